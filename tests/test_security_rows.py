"""SECURITY.md's rows cite tests that exist, and the mutation table (tests/mutations/table.py) still fits the code.

Nothing is run here but parsing: the mutation run itself (tests/mutations/run.py, a step of ``.ci/run``) applies
each mutation in a copy of the project and requires the tests it names to fail.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT / "tests" / "mutations"))

from table import MUTATIONS, UNMUTATED  # noqa: E402

#: Rows from 150 (the second opinion) on, and the revocation rule, get a mutation or a reason in UNMUTATED
#: (tests/mutations/table.py and its rows_*.py); rows up to here are checked.
CHECKED_UP_TO = 399


def _hardening():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("hardening", PROJECT / "bench" / "hardening.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HARDENING = _hardening()


def _rows() -> dict[int, list[str]]:
    rows = {}
    for line in (PROJECT / "SECURITY.md").read_text().splitlines():
        cells = HARDENING.row_cells(line)
        if cells is not None:
            rows[int(cells[1])] = HARDENING.references(next(c for c in reversed(cells) if c))
    return rows


@functools.cache
def _functions(path: str) -> frozenset[str] | None:
    file = PROJECT / path
    if not file.is_file():
        return None
    return frozenset(node.name for node in ast.walk(ast.parse(file.read_text()))
                     if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))


def _missing(rows: dict[int, list[str]]) -> list[str]:
    """The references of ``rows`` that name no test (``row N: REF``)."""
    missing = []
    for row, refs in rows.items():
        for ref in refs:
            path, _, name = ref.partition("::")
            functions = _functions(path)
            if functions is None or (name and name not in functions):
                missing.append(f"row {row}: {ref}")
    return missing


def test_every_row_cites_tests_that_exist() -> None:
    """A reference that names no test (a renamed or never-written one) is a row nothing proves."""
    rows = _rows()
    assert len(rows) > 200, len(rows)
    missing = _missing(rows)
    assert not missing, missing
    here = "tests/test_security_rows.py"
    assert _missing({1: [f"{here}::test_renamed_away", "tests/test_never_written.py",
                         f"{here}::test_every_row_cites_tests_that_exist", here]}) == [
        f"row 1: {here}::test_renamed_away", "row 1: tests/test_never_written.py"]


def test_bench_hardening_counts_a_reference_that_matches_nothing_as_not_covered() -> None:
    outcomes = {"tests/test_a.py::test_real": "passed"}
    assert HARDENING.matching(outcomes, "tests/test_a.py::test_real") == ["passed"]
    assert HARDENING.matching(outcomes, "tests/test_a.py::test_gone") == []
    assert HARDENING.references("`tests/test_a.py::test_x`, `::test_y[p]`, tests/test_b.py") == [
        "tests/test_a.py::test_x", "tests/test_a.py::test_y", "tests/test_b.py"]


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[f"{m.row}-{m.name}" for m in MUTATIONS])
def test_each_mutation_fits_the_code_and_its_tests_are_cited_by_its_row(mutation) -> None:  # type: ignore[no-untyped-def]
    """The old text is in its file exactly once (else the run would mutate nothing), the change changes it, and
    every test it names exists and is cited by its row."""
    assert (PROJECT / mutation.file).read_text().count(mutation.old) == 1, mutation.file
    assert mutation.new != mutation.old
    refs = _rows()[mutation.row]
    for test in mutation.tests:
        path, _, name = test.partition("::")
        assert name in (_functions(path) or ()), test
        assert test in refs or path in refs, f"row {mutation.row} does not cite {test}"


def test_every_row_from_150_and_the_revocation_rule_has_a_mutation_or_a_reason() -> None:
    mutated = {m.row for m in MUTATIONS}
    rows = [row for row in _rows() if 150 <= row <= CHECKED_UP_TO]
    assert {48, 150, 151, 152, 159, 165, 166, 167} <= mutated
    assert not [row for row in rows if row not in mutated and row not in UNMUTATED]
    assert not mutated & set(UNMUTATED)


def test_ci_runs_the_mutations() -> None:
    ci = (PROJECT / ".ci" / "run").read_text()
    assert " exec python3 tests/mutations/run.py --jobs 1)" in ci
    assert 'wait "$mutations" || mutation_status=$?' in ci and '[ "$mutation_status" -eq 0 ] ||' in ci


def test_the_mutation_run_fails_a_mutation_a_cited_test_survives(tmp_path: Path) -> None:
    """tests/mutations/run.py counts a mutation as caught only when every test it names failed: one a named test
    passes under, or whose old text is gone, is not; the mutated file is put back."""
    import run

    (tmp_path / "tests").mkdir()
    (tmp_path / "guarded.py").write_text("LIMIT = 3\n")
    (tmp_path / "tests" / "test_guarded.py").write_text(
        "from pathlib import Path\n\n\ndef test_limit():\n"
        "    assert (Path(__file__).parent.parent / 'guarded.py').read_text() == 'LIMIT = 3\\n'\n\n\n"
        "def test_other():\n    pass\n")
    limit, other = "tests/test_guarded.py::test_limit", "tests/test_guarded.py::test_other"
    assert run.run_one(tmp_path, run.Mutation(0, "limit", "guarded.py", "LIMIT = 3", "LIMIT = 4", (limit,)))[0]
    survived = run.run_one(tmp_path, run.Mutation(0, "limit", "guarded.py", "LIMIT = 3", "LIMIT = 4",
                                                  (limit, other)))
    assert survived[0] is False and f"passed with the protection removed: {other}" in survived[1], survived
    stale = run.run_one(tmp_path, run.Mutation(0, "gone", "guarded.py", "LIMIT = 5", "LIMIT = 4", (limit,)))
    assert stale[0] is False and "occurs 0 times" in stale[1], stale
    assert (tmp_path / "guarded.py").read_text() == "LIMIT = 3\n"
