"""A refresh where one key source failed is not a full refresh (real loopback servers: one down, one up).

The attack: a network attacker blocks the one source that carries a revocation (the keyserver) while WKD
answers with the old key.  Before, the refresh was recorded as successful, so ``[policy] max-refresh-age``
never fired and the revocation was delayed for ever.  Now each configured source's last answer is recorded
on its own; a source that fails (network error, 5xx; a clean 404 is an answer) warns, naming it, and once
it has not answered for ``max-refresh-age`` the refresh fails (exit 3) naming the source and the fix.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from conftest import GkeysEnv

from gkeys_portage.demo.world import LoopbackServer, RequestInfo, Response
from gkeys_portage.keys.sources import wkd_hash
from gkeys_portage.openpgp.gnupg import GnuPG

CATEGORY = "gentoo-devs"
NICKS = ("alice", "bob")


@pytest.fixture
def keyserver() -> Iterator[LoopbackServer]:
    """A second loopback server: the keyserver, separate from the WKD host."""
    srv = LoopbackServer()
    yield srv
    srv.close()


def _unavailable(info: RequestInfo) -> Response:
    return Response(503, b"Service Unavailable")


def _only(nick_fpr: str) -> object:
    """A keyserver that fails for every key but one (an attacker blocking the lookups that matter)."""
    def respond(info: RequestInfo) -> Response:
        search = info.query.get("search", [""])[0].upper().removeprefix("0X")
        return Response(503, b"busy") if search != nick_fpr else Response(404, b"No results found")
    return respond


@pytest.fixture
def installed(env: GkeysEnv, keyserver: LoopbackServer) -> GkeysEnv:
    """gentoo-devs (alice, bob) installed from WKD; the keyserver is the second server."""
    env.bootstrap()
    env.publish_seeds(CATEGORY, NICKS)
    assert env.run("fetch-seed", "-C", CATEGORY).code == 0
    env.write_config(keyservers=keyserver.url)
    for nick in NICKS:
        env.server.publish_wkd(f"{nick}@gentoo.org", env.keys.public(nick, armor=False))
        keyserver.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick)
    result = env.run("install-key", "-C", CATEGORY)
    assert result.code == 0, result.text
    return env


def _record(env: GkeysEnv, name: str) -> dict[str, object]:
    path = env.state / "state" / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _age_records(env: GkeysEnv, days: float) -> None:
    """Make every refresh record ``days`` old (as if the last answers were that long ago)."""
    then = time.time() - days * 86400
    for name in ("refresh", "refresh-sources"):
        path = env.state / "state" / f"{name}.json"
        data = _record(env, name)
        if name == "refresh":
            data[CATEGORY] = then
        elif isinstance(data.get(CATEGORY), dict):
            data[CATEGORY] = {source: then for source in data[CATEGORY]}  # type: ignore[union-attr]
        path.write_text(json.dumps(data))


def _revoke_on(env: GkeysEnv, keyserver: LoopbackServer, nick: str) -> None:
    """The keyserver (only) learns ``nick``'s revocation."""
    scratch = GnuPG(env.root / f"scratch-{nick}")
    scratch.import_keys(env.keys.public(nick))
    scratch.import_keys(env.keys.revocation(nick))
    keyserver.hkp[env.keys.keys[nick].fingerprint] = scratch.export_keys([env.keys.keys[nick].fingerprint])


def _bob_is_revoked(env: GkeysEnv) -> bool:
    signed = env.root / "doc"
    signed.write_bytes(b"doc")
    (env.root / "doc.asc").write_bytes(env.keys.sign("bob", signed))
    result = env.run("verify", "-F", str(signed), "-C", CATEGORY)
    return result.code == 1 and "revoked" in result.text


@pytest.mark.parametrize("fault", ["down", "503", "blocked-for-bob"])
def test_a_refresh_with_a_failed_source_warns_and_is_not_a_full_refresh(
        installed: GkeysEnv, keyserver: LoopbackServer, fault: str) -> None:
    env = installed
    if fault == "down":
        env.write_config(keyservers="http://127.0.0.1:1")
        dead = "http://127.0.0.1:1"
    else:
        dead = keyserver.url
        keyserver.routes["/pks/lookup"] = (  # type: ignore[assignment]
            _unavailable if fault == "503" else _only(env.keys.keys["alice"].fingerprint))
    _revoke_on(env, keyserver, "bob")  # the revocation the attacker keeps out
    _age_records(env, 2)  # the last full refresh (the install) was two days ago: a refresh is due
    before = _record(env, "refresh")
    result = env.run("refresh-key", "-C", CATEGORY)
    assert result.code == 0, result.text  # the keys WKD brought are used; nothing blocks yet
    assert f"refresh failed for {dead}" in result.err, result.text
    assert "keys refreshed" not in result.out
    assert _record(env, "refresh") == before  # not recorded as a full refresh
    sources = _record(env, "refresh-sources")[CATEGORY]
    assert "wkd gentoo.org" in sources and dead not in sources  # type: ignore[operator]
    again = env.run("refresh-key", "-C", CATEGORY)  # still due: not "refreshed recently"
    assert "skipped" not in again.text and f"refresh failed for {dead}" in again.err, again.text
    assert not _bob_is_revoked(env)


