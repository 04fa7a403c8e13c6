"""Private scratch directories of gkeys runs, and the removal of those that a killed run left behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

#: no gkeys run lasts a day (every gpg call has a timeout), so an older scratch directory belongs to nobody
STALE_SECONDS = 24 * 3600


def remove_stale_dirs(parent: str | Path, prefix: str, *, now: float | None = None, max_age: float = STALE_SECONDS,
                      stale: Callable[[Path, os.stat_result], bool] | None = None) -> int:
    """Remove this user's directories named ``prefix*`` directly under ``parent`` that are stale; returns how many.

    Stale means last changed more than ``max_age`` seconds before ``now``, unless ``stale(path, stat)`` decides
    instead (gemato's homes: their owner process is gone).  Symlinks and other users' directories are never
    touched (``parent`` is usually world-writable: ``/tmp``, ``/dev/shm``)."""
    cutoff = (time.time() if now is None else now) - max_age
    removed = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            with contextlib.suppress(OSError):
                if not entry.name.startswith(prefix) or not entry.is_dir(follow_symlinks=False):
                    continue
                info = entry.stat(follow_symlinks=False)
                if info.st_uid != os.geteuid():
                    continue
                if stale(Path(entry.path), info) if stale is not None else info.st_mtime < cutoff:
                    shutil.rmtree(entry.path)
                    removed += 1
    return removed
