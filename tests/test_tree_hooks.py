"""The Portage hooks' entry points, called directly (no emerge): markers, rollback, non-git repos."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tree_helpers import build, install_devs

from gkeys_portage.portage.hooks import postsync_main, repo_postsync_main


@pytest.fixture
def hook_env(env: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("GKEYS_CONFIG", str(env.config))
    install_devs(env, ("alice",))
    return env


def markers(env: Any) -> list[str]:
    return sorted(p.name for p in (env.state / "state" / "tree-failed").glob("*.json"))


def test_non_git_repository_is_skipped(hook_env: Any, tmp_path: Path) -> None:
    (tmp_path / "rsync-repo").mkdir()
    assert repo_postsync_main(["gentoo", "rsync://example", str(tmp_path / "rsync-repo")]) == 0
    assert markers(hook_env) == [] and postsync_main() == 0


def test_bad_first_sync_marks_then_a_good_sync_clears(hook_env: Any, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    repo = build(tmp_path / "repo", hook_env.keys, ["alice", "mallory"])
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 1
    assert markers(hook_env) == ["test.json"]
    assert "NO verified revision to roll back to" in capsys.readouterr().err
    assert postsync_main() == 1
    assert "repository test" in capsys.readouterr().err
    good = repo.commit("alice", parents=[repo.git("rev-parse", "HEAD~1").strip()])
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 0
    assert markers(hook_env) == [] and postsync_main() == 0
    repo.commit(None)
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 1
    assert repo.head() == good  # rolled back to the last verified revision
    assert repo_postsync_main(["too", "few"]) == 2
