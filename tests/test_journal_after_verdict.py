"""Issue 43 items 8-13: the journal records the final verdict, once, by the caller that applied it, naming the
live location and a strong digest of what was accepted; a torn line never makes it unreadable for good."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import context, install_devs

from gkeys_portage.core import journal
from gkeys_portage.core.state import Layout
from gkeys_portage.demo.tree_repo import RepoBuilder, git_environment
from gkeys_portage.portage.hooks import repo_postsync_main
from gkeys_portage.portage.treesync import SyncOutcome, SyncRequest, clone_verified, update_verified
from gkeys_portage.verify.git.tree import TreeOptions


def _entries(root: Path, *kinds: str) -> list[dict[str, Any]]:
    found = [json.loads(line) for path in journal.JournalPaths.of(Layout(root)).files()
             for line in path.read_text().splitlines()]
    return [e for e in found if not kinds or e["kind"] in kinds]


def _sync(env: Any, location: Path, upstream: Path) -> SyncOutcome:
    request = SyncRequest(location, f"file://{upstream}", TreeOptions(policy="all", jobs=1), git_env=git_environment())
    action = update_verified if (location / ".git").exists() else clone_verified
    return action(context(env), request, lambda level, text: None)


def test_git_sync_journals_the_live_location_after_the_swap_and_never_a_refused_revision(env: Any,
                                                                                       tmp_path: Path) -> None:
    """Item 8: an update is journaled under the live location (it was the staging path, removed right after).
    Item 9: a signed revision that the content check refuses (a symlink out of the tree) is journaled as
    refused, never as accepted, and ``audit --recheck`` does not call it "verifies"."""
    install_devs(env, ("alice",))
    up = RepoBuilder(tmp_path / "upstream", env.keys)
    up.commit("alice")
    location = tmp_path / "repos" / "gentoo"
    assert _sync(env, location, up.path).ok
    second = up.commit("alice")
    assert _sync(env, location, up.path).ok
    accepted = _entries(env.state, "tree-accepted")
    assert [e["data"]["repo"] for e in accepted] == [str(location)] * 2, accepted
    assert accepted[-1]["data"]["tip"] == second

    (up.path / "dev-test" / "pkg" / "shadow").symlink_to("../../../../etc/shadow")
    refused_tip = up.commit("alice")
    outcome = _sync(env, location, up.path)
    assert not outcome.ok and "outside the repository" in outcome.reason, outcome.reason
    assert [e["data"]["tip"] for e in _entries(env.state, "tree-accepted")] == [accepted[0]["data"]["tip"], second]
    (refusal,) = _entries(env.state, "tree-refused")
    assert refusal["data"]["tip"] == refused_tip and refusal["data"]["repo"] == str(location)
    assert refusal["data"]["code"] == "bad-input" and "outside the repository" in refusal["data"]["why"]

    alice = env.keys.keys["alice"].fingerprint
    doc = json.loads(env.run("--json", "audit", "--key", alice, "--recheck").out)
    assert [a["subject"] for a in doc["artifacts"]] == [str(location)], doc
    assert refused_tip not in json.dumps(doc["artifacts"])
    assert all(r["status"] == "verifies" for r in doc["recheck"]), doc["recheck"]


def test_hook_journals_a_revision_refused_after_its_signatures_verified(env: Any, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 9 (hooks): HEAD's commits verify but the work tree is not HEAD: refused, and journaled so."""
    monkeypatch.setenv("GKEYS_CONFIG", str(env.config))
    install_devs(env, ("alice",))
    repo = RepoBuilder(tmp_path / "repo", env.keys)
    repo.commit("alice")
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 0
    (repo.path / "dev-test" / "pkg" / "file1").write_text("rewritten by a merge that failed part-way\n")
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 1
    kinds = [(e["kind"], e["data"].get("code")) for e in _entries(env.state, "tree-accepted", "tree-refused")]
    assert kinds == [("tree-accepted", None), ("tree-refused", "worktree-changed")], kinds
