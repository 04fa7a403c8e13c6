"""The tree as verified: cut a gemato-verified staging tree down to what its Manifests cover, with gkeys' modes.

gemato checks the contents of the files its Manifests list; it skips dot files, dot directories and IGNOREd
paths, and never looks at modes or owners.  What Portage then reads is the whole directory.  So before a
verified tree is swapped in, :func:`shape_tree` walks it once (``os.scandir``) and compares every entry with
the set of paths the loaded Manifests cover (:func:`covered_paths`, taken from gemato's loader after the
verification: nothing is hashed twice):

* kept: a covered regular file; a directory holding something kept; the few small uncovered files Gentoo's
  tree needs (gemato's ``ebuild`` profile IGNOREs them: ``metadata/timestamp{,.chk,.commit,.x}`` and
  ``metadata/{dtd,glsa,news,xml-schema}/timestamp{.chk,.commit}``, regular files up to 64 KiB); a covered
  symbolic link whose target lies inside the tree and is kept;
* dropped and named: everything else that no Manifest covers (dot entries such as ``.hg/``, ``.svn/`` or a
  hidden ``metadata/news/.X/``, an IGNOREd ``lost+found/``, devices, fifos, sockets, empty directories);
* refused (:class:`TreeMismatchError`): a covered entry that is neither a regular file nor an in-tree link to
  a kept entry (gemato read it through a link that leaves the tree, or something that is not a file).

Modes are gkeys': regular files 0644 (0755 when served with an execute bit), directories 0755.  A file whose
mode differs is *replaced* by a copy (a new inode): a staging file may be a hard link to a live file, and
nothing here may write a live file.  Owners are given last (:func:`hand_over`: the user rsync ran as).

Everything goes through directory descriptors (:mod:`gkeys_portage.core.fs.fdtree`).  In an rsync sync the tree is
in root's custody while it is shaped (:mod:`gkeys_portage.verify.manifest.custody`): ``taken`` holds every
entry as gkeys took it over (inode, size, modification and change time, mode), and an entry that differs (a
write through a descriptor the sync user opened before the takeover changes the change time) refuses the tree.
What :func:`shape` keeps is returned as it left it, the state :func:`hand_over` compares with before it gives
each entry its owner.
"""

from __future__ import annotations

import itertools
import os
import stat
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gkeys_portage.core.errors import NotVerifiedError, TreeMismatchError
from gkeys_portage.core.fs import fdtree

FILE_MODE = 0o644
#: a file the mirror serves with any execute bit (a FILESDIR script; git trees carry 100755 the same way)
EXECUTABLE_MODE = 0o755
DIRECTORY_MODE = 0o755
#: Uncovered files a synced ::gentoo needs (gemato 20.15 ``profile.py``, ``EbuildRepositoryProfile`` IGNOREs).
TIMESTAMP_FILES = frozenset(
    ["metadata/timestamp", "metadata/timestamp.chk", "metadata/timestamp.commit", "metadata/timestamp.x"]
    + [f"metadata/{sub}/{name}" for sub in ("dtd", "glsa", "news", "xml-schema")
       for name in ("timestamp.chk", "timestamp.commit")])
TIMESTAMP_MAX_BYTES = 64 * 1024
_NOT_FILES = ("DIST", "TIMESTAMP", "IGNORE")  # Manifest entries that name no file of the tree
#: How deep and how large a tree from a mirror may be (::gentoo: 6 levels, ~200,000 entries).
TREE_LIMITS = fdtree.Limits(depth=64, entries=1_000_000)


def covered_paths(loader: Any) -> frozenset[str]:
    """Every tree path a loaded gemato ``ManifestRecursiveLoader`` covers: the top Manifest, every Manifest an
    entry names, every DATA/EBUILD/MISC/AUX file (relative to the tree, ``/``-separated)."""
    paths = {"Manifest"}
    for manifest_path, manifest in loader.loaded_manifests.items():
        base = os.path.dirname(manifest_path)
        for entry in manifest.entries:
            if entry.tag not in _NOT_FILES:
                paths.add(f"{base}/{entry.path}" if base else entry.path)
    return frozenset(paths)


def _directories(paths: frozenset[str]) -> set[str]:
    """Every directory that holds one of ``paths`` (at any depth)."""
    found: set[str] = set()
    for path in paths:
        cut = path.rfind("/")
        while cut > 0:
            parent = path[:cut]
            if parent in found:
                break
            found.add(parent)
            cut = parent.rfind("/")
    return found


def shown(path: str) -> str:
    """A path from the mirror as it may reach a terminal: as is when printable, else escaped (``ascii()``)."""
    return path if path.isprintable() else ascii(path)


def _timestamp_file(path: str, st: os.stat_result) -> bool:
    """One of the uncovered files a synced tree needs: a small regular file at a known path."""
    return path in TIMESTAMP_FILES and stat.S_ISREG(st.st_mode) and st.st_size <= TIMESTAMP_MAX_BYTES


