"""verify-media reads a file only a detached ``.asc`` signs twice, side by side: gpg itself, and Sequoia's pass
(fed by gkeys, which hashes the journal's digest on the way).  Both reads must see the same bytes, or the file
is "not verified" (issue 18 goal 1).  With a signed statement listing the file there is one read (issue 44
item 3), so no two reads can be shown different bytes: the mixed release below is refused by its digests.

The attack on two reads: gpg is shown a genuine old build X, the second read another file.  The hooks below
make the second read happen only after gpg has finished and the file was changed.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from media_helpers import STAGE3, install_release_key, make_media

from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.openpgp import process as gpg_process
from gkeys_portage.openpgp import signatures
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.process import OpenFile
from gkeys_portage.verify.media import fanout

OLD = b"old build, signed long ago " * 9000
NEW = b"new build, listed by DIGEST" * 9000  # same length as OLD


@pytest.fixture
def menv(env):  # type: ignore[no-untyped-def]
    """A gkeys root whose category gentoo pins (and holds) the releng key."""
    install_release_key(env)
    return env


def _asc_release(keys: KeyFactory, folder: Path) -> Path:
    """STAGE3 holding OLD with its .asc over OLD, nothing else (verified with --allow-unnamed): two reads."""
    return make_media(keys, folder, data=OLD, siblings=(".asc",)).path


def _mixed_release(keys: KeyFactory, folder: Path) -> Path:
    """STAGE3 holding OLD, its .asc over OLD, its .DIGESTS and .sha256 listing NEW."""
    media = make_media(keys, folder, data=NEW, siblings=(".DIGESTS", ".sha256"))
    (folder / f"{STAGE3}.asc").write_bytes(keys.sign_bytes("releng", OLD, folder))
    media.path.write_bytes(OLD)
    return media.path


class Hook:
    """After gpg's read, ``change()`` the file; the digests' read (one read fed to all, or each digest's
    own ``pread`` of the held file) waits for that."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
        self.changed = threading.Event()
        self.gpg_data: list[object] = []
        original_verify, original_feed, original_pread = GnuPG.verify_detached, fanout._feed, fanout._pread_into
        original_run, original_tee = GnuPG.run, signatures._hash_into

        def verify(gpg: GnuPG, signature: bytes, data: object) -> object:
            self.gpg_data.append(data)
            return original_verify(gpg, signature, data)  # type: ignore[arg-type]

        def run(gpg: GnuPG, args: list[str], *rest: object, **options: object) -> object:
            result = original_run(gpg, args, *rest, **options)  # type: ignore[arg-type]
            if "--verify" in args and options.get("pass_fds"):  # gpg read the held file: change it now
                change()
                self.changed.set()
            return result

        def tee(*args: object) -> None:
            self.changed.wait(30)
            original_tee(*args)  # type: ignore[arg-type]

        def feed(*args: object) -> None:
            self.changed.wait(30)
            original_feed(*args)  # type: ignore[arg-type]

        def pread(fd: int, buffer: bytearray, offset: int) -> int:
            self.changed.wait(30)
            return original_pread(fd, buffer, offset)

        monkeypatch.setattr(GnuPG, "verify_detached", verify)
        monkeypatch.setattr(GnuPG, "run", run)
        monkeypatch.setattr(signatures, "_hash_into", tee)
        monkeypatch.setattr(fanout, "_feed", feed)
        monkeypatch.setattr(fanout, "_pread_into", pread)


def _rewrite_in_place(path: Path, writers: list[threading.Thread], blocked: list[bool]) -> Callable[[], None]:
    """Overwrite ``path`` with NEW through the same inode, as a writer would (its open waits for a lease)."""

    def write(flags: int) -> None:
        fd = os.open(path, os.O_WRONLY | flags)
        try:
            os.pwrite(fd, NEW, 0)
        finally:
            os.close(fd)

    def change() -> None:
        try:
            write(os.O_NONBLOCK)
        except BlockingIOError as exc:  # the lease: this open now breaks it, a blocking one waits
            assert exc.errno == errno.EWOULDBLOCK
            blocked.append(True)
            writer = threading.Thread(target=write, args=(0,))
            writer.start()
            writers.append(writer)

    return change


