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


SHORT_WRITE = """
import resource, signal, sys
from pathlib import Path
from gkeys_portage.core import journal
from gkeys_portage.core.state import Layout
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a short write, then EFBIG: as a full disk does
size = journal.JournalPaths.of(Layout(Path(sys.argv[1]))).current.stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 40, size + 40))
assert journal.record(Layout(Path(sys.argv[1])), "media-accepted", {"file": "x" * 200}) is None
"""


def test_one_short_write_never_makes_the_journal_unreadable(env: Any, tmp_path: Path) -> None:
    """Item 13, reproduced as the issue did (``RLIMIT_FSIZE`` standing in for a full disk): the torn line is
    cut before the next append, ``history`` and ``audit`` read on; a line that cannot be read is named and
    passed over, and a broken chain is a warning of ``history`` and ``audit``."""
    import os
    import subprocess
    import sys

    layout = Layout(env.state)
    journal.record(layout, "keys-changed", {"category": "gentoo", "keys": [
        {"nick": "a", "fingerprint": "A" * 40, "change": "added"}]})
    current = journal.JournalPaths.of(layout).current
    before = current.read_bytes()
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", SHORT_WRITE, str(env.state)], check=True,
                   env={**os.environ, "PYTHONPATH": str(root)})
    torn = current.read_bytes()
    assert len(torn) == len(before) + 40 and not torn.endswith(b"\n")
    journal.record(layout, "keys-changed", {"category": "gentoo", "keys": [
        {"nick": "b", "fingerprint": "B" * 40, "change": "added"}]})
    assert journal.verify_chain(layout).ok
    result = env.run("history")
    assert result.code == 0 and "A" * 40 in result.out and "B" * 40 in result.out, result.text
    assert env.run("audit", "--key", "A" * 40).code == 0

    lines = current.read_bytes().splitlines(keepends=True)
    current.write_bytes(b"".join([*lines[:-1], b"garbage\n", lines[-1]]))  # an unreadable line in the middle
    result = env.run("--json", "history")
    assert result.code == 0, result.text
    doc = json.loads(result.out)
    assert "B" * 40 in json.dumps(doc["changes"]), doc
    assert any(f"journal.jsonl:{len(lines)}: not a journal entry" in w for w in doc["warnings"]), doc["warnings"]
    text = env.run("audit", "--key", "B" * 40)
    assert text.code == 0 and "passed over" in text.err, text.text

    current.write_bytes(b"".join([*lines[:-2], lines[-1]]))  # an entry removed: the chain is broken
    warned = env.run("history")
    assert warned.code == 0 and "chain is broken" in warned.err and "journal verify)" in warned.err, warned.text
