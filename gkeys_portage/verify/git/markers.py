"""Failure markers of the ``sync-type = git`` hooks: one JSON file per repository that failed.

The repo.postsync.d hook writes a marker when a repository did not verify (Portage ignores that
hook's exit status); the postsync.d hook fails ``emerge --sync`` while a marker of a configured
repository exists.  ``gkeys verify-tree --clear-marker REPO`` removes one by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

from gkeys_portage.core.state import Layout, atomic_write_json, read_json

MARKERS = "tree-failed"


def marker_path(layout: Layout, repo_name: str) -> Path:
    """Where the failure marker of ``repo_name`` lives."""
    safe = re.sub(r"[^A-Za-z0-9._+-]", "_", repo_name) or "_"
    return layout.state_dir / MARKERS / f"{safe}.json"


def failure_markers(layout: Layout) -> list[dict[str, str]]:
    """Every failure marker (repository, location, reason), sorted by repository."""
    found = []
    for path in sorted((layout.state_dir / MARKERS).glob("*.json")):
        data = read_json(path, {})
        if isinstance(data, dict):
            found.append({k: str(v) for k, v in data.items()})
    return found


def write_marker(marker: Path, repo_name: str, location: Path, reason: str, rolled: str) -> None:
    """Write (atomically) the marker of a repository that did not verify."""
    atomic_write_json(marker, {"repo": repo_name, "location": str(location), "reason": reason,
                               "rolled_back_to": rolled})


def clear_markers_at(layout: Layout, location: Path) -> None:
    """Remove every marker written for the repository at ``location``, whatever name it was written under
    (Portage may name a repository from its tree, so the name of an earlier run can differ)."""
    wanted = location_key(str(location))
    for path in sorted((layout.state_dir / MARKERS).glob("*.json")):
        data = read_json(path, {})
        if isinstance(data, dict) and location_key(str(data.get("location", ""))) == wanted:
            path.unlink(missing_ok=True)


def location_key(location: str) -> str:
    """A repository location with symlinks resolved, for comparing locations ("" stays "")."""
    return str(Path(location).resolve()) if location else ""


def clear_marker(layout: Layout, repo_name: str) -> bool:
    """Remove the marker of ``repo_name``; False if there was none."""
    path = marker_path(layout, repo_name)
    existed = path.exists()
    path.unlink(missing_ok=True)
    return existed
