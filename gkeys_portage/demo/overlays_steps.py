"""Demo scenes for overlays (filled in by its issue)."""

from __future__ import annotations

from gkeys_portage.demo.runner import DemoWorld, Step


def steps(world: DemoWorld) -> list[Step]:
    """This topic's demo steps (none yet)."""
    return []
