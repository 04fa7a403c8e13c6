"""A root directory walked one component at a time, never through a symlink, never into another's directory.

``gkeys setup-portage --eroot DIR`` runs as root on a directory that another user may be able to write
to: a planted ``etc/portage/postsync.d -> /elsewhere`` symlink would make root write hooks into (or, on
``--undo``, delete files from) another system's configuration.  :class:`ConfinedRoot` opens ``DIR`` once
and reaches every path below it with ``openat(..., O_NOFOLLOW)`` from the directory above; every
directory on the way must be a real directory owned by the running user or root and writable by
nobody else.  Files are written atomically (temp file, fsync, ``renameat``, fsync of the directory).
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import secrets
import stat
from pathlib import Path
from types import TracebackType

from gkeys_portage.core.errors import BadInputError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePathError(BadInputError):
    """A path below the root is a symlink, not a directory, or in a directory others control."""


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def check_directory(info: os.stat_result, path: Path) -> None:
    """Refuse a directory owned by anyone but the running user or root, or writable by group or others."""
    if info.st_uid not in (os.geteuid(), 0):
        raise UnsafePathError(f"{path} belongs to {_owner(info.st_uid)}: setup-portage writes only where nobody "
                              "but you or root can change the path (chown it, or give --eroot a root you own)")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePathError(f"{path} is {'world' if info.st_mode & stat.S_IWOTH else 'group'}-writable: another "
                              f"user could plant a symlink there (chmod go-w {path}, then run again)")


class ConfinedRoot:
    """``eroot`` opened once; paths below it are resolved from a directory descriptor without symlinks."""

    def __init__(self, eroot: Path) -> None:
        self.eroot = eroot
        try:
            self.fd = os.open(eroot, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise BadInputError(f"{eroot} is not a directory: give --eroot the root that holds etc/portage "
                                f"({exc.strerror})") from exc
        try:
            check_directory(os.fstat(self.fd), eroot)
        except BaseException:
            os.close(self.fd)
            raise

    def __enter__(self) -> ConfinedRoot:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        os.close(self.fd)

    def _open_dir(self, parent: int, name: str, path: Path) -> int | None:
        """The directory ``name`` in ``parent`` (None if absent); refused if a symlink or unsafe."""
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            return None
        except OSError as exc:
            try:
                link = stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
            except OSError:
                link = exc.errno == errno.ELOOP
            kind = "a symlink" if link else "not a directory"
            raise UnsafePathError(f"{self.eroot / path} is {kind}: setup-portage never writes through one (it could "
                                  "lead into another system's configuration); make it a real directory, or give "
                                  "--eroot the real path") from exc
        try:
            check_directory(os.fstat(fd), self.eroot / path)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def directory(self, rel: Path, *, create: bool = False, made: list[Path] | None = None) -> int | None:
        """A descriptor of directory ``rel`` (the caller closes it); None if a component is missing and
        ``create`` is false.  Created directories (mode 0755) are appended to ``made``, outermost first."""
        fd = os.dup(self.fd)
        walked = Path()
        for part in rel.parts:
            walked /= part
            try:
                child = self._open_dir(fd, part, walked)
                if child is None and create:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    if made is not None:
                        made.append(walked)
                    child = self._open_dir(fd, part, walked)
            finally:
                os.close(fd)
            if child is None:
                return None
            fd = child
        return fd

    def missing(self, rel: Path) -> list[Path]:
        """The directories of ``rel`` (itself included) that do not exist yet, outermost first."""
        for depth in range(1, len(rel.parts) + 1):
            fd = self.directory(Path(*rel.parts[:depth]))
            if fd is None:
                return [Path(*rel.parts[:d]) for d in range(depth, len(rel.parts) + 1)]
            os.close(fd)
        return []

    def kind(self, rel: Path) -> str:
        """``missing``, ``file`` (a regular file), ``symlink``, ``directory`` or ``other``, of ``rel`` itself
        (its directories are walked safely; a missing one makes it ``missing``)."""
        fd = self.directory(rel.parent)
        if fd is None:
            return "missing"
        try:
            info = os.stat(rel.name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return "missing"
        finally:
            os.close(fd)
        if stat.S_ISLNK(info.st_mode):
            return "symlink"
        if stat.S_ISDIR(info.st_mode):
            return "directory"
        return "file" if stat.S_ISREG(info.st_mode) else "other"

    def read(self, rel: Path) -> bytes | None:
        """The content of regular file ``rel`` (None if missing); a symlink anywhere is refused."""
        fd = self.directory(rel.parent)
        if fd is None:
            return None
        try:
            handle = os.open(rel.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise UnsafePathError(f"{self.eroot / rel} is a symlink: left alone") from exc
        finally:
            os.close(fd)
        with os.fdopen(handle, "rb") as stream:
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                raise UnsafePathError(f"{self.eroot / rel} is not a regular file: left alone")
            return stream.read()

    def write(self, rel: Path, data: bytes, mode: int, made: list[Path] | None = None, temp: str | None = None) -> None:
        """Create (or replace) ``rel`` atomically, making its missing directories; never through a symlink.
        ``temp``: the temporary name to write under (one a record named first), else a new random one."""
        fd = self.directory(rel.parent, create=True, made=made)
        assert fd is not None  # created
        tmp = temp or f".{rel.name}.{secrets.token_hex(6)}.tmp"
        try:
            handle = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                             dir_fd=fd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(handle, view):]
                os.fchmod(handle, mode)
                os.fsync(handle)
            finally:
                os.close(handle)
            os.rename(tmp, rel.name, src_dir_fd=fd, dst_dir_fd=fd)  # replaces a name, never follows it
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            raise
        finally:
            os.close(fd)

    def readlink(self, rel: Path) -> str | None:
        """The target of symlink ``rel`` (None if ``rel`` is missing or not a symlink); directories walked safely."""
        fd = self.directory(rel.parent)
        if fd is None:
            return None
        try:
            return os.readlink(rel.name, dir_fd=fd)
        except OSError:
            return None
        finally:
            os.close(fd)

    def symlink(self, rel: Path, target: str, made: list[Path] | None = None) -> None:
        """Create symlink ``rel`` -> ``target`` (never replacing a name), making its missing directories."""
        fd = self.directory(rel.parent, create=True, made=made)
        assert fd is not None  # created
        try:
            os.symlink(target, rel.name, dir_fd=fd)
            os.fsync(fd)
        finally:
            os.close(fd)

    def unlink(self, rel: Path) -> None:
        """Remove file ``rel`` (its directories walked safely; the name itself is never followed)."""
        fd = self.directory(rel.parent)
        if fd is None:
            return
        try:
            os.unlink(rel.name, dir_fd=fd)
        finally:
            os.close(fd)

    def rmdir(self, rel: Path) -> bool:
        """Remove directory ``rel`` if it exists and is empty; False if it is still there (not empty)."""
        fd = self.directory(rel.parent)
        if fd is None:
            return True
        try:
            os.rmdir(rel.name, dir_fd=fd)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        finally:
            os.close(fd)
        return True
