"""Proof that a live tree is still the one gkeys swapped in: a digest of every entry's identity, kept in state.

The no-change fast path of an rsync sync does not hash the tree again; it trusts that the live files are
the very files gkeys verified.  rsync's own check (size and modification time) cannot prove that: both can
be put back after an edit.  So right after a verified tree is handed over, the ``lstat`` gkeys took of every entry
right after giving it its owner (:func:`of_entries`; never the tree read again: another user could have
written it in between) is digested, for every entry, its path, type and mode, owner,
inode, size, modification time and *change* time.  The change time is set by the kernel on every write,
chmod, chown, link count change or utime, and no user (not even root, short of changing the clock or the
disk) can set it back; a replaced file has another inode.  :func:`matches` walks the tree again and compares
digests: any difference means the tree is not proven and the sync takes the full path.

The record lives in ``state/rsync-inventories.json``, keyed like the high-water mark, with the top
Manifest's digest it was taken for; it is replaced atomically under the state lock.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from gkeys_portage.core.fs import fdtree
from gkeys_portage.core.state import atomic_write_json, read_json_object
from gkeys_portage.keys.context import Gkeys

RECORD = "rsync-inventories"
#: Larger than any tree shaping keeps (:data:`gkeys_portage.verify.manifest.shape.TREE_LIMITS`).
LIMITS = fdtree.Limits(depth=128, entries=4_000_000)


@dataclass(frozen=True)
class Inventory:
    """The digest of a tree's entries, how many there were, and the top Manifest it was taken for."""

    digest: str
    entries: int
    manifest: str


#: One entry: its name's length, mode, owner, group, inode, size, modification and change time (then the name).
_ENTRY = struct.Struct("<HIIIQqqq")


class Entries:
    """The entries of a tree as they are recorded, one packed record each (path order is the digest's, not the
    order they come in)."""

    def __init__(self) -> None:
        self.items: list[bytes] = []

    def add(self, rel: bytes, st: os.stat_result) -> None:
        """Record the entry at ``rel`` (relative to the top) whose ``lstat`` is ``st``."""
        self.items.append(rel + b"\0" + _ENTRY.pack(len(rel), st.st_mode, st.st_uid, st.st_gid, st.st_ino, st.st_size,
                                                     st.st_mtime_ns, st.st_ctime_ns))


def digest(top: os.stat_result, entries: Entries) -> tuple[str, int]:
    """The digest of a tree whose top directory has ``top`` (its mode and owner: its times change with the swap)
    and whose entries are ``entries``, taken in path order; and their number."""
    hasher = hashlib.blake2b(digest_size=32)
    hasher.update(_ENTRY.pack(0, top.st_mode, top.st_uid, top.st_gid, 0, 0, 0, 0))
    entries.items.sort()  # a name holds no NUL: sorting "rel NUL record" sorts by path
    for item in entries.items:
        cut = item.index(b"\0")
        hasher.update(item[cut + 1:] + item[:cut])
    return hasher.hexdigest(), len(entries.items)


def _digest(root: Path, skip: frozenset[str]) -> tuple[str, int]:
    """The digest of every entry under ``root`` (top-level names in ``skip`` left out) and their number, walked
    through descriptors (:func:`gkeys_portage.core.fs.fdtree.walk`: no link followed, no mount crossed)."""
    skipped = {os.fsencode(name) for name in skip}
    entries = Entries()

    def visit(entry: fdtree.Entry) -> bool:
        if entry.depth == 1 and entry.name in skipped:
            return False
        entries.add(entry.rel, entry.st)
        return entry.is_dir

    top = fdtree.open_dir(root)
    try:
        fdtree.walk(top, visit, limits=LIMITS)
        return digest(os.fstat(top), entries)
    finally:
        os.close(top)


def take(root: Path, manifest: str, skip: frozenset[str] = frozenset()) -> Inventory:
    """The inventory of the tree at ``root``, whose top Manifest has SHA-256 ``manifest``."""
    found, count = _digest(root, skip)
    return Inventory(found, count, manifest)


def of_entries(top: os.stat_result, entries: Entries, manifest: str) -> Inventory:
    """The inventory of a tree from the ``lstat`` of its top and of every entry (as :func:`take` would find them),
    whose top Manifest has SHA-256 ``manifest``: the state gkeys verified and handed over, never read again."""
    found, count = digest(top, entries)
    return Inventory(found, count, manifest)


def record(ctx: Gkeys, key: str, inventory: Inventory | None) -> None:
    """Keep ``inventory`` as the one of repository ``key`` (None: forget it); atomic, under the state lock."""
    ctx.ensure_layout()
    with ctx.lock:
        path = ctx.layout.record(RECORD)
        records = read_json_object(path)
        if inventory is None:
            if records.pop(key, None) is None:
                return
        else:
            records[key] = {"digest": inventory.digest, "entries": inventory.entries, "manifest": inventory.manifest}
        atomic_write_json(path, records)


def recorded(ctx: Gkeys, key: str) -> Inventory | None:
    """The inventory recorded for repository ``key``, if any (a malformed record counts as none)."""
    value = read_json_object(ctx.layout.record(RECORD)).get(key)
    if not isinstance(value, dict):
        return None
    try:
        return Inventory(str(value["digest"]), int(value["entries"]), str(value["manifest"]))
    except (KeyError, TypeError, ValueError):
        return None


def matches(root: Path, expected: Inventory, skip: frozenset[str] = frozenset()) -> bool:
    """True when the tree at ``root`` is entry for entry the one ``expected`` was taken of (any error: False)."""
    try:
        found, count = _digest(root, skip)
    except OSError:
        return False
    return count == expected.entries and found == expected.digest
