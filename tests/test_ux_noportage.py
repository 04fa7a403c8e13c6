"""Issue 15 item 8: without Portage, no traceback and no fake ``portage`` that changes anything.

``pip install ./portage-sync-module`` installs the leaf ``portage/sync/modules/gkeys`` (no ``__init__.py`` above
it); it depends on Portage, so the leaf is there without Portage only when copied by hand (issue 23 item 23).
Both ways are tested in a child Python: beside a real Portage the bare directory shadows nothing
(a regular package wins over a namespace portion, PEP 420); without Portage (simulated by a finder
that resolves ``portage`` only in the bare directory) every gkeys path that looks for Portage says
so in one line: plain output, the demo's probe, the hooks, the leaf module itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gkeys_portage.demo.tree_repo import SYNC_MODULE_PROBE, probe_reason

PROJECT = Path(__file__).resolve().parent.parent

WITHOUT_PORTAGE = """\
import importlib.machinery, sys
BARE = sys.argv[1]
class OnlyTheBareDirectory:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "portage":
            return importlib.machinery.PathFinder.find_spec(name, [BARE])
        return None
sys.meta_path.insert(0, OnlyTheBareDirectory)
"""


@pytest.fixture
def bare(tmp_path: Path) -> Path:
    """A directory holding only the leaf ``portage/sync/modules/gkeys``, as if copied without Portage."""
    root = tmp_path / "site"
    shutil.copytree(PROJECT / "portage-sync-module" / "gkeys", root / "portage" / "sync" / "modules" / "gkeys")
    return root


def _child(code: str, bare: Path, *, without_portage: bool) -> subprocess.CompletedProcess[str]:
    script = (WITHOUT_PORTAGE if without_portage else "import sys\n") + code
    env = {**os.environ, "PYTHONPATH": f"{bare}{os.pathsep}{PROJECT}"}
    return subprocess.run([sys.executable, "-c", script, str(bare)], capture_output=True, text=True, env=env,
                          timeout=120, check=False, cwd="/")


def test_the_bare_directory_does_not_shadow_a_real_portage(bare: Path) -> None:
    pytest.importorskip("portage.output")
    result = _child("import portage\nprint(hasattr(portage, 'VERSION'), portage.__file__)\n", bare,
                    without_portage=False)
    assert result.returncode == 0 and result.stdout.startswith("True "), result.stderr
    assert str(bare) not in result.stdout


def test_without_portage_every_path_says_so_without_a_traceback(bare: Path) -> None:
    code = """\
import io
import portage
assert not hasattr(portage, "VERSION"), "the simulation must hide the real Portage"
from gkeys_portage.ui.output import star_line
print(repr(star_line("error", "x", io.StringIO())))
from gkeys_portage.portage.hooks import configured_repositories
print(configured_repositories())
import portage.sync.modules.gkeys as leaf
print(leaf.module_spec["provides"] == {}, leaf.module_spec["description"].startswith("gkeys sync module unavailable"))
"""
    result = _child(code, bare, without_portage=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == ["' * x\\n'", "None", "True True"]
    probe = _child(SYNC_MODULE_PROBE, bare, without_portage=True)
    assert probe.returncode == 0 and probe.stdout.split()[0] == "no-portage" and probe.stderr == ""


def test_the_demo_probe_names_the_cause_in_one_line(bare: Path) -> None:
    """The AttributeError of the issue (``portage.sync`` has no ``module_names``) is now a reason."""
    probe = _child(SYNC_MODULE_PROBE, bare, without_portage=True)
    reason = probe_reason(probe.stdout)
    assert reason is not None and "\n" not in reason and "pip install portage" in reason
    assert "Traceback" not in probe.stdout + probe.stderr
