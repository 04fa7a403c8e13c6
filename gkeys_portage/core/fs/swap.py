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
import stat
from collections.abc import Callable
from pathlib import Path

from gkeys_portage.core.fs import fdtree
from gkeys_portage.core.state import fsync_directory

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
#: Errors that mean "this kernel or file system cannot exchange" (not "the paths are wrong").
_UNSUPPORTED = (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP)


def exchange(first: Path | str | bytes, second: Path | str | bytes, *, first_dir: int = _AT_FDCWD,
             second_dir: int = _AT_FDCWD) -> None:
    """Swap the names ``first`` and ``second`` atomically (both must exist, on one file system); each relative to
    the directory descriptor ``first_dir``/``second_dir`` when given."""
    libc = ctypes.CDLL(None, use_errno=True)
    call = getattr(libc, "renameat2", None)
    if call is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available in this C library")
    result = call(first_dir, os.fsencode(first), second_dir, os.fsencode(second), _RENAME_EXCHANGE)
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), os.fsdecode(first))


def previous_path(location: Path) -> Path:
    """Where the two-rename fallback parks the old tree (``.NAME.previous`` beside the location)."""
    return location.with_name(f".{location.name}.previous")


def recover(location: Path, warn: Callable[[str], None] | None = None) -> bool:
    """Undo a fallback swap that was interrupted between its two renames; True if something was moved back.

    What sits at the previous name is looked at without following it (``lstat``): only a real directory on the
    location's file system (what the fallback parks there) is renamed back or removed (by descriptor,
    :func:`fdtree.remove_tree`); anything else (a symbolic link, a file) is left alone and named to ``warn``
    with the command that removes it, and never stops a sync."""
    parked = previous_path(location)
    try:
        st = os.lstat(parked)
    except FileNotFoundError:
        return False
    parent = os.lstat(parked.parent)
    if not stat.S_ISDIR(st.st_mode) or st.st_dev != parent.st_dev:
        if warn is not None:
            kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory gkeys parked there"
            warn(f"gkeys: {parked} is {kind}, left alone; remove it (rm {parked}) if nothing needs it")
        return False
    if not os.path.lexists(location):
        os.rename(parked, location)
        fsync_directory(location.parent)
        return True
    fd = fdtree.open_dir(parked.parent)
    try:  # the swap finished; only the removal of the old tree did not
        fdtree.remove_tree(fd, parked.name)
    except OSError as exc:
        if warn is not None:
            warn(f"gkeys: could not remove {parked}, an old tree an interrupted sync left ({exc.strerror}); "
                 f"remove it by hand: rm -rf --one-file-system {parked}")
    finally:
        os.close(fd)
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
