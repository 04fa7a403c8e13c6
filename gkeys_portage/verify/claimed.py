"""Open, as root, a file a journal spool record names, without acting on a path the build user can change.

A record (:mod:`gkeys_portage.verify.spool`) names a distfile and its signature; the build user chose both paths.
Root opens them only like this, or journals the claim as unconfirmed with :class:`Unconfirmable`'s reason:

1. Only below Portage's real ``DISTDIR`` (root's own environment or make.conf, given by the caller and resolved
   once, by root): a build resolves its ``${DISTDIR}`` (a directory of links in ``PORTAGE_BUILDDIR``) before
   it writes the record, so the record names the real distfile.  The name must be absolute and normal (no
   ``.``, ``..``, ``//``).
2. ``DISTDIR`` is opened as a directory; each component below it by descriptor (``O_NOFOLLOW|O_DIRECTORY``,
   :func:`~gkeys_portage.core.fs.fdtree.open_dir`), the file itself with ``O_NOFOLLOW|O_NONBLOCK|O_NOCTTY``: a
   symbolic link anywhere, a FIFO, a device or a socket is refused at once, never waited on, never read.
3. The record's owner must be able to read it itself (the mode bits of each directory on the way and of the file,
   for its uid and groups): root answers no question (is it there, did it change, its hash) about a file the
   build user could not read.
4. At most ``limit`` bytes (``fstat``; a file that grows is read no further than that).

The caller hashes and verifies through the descriptor returned (the same inode, never reopened by name).
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from gkeys_portage.core.fs.fdtree import open_dir

FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
READ, SEARCH = 4, 1


class Unconfirmable(Exception):
    """Why root does not open what a record names (the text a ``file-reported`` entry carries)."""


def _groups(user: str, uid: int) -> tuple[int, set[int]]:
    try:
        entry = pwd.getpwuid(uid)
    except KeyError as exc:
        raise Unconfirmable(f"uid {uid} is no user") from exc
    return uid, set(os.getgrouplist(user, entry.pw_gid))


def _may(info: os.stat_result, who: tuple[int, set[int]], bit: int) -> bool:
    """Whether the user ``who`` (uid, groups) has permission ``bit`` (READ, SEARCH) on ``info``."""
    uid, gids = who
    if uid == 0:
        return True
    if info.st_uid == uid:
        return bool(info.st_mode & (bit << 6))
    return bool(info.st_mode & ((bit << 3) if info.st_gid in gids else bit))


def below(distdir: Path | None, named: str) -> list[str]:
    """The components of ``named`` below the real ``distdir``; :class:`Unconfirmable` when it is not there."""
    if distdir is None or not distdir.is_absolute():
        raise Unconfirmable("Portage's DISTDIR is not known here (set DISTDIR in make.conf)")
    top = os.path.realpath(distdir)
    if os.path.normpath(named) != named or not named.startswith(top.rstrip("/") + "/"):
        raise Unconfirmable(f"it is not a file below Portage's DISTDIR {top}")
    return named[len(top.rstrip("/")) + 1:].split("/")


def open_claimed(distdir: Path | None, named: str, owner: tuple[str, int], limit: int) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular file ``named`` below ``distdir`` that the record's ``owner`` (name,
    uid) may read, at most ``limit`` bytes, and its ``fstat`` (see the module docstring); the caller closes it.
    Raises :class:`Unconfirmable` naming why not."""
    parts = below(distdir, named)
    who = _groups(*owner)
    assert distdir is not None
    try:
        level = open_dir(os.path.realpath(distdir))
    except OSError as exc:
        raise Unconfirmable(f"Portage's DISTDIR cannot be opened ({exc.strerror})") from exc
    try:
        for part in parts[:-1]:
            try:
                inner = open_dir(part, level)
            except OSError as exc:
                raise Unconfirmable(f"{part} is not a directory below DISTDIR ({exc.strerror}: a symbolic link?)"
                                    ) from exc
            os.close(level)
            level = inner
            if not _may(os.fstat(level), who, SEARCH):
                raise Unconfirmable(f"{owner[0]} may not enter the directory {part}")
        try:
            fd = os.open(parts[-1], FILE_FLAGS, dir_fd=level)
        except FileNotFoundError as exc:
            raise Unconfirmable("the file is gone") from exc
        except OSError as exc:
            raise Unconfirmable(f"it cannot be opened as a file ({exc.strerror}: a symbolic link?)") from exc
    finally:
        os.close(level)
    info = os.fstat(fd)
    why = ("it is not a regular file (a FIFO, a device or a socket)" if not stat.S_ISREG(info.st_mode) else
           f"{owner[0]} may not read it" if not _may(info, who, READ) else
           f"it is larger than {limit} bytes" if info.st_size > limit else "")
    if why:
        os.close(fd)
        raise Unconfirmable(why)
    return fd, info


def read_claimed(fd: int, limit: int) -> bytes:
    """All of the file at ``fd`` from its start, at most ``limit`` bytes (:class:`Unconfirmable` if more)."""
    chunks: list[bytes] = []
    offset = 0
    while chunk := os.pread(fd, min(1 << 20, limit + 1 - offset), offset):
        chunks.append(chunk)
        offset += len(chunk)
        if offset > limit:
            raise Unconfirmable(f"it is larger than {limit} bytes")
    return b"".join(chunks)