def test_a_source_silent_beyond_max_refresh_age_fails_naming_it_and_the_fix(
        installed: GkeysEnv, keyserver: LoopbackServer) -> None:
    env = installed
    keyserver.routes["/pks/lookup"] = _unavailable  # type: ignore[assignment]
    _revoke_on(env, keyserver, "bob")
    assert env.run("refresh-key", "-C", CATEGORY, "--force").code == 0  # WKD recorded, keyserver not
    _age_records(env, 40)
    failed = env.run("refresh-key", "-C", CATEGORY, "--force")
    assert failed.code == 3, failed.text
    lines = [line for line in failed.err.splitlines() if line.strip()]
    assert len(lines) == 1, failed.err
    line = lines[0]
    assert keyserver.url in line and "40 days ago" in line, line
    assert f"{env.gkeys} refresh-key -C {CATEGORY} --force" in line and "'[sources] keyservers'" in line, line
    assert "wkd gentoo.org" not in line  # WKD answered: only the silent source is named
    # The keyserver answers again: the revocation applies and the refresh is full again.
    keyserver.routes.clear()
    healed = env.run("refresh-key", "-C", CATEGORY, "--force")
    assert healed.code == 0 and "keys refreshed" in healed.out, healed.text
    assert _record(env, "refresh-sources")[CATEGORY][keyserver.url] > time.time() - 60  # type: ignore[index]
    assert _bob_is_revoked(env)


def test_dropping_a_dead_source_from_the_config_unblocks(installed: GkeysEnv, keyserver: LoopbackServer) -> None:
    """Never blocked for ever: the line the error names (drop the source) makes the next refresh pass."""
    env = installed
    env.write_config(keyservers="http://127.0.0.1:1")
    assert env.run("refresh-key", "-C", CATEGORY, "--force").code == 0
    _age_records(env, 40)
    assert env.run("refresh-key", "-C", CATEGORY, "--force").code == 3
    env.write_config(keyservers="")
    result = env.run("refresh-key", "-C", CATEGORY, "--force")
    assert result.code == 0 and "keys refreshed" in result.out, result.text
    assert _record(env, "refresh")[CATEGORY] > time.time() - 60  # type: ignore[operator]


def test_a_clean_404_is_an_answer(installed: GkeysEnv, keyserver: LoopbackServer) -> None:
    """A keyserver that does not have the keys (404) answered: the refresh is full, no warning."""
    env = installed
    keyserver.hkp.clear()
    result = env.run("refresh-key", "-C", CATEGORY, "--force")
    assert result.code == 0 and "keys refreshed" in result.out and "refresh failed" not in result.text, result.text
    assert _record(env, "refresh")[CATEGORY] > time.time() - 60  # type: ignore[operator]
    assert keyserver.url in _record(env, "refresh-sources")[CATEGORY]  # type: ignore[operator]


def test_wkd_answering_by_one_method_is_an_answer(installed: GkeysEnv) -> None:
    """The advanced WKD host does not exist for many domains: the direct method answering is enough
    (a name under .invalid never resolves: DNS says NXDOMAIN, offline too)."""
    env = installed
    text = "".join("wkd-advanced-url = http://openpgpkey.{domain}.invalid/{domain}\n"
                   if line.startswith("wkd-advanced-url")
                   else line for line in env.config.read_text().splitlines(keepends=True))
    env.config.write_text(text)
    for nick in NICKS:
        env.server.publish_wkd(f"{nick}@gentoo.org", env.keys.public(nick, armor=False), method="direct")
    result = env.run("refresh-key", "-C", CATEGORY, "--force")
    assert result.code == 0 and "refresh failed" not in result.text, result.text
    assert "wkd gentoo.org" in _record(env, "refresh-sources")[CATEGORY]  # type: ignore[operator]


