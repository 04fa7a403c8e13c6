"""For comparison: Portage's own rsync module (gemato, ``sync-rsync-verify-metamanifest = yes``) against a real
``rsync --daemon`` on 127.0.0.1, and the same attack on ``sync-type = gkeys``.

The mirror serves yesterday's genuinely signed tree with a forged, newer ``metadata/timestamp.chk`` (every
Manifest IGNOREs that file, so the signature still verifies).  Portage's only rollback check compares that
unsigned file: it accepts the older tree and an ebuild vanishes.  gkeys compares the signed ``TIMESTAMP``
with the high-water mark in its own state and refuses, leaving the tree as it was.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rsync_helpers import CATEGORY, RsyncDaemon, make_tree, pin_repository_keys

from gkeys_portage.demo.tree_repo import PortageSandbox, sync_module_missing

pytestmark = pytest.mark.slow
_MISSING = sync_module_missing()
RSYNC_OPTS = ("--recursive --links --safe-links --perms --times --omit-dir-times --compress --force --whole-file "
              "--delete --stats --human-readable --timeout=180 --exclude=/distfiles --exclude=/local "
              "--exclude=/packages --exclude=/.git")


@pytest.fixture
def daemon(tmp_path: Path) -> Any:
    served = RsyncDaemon(tmp_path / "rsyncd")
    yield served
    served.close()


def _chk(tree: Path, when: datetime) -> Path:
    (tree / "metadata" / "timestamp.chk").write_text(f"{when:%a, %d %b %Y %H:%M:%S} +0000\n")  # unsigned
    return tree


def _trees(env: Any, tmp_path: Path) -> tuple[Path, Path]:
    now = datetime.now(UTC).replace(microsecond=0)
    today = _chk(make_tree(tmp_path / "today", env.keys, "infra", when=now - timedelta(minutes=10),
                           files={"dev-test/pkg/pkg-2.ebuild": "EAPI=8\nSLOT=0\n"}), now - timedelta(minutes=10))
    yesterday = make_tree(tmp_path / "yesterday", env.keys, "infra", when=now - timedelta(hours=20))
    stamp = (now - timedelta(hours=20)).timestamp()
    for path in yesterday.rglob("*"):  # its files were written yesterday (else rsync's size-and-time check
        os.utime(path, (stamp, stamp))  # could keep today's top Manifest of the same size and second)
    return today, _chk(yesterday, now + timedelta(minutes=1))  # forged: "newer" than today's


@pytest.mark.parametrize("sync_type", ["rsync", "gkeys"])
def test_older_signed_tree_with_forged_timestamp_chk(env: Any, daemon: RsyncDaemon, tmp_path: Path,
                                                     sync_type: str) -> None:
    if _MISSING:
        pytest.skip(_MISSING)
    pin_repository_keys(env)
    today, yesterday = _trees(env, tmp_path)
    portage = PortageSandbox(tmp_path / "portage", env.config)
    if sync_type == "rsync":
        key = tmp_path / "infra.asc"
        key.write_bytes(env.keys.public("infra"))
        with open(portage.etc / "make.conf", "a") as conf:  # Gentoo's make.globals value (not in PyPI portage)
            conf.write(f'PORTAGE_RSYNC_OPTS="{RSYNC_OPTS}"\nPORTAGE_RSYNC_RETRIES="0"\n')
        location = portage.add_repo("gentoo", daemon.url, "rsync", sync_rsync_verify_metamanifest="yes",
                                    sync_openpgp_key_path=str(key), sync_openpgp_key_refresh="no")
    else:
        location = portage.add_repo("gentoo", daemon.url, "gkeys", sync_gkeys_category=CATEGORY)
    daemon.serve(today)
    result = portage.sync("gentoo")
    assert result.returncode == 0, result.stdout
    assert (location / "dev-test/pkg/pkg-2.ebuild").is_file()

    daemon.serve(yesterday)
    result = portage.sync("gentoo")
    if sync_type == "rsync":  # what Portage does today: the rollback lands
        assert result.returncode == 0, result.stdout
        assert not (location / "dev-test/pkg/pkg-2.ebuild").exists()
    else:
        assert result.returncode != 0 and "older than" in result.stdout, result.stdout
        assert (location / "dev-test/pkg/pkg-2.ebuild").is_file()
