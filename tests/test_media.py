"""verify-media on local files: every sibling form, and every bad-input case of the issue (real gpg)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from media_helpers import STAGE3, digest_block, install_release_key, make_media

from gkeys_portage.demo.world import KeyFactory


@pytest.fixture
def menv(env):  # type: ignore[no-untyped-def]
    """A gkeys root whose category gentoo pins (and holds) the releng key."""
    install_release_key(env)
    return env


def test_all_siblings_verify_and_name_signer_and_digests(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "m")
    result = menv.run("verify-media", str(media.path))
    assert result.code == 0, result.text
    fpr = keys.keys["releng"].fingerprint
    # one key signing two siblings is said once (issue 15 item 5: no line printed twice); the .asc is not needed
    # beside the statements that list the file (issue 44 item 3): compared on its digest prefix, not verified
    assert f"{STAGE3}.DIGESTS, {STAGE3}.sha256: good signature by gentoo/releng ({fpr})" in result.out
    assert result.out.count("good signature by") == 1
    assert f"{STAGE3}.asc: not verified, not needed: {STAGE3}.DIGESTS, {STAGE3}.sha256 (verified by both " \
           f"engines) lists {STAGE3} with a matching digest; its digest prefix matches" in result.out
    assert f"{STAGE3}: SHA512 match {STAGE3}.DIGESTS" in result.out  # one strong digest per statement
    assert f"{STAGE3}: SHA256 match {STAGE3}.sha256" in result.out
    assert f"{STAGE3}.CONTENTS.gz: SHA512 match {STAGE3}.DIGESTS" in result.out

    doc = json.loads(menv.run("--json", "verify-media", str(media.path)).out)
    assert doc["verified"] is True and doc["category"] == "gentoo"
    assert {s["source"] for s in doc["signatures"]} == {STAGE3 + ".DIGESTS", STAGE3 + ".sha256"}
    assert [line.split(":")[0] for line in doc["not_needed"]] == [STAGE3 + ".asc"]
    assert all(s["fingerprint"] == fpr and s["nick"] == "releng" for s in doc["signatures"])
    assert {(d["file"], d["algorithm"]) for d in doc["digests"]} >= {(STAGE3, "SHA512"), (STAGE3, "SHA256"),
                                                                      (STAGE3 + ".CONTENTS.gz", "BLAKE2B")}


@pytest.mark.parametrize("siblings", [(".asc",), (".sha256",), (".DIGESTS",)])
def test_one_signed_sibling_is_enough(menv, keys: KeyFactory, tmp_path: Path, siblings: tuple[str, ...]) -> None:
    """One signed sibling verifies; an .asc alone names no file, so it needs the explicit --bind-by-date
    (issue 23 item 1: it used to be the default)."""
    media = make_media(keys, tmp_path / "m", siblings=siblings)
    opt_in = ["--bind-by-date"] if siblings == (".asc",) else []
    result = menv.run("verify-media", *opt_in, str(media.path))
    assert result.code == 0, result.text
    assert f"{STAGE3}{siblings[0]}: good signature by gentoo/releng" in result.out


def test_older_digests_asc_forms(menv, keys: KeyFactory, tmp_path: Path) -> None:
    # Clearsigned .DIGESTS.asc beside an unsigned .DIGESTS (the pre-2022 layout).
    media = make_media(keys, tmp_path / "old", siblings=(".DIGESTS",))
    unsigned = digest_block("SHA512", media.data, media.name).encode()
    (media.folder / (media.name + ".DIGESTS.asc")).write_bytes(media.files[".DIGESTS"])
    (media.folder / (media.name + ".DIGESTS")).write_bytes(unsigned)
    result = menv.run("verify-media", str(media.path))
    assert result.code == 0, result.text
    assert f"{STAGE3}.DIGESTS.asc: good signature" in result.out and "DIGESTS: not signed; ignored" in result.err
    # Unsigned .DIGESTS with a detached .DIGESTS.asc over it.
    media2 = make_media(keys, tmp_path / "detached", siblings=())
    (media2.folder / (media2.name + ".DIGESTS")).write_bytes(unsigned)
    (media2.folder / (media2.name + ".DIGESTS.asc")).write_bytes(keys.sign_bytes("releng", unsigned, tmp_path))
    result = menv.run("verify-media", str(media2.path))
    assert result.code == 0, result.text
    assert f"{STAGE3}: SHA512 match {STAGE3}.DIGESTS" in result.out


def test_bsd_style_build_path_and_unknown_algorithm(menv, keys: KeyFactory, tmp_path: Path) -> None:
    data = b"iso image" * 1000
    name = "install-amd64-minimal-20260101T170000Z.iso"
    text = (f"# WHIRLPOOL HASH\n{'ab' * 64}  {name}\n"
            f"SHA512 (builds/default/{name}) = {hashlib.sha512(data).hexdigest()}\n")
    media = make_media(keys, tmp_path / "iso", name, data, siblings=(".DIGESTS",), digests_text=text)
    result = menv.run("verify-media", str(media.path))
    assert result.code == 0, result.text
    assert "WHIRLPOOL" not in result.err  # one strong digest per statement: SHA512, the others unchecked
    assert f"{name}: SHA512 match {name}.DIGESTS" in result.out
    menv.write_config("[media]\nall-digests = yes\n")
    result = menv.run("verify-media", str(media.path))
    assert result.code == 0, result.text
    assert "WHIRLPOOL is not available here; skipped" in result.err


def _state(menv) -> dict[str, bytes]:  # type: ignore[no-untyped-def]
    """The state files, without gpg's random_seed (gpg rewrites it on every run)."""
    return {k: v for k, v in menv.snapshot().items() if not k.endswith("random_seed")}


