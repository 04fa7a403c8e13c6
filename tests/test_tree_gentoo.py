"""Several categories per commit (issue 13 item 3): a sync repository shaped like Gentoo's.

In github.com/gentoo-mirror/gentoo every commit is signed by a developer or by the repository
mirror key, and the mirror's "Merge updates from master" merges (two parents) and metadata
timestamp commits lie *between* two user syncs.  Here: developer commits on a side line, merged by
a generated "mirror" key pinned in gentoo-infra, then a mirror timestamp commit; real
``emerge --sync`` three times with ``sync-gkeys-category = gentoo-devs gentoo-infra``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import head, install_devs, records

from gkeys_portage.demo.tree_repo import PortageSandbox, RepoBuilder, sync_module_missing

_MISSING = sync_module_missing()


def _pin_mirror(env: Any) -> None:
    """A generated mirror key replaces the packaged (real) gentoo-infra/mirror seed."""
    if "mirror" not in env.keys.keys:
        env.keys.create("mirror", name="Gentoo repository mirrors", email="repomirrorci@gentoo.org")
    key = env.keys.keys["mirror"]
    assert env.run("remove-seed", "-C", "gentoo-infra", "-n", "mirror").code == 0
    assert env.run("add-seed", "-C", "gentoo-infra", "-n", "mirror", "-N", "Mirror", "-K", key.fingerprint).code == 0
    keyfile = env.root / "mirror.asc"
    keyfile.write_bytes(env.keys.public("mirror"))
    result = env.run("import-key", "-C", "gentoo-infra", "-n", "mirror", "-F", str(keyfile))
    assert result.code == 0, result.text


class Mirror:
    """The developer line and the mirror line of a sync repository."""

    def __init__(self, path: Path, keys: Any) -> None:
        self.up = RepoBuilder(path, keys, name="gentoo")
        self.dev = self.up.commit("alice")
        self.up.commit("mirror", message="[ metadata ] timestamp")

    def round(self, *developers: str) -> str:
        """Developers commit on master of gentoo.git; the mirror merges them and adds a timestamp."""
        for nick in developers:
            self.dev = self.up.commit(nick, parents=[self.dev], move=False)
        top = self.up.head() or ""
        self.up.commit("mirror", parents=[top, self.dev], message="Merge updates from master")
        return self.up.commit("mirror", message="[ metadata ] timestamp")


def test_verify_tree_accepts_any_listed_category(env: Any, tmp_path: Path) -> None:
    install_devs(env, ("alice", "bob"))
    _pin_mirror(env)
    mirror = Mirror(tmp_path / "sync", env.keys)
    mirror.round("bob", "alice")
    recorded = env.run("--json", "verify-tree", str(mirror.up.path), "--policy", "all",
                       "-C", "gentoo-devs", "-C", "gentoo-infra")
    assert recorded.code == 0, recorded.out
    mirror.round("alice")
    # The old way: mirror commits below the tip are refused, -T covers the tip only.
    only_top = env.run("--json", "verify-tree", str(mirror.up.path), "-C", "gentoo-devs", "-T", "gentoo-infra")
    assert only_top.code == 1
    assert {b["code"] for b in json.loads(only_top.out)["bad"]} == {"unknown-signer"}
    both = env.run("--json", "verify-tree", str(mirror.up.path), "-C", "gentoo-devs gentoo-infra")
    assert both.code == 0, both.out
    assert json.loads(both.out)["checked"] == 3
    env.write_config("[tree]\ncategory = gentoo-devs gentoo-infra\n")
    mirror.round("bob")
    assert env.run("verify-tree", str(mirror.up.path)).code == 0
    mirror.round("mallory")
    refused = env.run("--json", "verify-tree", str(mirror.up.path))
    assert refused.code == 1
    bad = json.loads(refused.out)["bad"]
    assert [b["code"] for b in bad] == ["unknown-signer"] and bad[0]["commit"] == mirror.dev


@pytest.mark.slow
def test_gentoo_shaped_sync_repository_three_syncs(env: Any, tmp_path: Path) -> None:
    if _MISSING:
        pytest.skip(_MISSING)
    system = Path("/etc/gitconfig")
    before = system.read_bytes() if system.exists() else None
    install_devs(env, ("alice", "bob"))
    _pin_mirror(env)
    sandbox = PortageSandbox(tmp_path / "portage", env.config)
    mirror = Mirror(tmp_path / "sync", env.keys)
    mirror.round("bob")
    location = sandbox.add_repo("gentoo", f"file://{mirror.up.path}", "gkeys",
                                sync_gkeys_category="gentoo-devs gentoo-infra", sync_gkeys_policy="all")
    for developers in (("alice",), ("bob", "alice"), ("alice",)):
        result = sandbox.sync("gentoo")
        assert result.returncode == 0, result.stdout
        assert head(location) == mirror.up.head()
        assert records(env)[str(location.resolve())]["revision"] == head(location)
        verified = head(location)
        tip = mirror.round(*developers)  # mirror commits between two syncs
    result = sandbox.sync("gentoo")
    assert result.returncode == 0 and head(location) == tip, result.stdout
    verified = tip

    mirror.round("mallory")  # a commit by an unpinned key between two syncs
    result = sandbox.sync("gentoo")
    assert result.returncode != 0, result.stdout
    assert mirror.dev[:12] in result.stdout
    assert head(location) == verified
    assert (system.read_bytes() if system.exists() else None) == before, "/etc/gitconfig was modified"
