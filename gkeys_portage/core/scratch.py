"""Private scratch directories of gkeys runs, and the removal of those that a killed run left behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

#: no gkeys run lasts a day (every gpg call has a timeout), so an older scratch directory belongs to nobody
STALE_SECONDS = 24 * 3600


def remove_stale_dirs(parent: str | Path, prefix: str, *, now: float | None = None,
                      max_age: float = STALE_SECONDS) -> int:
    """Remove this user's directories named ``prefix*`` directly under ``parent`` that were last changed more than
    ``max_age`` seconds before ``now``; returns how many.  Symlinks and other users' directories are never
    touched (``parent`` is usually world-writable: ``/tmp``, ``/dev/shm``)."""
    cutoff = (time.time() if now is None else now) - max_age
    removed = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if (entry.name.startswith(prefix) and entry.is_dir(follow_symlinks=False)
                        and info.st_uid == os.geteuid() and info.st_mtime < cutoff):
                    shutil.rmtree(entry.path)
                    removed += 1
    return removed
