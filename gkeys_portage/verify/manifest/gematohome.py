"""gemato's GnuPG homes: marked as gkeys' while a verification runs, removed once that run is gone.

gemato verifies in a temporary GnuPG home (``$TMPDIR/gemato.XXXXXXXX``) whose ``gpg --import`` starts a
``gpg-agent``; closing the environment kills the agent and removes the home.  A sync killed by SIGKILL (or the
OOM killer) closes nothing: the home and its agent would stay until the next reboot, one more after every such
kill.  So each home gkeys opens gets an owner file naming the process (pid and start time, so a reused pid does
not count) the moment gemato makes it (:func:`owned_homes`), and every verification first removes the homes whose
owner is gone.  Removing the home is enough to
end its agent: gpg-agent watches its home directory and exits when it disappears.  Homes without gkeys' owner
file (Portage's own rsync module and emerge-webrsync run gemato too) are never touched.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gkeys_portage.core.scratch import OWNER_FILE, claim, claimed_owner_gone, remove_stale_dirs

__all__ = ["OWNER_FILE", "PREFIX", "claim", "owned_homes", "remove_stale"]

PREFIX = "gemato."


class _OwnedTempfile:
    """gemato's ``tempfile`` while gkeys verifies: the same module, but a directory it makes is claimed
    (:func:`claim`) the moment it exists, before gemato writes into it or starts an agent there.  (Its name stays
    gemato's: a longer one could push the agent's socket path past the 107 bytes a socket name may have.)"""

    def __getattr__(self, name: str) -> Any:
        return getattr(tempfile, name)

    @staticmethod
    def mkdtemp(suffix: str | None = None, prefix: str | None = None, dir: str | None = None) -> str:  # noqa: A002
        """:func:`tempfile.mkdtemp`, claimed for this process."""
        home = tempfile.mkdtemp(suffix, prefix, dir)
        claim(home)
        return home


@contextlib.contextmanager
def owned_homes(openpgp: Any) -> Iterator[None]:
    """Within the block, the homes gemato's ``openpgp`` module makes are claimed as they are made; put back
    after."""
    saved = openpgp.tempfile
    openpgp.tempfile = _OwnedTempfile()
    try:
        yield
    finally:
        openpgp.tempfile = saved


def remove_stale(parent: str | None = None) -> int:
    """Remove the gemato homes under ``parent`` (default: where gemato makes them, ``tempfile.gettempdir()``)
    that gkeys claimed (:func:`gkeys_portage.core.scratch.claim`) for a process that is gone; returns how many.
    Only directories of this user, private to it (mode 0700) and not symlinks are looked at: ``$TMPDIR`` is
    usually world-writable."""
    def stale(home: Path, info: os.stat_result) -> bool:
        return not stat.S_IMODE(info.st_mode) & 0o077 and claimed_owner_gone(home)

    return remove_stale_dirs(parent if parent is not None else tempfile.gettempdir(), PREFIX, stale=stale)
