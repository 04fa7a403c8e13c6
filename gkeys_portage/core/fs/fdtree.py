"""Act on a directory tree through descriptors only: no path is resolved twice, no link followed, no mount crossed.

Root works on trees another user may write (under Portage's ``usersync`` the repository belongs to ``portage``,
and so does every process a build leaves behind).  A walk *by path* (``scandir``, then ``chown(path)`` on what
it found) resolves every component again at each call: a directory renamed away and replaced by a symbolic
link between the two sends root's call elsewhere, and ``follow_symlinks=False`` guards only the last
component.  So every tree operation gkeys performs as root goes through this module:

* each level is opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's descriptor
  (:func:`open_dir`), and the directory opened must be the one ``lstat`` saw (same device and inode, else
  :class:`Changed`);
* everything below works relative to that descriptor (``fstatat``, ``fchownat``/``fchmodat`` without
  following, ``openat(O_NOFOLLOW)``, ``unlinkat``, ``renameat``);
* :func:`walk` is iterative (a list of open levels, never recursion in Python), bounded in depth and entries
  (:class:`Limits`, :class:`LimitExceeded`), never enters a directory on another device (a mount point);
* :func:`remove_tree` removes iteratively and never follows a link nor crosses into another file system; it
  holds at most ``fd_depth`` descriptors whatever the depth (deeper directories are moved up to the top of the
  tree being removed, one rename each), and what it cannot remove it names (:class:`NotRemoved`);
* :func:`copy_file` copies a regular file into a directory descriptor (a new inode, its owner, mode and times
  set on the new descriptor).

Nothing here imports another gkeys package (the core floor).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

#: How every directory is opened: never through a link, only a directory, never inherited by a child.
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: How a file is opened for reading: never through a link; ``O_NONBLOCK`` so a fifo planted there never blocks.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
#: Descriptors :func:`remove_tree` holds at most (one per level); deeper levels are moved up first.
REMOVE_FD_DEPTH = 64
_COPY_CHUNK = 1 << 20
_ENCODING = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()


class Changed(OSError):
    """An entry changed between two calls that had to see the same one (replaced, renamed, gone)."""

    def __init__(self, what: str) -> None:
        super().__init__(errno.ESTALE, f"{what} changed while gkeys worked on it")
        self.what = what


class LimitExceeded(OSError):
    """A tree is deeper, or holds more entries, than :class:`Limits` allows."""

    def __init__(self, what: str) -> None:
        super().__init__(errno.EMLINK, what)
        self.what = what


class NotRemoved(OSError):
    """:func:`remove_tree` left something behind; ``left`` names it (relative paths, first few)."""

    def __init__(self, left: list[str], cause: str) -> None:
        super().__init__(errno.ENOTEMPTY, f"could not remove everything ({cause}): {', '.join(left[:5])}")
        self.left = left
        self.cause = cause


@dataclass(frozen=True)
class Limits:
    """How deep a walk may go (levels below its top) and how many entries it may meet."""

    depth: int = 128
    entries: int = 2_000_000


@dataclass(frozen=True)
class Entry:
    """One entry met by :func:`walk`.  ``parent`` is the descriptor of the directory holding it: valid only
    while the walk's ``visit`` call for this entry runs.  ``st`` is its ``lstat``; ``depth`` 1 is the top's own."""

    rel: bytes
    name: bytes
    parent: int
    st: os.stat_result
    depth: int

    @property
    def is_dir(self) -> bool:
        """A real directory (``lstat``: a link to one is not)."""
        return stat.S_ISDIR(self.st.st_mode)


def same(first: os.stat_result, second: os.stat_result) -> bool:
    """The two stats are of one inode (device and inode number)."""
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def open_dir(name: str | bytes | os.PathLike[str], dir_fd: int | None = None, *,
             expect: os.stat_result | None = None) -> int:
    """Open the directory ``name`` (relative to ``dir_fd`` when given) without following a link at it; with
    ``expect``, it must be that inode (else :class:`Changed`).  The caller closes the descriptor."""
    fd = os.open(name, DIRECTORY_FLAGS, dir_fd=dir_fd)
    if expect is not None and not same(os.fstat(fd), expect):
        os.close(fd)
        raise Changed(os.fsdecode(name))
    return fd


def lstat_at(dir_fd: int, name: str | bytes) -> os.stat_result:
    """``fstatat(dir_fd, name, AT_SYMLINK_NOFOLLOW)``."""
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


def set_owner_mode(dir_fd: int, name: str | bytes, st: os.stat_result, owner: tuple[int, int] | None,
                   mode: int | None) -> os.stat_result:
    """Give the regular file or directory ``name`` of ``dir_fd`` (the inode ``st``, else :class:`Changed`) the
    ``owner`` (uid, gid) and permission bits ``mode`` (None: leave), through a descriptor opened without
    following a link; only what differs is changed.  Returns the stat after."""
    flags = DIRECTORY_FLAGS if stat.S_ISDIR(st.st_mode) else READ_FLAGS
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        raise Changed(os.fsdecode(name))
    fd = os.open(name, flags, dir_fd=dir_fd)
    try:
        now = os.fstat(fd)
        if not same(now, st) or stat.S_IFMT(now.st_mode) != stat.S_IFMT(st.st_mode):
            raise Changed(os.fsdecode(name))
        if owner is not None and (now.st_uid, now.st_gid) != owner:
            os.fchown(fd, *owner)
        if mode is not None and stat.S_IMODE(now.st_mode) != mode:
            os.fchmod(fd, mode)
        return os.fstat(fd)
    finally:
        os.close(fd)


def open_for_writing(fd: int) -> bool | None:
    """Whether any process holds the regular file open at ``fd`` (opened read-only) open for writing, or
    mapped shared and writable: Linux refuses a read lease (``F_SETLEASE``, ``F_RDLCK``) then.  None when the
    file system or the caller cannot take leases (the answer is unknown).  Needs the file's owner or
    ``CAP_LEASE`` (root)."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except OSError as exc:
        return True if exc.errno == errno.EAGAIN else None
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    return False


