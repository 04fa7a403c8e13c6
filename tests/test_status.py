"""``gkeys status``: categories, key sources and repositories on one screen, from real state (a real rsync sync
through gkeys, a real refresh from the loopback keyserver) and a repos.conf in a temporary root."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rsync_helpers import CATEGORY, RsyncDaemon, make_tree, pin_repository_keys

from gkeys_portage.core.config import load_config
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.openpgp.engine import probe
from gkeys_portage.portage.rsyncsync import RsyncRequest, sync_rsync


@pytest.fixture
def daemon(tmp_path: Path) -> Any:
    served = RsyncDaemon(tmp_path / "rsyncd")
    yield served
    served.close()


def test_status_shows_categories_sources_and_repositories(env: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    pin_repository_keys(env)
    for nick in ("infra", "alice"):
        env.server.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick)
    assert env.run("refresh-key", "-C", CATEGORY).code == 0
    eroot = tmp_path / "root"
    conf = eroot / "etc/portage/repos.conf"
    conf.mkdir(parents=True)
    gentoo = tmp_path / "repos" / "gentoo"
    conf.joinpath("gentoo.conf").write_text(
        f"[gentoo]\nlocation = {gentoo}\nsync-type = gkeys\nsync-uri = {daemon.url}\n"
        f"sync-gkeys-category = {CATEGORY}\n"
        f"[guru]\nlocation = {tmp_path}/repos/guru\nsync-type = git\nsync-uri = https://example.org/guru.git\n"
        f"[plain]\nlocation = {tmp_path}/repos/plain\nsync-type = rsync\nsync-uri = rsync://example.org/x\n"
        "sync-rsync-verify-metamanifest = yes\n")
    daemon.serve(make_tree(tmp_path / "tree", env.keys, "infra"))
    ctx = Gkeys(load_config(env.config))
    assert sync_rsync(ctx, RsyncRequest(gentoo, daemon.url, CATEGORY, quiet=True), lambda *_: None).ok

    result = env.run("--json", "status", "--eroot", str(eroot))
    assert result.code == 0, result.text
    data = json.loads(result.out)
    cat = next(c for c in data["categories"] if c["name"] == CATEGORY)
    assert cat["seeds"] == 2 and cat["keys"] == 2 and cat["next_expiry"] and cat["last_refresh"]
    assert cat["sources"][env.server.url], cat  # the loopback keyserver answered the refresh
    repos = {r["name"]: r for r in data["repositories"]}
    assert repos["gentoo"]["verified_by"] == "gkeys rsync" and repos["gentoo"]["mark"]["source"] == daemon.url
    assert repos["guru"]["verified_by"] == "nothing" and repos["guru"]["mark"] is None
    assert repos["plain"]["verified_by"].startswith("Portage (gemato")
    assert isinstance(data["doctor"]["findings"], int) and data["doctor"]["findings"] > 0  # guru syncs unverified
    assert data["engine"]["name"] == probe().describe() and data["engine"]["error"] is None

    text = env.run("status", "--eroot", str(eroot))
    assert text.code == 0
    assert f"high-water mark {repos['gentoo']['mark']['timestamp']} from {daemon.url}" in text.text
    assert "guru" in text.text and "(nothing)" in text.text and f"{env.gkeys} doctor" in text.text
    assert f"OpenPGP engine: {probe().describe()}" in text.text


def test_status_of_an_empty_root(env: Any, tmp_path: Path) -> None:
    (tmp_path / "root" / "etc/portage").mkdir(parents=True)
    result = env.run("status", "--eroot", str(tmp_path / "root"), "--no-doctor")
    assert result.code == 0, result.text
    assert "gentoo " in result.text and "refreshed never" in result.text and "not run" in result.text
