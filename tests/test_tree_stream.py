"""verify-tree keeps no per-commit state: the range waits in a file, the first good ancestor is asked of git.

The first good ancestor is checked against the in-memory definition (every parent list held, the code
before issue 25) on random histories built by real git: both must name the same commit.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gkeys_portage.core.errors import BadInputError
from gkeys_portage.verify.git.ancestry import first_good_ancestor
from gkeys_portage.verify.git.objects import GitRepo
from gkeys_portage.verify.git.revisions import Revisions


def reference(order: Sequence[str], parents: Mapping[str, Sequence[str]], bad: set[str], tip: str,
              below: bool) -> str | None:
    """The definition: the newest commit on tip's first-parent line whose history in the range is good."""
    tainted: set[str] = set()
    for commit in reversed(order):
        if commit in bad or any(p in tainted for p in parents.get(commit, ())):
            tainted.add(commit)
    current: str | None = tip
    while current is not None and current in parents:
        if current not in tainted:
            return current
        line = parents[current]
        current = line[0] if line else None
    return current if below else None


def make_history(path: Path, parent_lists: list[list[int]]) -> list[str]:
    """A repository whose commit ``i`` has the parents ``parent_lists[i]`` (indices below ``i``), built with
    one ``git fast-import``; the hashes in the same order."""
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    stream = []
    for index, parents in enumerate(parent_lists):
        stream.append(f"commit refs/heads/c{index}\nmark :{index + 1}\n"
                      f"committer A <a@example.org> {1_700_000_000 + index} +0000\ndata 3\nc{index % 10}\n")
        stream += [f"{'from' if n == 0 else 'merge'} :{parent + 1}\n" for n, parent in enumerate(parents)]
        stream.append("\n")
    marks = path / "marks"
    subprocess.run(["git", "-C", str(path), "fast-import", "--quiet", f"--export-marks={marks}"],
                   input="".join(stream).encode(), check=True)
    named = dict(line.split() for line in marks.read_text().splitlines())
    return [named[f":{index + 1}"] for index in range(len(parent_lists))]


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[list[int]], set[int], int | None, bool]:
    """Parent lists (0-3 distinct earlier commits each), a bad subset, an optional excluded base, ``below``."""
    count = draw(st.integers(1, 12))
    lists = [draw(st.lists(st.integers(0, index - 1), max_size=3, unique=True)) if index else []
             for index in range(count)]
    bad = draw(st.sets(st.integers(0, count - 1), max_size=4))
    base = draw(st.one_of(st.none(), st.integers(0, count - 1)))
    return lists, bad, base, draw(st.booleans())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(histories())
@example(([[], [0], [1]], {1}, 0, False))  # the whole line in the range is refused; nothing below was verified
@example(([[], [0], [1]], {1}, 0, True))  # ... and something below was: the commit below the range
@example(([[], [0], [0], [1, 2]], {2}, None, False))  # a refused side branch taints the merge, not the line
def test_first_good_ancestor_agrees_with_the_in_memory_definition(
        tmp_path_factory: pytest.TempPathFactory, history: tuple[list[list[int]], set[int], int | None, bool]) -> None:
    lists, bad_indices, base_index, below = history
    path = tmp_path_factory.mktemp("history")
    hashes = make_history(path, lists)
    repo, tip = GitRepo(path), hashes[-1]
    exclude = [hashes[base_index]] if base_index is not None else []
    order = repo.rev_list(tip, exclude)
    commits = repo.read_commits(order)
    parents = {name: commit.parents for name, commit in commits.items()}
    bad = {hashes[i] for i in bad_indices} & set(order)
    with Revisions(repo, tip, exclude) as revisions:
        assert list(revisions) == order and len(revisions) == len(order)
        assert first_good_ancestor(revisions, bad, below=below) == reference(order, parents, bad, tip, below)


def test_the_tip_alone_is_listed_without_walking_history(tmp_path: Path) -> None:
    """``--policy top`` names one commit: no ``git rev-list`` (which walks the whole history, and fails on a
    missing ancestor) runs for it."""
    hashes = make_history(tmp_path / "repo", [[], [0], [1]])
    (tmp_path / "repo" / ".git" / "objects" / hashes[0][:2] / hashes[0][2:]).unlink()  # a broken ancestor
    repo = GitRepo(tmp_path / "repo")
    with pytest.raises(BadInputError, match="rev-list failed"):
        Revisions(repo, hashes[2])
    with Revisions(repo, hashes[2], only_tip=True) as top:
        assert list(top) == [hashes[2]] and len(top) == 1
        assert first_good_ancestor(top, {hashes[2]}, below=False) is None
        assert first_good_ancestor(top, set(), below=False) == hashes[2]


def test_a_listing_that_is_not_whole_hashes_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The count is the file's size over the hash width: anything else git printed is an error, not a guess."""
    hashes = make_history(tmp_path / "repo", [[], [0]])
    repo = GitRepo(tmp_path / "repo")
    monkeypatch.setattr(Revisions, "arguments", lambda self, *options: ["log", "--format=%H %s", self.tip])
    with pytest.raises(BadInputError, match="not whole 40-digit hashes"):
        Revisions(repo, hashes[1])
