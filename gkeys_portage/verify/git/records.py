"""The last verified revision of each git repository, kept in gkeys' state (never in the tree)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

from gkeys_portage.core.state import Layout, atomic_write, atomic_write_json, read_json
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.verify.git.proof import Inventory, Known, dump_known, load_known

RECORD = "tree-revisions"


def _records(layout: Layout) -> dict[str, dict[str, str]]:
    data = read_json(layout.record(RECORD), {})
    return data if isinstance(data, dict) else {}


def last_verified(layout: Layout, location: Path) -> str | None:
    """The last verified revision recorded for the repository at ``location``."""
    entry = _records(layout).get(str(Path(location).resolve()))
    revision = entry.get("revision") if isinstance(entry, dict) else None
    return revision if isinstance(revision, str) and revision else None


def record_verified(ctx: Gkeys, location: Path, revision: str, *, inventory: Inventory | None = None) -> None:
    """Record ``revision`` as the last verified revision of ``location`` (atomic, under the state lock), with the
    inventory of the work tree proven to be that revision (:mod:`.hold`; None: no proof kept)."""
    ctx.ensure_layout()
    with ctx.lock:
        records = _records(ctx.layout)
        entry: dict[str, object] = {"revision": revision, "verified": datetime.now(UTC).isoformat(timespec="seconds")}
        if inventory is not None:
            entry["inventory"] = {"digest": inventory.digest, "entries": inventory.entries}
        records[str(Path(location).resolve())] = entry  # type: ignore[assignment]
        atomic_write_json(ctx.layout.record(RECORD), records)


def recorded_inventory(layout: Layout, location: Path) -> Inventory | None:
    """The inventory recorded with the last verified revision of ``location`` (None: none, or malformed)."""
    entry = _records(layout).get(str(Path(location).resolve()))
    value = entry.get("inventory") if isinstance(entry, dict) else None
    if not isinstance(value, dict):
        return None
    try:
        return Inventory(str(value["digest"]), int(value["entries"]))
    except (KeyError, TypeError, ValueError):
        return None


def _proof_path(layout: Layout, location: Path) -> Path:
    digest = hashlib.sha256(str(Path(location).resolve()).encode()).hexdigest()[:24]
    return layout.state_dir / "tree-proofs" / f"{digest}.bin"


def proven_files(layout: Layout, location: Path) -> Known:
    """What the last proof of the tree at ``location`` hashed (empty if none)."""
    try:
        return load_known(_proof_path(layout, location).read_bytes())
    except OSError:
        return {}


def record_proven_files(ctx: Gkeys, location: Path, known: Known) -> None:
    """Keep what the proof of the tree now at ``location`` hashed, for the next proof (atomic)."""
    ctx.ensure_layout()
    path = _proof_path(ctx.layout, location)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    atomic_write(path, dump_known(known), mode=0o600)


def forget(ctx: Gkeys, location: Path) -> None:
    """Drop the record of ``location`` (a repository that was removed or is cloned afresh)."""
    ctx.ensure_layout()
    with ctx.lock:
        records = _records(ctx.layout)
        if records.pop(str(Path(location).resolve()), None) is not None:
            atomic_write_json(ctx.layout.record(RECORD), records)