def test_file_rewritten_in_place_between_the_two_reads_is_refused(menv, keys: KeyFactory, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = _asc_release(keys, tmp_path / "m")
    writers: list[threading.Thread] = []
    blocked: list[bool] = []
    hook = Hook(monkeypatch, _rewrite_in_place(path, writers, blocked))
    result = menv.run("verify-media", "--allow-unnamed", str(path))
    for writer in writers:
        writer.join(60)
    assert any(isinstance(d, OpenFile) for d in hook.gpg_data), "gpg did not read the file itself"
    assert result.code == 1, result.text
    assert f"{STAGE3} was opened for writing or replaced while it was verified; not verified" in result.err
    assert blocked == [True]  # the writer had to wait for the lease
    assert f"{menv.gkeys} verify-media {path}" in result.err
    assert "Traceback" not in result.err
    assert path.read_bytes() == NEW  # the writer did write, after the verdict


def test_file_swapped_by_rename_between_the_two_reads_is_refused(menv, keys: KeyFactory, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = _asc_release(keys, tmp_path / "m")
    other = tmp_path / "new-build"
    other.write_bytes(NEW)
    hook = Hook(monkeypatch, lambda: os.replace(other, path))
    result = menv.run("verify-media", "--allow-unnamed", str(path))
    assert any(isinstance(d, OpenFile) for d in hook.gpg_data), "gpg did not read the file itself"
    assert result.code == 1, result.text
    assert f"{STAGE3} was opened for writing or replaced while it was verified; not verified" in result.err


def test_unchanged_file_verifies_with_gpg_reading_it_itself(menv, keys: KeyFactory, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = _asc_release(keys, tmp_path / "m")
    hook = Hook(monkeypatch, lambda: None)
    result = menv.run("verify-media", "--allow-unnamed", str(path))
    assert result.code == 0, result.text
    assert any(isinstance(d, OpenFile) for d in hook.gpg_data)
    media = make_media(keys, tmp_path / "listed")  # a signed DIGESTS lists it: one read, gpg never reads it
    hook.gpg_data.clear()
    result = menv.run("verify-media", str(media.path))
    assert result.code == 0, result.text
    assert hook.gpg_data == []


def test_file_open_for_writing_falls_back_to_one_read(menv, keys: KeyFactory, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """No lease while someone holds the file open for writing (a download still running, a writable
    mmap): gpg is fed through a pipe from the one read that the digests see."""
    path = _asc_release(keys, tmp_path / "m")
    hook = Hook(monkeypatch, lambda: None)
    hook.changed.set()
    with open(path, "r+b"):
        result = menv.run("verify-media", "--allow-unnamed", str(path))
    assert result.code == 0, result.text
    assert hook.gpg_data and not any(isinstance(d, OpenFile) for d in hook.gpg_data)
    mixed = _mixed_release(keys, tmp_path / "x")
    with open(mixed, "r+b"):
        result = menv.run("verify-media", str(mixed))
    assert result.code == 1 and "does not match" in result.err, result.text


def test_without_dev_fd_gpg_is_fed_through_a_pipe(menv, keys: KeyFactory, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A chroot without /proc has no /dev/fd: gpg could not open the descriptor, so one read feeds it."""
    path = _asc_release(keys, tmp_path / "m")
    hook = Hook(monkeypatch, lambda: None)
    hook.changed.set()
    monkeypatch.setattr(gpg_process, "FD_DIR", str(tmp_path / "no-dev-fd"))
    result = menv.run("verify-media", "--allow-unnamed", str(path))
    assert result.code == 0, result.text
    assert hook.gpg_data and not any(isinstance(d, OpenFile) for d in hook.gpg_data)


def test_a_swap_during_the_one_read_is_refused(menv, keys: KeyFactory, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A signed statement lists the file: one read.  A new build renamed over the name while it is read (the
    read goes on in the old file) is refused: the verdict would name a file the name no longer shows."""
    media = make_media(keys, tmp_path / "m")
    other = tmp_path / "new-build"
    other.write_bytes(media.data)
    original_feed = fanout._feed

    def feed(*args: object) -> None:
        os.replace(other, media.path)
        original_feed(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(fanout, "_feed", feed)
    result = menv.run("verify-media", str(media.path))
    assert result.code == 1, result.text
    assert f"{STAGE3} was opened for writing or replaced while it was verified; not verified" in result.err
    assert "Traceback" not in result.err


def test_file_written_during_the_one_read_of_the_fallback_is_refused(menv, keys: KeyFactory, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a lease (someone holds the file open for writing) the one read feeds gpg and the digests
    alike, but the file may still be written while it is read: the verdict would then be about bytes the
    file no longer holds.  A change of its size or times across the read is refused, as with the lease."""
    media = make_media(keys, tmp_path / "m")
    os.utime(media.path, (1_000_000_000, 1_000_000_000))  # a write now surely moves mtime
    original_feed = fanout._feed

    with open(media.path, "r+b") as writer:  # no lease: the fallback

        def feed(*args: object) -> None:
            original_feed(*args)  # type: ignore[arg-type]
            os.pwrite(writer.fileno(), b"X", 0)  # after the read, before the verdict

        monkeypatch.setattr(fanout, "_feed", feed)
        result = menv.run("verify-media", str(media.path))
    assert result.code == 1, result.text
    assert f"{STAGE3} was opened for writing or replaced while it was verified; not verified" in result.err
    assert "Traceback" not in result.err


@pytest.mark.parametrize("read", ["one read (a listing statement)", "held (a lone .asc)"])
def test_a_fifo_put_at_the_name_after_the_look_is_refused_at_once(tmp_path: Path, read: str) -> None:
    """``is_file()`` looked at a regular file; a FIFO (or a device) renamed over it before the open made the open
    wait for a writer for ever.  Both reads open without waiting and refuse anything but a regular file."""
    from gkeys_portage.core.errors import BadInputError
    from gkeys_portage.verify.media.pinned import pinned

    fifo = tmp_path / "stage3.tar.xz"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def attempt() -> None:
        try:
            if read.startswith("one read"):
                fanout.read_once(fifo, ["sha512"])
            else:
                with pinned(fifo):
                    pass
        except BaseException as exc:  # noqa: BLE001 - the outcome is asserted below
            outcome.append(exc)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(5)
    if worker.is_alive():
        with open(fifo, "wb"):  # let the stuck open go, so the thread ends
            pass
        pytest.fail("the open waited on a FIFO")
    assert outcome and isinstance(outcome[0], BadInputError), outcome
    assert "not a regular file" in str(outcome[0]), outcome
