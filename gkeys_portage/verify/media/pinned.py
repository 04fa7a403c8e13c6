"""Hold a file still while two readers each read it: gpg (its detached signature) and the digests.

Reading a big file twice is faster than pushing it once through a pipe into gpg (the second read
comes from the page cache), but only if both reads see the same bytes.  :func:`pinned` makes sure
they do, or says the file changed:

* the file is opened once; gpg reads that descriptor (``/dev/fd/N``, the same inode whatever the
  name points at later) and the digests are read from it with ``pread``;
* a read *lease* (``F_SETLEASE``/``F_RDLCK``) is taken first.  Linux grants it only while nobody
  has the file open for writing (so no earlier writer, no writable ``mmap``), and breaks it the
  moment anyone opens it for writing or truncates it; the writer then waits until the lease is
  released.  A lease still held after both reads means nobody could have written in between;
* the name must still point at the same file (``st_dev``, ``st_ino``, ``st_size``, ``st_mtime_ns``,
  ``st_ctime_ns``) before and after.

When no lease can be had (someone writes the file, it is not ours, the file system has no leases,
or the caller is not the main thread, which alone may ignore ``SIGIO``), or gpg could not open the
descriptor by name (no ``/dev/fd``, as in a chroot without ``/proc``), :func:`pinned` yields
``None`` and the caller falls back to one read fed to every consumer, inside :func:`unchanged` (a file
written or replaced during that read is refused just the same, as far as its size and times tell).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from gkeys_portage.core.errors import NotVerifiedError
from gkeys_portage.core.fs.regular import open_regular
from gkeys_portage.openpgp.process import OpenFile

Identity = tuple[int, int, int, int, int]


class FileChangedError(NotVerifiedError):
    """The file was written to or replaced while it was verified."""


def identity(st: os.stat_result) -> Identity:
    """What must not change while a file is verified: device, inode, size, mtime and ctime."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _take_lease(fd: int) -> bool:
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except OSError:  # EAGAIN: open for writing; EACCES: not ours; EINVAL: no leases here
        return False
    return True


def _reachable(fd: int, before: os.stat_result) -> bool:
    """Whether gpg, inheriting ``fd``, can open it by name (``/dev/fd`` exists, e.g. not in a bare chroot)."""
    try:
        return identity(os.stat(OpenFile(fd).path)) == identity(before)
    except OSError:
        return False


def _changed(path: Path) -> FileChangedError:
    """The refusal of a file written to or replaced while it was verified, and what to do about it."""
    return FileChangedError(f"{path.name} was opened for writing or replaced while it was verified; "
                            f"not verified. Let whatever writes it finish, then run: gkeys verify-media {path}")


def _named(path: Path) -> Identity | None:
    """The identity of the file ``path`` names now (None if it names none)."""
    try:
        return identity(os.stat(path))
    except OSError:
        return None


@contextlib.contextmanager
def unchanged(path: Path) -> Iterator[None]:
    """For a file that cannot be held (:func:`pinned` yielded ``None``) and is read once: on leaving
    without an exception, raise :class:`FileChangedError` if the name now points at another file, or
    the file's size, mtime or ctime changed meanwhile (someone wrote it while it was read)."""
    before = _named(path)
    yield
    if before is None or _named(path) != before:
        raise _changed(path)


@contextlib.contextmanager
def held(fd: int, name: str) -> Iterator[bool]:
    """Hold the regular file open at ``fd`` still: yield whether it is held (a read lease taken, gpg can open
    ``/dev/fd/N``; False: the caller reads it once instead).  On leaving without an exception, a held file whose
    lease was broken or whose size or times changed raises :class:`FileChangedError` naming ``name``."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = signal.signal(signal.SIGIO, signal.SIG_IGN)  # a broken lease must not kill us
    taken = False
    try:
        before = os.fstat(fd)
        taken = stat.S_ISREG(before.st_mode) and _reachable(fd, before) and _take_lease(fd)
        yield taken
        if taken and (fcntl.fcntl(fd, fcntl.F_GETLEASE) != fcntl.F_RDLCK
                      or identity(os.fstat(fd)) != identity(before)):
            raise _changed(Path(name))
    finally:
        if taken:
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        signal.signal(signal.SIGIO, previous if previous is not None else signal.SIG_DFL)


@contextlib.contextmanager
def pinned(path: Path) -> Iterator[int | None]:
    """Open ``path`` and hold it still (:func:`held`); yield its descriptor, or ``None`` if it cannot be held.

    On leaving without an exception, raise :class:`FileChangedError` if the file may have been
    written to, or its name now points at another file.
    """
    fd = open_regular(path)
    try:
        before = identity(os.fstat(fd))
        with held(fd, str(path)) as holding:
            yield fd if holding else None
            if holding and _named(path) != before:
                raise _changed(path)
    finally:
        os.close(fd)
