"""The staging tree in root's custody: taken from the sync user before it is judged, given back last.

Under Portage's ``usersync`` rsync fills the staging tree as the repository's owner (``portage``), and any
process a build left behind runs as that user too.  So once rsync has finished, and before gemato reads a
byte, the tree is taken away (:func:`take_over`):

1. renamed into a *holder* beside the location, a directory only root can enter (0700, root's:
   :func:`open_holder`), so no path of the sync user reaches it any more;
2. walked once through descriptors (:mod:`gkeys_portage.core.fs.fdtree`): every directory, as soon as it is
   opened and before it is listed, becomes root's with mode 0700 (a descriptor the user opened on it earlier
   no longer lets it create, rename or open anything in it); every file and link becomes root's (a file keeps
   its mode minus group/other write and set-id bits); an entry of any other owner refuses the tree;
3. every entry's inode, size, modification and change time and mode recorded *after* that change (the
   "taken" record).  A process of the user that opened a file for writing before the takeover can still
   write through that descriptor: the write changes the change time, and shaping compares every entry with
   this record (:func:`gkeys_portage.verify.manifest.shape.shape`) and refuses on any difference.

A staging file that rsync hard-linked to a live file shares the live file's inode: the takeover makes the live
file root's too, until :func:`gkeys_portage.verify.manifest.shape.hand_over` gives the tree its owner as the
very last step (or, when the tree is refused, :func:`give_back` gives those shared files their owner and mode
back).  The old tree an exchange replaced lands in the holder too and is removed there, by descriptor.

What an interrupted sync left beside the location (holders, staging trees) is removed at the start of the next
one (:func:`remove_stale`); what cannot be removed is named with the command that removes it, never the reason
a sync fails.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.core.errors import NotVerifiedError
from gkeys_portage.core.fs import fdtree
from gkeys_portage.core.scratch import owned_prefix
from gkeys_portage.verify.manifest.shape import TREE_LIMITS, fingerprint, shown

#: The name of the tree inside its holder.
TREE = "tree"
HOLDER_MODE = 0o700
#: A directory's mode while gkeys holds it: nobody else may enter it, even through a descriptor opened before.
HELD_DIRECTORY_MODE = 0o700
_STRIP = 0o7022  # never kept on a file in custody: set-user-id, set-group-id, sticky, group and other write


class TreeTooLarge(NotVerifiedError):
    """The mirror sent a tree deeper or larger than gkeys takes (:data:`shape.TREE_LIMITS`)."""


class ForeignEntry(NotVerifiedError):
    """The staging tree holds an entry neither the sync user nor root owns."""


@dataclass
class Taken:
    """A tree in custody: every entry's :func:`shape.fingerprint` after the takeover, and the owner and mode
    each file or link had before it (given back by :func:`give_back` to the ones shared with the live tree)."""

    fingerprints: dict[bytes, bytes] = field(default_factory=dict)
    before: dict[bytes, tuple[int, int, int]] = field(default_factory=dict)  # shared files only (link count > 1)


def open_holder(parent: Path, prefix: str) -> tuple[Path, int]:
    """A fresh holder beside the location (``PREFIX…``, root's, 0700) and its descriptor."""
    path = Path(tempfile.mkdtemp(prefix=owned_prefix(prefix), dir=parent))
    fd = fdtree.open_dir(path)
    os.fchmod(fd, HOLDER_MODE)
    return path, fd


def take_over(holder: int, parent: int, name: str, owners: frozenset[int], taken: Taken) -> Taken:
    """Move the staging tree ``name`` of the directory ``parent`` into ``holder`` (as :data:`TREE`) and make it
    root's alone (see the module docstring), recording into ``taken`` (also what a failed takeover changed, for
    :func:`give_back`).  ``owners``: the uids its entries may have (the sync user's, 0).

    Raises :class:`TreeTooLarge` past :data:`shape.TREE_LIMITS`, :class:`ForeignEntry` for an entry of another
    owner, :class:`fdtree.Changed` for an entry replaced under the walk."""
    os.rename(name, TREE, src_dir_fd=parent, dst_dir_fd=holder)
    top = fdtree.open_dir(TREE, holder)
    owners_seen: dict[tuple[int, int, int], tuple[int, int, int]] = {}  # one tuple per distinct owner and mode
    try:
        st = os.fstat(top)
        _owned(st, owners, "the staging directory")
        _hold_directory(top, st)

        def entered(fd: int, entry: fdtree.Entry) -> None:
            _hold_directory(fd, entry.st)

        def left(fd: int, entry: fdtree.Entry) -> None:  # after its content: a file broken away changes it
            taken.fingerprints[entry.rel] = fingerprint(os.fstat(fd))

        def visit(entry: fdtree.Entry) -> bool:
            st = entry.st
            _owned(st, owners, shown(os.fsdecode(entry.rel)))
            if stat.S_ISDIR(st.st_mode):
                return True
            if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                if st.st_uid != 0 or st.st_gid != 0:
                    os.chown(entry.name, 0, 0, dir_fd=entry.parent, follow_symlinks=False)
                if st.st_nlink > 1:  # another name (a live file) shares it: given back if the tree is refused
                    was = (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))
                    taken.before[entry.rel] = owners_seen.setdefault(was, was)
                if stat.S_ISREG(st.st_mode):
                    if st.st_mode & _STRIP:
                        fdtree.set_owner_mode(entry.parent, entry.name, st, None, stat.S_IMODE(st.st_mode) & ~_STRIP)
                    if _written(entry):
                        _break_away(entry)
                        taken.before.pop(entry.rel, None)  # a new inode: nothing to give back
                st = fdtree.lstat_at(entry.parent, entry.name)
            taken.fingerprints[entry.rel] = fingerprint(st)  # anything else: left as it is, shaping drops it
            return False

        try:
            fdtree.walk(top, visit, limits=TREE_LIMITS, entered=entered, left=left)
        except fdtree.LimitExceeded as exc:
            raise TreeTooLarge(f"the mirror sent a tree with {exc.what} (gkeys takes at most "
                               f"{TREE_LIMITS.depth} levels and {TREE_LIMITS.entries} entries); refused: "
                               f"use another mirror") from exc
    finally:
        os.close(top)
    return taken


