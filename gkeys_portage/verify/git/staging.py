"""A git work tree built beside the live one, so a sync never writes where Portage reads.

An update of a verified git repository works on a *staging copy* beside the live tree and swaps it in with
one ``renameat2(RENAME_EXCHANGE)`` (:mod:`gkeys_portage.core.fs.swap`):

1. :func:`copy_git_dir`: the live ``.git`` is copied into the staging directory, its ``objects/``
   hard-linked (git never rewrites an object or pack file: it writes new ones and renames them), every
   other file copied (``FETCH_HEAD`` and the reflogs are written in place).  The fetch goes into this copy,
   so a refused fetch's objects leave with the staging directory: the live repository does not grow, and
   no ref or reflog of it ever names a refused commit.  Lock files a killed git left are not copied.
2. Once every new commit verified, the staging directory gets a work tree for ``git reset --hard`` to
   bring to the new revision: the *spare* the last update kept (:mod:`gkeys_portage.core.fs.trash`), its
   top-level entries moved in by root (:func:`gkeys_portage.verify.git.hold.adopt`, a few renames), or,
   without one, the live work tree hard-linked in by :func:`link_work_tree` (one link per file); both leave
   out ``.git`` and the :data:`LOCAL_DIRECTORIES`.  Root takes the tree before it verifies or checks out
   anything and proves the result by hash (:mod:`gkeys_portage.verify.git.hold`).  The reset rewrites only
   what differs; git replaces a file it changes by a
   new one (a new inode, also for a mode change), so the live file a staging link shares is never written.
3. :func:`carry_local`: in a repository Portage treats as volatile, the :data:`LOCAL_DIRECTORIES` of the
   live tree are hard-linked into the checked-out staging tree, so the swap keeps them.

Copies and links are made by ``cp`` running as the user git runs as (Portage's ``sync-user``), so they
belong to the tree's owner.  A mount point at the top of the tree refuses the update: a rename cannot carry
it, and removing the old tree would descend into it.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

from gkeys_portage.core import children
from gkeys_portage.core.errors import BadInputError, UsageError
from gkeys_portage.core.fs import fdtree
from gkeys_portage.verify.git.spawn import SpawnSettings

#: Top-level directories Portage keeps as the user's in a volatile repository (its git module never runs
#: ``git clean`` there; gemato's ``ebuild`` profile IGNOREs them; the rsync path never syncs them).
LOCAL_DIRECTORIES = ("distfiles", "local", "packages")


def _cp(args: Sequence[str | Path], spawn: SpawnSettings) -> None:
    """Run ``cp`` (GNU) as the user git runs as; raise :class:`BadInputError` with its first error line."""
    try:
        result = subprocess.run(children.tied(["cp", *(str(a) for a in args)]), capture_output=True,
                                stdin=subprocess.DEVNULL, check=False, preexec_fn=children.preexec_for(),
                                **spawn.run_kwargs())
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


def copy_git_dir(live: Path, staging: Path, spawn: SpawnSettings, *, link: bool = True) -> None:
    """Make ``staging/.git`` a copy of ``live/.git``: objects hard-linked (copied when ``link`` is False: the live
    tree is a previous sync user's, whose files ``fs.protected_hardlinks`` keeps the sync user from linking),
    everything else copied (by ``cp`` as the sync user).  ``staging`` may belong to the sync user: ``.git`` is
    made and given to it (the owner and mode of ``staging``, or of ``live/.git`` when linking) by descriptor.
    Lock files a killed git left are removed once root has taken the tree (:func:`.hold.take`)."""
    source = live / ".git"
    if source.is_symlink() or not source.is_dir():
        raise BadInputError(f"{source} is not a directory: gkeys updates a work tree whose .git is a directory "
                            f"(remove {live} and sync again to clone afresh)")
    _make_dir_like(staging, ".git", source if link else staging)
    target = staging / ".git"
    others = [path for path in source.iterdir() if path.name != "objects"]
    how = ["-a"] if link else ["-a", "--no-preserve=ownership"]  # every copy the sync user's, none the old one's
    if others:
        _cp([*how, "-t", target, *others], spawn)
    _cp([*how, *(["--link"] if link else []), "-t", target, source / "objects"], spawn)


def _make_dir_like(parent: Path, name: str, like: Path) -> None:
    """Make the directory ``parent/name`` with the owner and mode of ``like``, by descriptor: ``parent`` may be
    the sync user's, who could otherwise put a link in its place between the mkdir and a chown by path."""
    st = like.stat()
    top = fdtree.open_dir(parent)
    try:
        os.mkdir(name, 0o700, dir_fd=top)
        made = fdtree.lstat_at(top, name)
        if made.st_uid != os.geteuid():
            raise fdtree.Changed(name)
        fdtree.set_owner_mode(top, name, made, (st.st_uid, st.st_gid), stat.S_IMODE(st.st_mode))
    finally:
        os.close(top)


def link_work_tree(live: Path, staging: Path, spawn: SpawnSettings) -> None:
    """Hard-link the live work tree into ``staging`` (every top-level entry but ``.git`` and the local ones)."""
    entries = sorted(path for path in live.iterdir() if path.name != ".git" and path.name not in LOCAL_DIRECTORIES)
    _refuse_mount_points(entries)
    if entries:
        _cp(["-a", "--link", "-t", staging, *entries], spawn)


def carry_local(live: Path, staging: Path, spawn: SpawnSettings, *, by_root: bool = False) -> list[str]:
    """Hard-link the live tree's :data:`LOCAL_DIRECTORIES` into the checked-out ``staging`` tree; their names.

    A symlink is carried as the symlink.  A verified revision that itself holds one of those names is refused
    (the user's files would otherwise be replaced by the revision's).  ``by_root``: root links them, through
    descriptors (:func:`fdtree.link_tree`, owners and modes kept), not the sync user's ``cp``: after a switch of
    the sync user they are the previous user's, which ``fs.protected_hardlinks`` keeps the new one from linking.
    """
    present = [live / name for name in LOCAL_DIRECTORIES if os.path.lexists(live / name)]
    _refuse_mount_points(present)
    for path in present:
        if os.path.lexists(staging / path.name):
            raise UsageError(f"the verified revision has {path.name}/, which Portage keeps as yours in {live}: move "
                             f"{path} away and sync again")
    names = [path.name for path in present]
    if by_root:
        _link_by_root(live, staging, names)
        return names
    if present:
        _cp(["-a", "--link", "-t", staging, *present], spawn)
    return names


def _link_by_root(live: Path, staging: Path, names: Sequence[str]) -> None:
    """Link the entries ``names`` of ``live`` into ``staging`` as root, through descriptors (nothing followed)."""
    source, target = fdtree.open_dir(live), fdtree.open_dir(staging)
    try:
        for name in names:
            fdtree.link_tree(source, name, target)
    finally:
        os.close(source)
        os.close(target)
