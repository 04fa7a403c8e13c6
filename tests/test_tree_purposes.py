"""Key purposes for commits (issue 23 item 2): the packaged gentoo category pins release, snapshot and mirror keys;
only the git-mirror key (and developers, whose category has no purposes) may sign sync-repository commits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from media_helpers import install_release_key
from tree_helpers import build, install_devs


def _verify(env: Any, repo: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = env.run("--json", "verify-tree", str(repo), "--policy", "all", "--no-record", *args)
    return result.code, json.loads(result.out)


@pytest.mark.parametrize("signer, nick, purpose", [("releng", "releng", "the release-media key"),
                                                   ("carol", "snapshot",
                                                    "the repository key and the overlay-list key")])
def test_a_release_or_snapshot_key_cannot_sign_a_commit(env: Any, tmp_path: Path, signer: str, nick: str,
                                                        purpose: str) -> None:
    """gentoo pins releng (release media), snapshot (the repository key) and mirror (git mirror): a top commit
    signed by the release or snapshot key was accepted with -T gentoo; now refused naming both purposes,
    while the mirror key's commit still passes."""
    install_devs(env, ("alice",))
    install_release_key(env)  # gentoo: releng only
    if nick != "releng":
        env.pin_key("gentoo", nick, signer)
    env.pin_key("gentoo", "mirror", "bob")
    refused = build(tmp_path / "refused", env.keys, ["alice", signer])
    code, data = _verify(env, refused.path, "-T", "gentoo")
    assert code == 1, data
    bad = data["bad"][0]
    assert bad["code"] == "wrong-purpose", bad
    assert f"signed by gentoo/{nick}, {purpose}; git mirror commits need git-mirror keys: gentoo/mirror" \
           in bad["reason"]
    good = build(tmp_path / "good", env.keys, ["alice", "bob"])
    code, data = _verify(env, good.path, "-T", "gentoo")
    assert code == 0, data


def test_developer_categories_keep_every_seed(env: Any, tmp_path: Path) -> None:
    """gentoo-devs has no purposes: every developer still signs commits (-C gentoo-devs)."""
    install_devs(env, ("alice", "bob"))
    repo = build(tmp_path / "repo", env.keys, ["alice", "bob"])
    code, data = _verify(env, repo.path, "-C", "gentoo-devs")
    assert code == 0, data
