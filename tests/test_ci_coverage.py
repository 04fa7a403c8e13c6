"""CI measures branch coverage of gkeys_portage in every process and runs exactly the README's test command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib

import pytest
from subprocess_coverage import COVERAGE_VARIABLES, with_coverage
from tree_helpers import PROJECT


def readme_commands() -> list[str]:
    """The two commands of the README's first ``sh`` block."""
    match = re.search(r"```sh\n(.*?)\n```", (PROJECT / "README.md").read_text(), re.S)
    assert match, "README.md has no ```sh block"
    return match.group(1).splitlines()


def test_ci_runs_exactly_the_readme_test_command_under_coverage() -> None:
    lines = (PROJECT / ".ci" / "run").read_text().splitlines()
    test_command = readme_commands()[1]
    assert test_command in lines, ".ci/run must run the README's test command verbatim"
    position = lines.index(test_command)
    export = next(i for i, line in enumerate(lines) if line.startswith("export COVERAGE_PROCESS_START="))
    assert export < position, "COVERAGE_PROCESS_START must be set before the test command runs"
    tail = lines[position + 1:]
    assert "python3 -m coverage combine -q" in tail
    assert any(line.startswith("python3 -m coverage report") for line in tail)


def test_coverage_config_counts_every_module_and_gates() -> None:
    project = tomllib.loads((PROJECT / "pyproject.toml").read_text())
    run = project["tool"]["coverage"]["run"]
    assert run["source"] == ["gkeys_portage"]  # every file shows up, imported or not
    assert run["branch"] is True and run["parallel"] is True
    assert "subprocess" in run["patch"]
    assert project["tool"]["coverage"]["report"]["fail_under"] >= 90
    assert any(dep.startswith("coverage") for dep in project["project"]["optional-dependencies"]["test"])


def test_hand_built_environments_keep_the_coverage_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in COVERAGE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert with_coverage({"PATH": "/bin"}) == {"PATH": "/bin"}
    monkeypatch.setenv("COVERAGE_PROCESS_START", "/x/pyproject.toml")
    assert with_coverage({"PATH": "/bin"}) == {"PATH": "/bin", "COVERAGE_PROCESS_START": "/x/pyproject.toml"}
    assert with_coverage({"COVERAGE_PROCESS_START": "mine"}) == {"COVERAGE_PROCESS_START": "mine"}
    assert with_coverage(None) is None


@pytest.mark.skipif(not any(name in os.environ for name in COVERAGE_VARIABLES), reason="not running under coverage")
def test_a_child_with_a_hand_built_environment_is_measured() -> None:
    probe = "import coverage; print(coverage.Coverage.current() is not None)"
    child = subprocess.run([sys.executable, "-c", probe], env={"PATH": "/usr/bin:/bin"}, capture_output=True,
                           text=True, check=True)
    assert child.stdout.strip() == "True"
