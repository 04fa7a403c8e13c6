"""A verified git update removes the old tree off its critical path (issue 36: the swap's price).

Removing the tree an exchange replaced was 13.5 s of a 17.8 s update of 50,000 files (``bench/gitsync.py``):
the old tree now goes to the location's trash (``.NAME.gkeys.old``) and a detached child removes it.  These
tests stop that child (as a reboot or the OOM killer would) to show what the next sync does with the rest.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import build, context, head, install_devs

from gkeys_portage.core import trash
from gkeys_portage.core.trash import trash_path
from gkeys_portage.demo.tree_repo import git_environment
from gkeys_portage.portage.treesync import SyncOutcome, SyncRequest, clone_verified, update_verified
from gkeys_portage.verify.git.tree import TreeOptions

pytestmark = pytest.mark.slow


def _sync(env: Any, location: Path, upstream: Path, lines: list[str] | None = None) -> SyncOutcome:
    request = SyncRequest(location, f"file://{upstream}", TreeOptions(policy="all", jobs=1), git_env=git_environment())
    action = update_verified if (location / ".git").exists() else clone_verified
    return action(context(env), request, lambda level, text: (lines if lines is not None else []).append(text))


def _status(path: Path) -> bytes:
    return subprocess.run(["git", "-C", str(path), "-c", f"safe.directory={path}", "status", "--porcelain",
                           "--ignored", "--untracked-files=all"], env=git_environment(), capture_output=True,
                          check=True).stdout


def test_a_killed_background_removal_is_finished_by_the_next_sync_and_one_old_tree_at_most(
        env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each update leaves exactly the tree it replaced in the trash (its removal killed at once); the next
    sync removes that one before it makes another, so the trash never holds two old trees."""
    install_devs(env, ("alice",))
    up = build(tmp_path / "upstream", env.keys, ["alice"])
    location = tmp_path / "repos" / "gentoo"
    assert _sync(env, location, up.path).ok
    monkeypatch.setattr(trash, "_BACKGROUND", ":")  # the detached removal dies before it removes anything
    revisions = [head(location)]
    for round_ in range(3):
        revisions.append(up.commit("alice", files={f"dev-test/round{round_}/f": f"{round_}\n"}))
        lines: list[str] = []
        outcome = _sync(env, location, up.path, lines)
        assert outcome.ok and outcome.changed, outcome.reason
        assert head(location) == revisions[-1] and _status(location) == b""
        old = [p.name for p in location.parent.iterdir() if p.name != location.name]
        assert old == [trash_path(location).name], old  # one old tree, no staging directory
        assert head(trash_path(location)) == revisions[-2]  # the tree this update replaced, not an older one
        assert (round_ > 0) == any("removed the old tree an earlier sync left" in line for line in lines), lines
        assert not (trash_path(location) / "left-half-removed").exists()  # the earlier old tree went whole
        (trash_path(location) / "left-half-removed").write_text(f"{round_}\n")

    monkeypatch.undo()  # the real detached removal: the trash goes without another sync
    revisions.append(up.commit("alice"))
    assert _sync(env, location, up.path).ok and head(location) == revisions[-1]
    for _ in range(600):  # a wait for the child, not a time limit on it
        if not trash_path(location).exists():
            break
        time.sleep(0.1)
    assert not trash_path(location).exists() and _status(location) == b""


def test_a_symlink_at_the_trash_name_is_removed_as_a_link_never_followed(
        env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever sits at the trash name is removed as itself: a link to another directory does not empty it,
    and a nothing-new sync removes a leftover too."""
    install_devs(env, ("alice",))
    up = build(tmp_path / "upstream", env.keys, ["alice"])
    location = tmp_path / "repos" / "gentoo"
    assert _sync(env, location, up.path).ok
    precious = tmp_path / "precious"
    (precious / "sub").mkdir(parents=True)
    (precious / "sub" / "file").write_text("keep me\n")
    trash_path(location).symlink_to(precious)
    outcome = _sync(env, location, up.path)  # nothing new: no swap, but the leftover goes
    assert outcome.ok and not outcome.changed, outcome.reason
    assert not trash_path(location).is_symlink() and (precious / "sub" / "file").read_text() == "keep me\n"

    monkeypatch.setattr(trash, "_BACKGROUND", ":")
    trash_path(location).symlink_to(precious)
    new = up.commit("alice")
    assert _sync(env, location, up.path).ok and head(location) == new
    assert trash_path(location).is_dir() and not trash_path(location).is_symlink()
    assert (precious / "sub" / "file").read_text() == "keep me\n"
