"""gemato's GnuPG homes: marked as gkeys' while a verification runs, removed once that run is gone.

gemato verifies in a temporary GnuPG home (``$TMPDIR/gemato.XXXXXXXX``) whose ``gpg --import`` starts a
``gpg-agent``; closing the environment kills the agent and removes the home.  A sync killed by SIGKILL (or the
OOM killer) closes nothing: the home and its agent would stay until the next reboot, one more after every such
kill.  So each home gkeys opens gets an owner file naming the process (pid and start time, so a reused pid does
not count), and every verification first removes the homes whose owner is gone.  Removing the home is enough to
end its agent: gpg-agent watches its home directory and exits when it disappears.  Homes without gkeys' owner
file (Portage's own rsync module and emerge-webrsync run gemato too) are never touched.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from gkeys_portage.core.scratch import OWNER_FILE, claim, claimed_owner_gone, remove_stale_dirs

__all__ = ["OWNER_FILE", "PREFIX", "claim", "remove_stale"]

PREFIX = "gemato."


def remove_stale(parent: str | None = None) -> int:
    """Remove the gemato homes under ``parent`` (default: where gemato makes them, ``tempfile.gettempdir()``)
    that gkeys claimed (:func:`gkeys_portage.core.scratch.claim`) for a process that is gone; returns how many.
    Only directories of this user, private to it (mode 0700) and not symlinks are looked at: ``$TMPDIR`` is
    usually world-writable."""
    def stale(home: Path, info: os.stat_result) -> bool:
        return not stat.S_IMODE(info.st_mode) & 0o077 and claimed_owner_gone(home)

    return remove_stale_dirs(parent if parent is not None else tempfile.gettempdir(), PREFIX, stale=stale)
