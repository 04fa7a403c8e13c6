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


def test_ci_runs_everything_python_in_a_fresh_venv_made_from_the_checkout() -> None:
    """A test dependency missing from the extras fails CI only if nothing else provides it (issue 42)."""
    lines = [line.strip() for line in (PROJECT / ".ci" / "run").read_text().splitlines()]
    create = next(i for i, line in enumerate(lines) if line.startswith("python3 -m venv "))
    assert "--system-site-packages" not in lines[create], "the venv must not see the system's packages"
    activate = next(i for i, line in enumerate(lines) if re.fullmatch(r'\. "?\S+/bin/activate"?', line))
    assert create < activate
    python_steps = [i for i, line in enumerate(lines)
                    if re.match(r"(pip |python3 -m (pip|pytest|coverage)|ruff |mypy |GKEYS_GPG=)", line)]
    assert python_steps and min(python_steps) > activate, "every Python step runs inside the venv"
    assert any(line.startswith("rm -rf ") for line in lines[:create]), "the venv is fresh"
    assert sum("-m pytest -q" in line and "-rx" not in line for line in lines) == 1, "the suite runs once"


def _imported_top_level_modules(directory: str) -> set[str]:
    """Top-level names every ``tests/*.py`` imports (``import x``, ``from x import``, ``importorskip("x")``)."""
    import ast

    names: set[str] = set()
    for path in (PROJECT / directory).glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip" and node.args
                  and isinstance(node.args[0], ast.Constant)):
                names.add(str(node.args[0].value).split(".")[0])
    local = {path.stem for folder in (directory, "bench") for path in (PROJECT / folder).rglob("*.py")}
    return names - set(sys.stdlib_module_names) - local - {"gkeys_portage", "__future__"}


def test_every_module_the_tests_import_is_declared_in_the_test_extra() -> None:
    """``pip install ".[test]"`` in a fresh venv provides every module the suite imports (README's second command)."""
    import importlib.metadata

    project = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[<>=!~\[ ;]", requirement)[0].lower().replace("_", "-")
                for requirement in project["dependencies"] + project["optional-dependencies"]["test"]}
    providers = importlib.metadata.packages_distributions()
    missing = {}
    for module in sorted(_imported_top_level_modules("tests")):
        dists = {name.lower().replace("_", "-") for name in providers.get(module, [])}
        if not dists & declared:
            missing[module] = sorted(dists)
    assert not missing, f"imported by tests/ but not declared in [project] dependencies or the [test] extra: {missing}"
