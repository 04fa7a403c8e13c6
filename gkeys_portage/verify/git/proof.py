"""The proof that a checked-out work tree is the signed tree, and the inventory of what was proven.

:func:`prove` reads every file of a work tree through a descriptor (:mod:`gkeys_portage.core.fs.fdtree`: no link
followed, no mount crossed), hashes it as git hashes a blob (a symlink: its target), and hashes the trees up
to the top, which must be the tree the verified commit names.  Nothing is trusted: not the object store the
checkout came from, not the index that let git skip a file, not a file shared by a hard link with a tree
another user can write.  The same walk digests every entry's identity -- inode, size, modification and
*change* time, mode, owner -- into the :class:`Inventory` kept with the revision: the kernel sets the change
time on every write, chmod, chown or link, and no user can set it back, so :func:`inventory` of the live tree
equals the recorded one only if nothing changed since the proof.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import stat
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.core.errors import BadInputError
from gkeys_portage.core.fs import fdtree
from gkeys_portage.verify.git.objects import GitRepo

_CHUNK = 1 << 20
#: What a proof hashed: path -> (identity, git mode, binary blob id).
Known = dict[bytes, tuple[tuple[int, ...], bytes, bytes]]
_ENTRY = struct.Struct("<IIIQqqq")


@dataclass(frozen=True)
class Inventory:
    """The digest of a work tree's entries (their identity, never their content) and how many there are."""

    digest: str
    entries: int


class Mismatch(BadInputError):
    """The work tree does not hash to the verified tree; ``paths`` are the entries found different."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__(f"{len(paths)} entries of the work tree differ from the verified revision "
                         f"({', '.join(paths[:3])})")
        self.paths = paths


def _hasher(length: int) -> hashlib._Hash:
    return hashlib.sha256() if length == 64 else hashlib.sha1()  # noqa: S324 - git's object names


def _blob(entry: fdtree.Entry, owner: tuple[int, int] | None, length: int) -> tuple[bytes, bytes, os.stat_result]:
    """``(mode, binary blob id, stat)`` of a regular file or symlink, hashed through a descriptor; given to
    ``owner`` first when it is root's (a file root's checkout wrote)."""
    st = entry.st
    if stat.S_ISLNK(st.st_mode):
        if owner is not None and (st.st_uid, st.st_gid) != owner:
            os.chown(entry.name, *owner, dir_fd=entry.parent, follow_symlinks=False)
        target = os.readlink(entry.name, dir_fd=entry.parent)
        after = fdtree.lstat_at(entry.parent, entry.name)
        if not fdtree.same(after, st) or not stat.S_ISLNK(after.st_mode):
            raise fdtree.Changed(os.fsdecode(entry.rel))
        hasher = _hasher(length)
        hasher.update(b"blob %d\0" % len(target) + target)
        return b"120000", hasher.digest(), after
    if not stat.S_ISREG(st.st_mode):
        raise fdtree.Changed(os.fsdecode(entry.rel))
    fd = os.open(entry.name, fdtree.READ_FLAGS, dir_fd=entry.parent)
    try:
        before = st  # the walk's lstat: the descriptor's fstat after the read must be the very same
        if owner is not None and (st.st_uid, st.st_gid) != owner:
            before = os.fstat(fd)
            if not fdtree.same(before, st) or not stat.S_ISREG(before.st_mode):
                raise fdtree.Changed(os.fsdecode(entry.rel))
            os.fchown(fd, *owner)
            before = os.fstat(fd)
        hasher = _hasher(length)
        hasher.update(b"blob %d\0" % before.st_size)
        size = 0
        want = before.st_size + 1 if before.st_size < _CHUNK else _CHUNK  # a small file: one read
        while True:
            chunk = os.read(fd, want)
            size += len(chunk)
            hasher.update(chunk)
            if len(chunk) < want or size > before.st_size:  # a short read of a regular file is its end
                break
        after = os.fstat(fd)
        if size != before.st_size or _identity(after) != _identity(before):
            raise fdtree.Changed(os.fsdecode(entry.rel))
    finally:
        os.close(fd)
    return (b"100755" if after.st_mode & stat.S_IXUSR else b"100644"), hasher.digest(), after


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_mode, st.st_uid, st.st_gid, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _tree_key(item: tuple[bytes, bytes, bytes]) -> bytes:
    name, mode, _ = item
    return name + b"/" if mode == b"40000" else name


@dataclass
class _Walk:
    """What one walk of a work tree found: each directory's entries (name, mode, id) and the inventory."""

    length: int
    owner: tuple[int, int] | None
    hash_files: bool
    skip: frozenset[bytes]
    dirs: dict[bytes, list[tuple[bytes, bytes, bytes]]] = field(default_factory=lambda: {b"": []})
    odd: list[str] = field(default_factory=list)
    digest: hashlib.blake2b = field(default_factory=lambda: hashlib.blake2b(digest_size=32))
    count: int = 0
    known: Known = field(default_factory=dict)  # what an earlier proof hashed, by path
    proven: Known = field(default_factory=dict)  # what this one hashed or reused

    def visit(self, entry: fdtree.Entry) -> bool:
        if entry.depth == 1 and entry.name in self.skip:
            return False
        self.count += 1
        if entry.is_dir:
            self.dirs[entry.rel] = []
            self.digest.update(b"d\0" + entry.rel + b"\0")
            return True
        st = entry.st
        if self.hash_files:
            identity = _identity(st)
            earlier = self.known.get(entry.rel)
            if earlier is not None and earlier[0] == identity and (st.st_uid, st.st_gid) == self.owner:
                _, mode, oid = earlier  # the very inode root hashed, untouched since (its change time says so)
            else:
                try:
                    mode, oid, st = _blob(entry, self.owner, self.length)
                except (fdtree.Changed, FileNotFoundError):
                    self.odd.append(os.fsdecode(entry.rel))
                    return False
                identity = _identity(st)
            self.proven[entry.rel] = (identity, mode, oid)
            self.dirs[entry.rel.rpartition(b"/")[0]].append((entry.name, mode, oid))
        self.digest.update(_ENTRY.pack(*_identity(st)) + entry.rel + b"\0")
        return False

    def top_tree(self) -> tuple[str, dict[bytes, bytes]]:
        """The top tree's id (hex) and every directory's (binary), hashed bottom-up as git does."""
        ids: dict[bytes, bytes] = {}
        for rel in sorted(self.dirs, key=lambda r: r.count(b"/") + (1 if r else 0), reverse=True):
            items = self.dirs[rel]
            if rel and not items:
                continue  # git keeps no empty directory
            body = b"".join(b"%s %s\0%s" % (mode, name, oid) for name, mode, oid in sorted(items, key=_tree_key))
            hasher = _hasher(self.length)
            hasher.update(b"tree %d\0" % len(body) + body)
            ids[rel] = hasher.digest()
            if rel:
                parent, _, name = rel.rpartition(b"/")
                self.dirs[parent].append((name, b"40000", ids[rel]))
        return ids[b""].hex(), ids