def test_a_key_only_the_failed_source_has_is_named_with_the_source(installed: GkeysEnv,
                                                                  keyserver: LoopbackServer) -> None:
    """bob is not on WKD (a clean 404) and the keyserver fails: one warning for the source (and bob's
    line), judged by the keyserver's age like any other key."""
    env = installed
    env.server.files = {path: data for path, data in env.server.files.items() if "/hu/" not in path
                        or not path.endswith(wkd_hash("bob"))}
    keyserver.routes["/pks/lookup"] = _unavailable  # type: ignore[assignment]
    result = env.run("refresh-key", "-C", CATEGORY, "--force")
    assert result.code == 0, result.text
    assert result.err.count("refresh failed") == 1 and f"refresh failed for {keyserver.url}" in result.err, result.err
    assert "bob" in result.err
    _age_records(env, 40)
    failed = env.run("refresh-key", "-C", CATEGORY, "--force")
    assert failed.code == 3 and keyserver.url in failed.err, failed.text



def test_sources_failing_in_turn_still_add_up_to_a_refresh(installed: GkeysEnv, keyserver: LoopbackServer) -> None:
    """The keyserver fails one day, WKD the next: every source answered within the two runs, so the keys count
    as refreshed as of the older answer (``refresh-interval`` and ``gkeys doctor`` see it), with a warning each
    time; before, the full-refresh record never moved again."""
    env = installed
    _age_records(env, 5)
    full_before = _record(env, "refresh")[CATEGORY]
    keyserver.routes["/pks/lookup"] = _unavailable  # type: ignore[assignment]
    first = env.run("refresh-key", "-C", CATEGORY)
    assert first.code == 0 and f"refresh failed for {keyserver.url}" in first.err, first.text
    assert _record(env, "refresh")[CATEGORY] == full_before  # WKD alone: not complete yet
    del keyserver.routes["/pks/lookup"]
    for nick in NICKS:  # both WKD methods fail (one clean 404 would count as an answer)
        for prefix in ("/wkd-advanced/gentoo.org/.well-known/openpgpkey/gentoo.org", "/wkd-direct/gentoo.org/"
                       ".well-known/openpgpkey"):
            env.server.routes[f"{prefix}/hu/{wkd_hash(nick)}"] = _unavailable  # type: ignore[assignment]
    second = env.run("refresh-key", "-C", CATEGORY, "--force")
    assert second.code == 0 and "refresh failed for wkd gentoo.org" in second.err, second.text
    sources = _record(env, "refresh-sources")[CATEGORY]
    assert set(sources) == {"wkd gentoo.org", keyserver.url}  # type: ignore[arg-type]
    full_after = _record(env, "refresh")[CATEGORY]
    assert full_after == min(sources.values()) > full_before  # type: ignore[union-attr,operator]


def test_refreshing_one_nick_does_not_count_as_a_refresh_of_the_category(
        installed: GkeysEnv, keyserver: LoopbackServer) -> None:
    """``refresh-key -n alice`` fetches alice's key only: it must not make the category's next refresh
    "refreshed recently" (bob's revocation, on the keyserver, would wait for refresh-interval)."""
    env = installed
    _revoke_on(env, keyserver, "bob")
    _age_records(env, 2)  # a refresh is due
    before = (_record(env, "refresh"), _record(env, "refresh-sources"))
    assert env.run("refresh-key", "-C", CATEGORY, "-n", "alice").code == 0
    assert (_record(env, "refresh"), _record(env, "refresh-sources")) == before
    result = env.run("refresh-key", "-C", CATEGORY)
    assert result.code == 0 and "skipped" not in result.text, result.text
    assert _bob_is_revoked(env)



def test_a_refresh_record_that_is_not_an_object_counts_as_never_refreshed(installed: GkeysEnv) -> None:
    """A hand-edited ``state/refresh.json`` holding ``[]`` failed every refresh ("internal error:
    AttributeError") for ever; now it counts as no record (refresh due) and the refresh rewrites it."""
    env = installed
    path = env.state / "state" / "refresh.json"
    path.write_text("[]\n")
    result = env.run("refresh-key", "-C", CATEGORY)
    assert result.code == 0 and "internal error" not in result.text, result.text
    assert isinstance(_record(env, "refresh").get(CATEGORY), float)


def test_installing_one_nick_does_not_count_as_a_refresh_of_the_category(
        installed: GkeysEnv, keyserver: LoopbackServer) -> None:
    """``install-key -n alice`` fetches alice's key only: like ``refresh-key -n``, it must not make the
    category's next refresh "refreshed recently" while bob's revocation waits on the keyserver."""
    env = installed
    _revoke_on(env, keyserver, "bob")
    _age_records(env, 2)  # a refresh is due
    before = _record(env, "refresh")
    assert env.run("install-key", "-C", CATEGORY, "-n", "alice").code == 0
    assert _record(env, "refresh") == before
    result = env.run("refresh-key", "-C", CATEGORY)
    assert result.code == 0 and "skipped" not in result.text, result.text
    assert _bob_is_revoked(env)
