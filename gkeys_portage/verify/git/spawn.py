"""Who git runs as: Portage's spawn settings (``sync-user``, ``FEATURES=usersync``, ``sync-umask``).

Portage computes ``uid``/``gid``/``groups``/``umask`` for a repository in ``portage/sync/controller.py``
and hands them to its sync modules as ``spawn_kwargs``; its own git module runs every git command with
them.  :class:`SpawnSettings` carries the same four values to :class:`~gkeys_portage.verify.git.objects.GitRepo`
(as :func:`subprocess.run` arguments) and gives a directory gkeys creates (the staging directory of a
first clone) the owner and mode Portage would have given the repository location.
"""

from __future__ import annotations

import os
import resource
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SpawnSettings:
    """The identity and umask git runs with; ``None`` fields mean "as this process"."""

    uid: int | None = None
    gid: int | None = None
    groups: tuple[int, ...] = field(default_factory=tuple)
    umask: int | None = None

    @classmethod
    def from_portage(cls, spawn_kwargs: Mapping[str, Any] | None) -> SpawnSettings:
        """The settings Portage's sync controller put into a module's ``spawn_kwargs``."""
        kwargs = spawn_kwargs or {}
        uid, gid, umask = kwargs.get("uid"), kwargs.get("gid"), kwargs.get("umask")
        groups = tuple(int(g) for g in kwargs.get("groups") or ())
        return cls(uid=int(uid) if uid is not None else None, gid=int(gid) if gid is not None else None,
                   groups=groups, umask=int(umask) if umask is not None else None)

    @classmethod
    def owner_of(cls, path: Path) -> SpawnSettings:
        """Run as the owner of ``path`` when this process is root and another user owns it.

        What Portage's ``FEATURES=usersync`` does (umask 002, or 022 when the directory is not group
        writable), so git run from a hook as root never leaves root-owned files in a user's tree.
        """
        try:
            st = path.stat()
        except OSError:
            return cls()
        if os.geteuid() != 0 or st.st_uid == 0:
            return cls()
        return cls(uid=st.st_uid, gid=st.st_gid, groups=(st.st_gid,), umask=0o002 if st.st_mode & 0o020 else 0o022)

    @property
    def switches_user(self) -> bool:
        """True when git runs under another uid or gid than this process."""
        return (self.uid is not None and self.uid != os.getuid()) or (self.gid is not None and
                                                                        self.gid != os.getgid())

    def owns(self, path: Path) -> bool:
        """True when ``path`` (not followed) is a directory of the user these settings run as: a tree this user
        synced last.  False after ``sync-user`` or ``FEATURES=usersync`` changed, and for a missing path."""
        try:
            st = path.lstat()
        except OSError:
            return False
        return stat.S_ISDIR(st.st_mode) and st.st_uid == (self.uid if self.uid is not None else os.geteuid())

    def run_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`subprocess.run` (the child switches identity before exec)."""
        kwargs: dict[str, Any] = {}
        if self.umask is not None:
            kwargs["umask"] = self.umask
        if self.switches_user:
            if self.gid is not None:
                kwargs["group"] = self.gid
            kwargs["extra_groups"] = list(self.groups or ((self.gid,) if self.gid is not None else ()))
            if self.uid is not None:
                kwargs["user"] = self.uid
        return kwargs

    def directory_mode(self) -> int:
        """The mode Portage gives a new repository location: 0755 minus the umask."""
        return 0o755 & ~(self.umask if self.umask is not None else 0o022)

    def prepare_directory(self, path: Path, like: Path | None = None) -> None:
        """Give ``path`` the owner and mode of ``like`` if that exists, else those Portage would choose."""
        try:
            st = like.stat() if like is not None else None
        except OSError:
            st = None
        if st is not None:
            uid, gid, mode = st.st_uid, st.st_gid, st.st_mode & 0o7777
        else:
            uid = self.uid if self.uid is not None else -1
            gid = self.gid if self.gid is not None else -1
            mode = self.directory_mode()
        if (uid, gid) != (-1, -1) and (uid, gid) != (os.getuid(), os.getgid()):
            os.chown(path, uid, gid)
        os.chmod(path, mode)


def file_size_limit(max_bytes: int | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` capping every file the child writes at ``max_bytes`` (``RLIMIT_FSIZE``)."""
    if not max_bytes:
        return None

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return limit
