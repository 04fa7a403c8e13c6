"""The old tree an exchange replaced: kept as the next update's starting point, its remains removed off the
critical path of a sync.

After :func:`gkeys_portage.core.fs.swap.swap_in` the old revision sits in the staging directory.  Removing it is
one unlink per file (``::gentoo``: ~170,000), and building the next staging tree one link per file; the two
were 17 s of an 18 s update of 50,000 files (``bench/gitsync.py``).  So the old tree is *kept* beside the
location as its *spare* (:func:`spare_path`: ``.NAME.gkeys.old``, same file system, one fixed name; it shares
every unchanged file's inode with the live tree, so it costs little disk), and the next update moves the
spare's top-level entries into its staging directory (a few renames) and lets ``git reset --hard`` rewrite the
files that differ from the new revision, instead of linking the whole tree again.  What the next update does
not take (the spare's ``.git``, a spare it cannot use) goes to the location's *trash* (:func:`trash_path`:
``.NAME.gkeys.trash``) and a detached child removes it (:func:`discard`): its own session, so killing
``emerge`` does not stop it, at ``nice 19`` and in the idle I/O class.

* **At most one old tree.**  Spare and trash have one name each; every sync of the location removes what is
  in the trash under its lock before it starts (:func:`sweep`): a removal killed half-way (a reboot, the OOM
  killer) or still running is finished then, so nothing stays for good and no run needs a manual step.
* **Never mistaken for the tree, never followed.**  Both are hidden siblings Portage never reads; their names
  are not a staging directory's (``.NAME.gkeys-*``).  ``rm -rf --one-file-system`` removes a symlink at any
  level as the link and does not descend into another file system; a spare that is a symlink or not owned
  as the location is never used, only discarded.  Nothing in the spare is trusted: the staging tree built
  from it is reset to the verified revision, cleaned and checked like any other.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from pathlib import Path

from gkeys_portage.core.errors import BadInputError
from gkeys_portage.core.fs import fdtree

#: Removes ``$1`` in a child that outlives the shell that started it (``&``): lowest CPU and I/O priority.
_BACKGROUND = ('set -- rm -rf --one-file-system -- "$1"; '
               'if command -v ionice >/dev/null 2>&1; then set -- ionice -c 3 -t "$@"; fi; '
               'nice -n 19 "$@" </dev/null >/dev/null 2>&1 &')


def spare_path(location: Path) -> Path:
    """Where the tree the last update of ``location`` replaced is kept (``.NAME.gkeys.old`` beside it)."""
    return location.with_name(f".{location.name}.gkeys.old")


def trash_path(location: Path) -> Path:
    """Where what an update of ``location`` no longer needs waits for its removal (``.NAME.gkeys.trash``)."""
    return location.with_name(f".{location.name}.gkeys.trash")


def usable_spare(location: Path) -> Path | None:
    """The spare of ``location`` if an update may start from it: a directory (not a symlink) owned as the
    location.  Anything else at the spare's name is discarded."""
    spare = spare_path(location)
    try:
        info, home = spare.lstat(), location.stat()
    except OSError:
        return None
    if stat.S_ISDIR(info.st_mode) and (info.st_uid, info.st_dev) == (home.st_uid, home.st_dev):
        return spare
    discard(spare, location)
    return None


def keep_spare(old: Path, location: Path) -> None:
    """Keep the directory ``old`` (the tree an exchange just replaced) as the spare of ``location``.

    Call under the location's sync lock after the spare was used or discarded.  If the name is taken or the
    rename fails, ``old`` is discarded instead.
    """
    spare = spare_path(location)
    try:
        if os.path.lexists(spare):
            raise FileExistsError(spare)
        os.rename(old, spare)
    except OSError:
        discard(old, location)


def _remove(path: Path) -> None:
    """Remove ``path`` by descriptor (:mod:`gkeys_portage.core.fs.fdtree`: never a link followed, never a mount
    crossed, no recursion; a removal running in parallel is tolerated); raise if anything stays."""
    try:
        parent = fdtree.open_dir(path.parent)
        try:
            fdtree.remove_tree(parent, path.name)
        finally:
            os.close(parent)
    except OSError as exc:
        raise BadInputError(f"cannot remove {path}, what an earlier sync left to remove ({exc.strerror or exc}): "
                            f"remove it by hand (rm -rf --one-file-system {path})") from exc


def sweep(location: Path) -> bool:
    """Finish the removal of what an earlier sync of ``location`` left in the trash; True if there was any.

    Call under the location's sync lock, before anything else (a removal running in the background may go
    on in parallel: both tolerate the other).  Raises :class:`BadInputError` if it cannot be removed.
    """
    trash = trash_path(location)
    if not os.path.lexists(trash):
        return False
    _remove(trash)
    return True


def discard(old: Path, location: Path) -> None:
    """Move ``old`` to the trash of ``location`` and remove it there in a detached child.

    Call under the location's sync lock after :func:`sweep`, once per sync (the trash name is free).  If the
    rename fails ``old`` stays where it is (a staging directory is removed by its owner or the next sync; a
    spare is tried again by the next sync); if the child cannot be started, the next sync's :func:`sweep`
    removes the trash.
    """
    trash = trash_path(location)
    try:
        os.rename(old, trash)
    except OSError:
        return  # the caller's staging directory: removed on its way out, or by the next sync
    with contextlib.suppress(OSError):  # not started: the next sync's sweep removes the trash
        subprocess.run(["sh", "-c", _BACKGROUND, "sh", str(trash)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, check=False)
