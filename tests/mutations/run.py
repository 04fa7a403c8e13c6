#!/usr/bin/env python3
"""Remove each protection of tests/mutations/table.py in a copy of the project and require its cited tests to fail.

The project (without ``.git``) is copied once to a temporary directory (``../shared`` linked beside it); each
mutation replaces its exact old text in that copy, runs only the tests it names (cited by its row), one mutation
at a time per copy, and puts the file back; two copies run side by side (``--jobs``).  Each named test must fail: a mutation one of them survives, or one whose
old text is gone (the table is stale), fails the run.  The checkout is never written.

Usage: python3 tests/mutations/run.py [--row N ...] [--jobs N]   (CI: .ci/run)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET  # noqa: S405 - pytest's own junit report
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent.parent
sys.path.insert(0, str(HERE))

from table import MUTATIONS, Mutation  # noqa: E402

PER_MUTATION_TIMEOUT = 600


def copy_project(where: Path) -> Path:
    """A copy of the project under ``where`` with ``../shared`` beside it (the tests read fixtures there)."""
    where.mkdir(parents=True, exist_ok=True)
    copy = where / PROJECT.name
    shutil.copytree(PROJECT, copy, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "*.egg-info", "build", ".coverage*", ".hypothesis", ".mypy_cache", ".ruff_cache"))
    shared = PROJECT.parent / "shared"
    if shared.exists():
        (where / "shared").symlink_to(shared)
    return copy


def _failed_tests(junit: Path) -> tuple[set[str], set[str]]:
    """(test ids with a failing case, test ids with a passing case) of a pytest junit report, parameters
    dropped (``tests/test_x.py::test_y``)."""
    failed, passed = set(), set()
    for case in ET.parse(junit).getroot().iter("testcase"):
        node = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "").split("[")[0]
        if any(child.tag in ("failure", "error") for child in case):
            failed.add(node)
        elif not any(child.tag == "skipped" for child in case):
            passed.add(node)
    return failed, passed


def run_one(copy: Path, mutation: Mutation) -> tuple[bool, str, float]:
    """Apply ``mutation`` in ``copy``, run its tests, restore: (each cited test failed, what happened, seconds)."""
    target = copy / mutation.file
    original = target.read_text()
    count = original.count(mutation.old)
    if count != 1:
        return False, f"the old text occurs {count} times in {mutation.file} (the table is stale)", 0.0
    target.write_text(original.replace(mutation.old, mutation.new))
    # CI=true would turn a skip into a failure, which would count as the mutation caught: a skip here is "did not
    # run", and fails the mutation run itself
    env = {k: v for k, v in os.environ.items() if k not in ("COVERAGE_PROCESS_START", "PYTEST_ADDOPTS", "CI")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    junit = copy / "mutation-junit.xml"
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                               f"--junitxml={junit}", *mutation.tests], cwd=copy, env=env, capture_output=True,
                              text=True, timeout=PER_MUTATION_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return False, f"its tests ran past {PER_MUTATION_TIMEOUT} s", time.monotonic() - started
    finally:
        target.write_text(original)
    seconds = time.monotonic() - started
    last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    if done.returncode not in (0, 1) or not junit.exists():
        return False, f"pytest exit {done.returncode} (not a test failure): {last}\n{done.stdout[-1500:]}", seconds
    failed, passed = _failed_tests(junit)
    survivors = [test for test in mutation.tests if test not in failed]
    if survivors:
        ran = [test for test in survivors if test in passed]
        return False, (f"passed with the protection removed: {', '.join(ran)}" if ran else
                       f"did not run: {', '.join(sorted(set(survivors) - set(ran)))} (skipped or not found)"), seconds
    return True, last, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--row", type=int, action="append", help="only the mutations of this SECURITY.md row")
    parser.add_argument("--jobs", type=int, default=2, help="copies run side by side (default 2: CI's two CPUs)")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.row or m.row in args.row]
    if not chosen:
        print(f"no mutation for row(s) {args.row}")
        return 2
    survived = []
    total = time.monotonic()
    todo: queue.SimpleQueue[Mutation] = queue.SimpleQueue()
    for mutation in chosen:
        todo.put(mutation)

    def worker(copy: Path) -> None:
        while True:
            try:
                mutation = todo.get_nowait()
            except queue.Empty:
                return
            killed, said, seconds = run_one(copy, mutation)
            print(f"row {mutation.row:>3} {'caught ' if killed else 'SURVIVED'} {seconds:6.1f} s  {mutation.name}: "
                  f"{said}", flush=True)
            if not killed:
                survived.append(mutation)

    with tempfile.TemporaryDirectory(prefix="gkeys-mutations-") as where:
        copies = [copy_project(Path(where) / str(n)) for n in range(max(1, args.jobs))]
        with concurrent.futures.ThreadPoolExecutor(len(copies)) as pool:
            for done in [pool.submit(worker, copy) for copy in copies]:
                done.result()
    print(f"{len(chosen) - len(survived)} of {len(chosen)} mutations caught by their cited tests in "
          f"{time.monotonic() - total:.0f} s")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
