"""Under ``CI=true`` a skip fails the run unless tests/conftest.py ``ALLOWED_SKIPS`` names its reason (issue 47):
a tool CI forgot to install cannot hide a test there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ALLOWED_SKIPS, PROJECT

SKIPPING = '''
import pytest

def test_needs_a_tool():
    pytest.skip("frobnicate is not installed")

def test_allowed():
    pytest.skip("not running under coverage")
'''


def _run(tmp_path: Path, ci: str | None) -> str:
    for name in ("conftest.py", "host_guard.py", "subprocess_coverage.py", "engine_expectations.py"):
        shutil.copy(PROJECT / "tests" / name, tmp_path / name)
    (tmp_path / "test_skipping.py").write_text(SKIPPING)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "GKEYS_GPG", "COVERAGE_PROCESS_START")}
    env.update({"PYTHONPATH": str(PROJECT), "GKEYS_TEST_HOST_GUARD": "0", **({"CI": ci} if ci else {})})
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                           str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    return done.stdout.strip().splitlines()[-1]


def test_a_skip_outside_the_allow_list_fails_under_ci(tmp_path: Path) -> None:
    assert "1 failed, 1 skipped" in _run(tmp_path, "true")
    assert "2 skipped" in _run(tmp_path, None)


def test_each_allowed_skip_says_why() -> None:
    assert ALLOWED_SKIPS and all(len(why) > 20 for why in ALLOWED_SKIPS.values())


def test_ci_installs_what_the_tests_need_and_sets_ci() -> None:
    text = (PROJECT / ".ci" / "run").read_text()
    assert "openssl systemd" in text and "\nexport CI=true" in text
