"""Revocations reach the keyring whatever the key sources do (issue 23 items 6, 7, 9, 16).

Real loopback servers: WKD on one, the keyserver on another (down, slow, dripping); real gpg.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from binpkg_helpers import install_gentoo, public_dir  # noqa: F401 - a fixture
from conftest import GkeysEnv
from test_refresh_sources import CATEGORY, _bob_is_revoked, _record, installed, keyserver  # noqa: F401 - fixtures

from gkeys_portage.core.errors import NetworkError
from gkeys_portage.core.http import HostNotFoundError, HttpClient
from gkeys_portage.demo.world import LoopbackServer, RequestInfo, Response
from gkeys_portage.openpgp.gnupg import GnuPG

DRIPPED = b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n" + b"A" * 40
DRIP_SECONDS = len(DRIPPED) * 0.5  # 39 s: a request that is not cut ends no sooner
#: a cut request ends within this many times its budget (headroom for a loaded machine), still far short of
#: the drip: the bounds below tell "cut" from "waited for the whole answer", not a fast machine from a slow one
HEADROOM = 5


def _drip(info: RequestInfo) -> Response:
    """A keyserver that sends its answer a byte every half second (each read well within the timeout)."""
    return Response(200, DRIPPED, drip=0.5)


def _cut_in_time(started: float, budget: float) -> None:
    elapsed = time.monotonic() - started
    assert budget * HEADROOM < DRIP_SECONDS / 2  # the bound still tells a cut request from a whole answer
    assert elapsed < budget * HEADROOM, f"{elapsed:.1f} s for a request with a {budget} s budget"


def _revoked(env: GkeysEnv, nick: str) -> bytes:
    scratch = GnuPG(env.root / f"scratch-{nick}")
    scratch.import_keys(env.keys.public(nick))
    scratch.import_keys(env.keys.revocation(nick))
    data = scratch.export_keys([env.keys.keys[nick].fingerprint], armor=False)
    scratch.close()
    return data


def test_a_dripping_server_is_cut_at_the_total_deadline(server: LoopbackServer) -> None:
    server.routes["/slow"] = _drip
    client = HttpClient(timeout=1.0, retries=1, backoff=0.05)
    started = time.monotonic()
    with pytest.raises(NetworkError, match="too slow"):
        client.get(server.url + "/slow")
    _cut_in_time(started, client.request_budget())
    started = time.monotonic()
    with pytest.raises(NetworkError, match="in time"):
        client.get(server.url + "/slow", deadline=time.monotonic() + 0.5)
    _cut_in_time(started, 0.5)


def test_a_dripping_keyserver_does_not_stall_the_refresh_nor_hide_wkds_revocation(
        installed: GkeysEnv, keyserver: LoopbackServer) -> None:  # noqa: F811 - fixtures
    env = installed
    keyserver.routes["/pks/lookup"] = _drip
    env.server.publish_wkd("bob@gentoo.org", _revoked(env, "bob"))
    started = time.monotonic()
    result = env.run("refresh-key", "-C", CATEGORY, "--force")
    elapsed = time.monotonic() - started
    assert result.code == 0, result.text
    # the budget is 2 s x 2 attempts; an answer waited for whole would take the drip's 39 s
    assert elapsed < 4 * HEADROOM < DRIP_SECONDS, f"refresh took {elapsed:.0f}s"
    assert f"refresh failed for {keyserver.url}" in result.err, result.text
    assert keyserver.url not in _record(env, "refresh-sources")[CATEGORY]  # type: ignore[operator]
    assert _bob_is_revoked(env)


def _offline(env: GkeysEnv) -> None:
    """Every key source down (a machine without network): keyserver and both WKD hosts refuse."""
    env.write_config(keyservers="http://127.0.0.1:1")
    text = env.config.read_text()
    for name in ("wkd-advanced-url", "wkd-direct-url"):
        text = "".join(f"{name} = http://127.0.0.1:1/{{domain}}\n" if line.startswith(name) else line
                       for line in text.splitlines(keepends=True))
    env.config.write_text(text)


def test_silence_counts_from_the_install_not_the_epoch(env: GkeysEnv) -> None:
    """Keys imported from a file offline: the first refresh warns (exit 0) instead of failing with "has
    never answered ... beyond max-refresh-age", and the advice is to retry, not to drop the sources."""
    _offline(env)
    env.pin_key("devs", "alice", "alice")
    result = env.run("refresh-key", "-C", "devs")
    assert result.code == 0, result.text
    assert "refresh failed" in result.err and "asked again on the next refresh" in result.err, result.text
    assert "never answered" not in result.text and "wkd = no" not in result.text
    assert "remove " not in result.text and "max-refresh-age" not in result.text
    # The limit still holds, counted from the install.
    record = env.state / "state" / "installed.json"
    data = json.loads(record.read_text())
    data["devs"] = time.time() - 40 * 86400
    record.write_text(json.dumps(data))
    late = env.run("refresh-key", "-C", "devs")
    assert late.code == 3 and "max-refresh-age" in late.err and "40 days" in late.err, late.text


