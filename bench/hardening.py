#!/usr/bin/env python3
"""Hardening figures: run the tests SECURITY.md cites, the fuzzers and the fault injection, and count.

Prints: attacks in the threat model and how many are covered by passing tests, fuzz cases tried,
faults injected, and failures.  The reliability section of docs/benchmarks.md quotes its output.

Usage: python3 bench/hardening.py [--examples N]   (fuzz examples per property; default 1000)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET  # noqa: S405 - parses pytest's own junit report
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUZZ_FILES = ["tests/test_fuzz_core.py", "tests/test_fuzz_verifiers.py"]
FAULT_FILES = ["tests/test_faults_network.py", "tests/test_faults_state.py", "tests/test_faults_sync.py"]
FAULT_TESTS = ["tests/test_key_install.py::test_keyserver_failures_exit_3_and_change_nothing",
               "tests/test_key_install.py::test_sigkill_during_install_key_leaves_a_working_keyring",
               "tests/test_key_install.py::test_two_runs_at_once_are_serialized"]
#: a reference: ``tests/FILE.py``, ``tests/FILE.py::test`` (parameters allowed) or ``::test`` (the file before it),
#: in backticks or bare
REF = re.compile(r"(tests/[\w/]+\.py)(?:::(\w+)(\[[^\]`]*\])?)?|(?<![\w/])::(\w+)")
CELL = re.compile(r"(?<!\\)\|")  # a cell border: a pipe not escaped as ``\|``


def row_cells(line: str) -> list[str] | None:
    """The cells of a numbered row of SECURITY.md's attack table (None for any other line)."""
    cells = [c.strip() for c in CELL.split(line)]
    if len(cells) < 6 or not cells[1].isdigit() or cells[2] == "**class** what happened":
        return None
    return cells


def references(cell: str) -> list[str]:
    """The test ids a row's last cell cites, in order (``::name`` takes the file named before it)."""
    refs: list[str] = []
    current_file = ""
    for match in REF.finditer(cell):
        if match.group(1):
            current_file = match.group(1)
            refs.append(current_file + (f"::{match.group(2)}" if match.group(2) else ""))
        elif current_file:
            refs.append(f"{current_file}::{match.group(4)}")
    return refs


def attack_rows() -> list[tuple[str, list[str]]]:
    """(attack, [test ids]) for every row of SECURITY.md's attack table."""
    rows = []
    for line in (ROOT / "SECURITY.md").read_text().splitlines():
        cells = row_cells(line)
        if cells is not None:
            rows.append((cells[2], references(next(c for c in reversed(cells) if c))))
    return rows


def run_pytest(targets: list[str], examples: int) -> tuple[dict[str, str], int, str]:
    """Run pytest; return ({nodeid-prefix: outcome}, fuzz examples tried, raw output)."""
    junit = Path(tempfile.mkdtemp()) / "junit.xml"
    env = dict(os.environ, GKEYS_FUZZ_EXAMPLES=str(examples))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
               "--hypothesis-show-statistics", *targets]
    completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    outcomes: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        name = case.get("name", "")
        failed = any(child.tag in ("failure", "error") for child in case)
        skipped = any(child.tag == "skipped" for child in case)
        outcomes[f"{path}::{name}"] = "failed" if failed else ("skipped" if skipped else "passed")
    examples_run = sum(int(n) for n in re.findall(r"(\d+) passing examples", completed.stdout))
    return outcomes, examples_run, completed.stdout


def matching(outcomes: dict[str, str], ref: str) -> list[str]:
    """Outcomes of every test case a reference names (a file, a test, or all its parameters)."""
    return [o for node, o in outcomes.items() if node == ref or node.startswith(ref + "[")
            or (ref.endswith(".py") and node.startswith(ref + "::"))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=1000, help="fuzz examples per property")
    args = parser.parse_args()
    rows = attack_rows()
    cited = sorted({ref.split("::")[0] for _, refs in rows for ref in refs} | set(FUZZ_FILES) | set(FAULT_FILES))
    print(f"running {len(cited)} test files ({args.examples} fuzz examples per property) ...", flush=True)
    outcomes, examples_run, output = run_pytest(cited, args.examples)

    covered = 0
    for attack, refs in rows:
        per_ref = [matching(outcomes, ref) for ref in refs]  # a reference that matches nothing: not covered
        results = [o for found in per_ref for o in found]
        ok = bool(refs) and all(per_ref) and all(o != "failed" for o in results) and "passed" in results
        covered += ok
        if not ok:
            print(f"  NOT covered: {attack} ({', '.join(refs) or 'no test cited'})")
    faults = [o for ref in FAULT_FILES + FAULT_TESTS for o in matching(outcomes, ref)]
    fuzz_props = [o for ref in FUZZ_FILES for o in matching(outcomes, ref)]
    failures = [node for node, o in outcomes.items() if o == "failed"]
    print()
    print(f"attacks in the threat model:     {len(rows)}")
    print(f"attacks covered by passing tests: {covered}")
    print(f"fuzz properties:                  {len(fuzz_props)}")
    print(f"fuzz cases tried:                 {examples_run}")
    print(f"faults injected (test cases):     {len(faults)}")
    print(f"test cases run:                   {len(outcomes)}")
    print(f"failures:                         {len(failures)}")
    for node in failures:
        print(f"  FAILED {node}")
    if not outcomes:
        print(output[-2000:])
    return 1 if failures or covered != len(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