def file_mode(served: int) -> int:
    """The mode a covered file gets from the mirror's ``served`` mode: 0755 if it has any execute bit, else 0644;
    never set-user-id, set-group-id, sticky, or writable by group or others."""
    return EXECUTABLE_MODE if served & 0o111 else FILE_MODE


_FINGERPRINT = struct.Struct("<QqqqI")
_CONTENT = struct.Struct("<QIqq")


def fingerprint(st: os.stat_result) -> bytes:
    """What must not change while gkeys holds a tree: inode, size, modification and change time, type and mode
    (packed: a tree's record holds one per entry)."""
    return _FINGERPRINT.pack(st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


def _content(st: os.stat_result) -> bytes:
    """What a handed-over entry must still have: inode, type and mode, and for a file or link its size and
    modification time (the change time changes with every link count change, the old tree's removal included;
    a directory's times and size with what shaping dropped or renewed in it)."""
    if stat.S_ISDIR(st.st_mode):
        return _CONTENT.pack(st.st_ino, st.st_mode, 0, 0)
    return _CONTENT.pack(st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns)


@dataclass
class Owner:
    """Who a synced tree belongs to: the user and group rsync created its files as."""

    uid: int
    gid: int


@dataclass
class Shaped:
    """What :func:`shape` did: the entries it dropped, the files it replaced by a copy, and every entry it kept
    (relative path as bytes: what :func:`hand_over` compares of it, as the shaping left it)."""

    dropped: list[str] = field(default_factory=list)
    renewed: list[str] = field(default_factory=list)
    kept: dict[bytes, bytes] = field(default_factory=dict)


class ChangedInCustody(NotVerifiedError):
    """An entry of a tree in gkeys' custody changed after the takeover (another process wrote to it)."""


class _Shaper:
    def __init__(self, root: Path, covered: frozenset[str], taken: Mapping[bytes, bytes] | None) -> None:
        self.root = os.fsencode(root)
        self.covered = covered
        self.needed = _directories(covered | TIMESTAMP_FILES)
        self.taken = taken
        self.links: list[str] = []
        self.result = Shaped()
        self.renames = itertools.count()

    def visit(self, entry: fdtree.Entry) -> bool:
        path = os.fsdecode(entry.rel)
        st = entry.st
        if self.taken is not None and self.taken.get(entry.rel) != fingerprint(st):
            raise ChangedInCustody(f"{shown(path)} changed after gkeys took the tree over from the sync user (a "
                                   f"process of that user still writes into it); refused: stop it and sync again")
        if stat.S_ISDIR(st.st_mode) and path in self.needed:
            self.result.kept[entry.rel] = _content(st)
            return True
        if stat.S_ISLNK(st.st_mode) and (path in self.covered or path in self.needed):
            self.links.append(path)
            self.result.kept[entry.rel] = _content(st)
        elif path in self.covered or _timestamp_file(path, st):
            self._file(entry, path)
        else:
            self._drop(entry)
            self.result.dropped.append(path)
        return False

    def _file(self, entry: fdtree.Entry, rel: str) -> None:
        st = entry.st
        if not stat.S_ISREG(st.st_mode):
            raise TreeMismatchError(f"{shown(rel)} is covered by a Manifest but is not a regular file; refused")
        if stat.S_IMODE(st.st_mode) != file_mode(st.st_mode):
            st = self._renew(entry)
            self.result.renewed.append(rel)
        self.result.kept[entry.rel] = _content(st)

    def _renew(self, entry: fdtree.Entry) -> os.stat_result:
        """Replace the file by a copy with gkeys' mode (:func:`file_mode`), owned by gkeys until :func:`hand_over`
        (a new inode: the old one may be a live file's)."""
        temporary = b".gkeys-renew-%d" % next(self.renames)
        copied = fdtree.copy_file(entry.parent, entry.name, entry.parent, temporary, mode=file_mode(entry.st.st_mode),
                                  expect=entry.st)
        try:
            os.rename(temporary, entry.name, src_dir_fd=entry.parent, dst_dir_fd=entry.parent)
        except BaseException:
            os.unlink(temporary, dir_fd=entry.parent)
            raise
        return copied

    @staticmethod
    def _drop(entry: fdtree.Entry) -> None:
        fdtree.remove_tree(entry.parent, entry.name)

    def check_links(self, kept: frozenset[str]) -> None:
        """Every kept link resolves inside the tree to a kept entry (else the tree is refused).  The tree is
        gkeys' alone by now (in custody, or the caller's own), so resolving its links by path is safe."""
        root = os.path.realpath(self.root)
        for rel in self.links:
            target = os.path.realpath(os.path.join(self.root, os.fsencode(rel)))
            inside = os.path.relpath(target, root)
            name = os.fsdecode(inside)
            if inside == b".." or inside.startswith(b"../") or os.path.isabs(inside) or name not in kept:
                raise TreeMismatchError(f"{shown(rel)} is a symbolic link to {ascii(name)}, outside the tree or to "
                                        f"nothing a Manifest covers; refused")


def shape(root: Path, covered: frozenset[str], taken: Mapping[bytes, bytes] | None = None) -> Shaped:
    """Cut the verified tree at ``root`` down to ``covered`` (see the module docstring), through descriptors.
    ``taken``: every entry's :func:`fingerprint` at the takeover (a difference refuses: :class:`ChangedInCustody`).
    Raises :class:`TreeMismatchError` for a covered entry gkeys will not install."""
    shaper = _Shaper(root, covered, taken)
    top = fdtree.open_dir(root)
    try:
        fdtree.walk(top, shaper.visit, limits=TREE_LIMITS)
    finally:
        os.close(top)
    shaper.check_links(covered | frozenset(shaper.needed) | TIMESTAMP_FILES)
    return shaper.result


def hand_over(top: int, kept: Mapping[bytes, bytes], owner: Owner, *, skip: frozenset[bytes] = frozenset(),
              then: Callable[[], None] | None = None,
              record: Callable[[bytes, os.stat_result], None] | None = None) -> bool:
    """Give every entry under the open directory ``top`` its final owner (``owner``) and mode (files
    :func:`file_mode`, directories 0755), through descriptors, each directory after everything in it
    (post-order: a directory still root's 0700 keeps others out of what is not handed over yet).

    Each entry must be the one shaping kept, unchanged (inode, size, modification time, mode): then its
    ``lstat`` after the change goes to ``record`` (the tree's inventory).  False when anything differs (an entry
    gone, added or changed: the caller does not vouch for the tree).  Top-level names in ``skip`` are neither
    entered nor changed; ``top`` itself is the caller's: ``then`` is called once the files and links directly in
    it are handed over and before any directory is (the caller gives ``top`` its owner there: no file is
    reachable through it before its own ``lstat`` is taken)."""
    handed = [0]
    sound = [True]

    def note(rel: bytes, st: os.stat_result) -> None:
        handed[0] += 1
        if record is not None:
            record(rel, st)

    def unchanged(entry: fdtree.Entry) -> bool:
        if kept.get(entry.rel) != _content(entry.st):
            sound[0] = False
            return False
        return True

    def give(parent: int, entry: fdtree.Entry) -> None:
        mode = file_mode(entry.st.st_mode)
        # below the top every directory is still root's 0700 (post-order): its names are gkeys' alone, so *at
        # calls by name act on the entry seen; a link is handed over as the link
        if stat.S_ISLNK(entry.st.st_mode) or (entry.depth > 1 and stat.S_IMODE(entry.st.st_mode) == mode):
            if (entry.st.st_uid, entry.st.st_gid) != (owner.uid, owner.gid):
                os.chown(entry.name, owner.uid, owner.gid, dir_fd=parent, follow_symlinks=False)
            note(entry.rel, fdtree.lstat_at(parent, entry.name))
            return
        try:
            note(entry.rel, fdtree.set_owner_mode(parent, entry.name, entry.st, (owner.uid, owner.gid), mode))
        except fdtree.Changed:
            sound[0] = False

    def visit(entry: fdtree.Entry) -> bool:
        if entry.depth == 1 and (entry.name in skip or entry.is_dir == first[0]):
            return False
        fine = unchanged(entry)
        if fine and not entry.is_dir:
            give(entry.parent, entry)
        return fine and entry.is_dir

    def left(fd: int, entry: fdtree.Entry) -> None:
        if _content(os.fstat(fd)) == _content(entry.st):
            if (entry.st.st_uid, entry.st.st_gid) != (owner.uid, owner.gid):
                os.fchown(fd, owner.uid, owner.gid)
            if stat.S_IMODE(os.fstat(fd).st_mode) != DIRECTORY_MODE:
                os.fchmod(fd, DIRECTORY_MODE)
            note(entry.rel, os.fstat(fd))

    first = [True]  # the top's own files and links first, then its directories and all below them
    fdtree.walk(top, visit, limits=TREE_LIMITS)
    if then is not None:
        then()
    first[0] = False
    fdtree.walk(top, visit, limits=TREE_LIMITS, left=left)
    return sound[0] and handed[0] == len(kept)


def shape_tree(root: Path, covered: frozenset[str], owner: Owner) -> Shaped:
    """:func:`shape` then :func:`hand_over` the tree at ``root`` (itself included) to ``owner``, outside custody
    (a tree only the caller can write).  Raises :class:`TreeMismatchError` for a covered entry gkeys will not
    install."""
    shaped = shape(root, covered)
    top = fdtree.open_dir(root)
    try:
        if (os.fstat(top).st_uid, os.fstat(top).st_gid) != (owner.uid, owner.gid):
            os.fchown(top, owner.uid, owner.gid)
        os.fchmod(top, DIRECTORY_MODE)
        hand_over(top, shaped.kept, owner)
    finally:
        os.close(top)
    return shaped
