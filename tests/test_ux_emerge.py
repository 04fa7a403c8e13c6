"""Issue 15 through real ``emerge --sync``: no state that blocks every sync for good (item 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import PROJECT, head, install_devs

from gkeys_portage.core.config import load_config
from gkeys_portage.demo.tree_repo import PortageSandbox, RepoBuilder
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.verify.git.markers import failure_markers, marker_path, write_marker

pytestmark = pytest.mark.slow





def _markers(env: Any) -> list[str]:
    return sorted(json.loads(p.read_text())["repo"] for p in (env.state / "state" / "tree-failed").glob("*.json"))


def test_marker_of_a_repository_removed_from_repos_conf_stops_failing_syncs(
        env: Any, tmp_path: Path, portage_root: PortageSandbox) -> None:
    install_devs(env, ("alice", "bob"))
    portage_root.install_hooks(PROJECT / "hooks")
    trial = RepoBuilder(tmp_path / "trial-up", env.keys, name="trialhook")
    trial.commit("alice")
    portage_root.add_repo("trialhook", f"file://{trial.path}", "git", clone_depth="0", sync_depth="0")
    assert portage_root.sync().returncode == 0
    trial.commit(None)  # an unsigned commit: refused, rolled back, marked
    result = portage_root.sync()
    assert result.returncode != 0 and "NOT verified" in result.stdout, result.stdout
    assert _markers(env) == ["trialhook"]
    assert "gkeys verify-tree --clear-marker trialhook" in result.stdout  # the next step for a repository gone

    # the user drops the repository and keeps another one
    (portage_root.etc / "repos.conf" / "trialhook.conf").unlink()
    other = RepoBuilder(tmp_path / "other-up", env.keys, name="other")
    other.commit("bob")
    location = portage_root.add_repo("other", f"file://{other.path}", "git", clone_depth="0", sync_depth="0")
    result = portage_root.sync()
    assert result.returncode == 0, result.stdout
    assert result.stdout.count("trialhook is no longer in repos.conf; removed its failure marker") == 1
    assert _markers(env) == [] and head(location) == other.head()
    again = portage_root.sync()
    assert again.returncode == 0 and "trialhook" not in again.stdout, again.stdout


def test_clear_marker_removes_one_marker_and_names_the_others(env: Any) -> None:
    layout = Gkeys(load_config(env.config, None)).layout
    for name in ("gone", "kept"):
        write_marker(marker_path(layout, name), name, Path("/var/db/repos") / name, "unsigned commit", "")
    result = env.run("verify-tree", "--clear-marker", "gone")
    assert result.code == 0 and "removed the failure marker of gone" in result.out, result.text
    assert [m["repo"] for m in failure_markers(layout)] == ["kept"]
    missing = env.run("verify-tree", "--clear-marker", "typo")
    assert missing.code == 2
    assert "no failure marker for repository typo (repositories with a marker: kept)" in missing.err
    usage = env.run("verify-tree")
    assert usage.code == 2 and "--clear-marker" in usage.err


def test_a_typo_in_a_sync_gkeys_key_fails_the_sync(env: Any, tmp_path: Path, portage_root: PortageSandbox) -> None:
    """Issue 15 item 4: ``sync-gkeys-polcy = all`` silently fell back to a shallow, top-only first clone."""
    install_devs(env, ("alice",))
    up = RepoBuilder(tmp_path / "upstream", env.keys)
    up.commit(None)  # an unsigned commit under a signed top: only policy=all sees it
    up.commit("alice")
    location = portage_root.add_repo("test", f"file://{up.path}", "gkeys", sync_gkeys_polcy="all")
    result = portage_root.sync("test")
    assert result.returncode != 0, result.stdout
    assert ("repos.conf [test]: unknown option 'sync-gkeys-polcy' (did you mean 'sync-gkeys-policy'?)"
            in result.stdout), result.stdout
    assert not (location / ".git").exists()  # nothing was cloned (Portage made the empty directory)
    portage_root.add_repo("test", f"file://{up.path}", "gkeys", sync_gkeys_policy="all")
    result = portage_root.sync("test")  # spelled right: the whole history is checked and refused
    assert result.returncode != 0 and "NOT verified" in result.stdout, result.stdout


def test_marker_of_a_git_sync_is_dropped_once_the_repository_syncs_verified_with_gkeys(
        env: Any, tmp_path: Path, portage_root: PortageSandbox) -> None:
    """A repository refused under sync-type = git, then switched to sync-type = gkeys: the first sync the
    module verifies must not keep failing on the old marker (the repo hook no longer runs for it)."""
    install_devs(env, ("alice", "bob"))
    portage_root.install_hooks(PROJECT / "hooks")
    up = RepoBuilder(tmp_path / "upstream", env.keys)
    up.commit("alice")
    location = portage_root.add_repo("test", f"file://{up.path}", "git", clone_depth="0", sync_depth="0")
    assert portage_root.sync("test").returncode == 0
    verified = head(location)
    up.commit(None)
    result = portage_root.sync("test")
    assert result.returncode != 0 and _markers(env) == ["test"], result.stdout
    up.force(verified)
    good = up.commit("bob")
    portage_root.add_repo("test", f"file://{up.path}", "gkeys", clone_depth="0")
    result = portage_root.sync("test")
    assert result.returncode == 0, result.stdout
    assert head(location) == good and _markers(env) == []
    assert "removed the failure marker" in result.stdout
