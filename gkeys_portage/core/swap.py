"""Put a new directory tree in place of an old one in one step (Linux ``renameat2(RENAME_EXCHANGE)``).

Why an exchange: the repository location stays a plain directory (nothing changes for Portage, hooks, bind
mounts or the owner Portage gave it), and one system call swaps the two names, so a process killed at any
instant leaves the location holding either the whole old tree or the whole new one.  A symlink to a
versioned directory would be atomic too, but turns the location into a link the first time, in two steps.

File systems without ``RENAME_EXCHANGE`` (some network file systems) get two renames: the old tree moves to
a *previous* name beside the location, then the new tree moves in.  A kill between the two leaves no tree at
the location and the old one under the previous name; :func:`recover` (called under the sync lock before
anything else) moves it back, so the next run starts from the old tree.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
from pathlib import Path

from gkeys_portage.core.state import fsync_directory

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
#: Errors that mean "this kernel or file system cannot exchange" (not "the paths are wrong").
_UNSUPPORTED = (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP)


def exchange(first: Path, second: Path) -> None:
    """Swap the names ``first`` and ``second`` atomically (both must exist, on one file system)."""
    libc = ctypes.CDLL(None, use_errno=True)
    call = getattr(libc, "renameat2", None)
    if call is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available in this C library")
    result = call(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE)
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(first))


def previous_path(location: Path) -> Path:
    """Where the two-rename fallback parks the old tree (``.NAME.previous`` beside the location)."""
    return location.with_name(f".{location.name}.previous")


def recover(location: Path) -> bool:
    """Undo a fallback swap that was interrupted between its two renames; True if something was moved back."""
    parked = previous_path(location)
    if parked.is_dir() and not location.exists():
        os.rename(parked, location)
        fsync_directory(location.parent)
        return True
    if parked.is_dir():
        shutil.rmtree(parked)  # the swap finished; only the removal of the old tree did not
    return False


def swap_in(new: Path, location: Path) -> None:
    """Make the directory ``new`` the directory ``location``, atomically; the old tree is left at ``new``.

    An empty or missing ``location`` is replaced by a plain rename.  The caller removes ``new`` afterwards.
    """
    if location.is_dir() and not location.is_symlink() and not any(location.iterdir()):
        location.rmdir()
    if not location.exists() and not location.is_symlink():
        os.rename(new, location)
        fsync_directory(location.parent)
        return
    try:
        exchange(new, location)
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise
        parked = previous_path(location)
        os.rename(location, parked)
        os.rename(new, location)
        fsync_directory(location.parent)
        os.rename(parked, new)
    fsync_directory(location.parent)