def _written(entry: fdtree.Entry) -> bool:
    """Whether a process holds the file open for writing (or mapped shared and writable) now that it is root's:
    a descriptor the sync user opened before the takeover, which no change of owner or mode takes away."""
    fd = os.open(entry.name, fdtree.READ_FLAGS, dir_fd=entry.parent)
    try:
        if not fdtree.same(os.fstat(fd), entry.st):
            raise fdtree.Changed(os.fsdecode(entry.rel))
        return fdtree.open_for_writing(fd) is True
    finally:
        os.close(fd)


def _break_away(entry: fdtree.Entry) -> None:
    """Replace a file some process still holds open for writing by a copy (a new inode, root's, nobody's
    descriptor reaches it); gemato then verifies the copy."""
    temporary = b".gkeys-taken"
    fdtree.copy_file(entry.parent, entry.name, entry.parent, temporary, owner=(0, 0),
                     mode=stat.S_IMODE(entry.st.st_mode) & ~_STRIP, expect=entry.st)
    os.rename(temporary, entry.name, src_dir_fd=entry.parent, dst_dir_fd=entry.parent)


def _owned(st: os.stat_result, owners: frozenset[int], what: str) -> None:
    if st.st_uid not in owners:
        raise ForeignEntry(f"{what} in the staging tree belongs to uid {st.st_uid}, neither the sync user nor "
                           f"root (another process put it there); refused: sync again")


def _hold_directory(fd: int, st: os.stat_result) -> None:
    if (st.st_uid, st.st_gid) != (0, 0):
        os.fchown(fd, 0, 0)
    os.fchmod(fd, HELD_DIRECTORY_MODE)


def give_back(holder: int, taken: Taken) -> None:
    """Give the files of the held tree that are shared with another name (a live file rsync linked) the owner
    and mode they had before the takeover, by descriptor; the rest is removed with the tree anyway."""
    try:
        top = fdtree.open_dir(TREE, holder)
    except OSError:
        return

    def visit(entry: fdtree.Entry) -> bool:
        was = taken.before.get(entry.rel)
        if (was is not None and stat.S_ISREG(entry.st.st_mode) and entry.st.st_nlink > 1
                and taken.fingerprints.get(entry.rel, b"")[:8] == entry.st.st_ino.to_bytes(8, "little")):
            fdtree.set_owner_mode(entry.parent, entry.name, entry.st, (was[0], was[1]), was[2])
        return entry.is_dir

    try:
        fdtree.walk(top, visit, limits=TREE_LIMITS)
    except OSError:
        pass  # best effort: the live files keep root as owner, readable as before; the next sync replaces them
    finally:
        os.close(top)


def remove(parent: int, name: str, where: Path) -> str | None:
    """Remove ``name`` of the directory ``parent`` (:func:`fdtree.remove_tree`); None when it is gone, else the
    warning to show: what stays under ``where`` and the command that removes it."""
    try:
        fdtree.remove_tree(parent, name)
    except fdtree.NotRemoved as exc:
        return (f"could not remove {where} ({exc.cause}: {', '.join(shown(left) for left in exc.left[:3])}); "
                f"remove it by hand: rm -rf --one-file-system {where}")
    except OSError as exc:
        return f"could not remove {where} ({exc.strerror or exc}); remove it by hand: rm -rf --one-file-system {where}"
    return None


def remove_stale(parent: Path, prefix: str, owners: frozenset[int] = frozenset()) -> tuple[int, list[str]]:
    """Remove every entry named ``prefix*`` in ``parent`` (holders and staging trees an interrupted sync left;
    call under the location's sync lock); return how many went and a warning for each that stays, and for each
    removed one of an owner not in ``owners`` (a staging tree of a previous sync user: removed by descriptor all
    the same, nothing in it trusted or followed)."""
    removed, warnings = 0, []
    try:
        fd = fdtree.open_dir(parent)
    except OSError:
        return 0, []
    try:
        for raw in fdtree.names(fd):
            name = os.fsdecode(raw)
            if not name.startswith(prefix):
                continue
            try:
                uid: int | None = fdtree.lstat_at(fd, raw).st_uid
            except OSError:
                uid = None
            warning = remove(fd, name, parent / name)
            if warning is None:
                removed += 1
                if owners and uid is not None and uid not in owners:
                    warnings.append(f"removed {shown(str(parent / name))}, which belonged to uid {uid} (left by an "
                                    "interrupted sync as a previous sync user)")
            else:
                warnings.append(warning)
    finally:
        os.close(fd)
    return removed, warnings