def test_install_and_update_seed_record_no_refresh(installed: GkeysEnv, keyserver: LoopbackServer) -> None:  # noqa: F811
    """install-key (and update-seed, which installs) stop at the first source that has each key: the next
    refresh-key must still ask every source, not skip as "refreshed recently" while a revocation waits."""
    env = installed  # install-key just ran
    assert CATEGORY not in _record(env, "refresh")
    scratch = env.root / "bob-revoked.asc"
    scratch.write_bytes(_revoked(env, "bob"))
    keyserver.hkp[env.keys.keys["bob"].fingerprint] = scratch.read_bytes()
    assert env.run("install-key", "-C", CATEGORY).code == 0  # run daily, as a cron job would
    assert CATEGORY not in _record(env, "refresh")
    result = env.run("refresh-key", "-C", CATEGORY)
    assert result.code == 0 and "skipped" not in result.text, result.text
    assert _bob_is_revoked(env)
    assert CATEGORY in _record(env, "refresh")  # the every-source refresh records itself


def test_the_http_layer_tells_a_missing_host_from_an_unreachable_one() -> None:
    client = HttpClient(timeout=2.0, retries=1, backoff=0.05)
    with pytest.raises(HostNotFoundError):
        client.get("http://openpgpkey.gentoo.org.invalid/.well-known/openpgpkey/policy")
    with pytest.raises(NetworkError) as down:
        client.get("http://127.0.0.1:1/.well-known/openpgpkey/policy")  # exists, but refuses: an outage
    assert not isinstance(down.value, HostNotFoundError)


def _wkd_advanced(env: GkeysEnv, template: str) -> None:
    env.config.write_text("".join(f"wkd-advanced-url = {template}\n" if line.startswith("wkd-advanced-url")
                                  else line for line in env.config.read_text().splitlines(keepends=True)))


def test_an_unreachable_advanced_wkd_host_is_no_answer_whatever_the_direct_method_says(
        installed: GkeysEnv, keyserver: LoopbackServer) -> None:  # noqa: F811 - fixtures
    """The advanced host refuses (blocked) and the domain answers 404 by the direct method: WKD did not
    answer (the revocation may wait there), so the refresh warns and is not recorded as full."""
    env = installed
    _wkd_advanced(env, "http://127.0.0.1:1/{domain}")
    env.server.files.clear()  # the direct method: 404 for everyone
    before = _record(env, "refresh")
    result = env.run("refresh-key", "-C", CATEGORY, "--force")
    assert result.code == 0, result.text
    assert "refresh failed for wkd gentoo.org" in result.err and "WKD advanced method" in result.err, result.text
    assert _record(env, "refresh") == before
    assert "wkd gentoo.org" not in _record(env, "refresh-sources").get(CATEGORY, {})  # type: ignore[operator]
    # Where the advanced host does not exist, the direct method's 404 is an answer.
    _wkd_advanced(env, "http://openpgpkey.{domain}.invalid/{domain}")
    result = env.run("refresh-key", "-C", CATEGORY, "--force")
    assert result.code == 0 and "refresh failed" not in result.text, result.text
    assert "wkd gentoo.org" in _record(env, "refresh-sources")[CATEGORY]  # type: ignore[operator]


def test_binpkg_keyring_builds_offline_after_an_import(env: GkeysEnv, public_dir: Path) -> None:  # noqa: F811
    """Keys imported from files, no network: the binary-package home is built (the refresh warns)."""
    _offline(env)
    install_gentoo(env)
    result = env.run("binpkg-keyring", "--gnupghome", str(public_dir / "gnupg"))
    assert result.code == 0 and "refresh failed" in result.text, result.text
    assert (public_dir / "gnupg" / "pubring.kbx").exists()


def test_a_dripping_answer_to_an_upload_is_cut_too(server: LoopbackServer) -> None:
    server.routes["/pks/add"] = _drip
    client = HttpClient(timeout=1.0, retries=0, backoff=0.05)
    started = time.monotonic()
    with pytest.raises(NetworkError, match="too slow"):
        client.post_form(server.url + "/pks/add", {"keytext": "x"})
    _cut_in_time(started, client.request_budget())
