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

Modes and owners are gkeys': regular files 0644, directories 0755, owned by ``owner`` (the user rsync ran
as).  A directory is fixed in place (every directory of the staging tree is new); a file that differs is
*replaced* by a copy (a new inode): a staging file may be a hard link to a live file, and nothing here may
write a live file.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gkeys_portage.core.errors import TreeMismatchError

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


@dataclass

class Owner:
    """Who a synced tree belongs to: the user and group rsync created its files as."""

    uid: int
    gid: int


@dataclass
class Shaped:
    """What :func:`shape_tree` did: the entries it dropped and the files it replaced by a copy."""

    dropped: list[str] = field(default_factory=list)
    renewed: list[str] = field(default_factory=list)


class _Shaper:
    def __init__(self, root: Path, covered: frozenset[str], owner: Owner) -> None:
        self.root = os.fsencode(root)
        self.covered = covered
        self.needed = _directories(covered | TIMESTAMP_FILES)
        self.owner = owner
        self.links: list[str] = []
        self.result = Shaped()

    def walk(self, rel: str) -> None:
        base = self.root + b"/" + os.fsencode(rel) if rel else self.root
        with os.scandir(base) as listing:
            entries = list(listing)
        for entry in entries:
            name = os.fsdecode(entry.name)
            path = f"{rel}/{name}" if rel else name
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode) and path in self.needed:
                self._directory(entry.path, st)
                self.walk(path)
            elif stat.S_ISLNK(st.st_mode) and (path in self.covered or path in self.needed):
                self.links.append(path)
            elif path in self.covered or _timestamp_file(path, st):
                self._file(entry.path, path, st)
            else:
                self._drop(entry.path, st)
                self.result.dropped.append(path)

    def _directory(self, path: bytes, st: os.stat_result) -> None:
        if (st.st_uid, st.st_gid) != (self.owner.uid, self.owner.gid):
            os.chown(path, self.owner.uid, self.owner.gid, follow_symlinks=False)
        if stat.S_IMODE(st.st_mode) != DIRECTORY_MODE:
            os.chmod(path, DIRECTORY_MODE)  # a directory (lstat said so) in the private staging tree

    def _file(self, path: bytes, rel: str, st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode):
            raise TreeMismatchError(f"{shown(rel)} is covered by a Manifest but is not a regular file; refused")
        if (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) != (file_mode(st.st_mode), self.owner.uid, self.owner.gid):
            self._renew(path, st)
            self.result.renewed.append(rel)

    def _renew(self, path: bytes, st: os.stat_result) -> None:
        """Replace ``path`` by a copy with gkeys' mode (:func:`file_mode`) and owner (a new inode: the old one may
        be a live file's)."""
        target, name = tempfile.mkstemp(prefix=b".gkeys-renew-", dir=os.path.dirname(path))
        try:
            source = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(source, "rb") as reader, os.fdopen(target, "wb", closefd=False) as writer:
                shutil.copyfileobj(reader, writer)
            if (os.geteuid(), os.getegid()) != (self.owner.uid, self.owner.gid):
                os.fchown(target, self.owner.uid, self.owner.gid)
            os.fchmod(target, file_mode(st.st_mode))
            os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
        except BaseException:
            os.unlink(name)
            raise
        finally:
            os.close(target)
        os.replace(name, path)

    @staticmethod
    def _drop(path: bytes, st: os.stat_result) -> None:
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)

    def check_links(self, kept: frozenset[str]) -> None:
        """Every kept link resolves inside the tree to a kept entry (else the tree is refused)."""
        root = os.path.realpath(self.root)
        for rel in self.links:
            target = os.path.realpath(os.path.join(self.root, os.fsencode(rel)))
            inside = os.path.relpath(target, root)
            name = os.fsdecode(inside)
            if inside == b".." or inside.startswith(b"../") or os.path.isabs(inside) or name not in kept:
                raise TreeMismatchError(f"{shown(rel)} is a symbolic link to {ascii(name)}, outside the tree or to "
                                        f"nothing a Manifest covers; refused")


def shape_tree(root: Path, covered: frozenset[str], owner: Owner) -> Shaped:
    """Cut the verified tree at ``root`` down to ``covered`` (see the module docstring).  Raises
    :class:`TreeMismatchError` for a covered entry gkeys will not install."""
    shaper = _Shaper(root, covered, owner)
    root_st = os.lstat(root)
    shaper._directory(os.fsencode(root), root_st)
    shaper.walk("")
    shaper.check_links(covered | frozenset(shaper.needed) | TIMESTAMP_FILES)
    return shaper.result
