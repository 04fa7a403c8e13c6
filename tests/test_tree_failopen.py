"""Fail-open paths of tree verification, closed: a frozen recorded tip ages out, a hook that errors or
crashes rolls back and fails emerge, an empty --range is refused, an empty refusal reason is no pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from tree_helpers import build, head, install_devs, records

from gkeys_portage.core.errors import BadInputError, GpgError, NotVerifiedError, SignerNotPinnedError
from gkeys_portage.demo.world import past
from gkeys_portage.openpgp.status import StatusReport
from gkeys_portage.portage.hooks import postsync_main, repo_postsync_main
from gkeys_portage.verify.git import commits, tree
from gkeys_portage.verify.git.objects import GitRepo, parse_commit


def set_tree_config(env: Any, text: str) -> None:
    base = env.config.read_text().split("[tree]\n")[0]
    env.config.write_text(base + "[tree]\n" + text)


def markers(env: Any) -> list[str]:
    return sorted(p.name for p in (env.state / "state" / "tree-failed").glob("*.json"))


# -- S2: [tree] max-age also applies to a tip that is already recorded ---------------------------------

def test_frozen_recorded_tip_ages_out(env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_devs(env, ("expired",))  # "expired" can sign "700 days ago"
    repo = build(tmp_path / "repo", env.keys, [])
    tip = repo.commit("expired", when=past(700))
    set_tree_config(env, "max-age = 1000\npolicy = all\n")
    assert env.run("verify-tree", str(repo.path)).code == 0
    assert records(env)[str(repo.path.resolve())]["revision"] == tip
    again = env.run("verify-tree", str(repo.path))  # nothing new, checked again: still within max-age
    assert again.code == 0 and "checked again" in again.text
    set_tree_config(env, "max-age = 30\npolicy = all\n")
    refused = env.run("verify-tree", str(repo.path))  # the mirror serves the same, now too old, tip
    assert refused.code == 1 and "max-age" in refused.text, refused.text
    # the Portage hook (plan() is shared) refuses it too
    monkeypatch.setenv("GKEYS_CONFIG", str(env.config))
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 1
    assert markers(env) == ["test.json"] and postsync_main() == 1
    set_tree_config(env, "max-age = 0\npolicy = all\n")  # off: nothing new means nothing to check
    assert env.run("verify-tree", str(repo.path)).code == 0


def test_sync_module_refuses_a_frozen_recorded_tip(env: Any, tmp_path: Path) -> None:
    from gkeys_portage.core.config import load_config
    from gkeys_portage.demo.tree_repo import git_environment
    from gkeys_portage.keys.context import Gkeys
    from gkeys_portage.portage.treesync import SyncRequest, clone_verified, update_verified

    install_devs(env, ("expired",))
    upstream = build(tmp_path / "upstream", env.keys, [])
    tip = upstream.commit("expired", when=past(700))
    location = tmp_path / "repos" / "gentoo"
    lines: list[tuple[str, str]] = []

    def request(days: float) -> SyncRequest:
        options = tree.TreeOptions(policy="all", jobs=1, max_age_days=days)
        return SyncRequest(location, str(upstream.path), options, git_env=git_environment(), quiet=True)

    ctx = Gkeys(load_config(env.config))
    assert clone_verified(ctx, request(1000), lambda *line: lines.append(line)).ok
    assert records(env)[str(location.resolve())]["revision"] == tip
    assert update_verified(ctx, request(1000), lambda *line: lines.append(line)).ok  # nothing new, fresh enough
    outcome = update_verified(ctx, request(30), lambda *line: lines.append(line))
    assert not outcome.ok and "max-age" in outcome.reason, outcome.reason


# -- S3: any error in the repo.postsync.d hook rolls back and leaves a marker --------------------------

@pytest.fixture
def hook_env(env: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("GKEYS_CONFIG", str(env.config))
    install_devs(env, ("alice",))
    return env


@pytest.mark.parametrize("error", [OSError(5, "Input/output error"), KeyError("boom"),
                                   BadInputError("git cat-file failed"), GpgError("gpg timed out")],
                         ids=["OSError", "KeyError", "BadInputError", "GpgError"])
def test_hook_error_while_verifying_rolls_back(hook_env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str], error: Exception) -> None:
    repo = build(tmp_path / "repo", hook_env.keys, ["alice"])
    good = repo.head()
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 0
    assert markers(hook_env) == []
    merged = repo.commit(None)  # what the sync merged: never verified

    def broken(self: GitRepo, hashes: Any) -> Any:
        raise error

    monkeypatch.setattr(GitRepo, "read_commits", broken)
    capsys.readouterr()
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 1
    assert repo.head() == good != merged  # rolled back to the last verified revision
    err = capsys.readouterr().err
    assert "NOT verified" in err and f"rolled back to {good[:12]}" in err
    assert markers(hook_env) == ["test.json"]
    assert postsync_main() == 1


def test_hook_interrupted_while_verifying_leaves_a_marker(hook_env: Any, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    repo = build(tmp_path / "repo", hook_env.keys, ["alice"])
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 0
    verified_tip = head(repo.path)
    repo.commit(None)

    def interrupted(self: GitRepo, hashes: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(GitRepo, "read_commits", interrupted)
    with pytest.raises(KeyboardInterrupt):
        repo_postsync_main(["test", "file:///up", str(repo.path)])
    assert markers(hook_env) == ["test.json"]  # the pending marker stays: emerge fails
    assert head(repo.path) == verified_tip  # and the unverified commit is not left checked out
    assert postsync_main() == 1
    monkeypatch.undo()
    monkeypatch.setenv("GKEYS_CONFIG", str(hook_env.config))
    repo.commit("alice")  # on top of the verified tip the rollback restored: the next sync recovers
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 0 and postsync_main() == 0


# -- S5: an empty --range is a usage error -------------------------------------------------------------

def test_empty_range_is_refused(env: Any, tmp_path: Path) -> None:
    install_devs(env, ("alice",))
    repo = build(tmp_path / "repo", env.keys, ["alice", "alice"])
    for commit_range in ("HEAD..HEAD~1", "HEAD..HEAD"):
        result = env.run("verify-tree", str(repo.path), "--range", commit_range)
        assert result.code == 2 and "holds no commits" in result.text, result.text
    assert env.run("verify-tree", str(repo.path), "--range", "HEAD~1..HEAD").code == 0


# -- S6: a refusal with an empty message is still a refusal ---------------------------------------------

class _Keyring:
    def installed(self) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize("error", [SignerNotPinnedError(""), NotVerifiedError(""), BadInputError("")])
def test_empty_refusal_message_is_not_good(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    def refuse(*args: Any) -> Any:
        raise error

    monkeypatch.setattr(commits, "decide", refuse)
    verifier = commits.CommitVerifier(cast(Any, _Keyring()), cast(Any, None), cast(Any, None), jobs=1)
    commit = parse_commit("a" * 40, b"tree 0\nauthor x <x@y> 0 +0000\n\nmsg\n")
    verdict = verifier.judge(commit, cast(StatusReport, object()))
    assert not verdict.good and verdict.reason and verdict.code
    assert not commits.CommitVerdict("a" * 40, "x", "msg").good  # a verdict nobody passed is not good
