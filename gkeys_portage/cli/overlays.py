"""CLI actions for overlays (filled in by its issue)."""

from __future__ import annotations

from gkeys_portage.cli.common import SubParsers


def register(sub: SubParsers) -> None:
    """Register this topic's actions (none yet)."""
