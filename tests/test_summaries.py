"""Every summary says exactly what was checked (issue 37, item 4): policy top names the history it did not
check; a partly failed update-seed counts keys and lists in text what --json lists; refresh-key with nothing
installed says so (exit 2, as check-key); status says where it looked for Portage."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from conftest import GkeysEnv, keys_installed_by_gnupg
from tree_helpers import build, install_devs


def test_policy_top_says_the_history_below_was_not_checked_and_how_to(env: Any, tmp_path: Path) -> None:
    install_devs(env, ("alice",))
    repo = build(tmp_path / "repo", env.keys, [None, "mallory", "alice"])
    result = env.run("verify-tree", str(repo.path), "--policy", "top")
    assert result.code == 0 and "1 commit(s) verified" in result.out
    assert "only the top commit" in result.out and "not the history below it" in result.out, result.text
    command = result.out.split("to check every commit up to it: ", 1)[1].split(" (or", 1)[0]
    assert shlex.split(command)[:4] == [*shlex.split(env.gkeys), "verify-tree"]  # on this run's config
    every = env.run_printed(command)  # run as printed: the unsigned and foreign commits below are found
    assert every.code == 1 and "2 of 3 commit(s) refused" in every.err, every.text
    document = json.loads(env.run("--json", "verify-tree", str(repo.path), "--policy", "top", "--no-record").out)
    assert document["history_checked"] is True  # the top was recorded by the first run: nothing new below it


def _partial_devs(env: GkeysEnv) -> None:
    """gentoo-devs pins alice and bob; the keyserver has only alice's key."""
    env.bootstrap()
    env.publish_seeds("gentoo-devs", ("alice", "bob"))
    env.server.hkp[env.keys.keys["alice"].fingerprint] = env.keys.public("alice")


def test_partly_failed_update_counts_keys_and_text_lists_what_json_lists(env: GkeysEnv) -> None:
    _partial_devs(env)
    with keys_installed_by_gnupg():
        text = env.run("update-seed")
        json_run = env.run("--json", "update-seed", "-C", "gentoo-devs")
        text_run = env.run("update-seed", "-C", "gentoo-devs")
    assert text.code != 0, text.text
    assert "categories not fully updated" in text.err and "gentoo-devs: 1 of 2 keys installed" in text.err, text.text
    entry = json.loads(json_run.out)["updated"][0]
    assert sorted(k["status"] for k in entry["keys"]) == ["missing", "unchanged"], entry
    for key in entry["keys"]:  # every key's outcome in text too, not only the problems
        assert key["fingerprint"] in text_run.text, (key, text_run.text)


def test_refresh_key_with_nothing_installed_says_so_and_exits_2(env: GkeysEnv) -> None:
    result = env.run("refresh-key")
    assert result.code == 2 and "no keys to refresh" in result.err and f"{env.gkeys} update-seed" in result.err
    document = json.loads(env.run("--json", "refresh-key").out)
    assert document["reason"] == "state" and document["exit"] == 2


def test_status_without_repositories_says_where_it_looked(env: GkeysEnv, tmp_path: Path) -> None:
    root = tmp_path / "empty-root"
    root.mkdir()
    result = env.run("status", "--eroot", str(root), "--no-doctor")
    assert f"none: {root}/etc/portage/repos.conf configures no repository (it does not exist)" in result.out
    assert f"{env.gkeys} status --eroot DIR" in result.out
