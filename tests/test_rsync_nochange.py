"""Issue 24, speed goal: a sync that changes nothing does not hash the tree again, but still checks the top
Manifest's signature against today's keyring and the freshness rules; any change falls back to the full
gemato pass."""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rsync_helpers import CATEGORY, RsyncDaemon, make_tree, pin_repository_keys
from test_rsync_sync import Syncer, _refused

from gkeys_portage.core.config import load_config
from gkeys_portage.demo.world import past
from gkeys_portage.keys.context import Gkeys

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/rsync") and shutil.which("rsync") is None,
                                reason="rsync is not installed")
FAST = "the files not hashed again"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[RsyncDaemon]:
    served = RsyncDaemon(tmp_path / "rsyncd")
    yield served
    served.close()


@pytest.fixture
def synced(env: Any, daemon: RsyncDaemon, tmp_path: Path) -> tuple[Syncer, Path, Path]:
    """A location synced once (in full) from a served tree; returns the syncer, the location and the tree."""
    pinned = pin_repository_keys(env)
    served = make_tree(tmp_path / "served", pinned.keys, "infra", when=past(0.1))
    daemon.serve(served)
    location = tmp_path / "repos" / "gentoo"
    sync = Syncer(pinned, location, daemon.url)
    outcome = sync()
    assert outcome.ok and not any(FAST in line for line in sync.lines), sync.lines
    return sync, location, served


def test_an_unchanged_tree_is_not_hashed_again(synced: tuple[Syncer, Path, Path]) -> None:
    sync, location, _served = synced
    outcome = sync()
    assert outcome.ok and not outcome.changed, sync.lines
    assert any(FAST in line for line in sync.lines), sync.lines
    assert (location / "dev-test/pkg/pkg-1.ebuild").is_file()


def test_an_unchanged_tree_is_neither_staged_nor_swapped(synced: tuple[Syncer, Path, Path]) -> None:
    """The dry run decides: no staging tree beside the location, the live directory is the same directory."""
    sync, location, _served = synced
    before = location.stat().st_ino
    outcome = sync()
    assert outcome.ok and location.stat().st_ino == before, sync.lines
    assert not [p for p in location.parent.iterdir() if p.name.startswith(f".{location.name}.gkeys")]


def test_a_file_only_the_live_tree_has_takes_the_full_path(synced: tuple[Syncer, Path, Path]) -> None:
    """rsync would delete it: not "unchanged"; the full sync removes it (the mirror's tree, verified)."""
    sync, location, _served = synced
    (location / "dev-test/pkg/added-by-hand.ebuild").write_text("not in any Manifest\n")
    outcome = sync()
    assert outcome.ok and not any(FAST in line for line in sync.lines), sync.lines
    assert not (location / "dev-test/pkg/added-by-hand.ebuild").exists()


def test_a_live_file_edited_takes_the_full_path_and_is_restored(synced: tuple[Syncer, Path, Path]) -> None:
    sync, location, served = synced
    ebuild = location / "dev-test/pkg/pkg-1.ebuild"
    ebuild.write_text("edited in the live tree\n")
    outcome = sync()
    assert outcome.ok and not any(FAST in line for line in sync.lines), sync.lines
    assert ebuild.read_bytes() == (served / "dev-test/pkg/pkg-1.ebuild").read_bytes()


def test_a_changed_file_under_the_same_manifest_still_refuses(synced: tuple[Syncer, Path, Path]) -> None:
    sync, location, served = synced
    (served / "dev-test/pkg/pkg-1.ebuild").write_text("tampered on the mirror\n")
    _refused(sync, location, "does not match")


def test_a_file_deleted_under_the_same_manifest_still_refuses(synced: tuple[Syncer, Path, Path]) -> None:
    sync, location, served = synced
    (served / "dev-test/pkg/pkg-1.ebuild").unlink()
    _refused(sync, location, "is missing")


def test_a_changed_manifest_is_verified_in_full(synced: tuple[Syncer, Path, Path], env: Any) -> None:
    sync, _location, served = synced
    times = {path: path.stat().st_mtime for path in served.rglob("*") if not path.name.startswith("Manifest")}
    make_tree(served, env.keys, "infra", when=past(0.05))  # re-signed later: a new top Manifest ...
    for path, mtime in times.items():  # ... over the very same files (rsync links them all)
        os.utime(path, (mtime, mtime))
    outcome = sync()
    assert outcome.ok and outcome.changed and not any(FAST in line for line in sync.lines), sync.lines


def test_a_key_revoked_since_still_refuses_an_unchanged_tree(synced: tuple[Syncer, Path, Path], env: Any) -> None:
    sync, location, _served = synced
    ctx = Gkeys(load_config(env.config))
    with ctx.lock, ctx.keyring(CATEGORY).update() as staging:  # the key refresh brings its revocation
        staging.import_keys(env.keys.revocation("infra"))
    _refused(Syncer(env, location, sync.request.uri), location, "revoked")


def test_the_maximum_age_still_applies_to_an_unchanged_tree(synced: tuple[Syncer, Path, Path]) -> None:
    sync, location, _served = synced
    sync.request = dataclasses.replace(sync.request, max_age_hours=0.01)
    _refused(sync, location, "more than the maximum")


def test_gemato_runs_the_engine_gkeys_runs(env: Any, daemon: RsyncDaemon, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """One engine decides every verdict: gemato's gpg calls go to ``$GKEYS_GPG``, not to ``gpg`` from PATH."""
    engine = os.environ.get("GKEYS_GPG") or shutil.which("gpg") or "gpg"
    calls = tmp_path / "calls"
    wrapper = tmp_path / "engine"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {engine} "$@"\n')
    wrapper.chmod(0o755)
    pinned = pin_repository_keys(env)
    daemon.serve(make_tree(tmp_path / "served", pinned.keys, "infra", when=past(0.1)))
    monkeypatch.setenv("GKEYS_GPG", str(wrapper))
    sync = Syncer(pinned, tmp_path / "repos" / "gentoo", daemon.url)
    assert sync().ok, sync.lines
    gemato_calls = [line for line in calls.read_text().splitlines()
                    if "--auto-check-trustdb" in line or "--import-ownertrust" in line]  # only gemato runs these
    assert gemato_calls, calls.read_text()
