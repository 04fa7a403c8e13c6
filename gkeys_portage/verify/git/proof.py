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
import threading
from collections.abc import Iterator, Sequence
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
    stop: threading.Event | None = None  # set: the walk ends at the next directory (:class:`LiveInventory`)

    def scan(self, top: int) -> None:
        """Walk the tree under the descriptor ``top`` (closed afterwards) as :func:`fdtree.walk` does -- depth first,
        sorted names, each level opened without following a link and checked to be the inode seen, no mount point
        entered, within :class:`fdtree.Limits` -- with what is done per entry written inline: ::gentoo holds
        170,000 files, and a file whose identity an earlier proof recorded costs one ``lstat`` and no call."""
        limits = fdtree.Limits()
        most, deepest = limits.entries, limits.depth
        lstat, is_dir, update, known, proven = os.stat, stat.S_ISDIR, self.digest.update, self.known, self.proven
        owner, hash_files, dirs, pack, skip = self.owner, self.hash_files, self.dirs, _ENTRY.pack, self.skip
        # each open level: its descriptor, path, names left and the (name, mode, id) list of its tree
        stack: list[tuple[int, bytes, Iterator[bytes], list[tuple[bytes, bytes, bytes]]]] = [(top, b"", iter(()), [])]
        met = count = 0
        try:
            device = os.fstat(top).st_dev
            stack[0] = (top, b"", iter(fdtree.names(top)), dirs[b""])
            while stack:
                fd, rel, pending, items = stack[-1]
                name = next(pending, None)
                if name is None:
                    os.close(fd)
                    stack.pop()
                    continue
                met += 1
                path = rel + b"/" + name if rel else name
                if met > most:
                    raise fdtree.LimitExceeded(f"more than {most} entries")
                try:
                    st = lstat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    raise fdtree.Changed(os.fsdecode(path)) from None
                if len(stack) > deepest:
                    raise fdtree.LimitExceeded(f"{os.fsdecode(path)[:120]}...: deeper than {deepest} levels")
                if not rel and name in skip:
                    continue
                count += 1
                if is_dir(st.st_mode):
                    if self.stop is not None and self.stop.is_set():
                        raise _Stopped(os.fsdecode(path))
                    dirs[path] = []
                    update(b"d\0" + path + b"\0")
                    if st.st_dev == device:
                        child = fdtree.open_dir(name, fd, expect=st)
                        stack.append((child, path, iter(()), []))  # closed below, should its listing fail
                        stack[-1] = (child, path, iter(fdtree.names(child)), dirs[path])
                    continue
                identity: tuple[int, ...] = (st.st_mode, st.st_uid, st.st_gid, st.st_ino, st.st_size,
                                             st.st_mtime_ns, st.st_ctime_ns)  # _identity, inline
                if hash_files:
                    earlier = known.get(path)
                    if earlier is not None and earlier[0] == identity and (st.st_uid, st.st_gid) == owner:
                        proven[path] = earlier  # the very inode root hashed, untouched since (its change time says so)
                        items.append((name, earlier[1], earlier[2]))
                    else:
                        try:
                            mode, oid, st = _blob(fdtree.Entry(path, name, fd, st, len(stack)), owner, self.length)
                        except (fdtree.Changed, FileNotFoundError):
                            self.odd.append(os.fsdecode(path))
                            continue
                        identity = _identity(st)
                        proven[path] = (identity, mode, oid)
                        items.append((name, mode, oid))
                update(pack(*identity) + path + b"\0")
        finally:
            self.count += count
            for fd, _, _, _ in stack:
                os.close(fd)

    def top_tree(self) -> tuple[str, dict[bytes, bytes]]:
        """The top tree's id (hex) and every directory's (binary), hashed bottom-up as git does."""
        ids: dict[bytes, bytes] = {}
        nested: set[bytes] = set()  # directories holding one: git sorts a directory's name as if "/" ended it
        for rel in sorted(self.dirs, key=lambda r: r.count(b"/") + (1 if r else 0), reverse=True):
            items = self.dirs[rel]
            if rel and not items:
                continue  # git keeps no empty directory
            if rel in nested:
                items.sort(key=_tree_key)
            else:
                items.sort()  # names are unique in a directory: the name alone decides
            body = b"".join([mode + b" " + name + b"\0" + oid for name, mode, oid in items])
            hasher = _hasher(self.length)
            hasher.update(b"tree %d\0" % len(body) + body)
            ids[rel] = hasher.digest()
            if rel:
                parent, _, name = rel.rpartition(b"/")
                self.dirs[parent].append((name, b"40000", ids[rel]))
                nested.add(parent)
        return ids[b""].hex(), ids


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
    state.scan(top)
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


class _Stopped(OSError):
    """A walk told to stop (:class:`LiveInventory`)."""


def inventory(location: Path, skip: Sequence[str], stop: threading.Event | None = None) -> Inventory | None:
    """The inventory of the live work tree at ``location`` (read-only walk by descriptor); None if unreadable (or
    the walk was stopped by ``stop``)."""
    names = frozenset(os.fsencode(n) for n in (".git", *skip))
    state = _Walk(40, None, False, names, stop=stop)
    try:
        state.scan(fdtree.open_dir(location))
    except OSError:
        return None
    return Inventory(state.digest.hexdigest(), state.count)




class LiveInventory:
    """:func:`inventory` of the live tree, walked in a thread from the start of a sync (beside the copy and the
    fetch, which wait on git and the network) instead of after them; :meth:`stop` ends it when the sync will not
    ask (something new: the tree is proven afresh anyway).  Walked before or after the fetch, it is the state of
    the tree at one moment before the sync decides, as before; a change after that moment is seen by the next
    sync.  Not walked at all without a recorded inventory (``wanted`` False)."""

    def __init__(self, location: Path, skip: Sequence[str], *, wanted: bool = True) -> None:
        self._stop = threading.Event()
        self._found: Inventory | None = None
        self._thread = threading.Thread(target=self._walk, args=(location, skip), daemon=True, name="inventory")
        if wanted:
            self._thread.start()

    def _walk(self, location: Path, skip: Sequence[str]) -> None:
        self._found = inventory(location, skip, self._stop)

    def result(self) -> Inventory | None:
        """The inventory (None: unreadable, stopped or not wanted), once the walk is done."""
        if self._thread.ident is not None:
            self._thread.join()
        return self._found

    def stop(self) -> None:
        """End the walk (at its next directory) and wait for it."""
        self._stop.set()
        self.result()

    def __enter__(self) -> LiveInventory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
