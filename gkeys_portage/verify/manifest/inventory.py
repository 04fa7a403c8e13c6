"""Proof that a live tree is still the one gkeys swapped in: a digest of every entry's identity, kept in state.

The no-change fast path of an rsync sync does not hash the tree again; it trusts that the live files are
the very files gkeys verified.  rsync's own check (size and modification time) cannot prove that: both can
be put back after an edit.  So right after a verified tree is in place, :func:`take` walks it once
(``os.scandir`` + ``lstat``) and digests, for every entry, its path, type and mode, owner,
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
import struct
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


#: One entry: its name's length, mode, owner, group, inode, size, modification and change time (then the name).
_ENTRY = struct.Struct("<HIIIQqqq")
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _digest(root: Path, skip: frozenset[str]) -> tuple[str, int]:
    """The digest of every entry under ``root`` (top-level names in ``skip`` left out) and their number.

    Directories are opened relative to the root (``O_NOFOLLOW``) and listed in the order the file system
    gives: an unchanged directory lists in the same order, and a changed one has another change time anyway,
    so a different order can only cost a full sync, never hide a change."""
    hasher = hashlib.blake2b(digest_size=32)
    count = 0
    st = os.lstat(root)  # the location itself: its mode and owner (its times change with the swap)
    hasher.update(_ENTRY.pack(0, st.st_mode, st.st_uid, st.st_gid, 0, 0, 0, 0))
    skipped = {os.fsencode(name) for name in skip}
    top = os.open(root, _DIRECTORY)
    pending = [b""]
    try:
        while pending:
            rel = pending.pop()
            fd = os.open(rel, _DIRECTORY, dir_fd=top) if rel else os.dup(top)
            try:
                parts = [rel, b"\0"]
                with os.scandir(fd) as listing:
                    for entry in listing:
                        name = os.fsencode(entry.name)
                        if not rel and name in skipped:
                            continue
                        st = entry.stat(follow_symlinks=False)
                        parts += (_ENTRY.pack(len(name), st.st_mode, st.st_uid, st.st_gid, st.st_ino, st.st_size,
                                              st.st_mtime_ns, st.st_ctime_ns), name)
                        count += 1
                        if stat.S_ISDIR(st.st_mode):
                            pending.append(rel + b"/" + name if rel else name)
                hasher.update(b"".join(parts))
            finally:
                os.close(fd)
    finally:
        os.close(top)
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