def _refused(menv, path: Path, code: int | tuple[int, ...], *needles: str) -> str:  # type: ignore[no-untyped-def]
    before = _state(menv)
    result = menv.run("verify-media", str(path))
    assert result.code in (code if isinstance(code, tuple) else (code,)), result.text
    assert "verified" not in result.out
    lines = [ln for ln in result.err.splitlines() if ln.strip()]
    assert len(lines) == 1, result.err  # one clear line
    for needle in needles:
        assert needle in result.err, result.err
    assert _state(menv) == before  # nothing installed or changed
    return result.err


def test_tampered_tarball(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "m")
    media.path.write_bytes(media.data[:-1] + b"X")
    _refused(menv, media.path, 1, "SHA512 does not match")  # the statement's verdict comes before the .asc's prefix
    media.files.pop(".asc")
    (media.folder / (media.name + ".asc")).unlink()
    _refused(menv, media.path, 1, "does not match")


def test_digests_signed_by_key_outside_category(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "m", signer="mallory", siblings=(".DIGESTS",))
    _refused(menv, media.path, 1, f"{STAGE3}.DIGESTS:", "unknown key")


def test_good_signature_but_hash_mismatch(menv, keys: KeyFactory, tmp_path: Path) -> None:
    text = digest_block("SHA512", b"some other bytes", STAGE3)
    media = make_media(keys, tmp_path / "m", siblings=(".DIGESTS",), digests_text=text)
    _refused(menv, media.path, 1, "SHA512 does not match", ".DIGESTS")


def test_digests_for_a_different_file_name(menv, keys: KeyFactory, tmp_path: Path) -> None:
    other = make_media(keys, tmp_path / "other", "stage3-amd64-systemd-20260101T170000Z.tar.xz",
                       siblings=(".DIGESTS",))
    media = make_media(keys, tmp_path / "m", siblings=())
    (media.folder / (media.name + ".DIGESTS")).write_bytes(other.files[".DIGESTS"])
    _refused(menv, media.path, 1, "does not list", STAGE3)


@pytest.mark.parametrize("name", [f"../{STAGE3}", f"builds/../../{STAGE3}", f"/var/tmp/../../{STAGE3}"])
def test_path_traversal_in_names(menv, keys: KeyFactory, tmp_path: Path, name: str) -> None:
    media = make_media(keys, tmp_path / "m", siblings=())
    text = digest_block("SHA512", media.data, name)
    make_media(keys, media.folder, siblings=(".DIGESTS",), digests_text=text, data=media.data)
    _refused(menv, media.path, 2, "path traversal", "refused")


def test_absolute_paths_only_as_build_paths_of_the_file(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "m", siblings=())
    build_path = f"/var/tmp/catalyst/builds/default/{STAGE3}"
    make_media(keys, media.folder, siblings=(".DIGESTS",), data=media.data,
               digests_text=digest_block("SHA512", media.data, build_path))
    result = menv.run("verify-media", str(media.path))
    assert result.code == 0, result.text
    text = digest_block("SHA512", media.data, STAGE3) + digest_block("SHA512", b"root:x:0:0", "/etc/passwd")
    make_media(keys, media.folder, siblings=(".DIGESTS",), data=media.data, digests_text=text)
    _refused(menv, media.path, 2, "absolute path '/etc/passwd' names a file other than", "refused")


