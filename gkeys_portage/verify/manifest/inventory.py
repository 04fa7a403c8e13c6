"""Proof that a live tree is still the one gkeys swapped in: a digest of every entry's identity, kept in state.

The no-change fast path of an rsync sync does not hash the tree again; it trusts that the live files are
the very files gkeys verified.  rsync's own check (size and modification time) cannot prove that: both can
be put back after an edit.  So right after a verified tree is in place, :func:`take` walks it once
(``os.scandir`` + ``lstat``) and digests, for every entry in a fixed order, its path, type and mode, owner,
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
import stat
from dataclasses import dataclass
from pathlib import Path

from gkeys_portage.core.state import atomic_write_json, read_json_object
from gkeys_portage.keys.context import Gkeys

RECORD = "rsync-inventories"


@dataclass(frozen=True)
class Inventory:
    """The digest of a tree's entries, how many there were, and the top Manifest it was taken for."""

    digest: str
    entries: int
    manifest: str


def _digest(root: Path, skip: frozenset[str]) -> tuple[str, int]:
    """The digest of every entry under ``root`` (top-level names in ``skip`` left out) and their number."""
    hasher = hashlib.blake2b(digest_size=32)
    count = 0
    pending = [b""]
    top = os.fsencode(root)
    skipped = {os.fsencode(name) for name in skip}
    st = os.lstat(top)  # the location itself: its mode and owner (its times change with the swap)
    hasher.update(b"/\0%o %d %d\n" % (st.st_mode, st.st_uid, st.st_gid))
    while pending:
        rel = pending.pop()
        with os.scandir(top + b"/" + rel if rel else top) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
        for entry in entries:
            if not rel and entry.name in skipped:
                continue
            path = rel + b"/" + entry.name if rel else entry.name
            st = entry.stat(follow_symlinks=False)
            hasher.update(b"%s\0%o %d %d %d %d %d %d\n" % (path, st.st_mode, st.st_uid, st.st_gid, st.st_ino,
                                                            st.st_size, st.st_mtime_ns, st.st_ctime_ns))
            count += 1
            if stat.S_ISDIR(st.st_mode):
                pending.append(path)
    return hasher.hexdigest(), count


def take(root: Path, manifest: str, skip: frozenset[str] = frozenset()) -> Inventory:
    """The inventory of the tree at ``root``, whose top Manifest has SHA-256 ``manifest``."""
    digest, count = _digest(root, skip)
    return Inventory(digest, count, manifest)


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
        digest, count = _digest(root, skip)
    except OSError:
        return False
    return count == expected.entries and digest == expected.digest