def names(dir_fd: int) -> list[bytes]:
    """The names in the directory ``dir_fd`` (sorted, as bytes)."""
    encoding, errors = _ENCODING
    return sorted([name.encode(encoding, errors) for name in os.listdir(dir_fd)])  # os.fsencode, inline


def walk(top: int, visit: Callable[[Entry], bool], *, limits: Limits = Limits(),
         entered: Callable[[int, Entry], None] | None = None, left: Callable[[int, Entry], None] | None = None) -> int:
    """Walk the tree under the open directory ``top`` depth first, iteratively; return the entries met.

    ``visit(entry)`` is called for every entry (its ``parent`` descriptor open); for a directory it returns
    whether to enter it.  A directory is entered only if it is on ``top``'s device (a mount point never is),
    opened with :func:`open_dir` relative to its parent and checked to be the inode ``visit`` saw;
    ``entered(fd, entry)`` is then called with its descriptor before it is listed, ``left(fd, entry)`` after
    everything in it was visited (a directory last: post-order).  Raises
    :class:`LimitExceeded` past ``limits`` and :class:`Changed` for an entry replaced under the walk.
    """
    device = os.fstat(top).st_dev
    stack: list[tuple[int, bytes, int, Iterator[bytes], Entry | None]] = []
    count = 0
    try:
        first = os.dup(top)
        stack.append((first, b"", 0, iter(names(first)), None))
        while stack:
            fd, rel, depth, pending, own = stack[-1]
            name = next(pending, None)
            if name is None:
                if left is not None and own is not None:
                    left(fd, own)
                os.close(fd)
                stack.pop()
                continue
            count += 1
            if count > limits.entries:
                raise LimitExceeded(f"more than {limits.entries} entries")
            path = rel + b"/" + name if rel else name
            try:
                st = lstat_at(fd, name)
            except FileNotFoundError:
                raise Changed(os.fsdecode(path)) from None
            if depth + 1 > limits.depth:
                raise LimitExceeded(f"{os.fsdecode(path)[:120]}...: deeper than {limits.depth} levels")
            entry = Entry(path, name, fd, st, depth + 1)
            if not visit(entry) or not stat.S_ISDIR(st.st_mode) or st.st_dev != device:
                continue
            child = open_dir(name, fd, expect=st)
            stack.append((child, path, depth + 1, iter(()), None))
            if entered is not None:
                entered(child, entry)
            stack[-1] = (child, path, depth + 1, iter(names(child)), entry)
    finally:
        for fd, *_ in stack:
            os.close(fd)
    return count


