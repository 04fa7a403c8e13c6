"""The rules of the one read (docs/media.md "One read", SECURITY.md rows 396-398), attacked: signed statements
that contradict each other, and an ``.asc`` beside a statement that lists the file, which adds nothing to trust
and must still sign the bytes read.  Real gpg, throwaway keys; small files (the reads are counted in
tests/test_media_reads.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from media_helpers import STAGE3, digest_block, install_release_key, make_media

from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.verify.media import verifier

DATA = hashlib.sha512(b"the build listed").digest() * 2048
OTHER = hashlib.sha512(b"another build").digest() * 2048


@pytest.fixture
def menv(env):  # type: ignore[no-untyped-def]
    """A gkeys root whose category gentoo pins (and holds) the releng key."""
    install_release_key(env)
    return env


def _statement(keys: KeyFactory, folder: Path, *blocks: tuple[str, bytes]) -> bytes:
    """A clearsigned statement (by releng) listing STAGE3 once per ``(algorithm, bytes hashed)``."""
    text = "".join(digest_block(algorithm, data, STAGE3) for algorithm, data in blocks)
    return keys.sign_bytes("releng", text.encode(), folder, clearsign=True)


CONTRADICTIONS = {  # .DIGESTS, .sha256: each agrees with the file on the digest it is checked on (row 86)
    "SHA256 line of the DIGESTS": ((("SHA512", DATA), ("SHA256", OTHER)), (("SHA256", DATA),), "SHA256"),
    "a digest neither computes": ((("SHA512", DATA), ("BLAKE2B", OTHER)), (("SHA256", DATA), ("BLAKE2B", DATA)),
                                  "BLAKE2B"),
}


@pytest.mark.parametrize("case", CONTRADICTIONS, ids=list(CONTRADICTIONS))
def test_signed_statements_that_contradict_each_other_are_refused(menv, keys: KeyFactory, tmp_path: Path,
                                                                   case: str) -> None:
    """A genuinely signed .DIGESTS whose SHA512 matches the file and whose SHA256 (or BLAKE2B) line contradicts
    the genuinely signed .sha256: each statement alone is checked on one digest, and both match; the release
    says two things about one file and is refused (it was "verified", exit 0), naming both and the next step."""
    digests, sha256, algorithm = CONTRADICTIONS[case]
    media = make_media(keys, tmp_path / "m", data=DATA, siblings=())
    (media.folder / f"{STAGE3}.DIGESTS").write_bytes(_statement(keys, tmp_path, *digests))
    (media.folder / f"{STAGE3}.sha256").write_bytes(_statement(keys, tmp_path, *sha256))
    result = menv.run("verify-media", str(media.path))
    assert result.code == 1, result.text
    assert (f"{STAGE3}: {STAGE3}.DIGESTS and {STAGE3}.sha256 list different {algorithm} digests for {STAGE3}"
            in result.err), result.err
    assert "next: fetch" in result.err and "Traceback" not in result.err
    journal = menv.state / "state" / "journal" / "journal.jsonl"
    assert not journal.exists() or '"media-accepted"' not in journal.read_text()


def test_statements_that_contradict_each_other_on_the_contents_are_refused(menv, keys: KeyFactory,
                                                                          tmp_path: Path) -> None:
    """The same for FILE.CONTENTS.gz: both statements match it on SHA512, their BLAKE2B lines differ."""
    media = make_media(keys, tmp_path / "m", data=DATA, siblings=(".CONTENTS.gz",))
    contents, listed = media.files[".CONTENTS.gz"], f"{STAGE3}.CONTENTS.gz"
    for suffix, blake in ((".DIGESTS", contents), (".sha256", OTHER)):
        text = (digest_block("SHA512" if suffix == ".DIGESTS" else "SHA256", DATA, STAGE3)
                + digest_block("SHA512", contents, listed) + digest_block("BLAKE2B", blake, listed))
        (media.folder / f"{STAGE3}{suffix}").write_bytes(keys.sign_bytes("releng", text.encode(), tmp_path,
                                                                         clearsign=True))
    result = menv.run("verify-media", str(media.path))
    assert result.code == 1, result.text
    assert (f"{listed}: {STAGE3}.DIGESTS and {STAGE3}.sha256 list different BLAKE2B digests for {listed}"
            in result.err), result.err


def test_statements_that_agree_on_every_shared_digest_verify(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """Both list SHA256 and BLAKE2B, with the same values: verified (the check compares, it does not refuse
    a second listing)."""
    media = make_media(keys, tmp_path / "m", data=DATA, siblings=())
    both = (("SHA256", DATA), ("BLAKE2B", DATA))
    (media.folder / f"{STAGE3}.DIGESTS").write_bytes(_statement(keys, tmp_path, ("SHA512", DATA), *both))
    (media.folder / f"{STAGE3}.sha256").write_bytes(_statement(keys, tmp_path, *both))
    result = menv.run("verify-media", str(media.path))
    assert result.code == 0, result.text


def test_an_asc_beside_a_sha256_alone_is_compared_on_its_own_hash(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """Only a .sha256 lists the file, so the read needs SHA256 alone; the .asc hashes with SHA512, which the
    read adds for its prefix: an .asc over another build is refused, one over these bytes is said and
    counts for nothing (not a signed sibling, whoever made it: an unpinned key's .asc neither helps nor hurts)."""
    media = make_media(keys, tmp_path / "m", data=DATA, siblings=(".sha256",))
    asc = media.folder / f"{STAGE3}.asc"
    asc.write_bytes(keys.sign_bytes("releng", OTHER, tmp_path))
    result = menv.run("verify-media", str(media.path))
    assert result.code == 1, result.text
    assert f"{STAGE3}.asc: BAD signature: its SHA512 digest does not match {STAGE3}" in result.err, result.err
    asc.write_bytes(keys.sign_bytes("mallory", DATA, tmp_path))
    result = menv.run("--json", "verify-media", str(media.path))
    assert result.code == 0, result.text
    doc = json.loads(result.out)
    assert [s["source"] for s in doc["signatures"]] == [f"{STAGE3}.sha256"]
    assert [line.split(":")[0] for line in doc["not_needed"]] == [f"{STAGE3}.asc"]
    assert "(no signature check)" in doc["not_needed"][0]


def test_a_tampered_file_beside_its_genuine_asc_is_named_by_the_statement(menv, keys: KeyFactory,
                                                                         tmp_path: Path) -> None:
    """A file altered after the release, beside its genuine .asc, .DIGESTS and .sha256: the refusal is the
    statement's (a full digest), not the .asc's 16-bit prefix, whose next step ("a stale .asc alone may be
    removed") would have sent the reader after the wrong file."""
    media = make_media(keys, tmp_path / "m", data=DATA)
    media.path.write_bytes(OTHER)
    result = menv.run("verify-media", str(media.path))
    assert result.code == 1, result.text
    assert f"{STAGE3}: SHA512 does not match {STAGE3}.DIGESTS" in result.err, result.err
    assert ".asc" not in result.err


def test_a_statement_signed_after_it_was_looked_at_is_refused(menv, keys: KeyFactory, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the .asc signs the file when verify-media looks (its .DIGESTS is unsigned), so the file is read by
    the engines and no statement is compared with it; a signed .DIGESTS over another build put in its place
    right after the look was verified beside the engines and said "good signature", though nothing compared
    what it lists with the file (exit 0).  Refused: what was looked at is not what was verified."""
    media = make_media(keys, tmp_path / "m", data=DATA, siblings=(".asc",))
    statement = media.folder / f"{STAGE3}.DIGESTS"
    statement.write_text(digest_block("SHA512", OTHER, STAGE3))
    signed = _statement(keys, tmp_path, ("SHA512", OTHER))
    looked = verifier._signed_looking

    def look(siblings: dict[str, Path]) -> list[str]:
        found = looked(siblings)
        statement.write_bytes(signed)  # swapped right after the look
        return found

    monkeypatch.setattr(verifier, "_signed_looking", look)
    result = menv.run("verify-media", "--allow-unnamed", str(media.path))
    assert result.code == 1, result.text
    assert (f"{STAGE3}.DIGESTS was signed when verified but not when looked at, so nothing compared it with "
            f"{STAGE3}" in result.err), result.err
    assert "Traceback" not in result.err