def walk_tree(root: int, visit: Callable[[fdtree.Entry], bool]) -> None:
    """Walk the tree under the descriptor ``root`` (closed afterwards)."""
    try:
        fdtree.walk(root, visit)
    finally:
        os.close(root)


def prove(top: int, owner: tuple[int, int], repo: GitRepo, tree: str, skip: Sequence[str],
          known: Known | None = None) -> tuple[Inventory, Known]:
    """Hash the work tree under the descriptor ``top`` (closed afterwards; every top-level name but ``.git`` and
    ``skip``) and compare it with the verified ``tree``; give root's files to ``owner`` on the way; return the
    inventory and what was proven (path -> identity, mode, blob id) for the next proof.

    A file whose identity -- inode, size, modification and change time, mode, owner -- is the one ``known``
    (an earlier proof of root's) records is not read again: no user can write a file, or put back its time,
    without a new change time.  Raises :class:`Mismatch` naming what differs (against ``git ls-tree``)."""
    names = frozenset(os.fsencode(n) for n in (".git", *skip))
    state = _Walk(len(tree), owner, True, names, known=known or {})
    walk_tree(top, state.visit)
    found, _ = state.top_tree()
    if found == tree and not state.odd:
        return Inventory(state.digest.hexdigest(), state.count), state.proven
    raise Mismatch(sorted(set(state.odd) | _differences(repo, tree, state)))


def _differences(repo: GitRepo, tree: str, state: _Walk) -> set[str]:
    """Paths whose (mode, id) differ between ``tree`` as git lists it and what the walk hashed."""
    listed: dict[str, tuple[bytes, bytes]] = {}
    out = repo.run("ls-tree", "-r", "-z", "--full-tree", tree).stdout
    for item in out.split(b"\0"):
        meta, _, name = item.partition(b"\t")
        fields = meta.split()
        if len(fields) == 3:
            listed[os.fsdecode(name)] = (fields[0], bytes.fromhex(fields[2].decode("ascii")))
    found: dict[str, tuple[bytes, bytes]] = {}
    for rel, items in state.dirs.items():
        for name, mode, oid in items:
            if mode != b"40000":
                found[os.fsdecode(rel + b"/" + name if rel else name)] = (mode, oid)
    return {path for path in listed.keys() | found.keys() if listed.get(path) != found.get(path)}


def dump_known(known: Known) -> bytes:
    """``known`` as bytes for gkeys' state (root's: never another user's to write)."""
    return marshal.dumps(known)


def load_known(data: bytes) -> Known:
    """What :func:`dump_known` wrote; anything malformed is nothing known (every file is hashed)."""
    try:
        value = marshal.loads(data)  # noqa: S302 - gkeys' own state file, root's alone
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(value, dict) or not all(
            isinstance(k, bytes) and isinstance(v, tuple) and len(v) == 3 and isinstance(v[0], tuple)
            and isinstance(v[1], bytes) and isinstance(v[2], bytes) for k, v in value.items()):
        return {}
    return value


def inventory(location: Path, skip: Sequence[str]) -> Inventory | None:
    """The inventory of the live work tree at ``location`` (read-only walk by descriptor); None if unreadable."""
    names = frozenset(os.fsencode(n) for n in (".git", *skip))
    state = _Walk(40, None, False, names)
    try:
        walk_tree(fdtree.open_dir(location), state.visit)
    except OSError:
        return None
    return Inventory(state.digest.hexdigest(), state.count)


