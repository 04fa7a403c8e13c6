"""verify-media reads a release file as few times as the verdict needs (issue 44 item 3, docs/media.md "One read"):
once when a signed statement lists it, twice side by side (gpg's and Sequoia's) for a lone ``.asc``; a sibling
that disagrees with the file still refuses; the journal still records a strong digest of what was verified.

Reads are counted with real parts: ``rchar`` of ``/proc/self/io``, the bytes read by this process (the
in-process run) and by every child it reaped (Linux adds a reaped child's I/O accounting to its parent's): gpg
reading the held file, ``cat``, Sequoia's child reading the pipe gkeys fills; and the programs started (recorded
as they start).  Before issue 44 every case below read 4x the file's size.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from media_helpers import STAGE3, digest_block, install_release_key, make_media

from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.openpgp import signatures

SIZE = 4 << 20  # large enough to dominate every other read of the run
DATA = hashlib.sha512(b"one read").digest() * (SIZE // 64)
OTHER = hashlib.sha512(b"another build").digest() * (SIZE // 64)


@pytest.fixture
def menv(env):  # type: ignore[no-untyped-def]
    """A gkeys root whose category gentoo pins (and holds) the releng key."""
    install_release_key(env)
    return env


def _read_so_far() -> int:
    """Bytes this process has read (``rchar``: every read and pread, from files and pipes)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


class Programs:
    """Records the command line of every program started while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started: list[list[str]] = []
        started = self.started

        class Recording(subprocess.Popen):  # type: ignore[type-arg]
            def __init__(self, args: Any, *rest: Any, **options: Any) -> None:
                started.append([str(arg) for arg in args])
                super().__init__(args, *rest, **options)

        monkeypatch.setattr(subprocess, "Popen", Recording)

    def gpg_reading_the_file(self) -> list[list[str]]:
        """gpg runs verifying a detached signature over a held descriptor (the release file itself)."""
        return [args for args in self.started if "--verify" in args and args[-1].startswith("/dev/fd/")]

    def named(self, program: str) -> list[list[str]]:
        return [args for args in self.started if any(Path(arg).name == program for arg in args)]


def _accepted(menv: Any) -> dict[str, Any]:
    """The journal's last media-accepted entry."""
    lines = (menv.state / "state" / "journal" / "journal.jsonl").read_text().splitlines()
    return [json.loads(line)["data"] for line in lines if '"media-accepted"' in line][-1]


def test_a_listed_file_is_read_once(menv, keys: KeyFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """.asc, .DIGESTS and .sha256: one read computes SHA-512 and SHA-256; gpg and Sequoia check only the two
    statements; the .asc is compared on its digest prefix from that read; the journal records the SHA-512."""
    media = make_media(keys, tmp_path / "m", data=DATA)
    programs = Programs(monkeypatch)
    before = _read_so_far()
    result = menv.run("verify-media", str(media.path))
    read = _read_so_far() - before
    assert result.code == 0, result.text
    assert SIZE <= read < SIZE * 1.5, f"the run read {read / SIZE:.2f} times the file's size"
    assert programs.gpg_reading_the_file() == [] and programs.named("cat") == []
    assert programs.named("sequoia_child.py") == []
    assert _accepted(menv)["digests"] == {"sha512": hashlib.sha512(DATA).hexdigest(),  # the DIGESTS' digest
                                          "sha256": hashlib.sha256(DATA).hexdigest()}  # the .sha256's


@pytest.mark.parametrize("second_opinion", ["yes", "no"])
def test_a_lone_asc_is_read_twice_side_by_side(menv, keys: KeyFactory, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch, second_opinion: str) -> None:
    """Only the .asc signs it: gpg reads the held file, and the thread that fills Sequoia's pipe (a child, as for
    any file of APART_BYTES or more) is the one read of gkeys, hashing the journal's SHA-256 on the way; no
    ``cat``, no third pass.  With the second opinion off, that read still gives the journal its digest."""
    menv.write_config(f"[gpg]\nsecond-opinion = {second_opinion}\n")
    monkeypatch.setattr(signatures, "APART_BYTES", 1 << 20)  # this 4 MiB file goes to Sequoia's child
    media = make_media(keys, tmp_path / "m", data=DATA, siblings=(".asc",))
    programs = Programs(monkeypatch)
    before = _read_so_far()
    result = menv.run("verify-media", "--allow-unnamed", str(media.path))
    read = _read_so_far() - before
    assert result.code == 0, result.text
    # gpg's read and gkeys' read of the file; with the second opinion, Sequoia's child reads the same bytes again
    # from the pipe gkeys fills (a copy in flight, not a read of the file)
    passes = 3 if second_opinion == "yes" else 2
    assert SIZE * passes <= read < SIZE * (passes + 0.5), f"the run read {read / SIZE:.2f} times the file's size"
    assert len(programs.gpg_reading_the_file()) == 1 and programs.named("cat") == []
    assert len(programs.named("sequoia_child.py")) == (1 if second_opinion == "yes" else 0)
    assert _accepted(menv)["digests"] == {"sha256": hashlib.sha256(DATA).hexdigest()}


def _signed(keys: KeyFactory, text: str, folder: Path) -> bytes:
    return keys.sign_bytes("releng", text.encode(), folder, clearsign=True)


DISAGREE = [  # (sibling replaced, by what, the one line's words)
    (".sha256", lambda keys, folder: _signed(keys, digest_block("SHA256", OTHER, STAGE3), folder),
     f"{STAGE3}: SHA256 does not match {STAGE3}.sha256"),
    (".DIGESTS", lambda keys, folder: _signed(keys, digest_block("SHA512", OTHER, STAGE3), folder),
     f"{STAGE3}: SHA512 does not match {STAGE3}.DIGESTS"),
    (".asc", lambda keys, folder: keys.sign_bytes("releng", OTHER, folder),
     f"{STAGE3}.asc: BAD signature: its SHA512 digest does not match {STAGE3}"),
]


@pytest.mark.parametrize(("sibling", "make", "words"), DISAGREE, ids=[d[0] for d in DISAGREE])
def test_a_sibling_that_disagrees_still_refuses(menv, keys: KeyFactory, tmp_path: Path, sibling: str, make: Any,
                                                words: str) -> None:
    """The other siblings agree with the file; one, genuinely signed, is about another build: refused, and
    nothing is journaled as accepted."""
    media = make_media(keys, tmp_path / "m", data=DATA)
    (media.folder / (STAGE3 + sibling)).write_bytes(make(keys, tmp_path))
    result = menv.run("verify-media", str(media.path))
    assert result.code == 1, result.text
    assert words in result.err, result.err
    assert "Traceback" not in result.err
    journal = menv.state / "state" / "journal" / "journal.jsonl"
    assert not journal.exists() or '"media-accepted"' not in journal.read_text()


def test_an_asc_that_is_no_signature_beside_a_listing_statement_refuses(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """An .asc that is no signature at all beside a listing DIGESTS is refused, naming the .asc."""
    media = make_media(keys, tmp_path / "m", data=DATA)
    (media.folder / (STAGE3 + ".asc")).write_bytes(b"-----BEGIN PGP SIGNATURE-----\n\nAAAA\n"
                                                   b"-----END PGP SIGNATURE-----\n")
    result = menv.run("verify-media", str(media.path))
    assert result.code == 1, result.text
    assert f"{STAGE3}.asc:" in result.err, result.err