def _remove_error(left: list[str], rel: bytes, exc: OSError) -> str:
    left.append(os.fsdecode(rel))
    return exc.strerror or str(exc)


def _remove_at(remove: Callable[..., None], name: bytes, dir_fd: int, rel: bytes, left: list[str]) -> str | None:
    """``remove(name, dir_fd=dir_fd)`` (``os.rmdir`` or ``os.unlink``); an entry already gone is fine, any other
    failure is named in ``left`` and its cause returned."""
    try:
        remove(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        return _remove_error(left, rel, exc)
    return None


def remove_tree(parent: int, name: str | bytes, *, fd_depth: int = REMOVE_FD_DEPTH,
                max_entries: int = 50_000_000) -> None:
    """Remove ``name`` in the directory ``parent`` and everything under it, iteratively.

    Links are removed as links (never followed); a directory on another device (a mount point) is never
    entered and so stays, with its parents.  At most ``fd_depth`` levels are open at once: a directory deeper
    than that is first renamed to the top of the tree being removed and removed from there (the tree's own
    file system, so a rename), so any depth is removed without recursion and within the descriptor limit.
    Nothing that is gone already is an error.  Raises :class:`NotRemoved` naming what stays.
    """
    raw = os.fsencode(name)
    try:
        st = lstat_at(parent, raw)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(raw, dir_fd=parent)
        return
    left: list[str] = []
    cause = ""
    if st.st_dev != os.fstat(parent).st_dev:
        raise NotRemoved([os.fsdecode(raw)], "a mount point")
    top = open_dir(raw, parent, expect=st)
    try:
        cause = _empty(top, raw, st.st_dev, fd_depth, max_entries, left)
    finally:
        os.close(top)
    if not left:
        cause = _remove_at(os.rmdir, raw, parent, raw, left) or cause
    if left:
        raise NotRemoved(left, cause)


def _empty(top: int, top_rel: bytes, device: int, fd_depth: int, max_entries: int, left: list[str]) -> str:
    """Remove everything in the open directory ``top``; what stays is appended to ``left``; returns the last
    cause of a failure."""
    moved = itertools.count()
    deferred: list[bytes] = []  # directories moved up to ``top``, removed when top's own listing is done
    cause = ""
    count = 0
    # each level: its descriptor, its path (for messages), its name in the level above, what is left to look at
    stack: list[tuple[int, bytes, bytes, Iterator[bytes]]] = [(top, top_rel, b"", iter(names(top)))]
    try:
        while stack:
            fd, rel, own, pending = stack[-1]
            name = next(pending, None)
            if name is None and len(stack) == 1 and deferred:
                name = deferred.pop()
            if name is None:
                stack.pop()
                if stack:
                    os.close(fd)
                    cause = _remove_at(os.rmdir, own, stack[-1][0], rel, left) or cause
                continue
            count += 1
            path = rel + b"/" + name
            if count > max_entries:
                left.append(os.fsdecode(path))
                return f"more than {max_entries} entries"
            try:
                st = lstat_at(fd, name)
            except FileNotFoundError:
                continue
            except OSError as exc:
                cause = _remove_error(left, path, exc)
                continue
            if not stat.S_ISDIR(st.st_mode):
                cause = _remove_at(os.unlink, name, fd, path, left) or cause
                continue
            if st.st_dev != device:
                left.append(os.fsdecode(path))
                cause = "a mount point"
                continue
            if len(stack) >= fd_depth:
                up = b".gkeys-deep-%d" % next(moved)
                try:
                    os.rename(name, up, src_dir_fd=fd, dst_dir_fd=top)
                except OSError as exc:
                    cause = _remove_error(left, path, exc)
                    continue
                deferred.append(up)
                continue
            try:
                child = open_dir(name, fd, expect=st)
            except (Changed, FileNotFoundError):
                continue
            except OSError as exc:
                cause = _remove_error(left, path, exc)
                continue
            stack.append((child, path, name, iter(names(child))))
    finally:
        for fd, *_ in stack[1:]:
            os.close(fd)
    return cause


def copy_file(src_dir: int, src_name: str | bytes, dst_dir: int, dst_name: str | bytes, *, mode: int,
              owner: tuple[int, int] | None = None, expect: os.stat_result | None = None) -> os.stat_result:
    """Copy the regular file ``src_name`` of ``src_dir`` to a new file ``dst_name`` in ``dst_dir`` (created
    exclusively, never through a link), with ``mode``, ``owner`` (uid, gid; None: the caller's) and the
    source's times, all set on the new descriptor.  With ``expect`` the source must be that inode.  Returns the
    new file's stat; a failed copy leaves no new file."""
    source = os.open(src_name, READ_FLAGS, dir_fd=src_dir)
    try:
        st = os.fstat(source)
        if not stat.S_ISREG(st.st_mode) or (expect is not None and not same(st, expect)):
            raise Changed(os.fsdecode(src_name))
        target = os.open(dst_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=dst_dir)
        try:
            while os.sendfile(target, source, None, _COPY_CHUNK):
                pass
            if owner is not None and owner != (os.geteuid(), os.getegid()):
                os.fchown(target, *owner)
            os.fchmod(target, mode)
            os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
            return os.fstat(target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(dst_name, dir_fd=dst_dir)
            raise
        finally:
            os.close(target)
    finally:
        os.close(source)


class MountInside(OSError):
    """:func:`link_tree` met a directory on another device (a mount point): it links no file system into another."""

    def __init__(self, what: str) -> None:
        super().__init__(errno.EXDEV, f"{what} is a mount point")
        self.what = what


def link_tree(src_dir: int, name: str | bytes, dst_dir: int, *, limits: Limits = Limits()) -> None:
    """Give the entry ``name`` of ``src_dir`` a second name ``name`` in ``dst_dir``: a directory is created anew
    (its owner and mode copied, after its content), everything else hard-linked as it is (a link as the link,
    never followed).  Raises :class:`MountInside` for a directory on another device than ``src_dir`` (nothing
    is linked across file systems: the caller leaves such a tree where it is) and removes what it made first."""
    raw = os.fsencode(name)
    st = lstat_at(src_dir, raw)
    if not stat.S_ISDIR(st.st_mode):
        os.link(raw, raw, src_dir_fd=src_dir, dst_dir_fd=dst_dir, follow_symlinks=False)
        return
    device = os.fstat(src_dir).st_dev
    if st.st_dev != device:
        raise MountInside(os.fsdecode(raw))
    targets: list[int] = []

    def make(parent: int, child: bytes, source: os.stat_result) -> None:
        os.mkdir(child, 0o700, dir_fd=parent)
        targets.append(open_dir(child, parent))

    def finish(source: os.stat_result) -> None:
        fd = targets.pop()
        try:
            if (source.st_uid, source.st_gid) != (os.geteuid(), os.getegid()):
                os.fchown(fd, source.st_uid, source.st_gid)
            os.fchmod(fd, stat.S_IMODE(source.st_mode))
        finally:
            os.close(fd)

    def visit(entry: Entry) -> bool:
        if entry.is_dir:
            if entry.st.st_dev != device:
                raise MountInside(os.fsdecode(raw + b"/" + entry.rel))
            return True
        os.link(entry.name, entry.name, src_dir_fd=entry.parent, dst_dir_fd=targets[-1], follow_symlinks=False)
        return False

    top = open_dir(raw, src_dir, expect=st)
    try:
        make(dst_dir, raw, st)
        walk(top, visit, limits=limits, entered=lambda fd, entry: make(targets[-1], entry.name, entry.st),
             left=lambda fd, entry: finish(entry.st))
        finish(st)
    except BaseException:
        for fd in targets:
            os.close(fd)
        targets.clear()
        with contextlib.suppress(OSError):
            remove_tree(dst_dir, raw)
        raise
    finally:
        os.close(top)
