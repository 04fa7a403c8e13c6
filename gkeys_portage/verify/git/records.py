"""The last verified revision of each git repository, kept in gkeys' state (never in the tree)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gkeys_portage.core.state import Layout, atomic_write_json, read_json
from gkeys_portage.keys.context import Gkeys

RECORD = "tree-revisions"


def _records(layout: Layout) -> dict[str, dict[str, str]]:
    data = read_json(layout.record(RECORD), {})
    return data if isinstance(data, dict) else {}


def last_verified(layout: Layout, location: Path) -> str | None:
    """The last verified revision recorded for the repository at ``location``."""
    entry = _records(layout).get(str(Path(location).resolve()))
    revision = entry.get("revision") if isinstance(entry, dict) else None
    return revision if isinstance(revision, str) and revision else None


def record_verified(ctx: Gkeys, location: Path, revision: str) -> None:
    """Record ``revision`` as the last verified revision of ``location`` (atomic, under the state lock)."""
    ctx.ensure_layout()
    with ctx.lock:
        records = _records(ctx.layout)
        records[str(Path(location).resolve())] = {"revision": revision,
                                                  "verified": datetime.now(UTC).isoformat(timespec="seconds")}
        atomic_write_json(ctx.layout.record(RECORD), records)


def forget(ctx: Gkeys, location: Path) -> None:
    """Drop the record of ``location`` (a repository that was removed or is cloned afresh)."""
    ctx.ensure_layout()
    with ctx.lock:
        records = _records(ctx.layout)
        if records.pop(str(Path(location).resolve()), None) is not None:
            atomic_write_json(ctx.layout.record(RECORD), records)
