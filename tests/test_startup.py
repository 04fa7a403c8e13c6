"""Start-up cost of the commands that never go online (issue 18 goal 1: ``verify-media`` is measured
against gpg's own pass over the file, start-up included): ``requests`` (~50 ms of imports) is loaded only
when something is downloaded, ``smtplib`` and ``ssl`` (~9 ms) only when a reminder is mailed, and the
actions of other topics (~15 ms) only when they run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _loaded_after(imports: str, watched: tuple[str, ...]) -> list[str]:
    """The modules of ``watched`` (top-level names or full names) that a fresh Python holds after ``imports``."""
    probe = (f"import json, sys, {imports}\n"
             f"print(json.dumps(sorted(m for m in sys.modules if m in {watched!r} or m.split('.')[0] in {watched!r})))")
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True).stdout
    return list(json.loads(out))


def test_the_cli_imports_no_network_library_until_it_goes_online() -> None:
    assert _loaded_after("gkeys_portage.cli.main, gkeys_portage.portage.fetch",
                         ("requests", "urllib3", "smtplib", "ssl")) == []


def test_building_the_parser_imports_no_action_of_another_topic() -> None:
    """Every ``gkeys`` command builds the whole parser; the mail reminders (``check-key --notify``) and the
    overlay-list verifier are imported by the actions that run them."""
    assert _loaded_after("gkeys_portage.cli.main", ("gkeys_portage.checks.notify", "gkeys_portage.ui.overlays",
                                                    "gkeys_portage.checks.glep63.sources")) == []