def test_conflicting_duplicate_entries(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "m", siblings=())
    text = digest_block("SHA512", media.data, STAGE3) + digest_block("SHA512", b"other", STAGE3)
    make_media(keys, media.folder, siblings=(".DIGESTS",), digests_text=text, data=media.data)
    _refused(menv, media.path, 2, "conflicting SHA512 entries")


def test_text_outside_the_clearsigned_block_is_ignored(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "m", siblings=(".DIGESTS",))
    tampered = media.data + b"backdoor"
    media.path.write_bytes(tampered)
    fake = digest_block("SHA512", tampered, STAGE3) + digest_block("BLAKE2B", tampered, STAGE3)
    (media.folder / (media.name + ".DIGESTS")).write_bytes(
        fake.encode() + media.files[".DIGESTS"] + fake.encode())
    _refused(menv, media.path, 1, "does not match")


@pytest.mark.parametrize("signature", [b"", b"\n", "truncated"])
def test_empty_or_truncated_asc(menv, keys: KeyFactory, tmp_path: Path, signature: bytes | str) -> None:
    media = make_media(keys, tmp_path / "m", siblings=(".asc",))
    asc = media.folder / (media.name + ".asc")
    asc.write_bytes(media.files[".asc"][: len(media.files[".asc"]) // 2] if signature == "truncated"
                    else signature)  # type: ignore[arg-type]
    err = _refused(menv, media.path, 1, ".asc")
    if signature == "truncated":  # named as what it is, with the next step (as tree and verify say it)
        assert "truncated" in err and "download" in err, err


def test_nothing_signed_the_file(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "m", siblings=(".CONTENTS.gz",))
    _refused(menv, media.path, 1, "nothing signed")
    (media.folder / (media.name + ".DIGESTS")).write_text(digest_block("SHA512", media.data, STAGE3))
    _refused(menv, media.path, 1, "nothing signed", "unsigned")


def test_weak_digests_alone_are_not_enough(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "m", siblings=())
    make_media(keys, media.folder, siblings=(".DIGESTS",), data=media.data,
               digests_text=digest_block("MD5", media.data, STAGE3))
    _refused(menv, media.path, 1, "no strong digest")


# -- one strong digest per signed statement (issue 18 goal 1) ---------------------------------------------------


def _digests_listing(keys: KeyFactory, folder: Path, text: str) -> Path:
    """A release whose only sibling is a signed .DIGESTS with ``text``."""
    media = make_media(keys, folder, siblings=())
    make_media(keys, folder, siblings=(".DIGESTS",), digests_text=text, data=media.data)
    return media.path


def test_one_strong_digest_per_statement_is_checked_and_all_digests_checks_every_one(
        menv, keys: KeyFactory, tmp_path: Path) -> None:
    """A signed DIGESTS whose SHA512 matches and whose BLAKE2B (and MD5) do not: the SHA512 line binds the
    file (what the handbook's ``sha512sum -c`` checks), the others are not computed; ``[media] all-digests``
    checks them all, as before."""
    data = hashlib.sha512(STAGE3.encode()).digest() * 4096  # make_media's default data
    text = (digest_block("BLAKE2B", b"another build", STAGE3) + digest_block("SHA512", data, STAGE3)
            + digest_block("MD5", b"another build", STAGE3))
    path = _digests_listing(keys, tmp_path / "m", text)
    result = menv.run("--json", "verify-media", str(path))
    assert result.code == 0, result.text
    outcomes = {d["algorithm"]: d["result"] for d in json.loads(result.out)["digests"]}
    assert outcomes == {"SHA512": "match", "BLAKE2B": "unchecked", "MD5": "unchecked"}
    menv.write_config("[media]\nall-digests = yes\n")
    _refused(menv, path, 1, "BLAKE2B does not match", ".DIGESTS")


@pytest.mark.parametrize(("listed", "checked"), [
    (("BLAKE2B",), "BLAKE2B"),            # no SHA512: the next strong one
    (("SHA256", "BLAKE2B"), "BLAKE2B"),
    (("MD5", "SHA256"), "SHA256"),        # a weak digest never stands in for a strong one
])
def test_the_preferred_strong_digest_is_the_one_checked(menv, keys: KeyFactory, tmp_path: Path,
                                                        listed: tuple[str, ...], checked: str) -> None:
    data = hashlib.sha512(STAGE3.encode()).digest() * 4096
    text = "".join(digest_block(a, data if a == checked else b"another build", STAGE3) for a in listed)
    path = _digests_listing(keys, tmp_path / "m", text)
    result = menv.run("verify-media", str(path))
    assert result.code == 0, result.text
    assert f"{STAGE3}: {checked} match {STAGE3}.DIGESTS" in result.out
    for other in set(listed) - {checked}:  # the wrong ones are really wrong: checking all refuses
        menv.write_config("[media]\nall-digests = yes\n")
        _refused(menv, path, 1, f"{other} does not match")
        menv.write_config()


def test_contents_mismatch_and_wrong_nick(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "m")
    result = menv.run("verify-media", str(media.path), "-n", "gkeys")
    assert result.code == 2 and "no seed 'gkeys'" in result.err
    (media.folder / (media.name + ".CONTENTS.gz")).write_bytes(b"not the listed contents")
    _refused(menv, media.path, 1, f"{STAGE3}.CONTENTS.gz: ", "does not match")


def test_missing_file_is_bad_input(menv, tmp_path: Path) -> None:
    result = menv.run("verify-media", str(tmp_path / "nope.tar.xz"))
    assert result.code == 2 and "no such file" in result.err


# -- binding the file to its name (issue 11 item 4) ----------------------------------------------------------

NEWER = "stage3-amd64-openrc-20271201T170321Z.tar.xz"  # a build stamp later than any signature made today


def _asc_only(keys: KeyFactory, folder: Path, name: str) -> Path:
    """An old release with its genuine .asc, served under ``name``; DIGESTS and .sha256 absent (404)."""
    return make_media(keys, folder, name, hashlib.sha512(b"old release").digest() * 64, siblings=(".asc",)).path


def test_old_release_under_a_newer_name_is_refused(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """The .asc is genuine but was made before the build stamp in the name: it signs an older build."""
    path = _asc_only(keys, tmp_path / "m", NEWER)
    err = _refused(menv, path, 1, f"{NEWER}: not bound to its name", "before the build stamp 20271201T170321Z",
                   "--allow-unnamed")
    assert "Traceback" not in err
    result = menv.run("--json", "verify-media", "--allow-unnamed", str(path))
    assert result.code == 0, result.text
    doc = json.loads(result.out)
    assert doc["name"]["rule"] == "allowed-unnamed" and "before the build stamp" in doc["name"]["detail"]


@pytest.mark.parametrize("name", ["stage3-amd64-openrc-latest.tar.xz", "install-amd64-minimal.iso",
                                  "stage3-amd64-openrc-20261399T999999Z.tar.xz"])  # not a real date: no stamp
def test_asc_only_without_build_stamp_needs_allow_unnamed(menv, keys: KeyFactory, tmp_path: Path, name: str) -> None:
    path = _asc_only(keys, tmp_path / "m", name)
    _refused(menv, path, 1, f"{name}: not bound to its name", f"there is no {name}.DIGESTS or {name}.sha256",
             f"fetch the signed {name}.DIGESTS")
    result = menv.run("verify-media", "--allow-unnamed", str(path))
    assert result.code == 0, result.text
    assert "name bound (allowed-unnamed)" in result.out and "accepted with --allow-unnamed" in result.err


def test_asc_made_after_the_build_stamp_binds_the_name_only_when_asked(menv, keys: KeyFactory,
                                                                        tmp_path: Path) -> None:
    """signed-after-build binds a date, not a name: an explicit opt-in (--bind-by-date), never the default
    (issue 23 item 1; this test used to expect it by default)."""
    path = _asc_only(keys, tmp_path / "m", STAGE3)  # stamp 2026-01-01, signature made today
    _refused(menv, path, 1, f"{STAGE3}: not bound to its name", "a date names no file", "--bind-by-date")
    result = menv.run("verify-media", "--bind-by-date", str(path))
    assert result.code == 0, result.text
    assert f"{STAGE3}: name bound (signed-after-build): {STAGE3}.asc was made" in result.out
    assert "a date, not a name" in result.out and f"there is no {STAGE3}.DIGESTS" in result.err
    doc = json.loads(menv.run("--json", "verify-media", "--bind-by-date", str(path)).out)
    assert doc["name"]["rule"] == "signed-after-build"


MUSL = "stage3-i686-musl-20260101T170000Z.tar.xz"


def test_another_products_genuine_build_under_this_name_is_refused(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """Issue 23 item 1: a genuine i686 musl stage3 with its genuine .asc, served as the amd64 openrc stage3 of
    the same stamp, DIGESTS and .sha256 answering 404: the .asc postdates the stamp, which named no product.
    Refused by default, naming what is missing and the next step."""
    musl = make_media(keys, tmp_path / "src", MUSL, hashlib.sha512(b"i686 musl").digest() * 64, siblings=(".asc",))
    served = tmp_path / "mirror"
    served.mkdir()
    (served / STAGE3).write_bytes(musl.data)
    (served / (STAGE3 + ".asc")).write_bytes(musl.files[".asc"])
    err = _refused(menv, served / STAGE3, 1, f"{STAGE3}: not bound to its name",
                   f"there is no {STAGE3}.DIGESTS or {STAGE3}.sha256", f"fetch the signed {STAGE3}.DIGESTS",
                   "fetch-media --latest")
    assert "Traceback" not in err


def test_unsigned_digests_is_not_ignored_when_nothing_else_names_the_file(menv, keys: KeyFactory,
                                                                         tmp_path: Path) -> None:
    """Issue 23 item 1: with a genuine .asc and an unsigned .DIGESTS listing the file, the DIGESTS was "not
    signed; ignored" and the file accepted on the date alone; now the refusal says the DIGESTS is unsigned."""
    media = make_media(keys, tmp_path / "m", siblings=(".asc",))
    (media.folder / (STAGE3 + ".DIGESTS")).write_text(digest_block("SHA512", media.data, STAGE3))
    _refused(menv, media.path, 1, f"{STAGE3}: not bound to its name",
             f"{STAGE3}.DIGESTS is not signed (unsigned text names nothing)", f"there is no {STAGE3}.sha256")


def test_signed_digests_listing_the_file_bind_the_name(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "m", NEWER)  # the stamp does not matter when a DIGESTS lists the file
    result = menv.run("--json", "verify-media", str(media.path))
    assert result.code == 0, result.text
    doc = json.loads(result.out)
    assert doc["name"]["rule"] == "listed"
    assert doc["name"]["detail"] == f"{NEWER}.DIGESTS, {NEWER}.sha256 list(s) {NEWER} by name"


# -- DIGESTS cases the red-team pass found holding (issue 11 "Held"): keep them in the matrix ----------------


def _signed(keys: KeyFactory, text: str, folder: Path, signer: str = "releng") -> bytes:
    return keys.sign_bytes(signer, text.encode("utf-8", "surrogatepass"), folder, clearsign=True)


def _held_digests(case: str, keys: KeyFactory, folder: Path, data: bytes, tampered: bytes) -> tuple[bytes, bool]:
    """(the .DIGESTS bytes a mirror serves, whether the file on disk is ``tampered``) for one held case."""
    good = digest_block("SHA512", data, STAGE3) + digest_block("BLAKE2B", data, STAGE3)
    fake = digest_block("SHA512", tampered, STAGE3) + digest_block("BLAKE2B", tampered, STAGE3)
    genuine = _signed(keys, good, folder)
    if case == "Hash: header changed":
        return genuine.replace(b"Hash: SHA512", b"Hash: SHA256", 1), False
    if case == "Hash: header added to a hashless block":
        return genuine.replace(b"Hash: SHA512\n", b"Hash: SHA512\nHash: MD5\n", 1), False
    if case == "NUL byte in a signed name":
        return _signed(keys, digest_block("SHA512", data, STAGE3 + "\x00.evil"), folder), False
    if case == "NUL bytes and a fake hash before the block":
        return b"\x00" + fake.encode() + b"\x00\n" + genuine, True
    if case == "dash-escaped fake line inserted":
        return genuine.replace(b"# BLAKE2B HASH", f"- {fake.splitlines()[1]}\n# BLAKE2B HASH".encode(), 1), True
    if case == "two signed blocks, unpinned one first":
        return _signed(keys, fake, folder, "mallory") + genuine, True
    if case == "two signed blocks, unpinned one second":
        return genuine + _signed(keys, fake, folder, "mallory"), True
    if case == "two blocks by the pinned key, second conflicting":
        return genuine + _signed(keys, digest_block("SHA512", b"older release", STAGE3), folder), False
    if case == "homoglyph name (Cyrillic a)":
        return _signed(keys, good.replace("stage3", "st\u0430ge3"), folder), False
    if case == "Unicode line separator in a name":
        return _signed(keys, good.replace(STAGE3, STAGE3 + "\u2028# x"), folder), False
    if case == "one wrong hash section":
        return _signed(keys, digest_block("BLAKE2B", data, STAGE3) + digest_block("SHA512", tampered, STAGE3),
                       folder), False
    if case == "3 MB hex line":
        return _signed(keys, good + f"# SHA512 HASH\n{'a' * 3_000_000}  {STAGE3}\n", folder), False
    if case == "3 MB name":
        return _signed(keys, digest_block("SHA512", data, "x" * 3_000_000), folder), False
    raise AssertionError(case)


TWO_BLOCKS = (1, 2)  # not verified, or unusable input: which one is the signature verifier's call
HELD: list[tuple[str, int | tuple[int, ...], str]] = [  # (case, exit status, words of the one line)
    ("Hash: header changed", 1, f"{STAGE3}.DIGESTS: "),
    ("Hash: header added to a hashless block", 1, f"{STAGE3}.DIGESTS: "),
    ("NUL byte in a signed name", 1, "a NUL byte inside the signed text"),  # gpg and gkeys would read it differently
    ("NUL bytes and a fake hash before the block", 1, "does not match"),
    ("dash-escaped fake line inserted", 1, "BAD signature"),
    ("two signed blocks, unpinned one first", TWO_BLOCKS, f"{STAGE3}.DIGESTS: "),
    ("two signed blocks, unpinned one second", TWO_BLOCKS, f"{STAGE3}.DIGESTS: "),
    ("two blocks by the pinned key, second conflicting", TWO_BLOCKS, f"{STAGE3}.DIGESTS: "),
    ("homoglyph name (Cyrillic a)", 1, "does not list"),
    ("Unicode line separator in a name", 2, "unusable file name"),
    ("one wrong hash section", 1, "SHA512 does not match"),
    ("3 MB hex line", 2, "not a digest line"),  # gpg cuts a cleartext line that long: no hash line remains
    ("3 MB name", (1, 2), ".DIGESTS"),
]


@pytest.mark.parametrize(("case", "code", "needle"), HELD, ids=[c for c, _, _ in HELD])
def test_held_digests_attacks_are_refused(menv, keys: KeyFactory, tmp_path: Path, case: str,
                                          code: int | tuple[int, ...], needle: str) -> None:
    """Each case of the red-team pass's "held" list: refused with one short line, nothing else changed."""
    media = make_media(keys, tmp_path / "m", siblings=())
    tampered = media.data + b"backdoor"
    digests, use_tampered = _held_digests(case, keys, tmp_path, media.data, tampered)
    if use_tampered:
        media.path.write_bytes(tampered)
    (media.folder / (STAGE3 + ".DIGESTS")).write_bytes(digests)
    err = _refused(menv, media.path, code, needle)
    assert len(err) < 2000 and "Traceback" not in err


def test_trailing_whitespace_is_not_signed_and_not_part_of_a_name(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """A cleartext signature does not cover trailing spaces (RFC 9580 7.1), so a mirror may add them: they are
    not part of the listed name.  A local file whose own name ends in a space is another file: not listed."""
    media = make_media(keys, tmp_path / "m", siblings=(".DIGESTS",))
    padded = media.files[".DIGESTS"].replace(f"  {STAGE3}\n".encode(), f"  {STAGE3}  \t\n".encode())
    assert padded != media.files[".DIGESTS"]
    (media.folder / (STAGE3 + ".DIGESTS")).write_bytes(padded)
    result = menv.run("verify-media", str(media.path))
    assert result.code == 0, result.text
    other = tmp_path / "o"
    other.mkdir()
    (other / (STAGE3 + " ")).write_bytes(media.data)
    (other / (STAGE3 + " .DIGESTS")).write_bytes(media.files[".DIGESTS"])
    _refused(menv, other / (STAGE3 + " "), 1, "does not list")
