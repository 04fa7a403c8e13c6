"""A git work tree built beside the live one, so a sync never writes where Portage reads.

An update of a verified git repository works on a *staging copy* beside the live tree and swaps it in with
one ``renameat2(RENAME_EXCHANGE)`` (:mod:`gkeys_portage.core.swap`):

1. :func:`copy_git_dir`: the live ``.git`` is copied into the staging directory, its ``objects/``
   hard-linked (git never rewrites an object or pack file: it writes new ones and renames them), every
   other file copied (``FETCH_HEAD`` and the reflogs are written in place).  The fetch goes into this copy,
   so a refused fetch's objects leave with the staging directory: the live repository does not grow, and
   no ref or reflog of it ever names a refused commit.  Lock files a killed git left are not copied.
2. Once every new commit verified, the staging directory gets a work tree for ``git reset --hard`` to
   bring to the new revision: the *spare* the last update kept (:mod:`gkeys_portage.core.trash`), its
   top-level entries moved in by :func:`adopt_spare` (a few renames), or, without one, the live work tree
   hard-linked in by :func:`link_work_tree` (one link per file); both leave out ``.git`` and the
   :data:`LOCAL_DIRECTORIES`.  The reset rewrites only what differs; git replaces a file it changes by a
   new one (a new inode, also for a mode change), so the live file a staging link shares is never written.
3. :func:`carry_local`: in a repository Portage treats as volatile, the :data:`LOCAL_DIRECTORIES` of the
   live tree are hard-linked into the checked-out staging tree, so the swap keeps them.

Copies and links are made by ``cp`` running as the user git runs as (Portage's ``sync-user``), so they
belong to the tree's owner.  A mount point at the top of the tree refuses the update: a rename cannot carry
it, and removing the old tree would descend into it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from gkeys_portage.core import children
from gkeys_portage.core.errors import BadInputError, UsageError
from gkeys_portage.verify.git.spawn import SpawnSettings

#: Top-level directories Portage keeps as the user's in a volatile repository (its git module never runs
#: ``git clean`` there; gemato's ``ebuild`` profile IGNOREs them; the rsync path never syncs them).
LOCAL_DIRECTORIES = ("distfiles", "local", "packages")


def _cp(args: Sequence[str | Path], spawn: SpawnSettings) -> None:
    """Run ``cp`` (GNU) as the user git runs as; raise :class:`BadInputError` with its first error line."""
    try:
        result = subprocess.run(["cp", *(str(a) for a in args)], capture_output=True, stdin=subprocess.DEVNULL,
                                check=False, preexec_fn=children.preexec(), **spawn.run_kwargs())
    except OSError as exc:
        raise BadInputError(f"cannot run cp: {exc}") from exc
    if result.returncode != 0:
        lines = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise BadInputError(f"copying into the staging tree failed: {lines[0] if lines else result.returncode}")


def _refuse_mount_points(paths: Sequence[Path]) -> None:
    for path in paths:
        if os.path.ismount(path):
            raise UsageError(f"{path} is a mount point inside the repository: a verified update replaces the whole "
                             f"tree in one rename, which cannot carry a mount point; mount it outside "
                             f"{path.parent} and sync again")


def copy_git_dir(live: Path, staging: Path, spawn: SpawnSettings) -> None:
    """Make ``staging/.git`` a copy of ``live/.git``: objects hard-linked, everything else copied, no lock file."""
    source = live / ".git"
    if source.is_symlink() or not source.is_dir():
        raise BadInputError(f"{source} is not a directory: gkeys updates a work tree whose .git is a directory "
                            f"(remove {live} and sync again to clone afresh)")
    target = staging / ".git"
    target.mkdir()
    spawn.prepare_directory(target, like=source)
    others = [path for path in source.iterdir() if path.name != "objects"]
    if others:
        _cp(["-a", "-t", target, *others], spawn)
    _cp(["-a", "--link", "-t", target, source / "objects"], spawn)
    for directory, subdirs, files in os.walk(target):
        if Path(directory) == target:
            subdirs[:] = [name for name in subdirs if name != "objects"]
        for name in files:
            if name.endswith(".lock"):  # left by a killed git: it would block the staging copy for ever
                os.unlink(os.path.join(directory, name))


def link_work_tree(live: Path, staging: Path, spawn: SpawnSettings) -> None:
    """Hard-link the live work tree into ``staging`` (every top-level entry but ``.git`` and the local ones)."""
    entries = sorted(path for path in live.iterdir() if path.name != ".git" and path.name not in LOCAL_DIRECTORIES)
    _refuse_mount_points(entries)
    if entries:
        _cp(["-a", "--link", "-t", staging, *entries], spawn)


def adopt_spare(spare: Path, staging: Path) -> bool:
    """Move the work tree of ``spare`` (the tree the last update replaced) into ``staging``: every top-level
    entry but ``.git`` and the :data:`LOCAL_DIRECTORIES`, which stay in ``spare`` for the caller to discard.
    False (nothing moved) if it has no such entry (a run killed while moving them) or one is a mount point.

    The spare shares the inode of every file the last update did not change with the live tree, so the
    ``git reset --hard`` that follows rewrites only what differs from the new revision (git replaces a file it
    changes by a new one: no live file is written), and ``clean -ffdx`` removes what the revision lacks.
    """
    entries = sorted(path for path in spare.iterdir() if path.name != ".git" and path.name not in LOCAL_DIRECTORIES)
    if not entries or any(os.path.ismount(path) for path in entries):
        return False
    for path in entries:
        os.rename(path, staging / path.name)
    return True


def carry_local(live: Path, staging: Path, spawn: SpawnSettings) -> list[str]:
    """Hard-link the live tree's :data:`LOCAL_DIRECTORIES` into the checked-out ``staging`` tree; their names.

    A symlink is carried as the symlink.  A verified revision that itself holds one of those names is refused
    (the user's files would otherwise be replaced by the revision's).
    """
    present = [live / name for name in LOCAL_DIRECTORIES if os.path.lexists(live / name)]
    _refuse_mount_points(present)
    for path in present:
        if os.path.lexists(staging / path.name):
            raise UsageError(f"the verified revision has {path.name}/, which Portage keeps as yours in {live}: move "
                             f"{path} away and sync again")
    if present:
        _cp(["-a", "--link", "-t", staging, *present], spawn)
    return [path.name for path in present]
