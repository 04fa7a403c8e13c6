"""The old tree an exchange replaced, removed off the critical path of a sync.

After :func:`gkeys_portage.core.swap.swap_in` the old revision sits in the staging directory.  Removing it
is one unlink per file (``::gentoo``: ~170,000), which took three quarters of a verified git update
(13.5 s of 17.8 s for 50,000 files, ``bench/gitsync.py``).  So the sync renames it to the location's
*trash* (:func:`trash_path`: ``.NAME.gkeys.old`` beside the location, same file system, one fixed name) and a
detached child removes it (:func:`discard`): its own session, so killing ``emerge`` does not stop it, at
``nice 19`` and in the idle I/O class, so it yields to everything else.  The sync returns at once.

* **At most one old tree.**  The trash has one name, and every sync of the location removes what is there
  under its lock before it starts (:func:`sweep`): a removal killed half-way (a reboot, the OOM killer) or
  still running is finished then, so nothing stays for good and no run needs a manual step.
* **Never mistaken for the tree, never followed.**  The trash is a hidden sibling Portage never reads;
  ``rm -rf --one-file-system`` removes a symlink at any level as the link, and does not descend into
  another file system.  Its name is not a staging directory's (``.NAME.gkeys-*``), so nothing treats it as one.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

from gkeys_portage.core.errors import BadInputError

#: Removes ``$1`` in a child that outlives the shell that started it (``&``): lowest CPU and I/O priority.
_BACKGROUND = ('set -- rm -rf --one-file-system -- "$1"; '
               'if command -v ionice >/dev/null 2>&1; then set -- ionice -c 3 -t "$@"; fi; '
               'nice -n 19 "$@" </dev/null >/dev/null 2>&1 &')


def trash_path(location: Path) -> Path:
    """Where the old tree of ``location`` waits for its removal (``.NAME.gkeys.old`` beside it)."""
    return location.with_name(f".{location.name}.gkeys.old")


def _remove(path: Path) -> None:
    """``rm -rf --one-file-system path`` (tolerates a removal running in parallel); raise if anything stays."""
    try:
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], stdin=subprocess.DEVNULL,
                       capture_output=True, check=False)
    except OSError as exc:
        raise BadInputError(f"cannot run rm: {exc}") from exc
    if os.path.lexists(path):
        raise BadInputError(f"cannot remove {path}, the old tree an earlier sync replaced: remove it by hand "
                            f"(rm -rf {path}) and sync again")


def sweep(location: Path) -> bool:
    """Finish the removal of the old tree an earlier sync of ``location`` left; True if there was one.

    Call under the location's sync lock, before anything else (a removal running in the background may go
    on in parallel: both tolerate the other).  Raises :class:`BadInputError` if it cannot be removed.
    """
    trash = trash_path(location)
    if not os.path.lexists(trash):
        return False
    _remove(trash)
    return True


def discard(old: Path, location: Path) -> None:
    """Move the directory ``old`` to the trash of ``location`` and remove it there in a detached child.

    Call under the location's sync lock after :func:`sweep` (the trash name is free).  If the rename fails
    ``old`` stays where it is (the caller's staging directory, removed by the caller or the next sync); if
    the child cannot be started, the next sync's :func:`sweep` removes the trash.
    """
    trash = trash_path(location)
    try:
        os.rename(old, trash)
    except OSError:
        return  # the caller's staging directory: removed on its way out, or by the next sync
    with contextlib.suppress(OSError):  # not started: the next sync's sweep removes the trash
        subprocess.run(["sh", "-c", _BACKGROUND, "sh", str(trash)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, check=False)
