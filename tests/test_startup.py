"""Start-up cost of the commands that never go online (issue 18 goal 1: ``verify-media`` is measured
against gpg's own pass over the file, start-up included): ``requests`` (~50 ms of imports) is loaded only
when something is downloaded, ``smtplib`` and ``ssl`` (~9 ms) only when a reminder is mailed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_cli_imports_no_network_library_until_it_goes_online() -> None:
    probe = ("import sys, gkeys_portage.cli.main, gkeys_portage.portage.fetch\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('requests', 'urllib3', 'smtplib', 'ssl')))")
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
