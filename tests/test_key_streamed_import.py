"""install-key imports answers into quarantine while the other keys are still being fetched.

One ``gpg --import`` is fed every armored answer as it arrives (``_StreamedImport``); whatever happens
to it (gpg killed by its timeout during a slow fetch, a fetch that raised), the answers are imported
again the usual way, so the verdicts are those of the batch import.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import GkeysEnv

from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.keys.install import _StreamedImport
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.keyio import EarlyExport


def test_answers_fed_from_many_threads_make_one_import(tmp_path: Path, keys: KeyFactory) -> None:
    nicks = ("alice", "bob", "carol", "releng")
    quarantine = GnuPG(tmp_path / "quarantine")
    with _StreamedImport(quarantine) as feed, ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda nick: feed.put(keys.public(nick)), nicks))
    assert feed.report is not None and not feed.report.problem
    assert set(feed.report.imported) == {keys.keys[n].fingerprint for n in nicks}
    assert {k.fingerprint for k in quarantine.list_keys()} == set(feed.report.imported)


def test_a_fetch_that_raises_ends_the_import_and_leaves_no_report(tmp_path: Path, keys: KeyFactory) -> None:
    feed = _StreamedImport(GnuPG(tmp_path / "quarantine"))
    with pytest.raises(RuntimeError), feed:
        feed.put(keys.public("alice"))
        raise RuntimeError("network gone")
    assert feed.report is None  # the caller imports the answers again in one batch


def test_gpg_killed_during_a_slow_fetch_still_installs_every_key(env: GkeysEnv) -> None:
    env.bootstrap()
    env.publish_seeds("gentoo-devs", ("alice", "bob"))
    assert env.run("fetch-seed", "-C", "gentoo-devs").code == 0
    for nick in ("alice", "bob"):
        env.server.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick)
    # Each key costs two requests (WKD, then the keyserver) of 1.2 s: the streamed gpg import is
    # killed by its 2 s timeout before the fetch ends, and the answers are imported again.
    env.write_config("[policy]\ngpg-timeout = 2\n")
    env.server.latency = 1.2
    result = env.run("--json", "install-key", "-C", "gentoo-devs")
    env.server.latency = 0
    assert result.code == 0, result.text
    listed = json.loads(env.run("--json", "list-key", "-C", "gentoo-devs").out)
    assert {k["fingerprint"] for k in listed["keys"] if k["installed"]} == {
        env.keys.keys["alice"].fingerprint, env.keys.keys["bob"].fingerprint}


def test_a_feed_that_got_nothing_reports_no_problem(tmp_path: Path) -> None:
    with _StreamedImport(GnuPG(tmp_path / "quarantine")) as feed:
        pass
    assert feed.report is not None and not feed.report.problem and not feed.report.imported


def test_the_export_made_beside_the_listing_serves_only_the_keys_it_names(tmp_path: Path, keys: KeyFactory) -> None:
    alice, bob = keys.keys["alice"], keys.keys["bob"]
    quarantine = GnuPG(tmp_path / "quarantine")
    quarantine.import_keys(keys.public("alice") + keys.public("bob"))
    early = EarlyExport({alice.fingerprint, bob.fingerprint})
    present = EarlyExport.listing(early, quarantine, {alice.fingerprint})  # gpg reported only alice imported
    assert set(present) == {alice.fingerprint, bob.fingerprint}
    assert early.take({alice.fingerprint, bob.fingerprint}) is None  # found more than it exported: not used
    selection = early.take({alice.fingerprint})
    assert selection is not None and selection.primaries == {alice.fingerprint}
    assert quarantine.show_primaries(selection.data) == {alice.fingerprint}
    early.clear()  # quarantine changes: the export is forgotten
    assert early.take({alice.fingerprint}) is None
