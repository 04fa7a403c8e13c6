"""install-key / import-key / refresh-key: fingerprint pinning, sources, network faults, crash safety."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PROJECT, GkeysEnv
from kill_helpers import kill_group_during

from gkeys_portage.demo.world import RequestInfo, Response


@pytest.fixture
def seeded(env: GkeysEnv) -> GkeysEnv:
    """Bootstrapped root with a fetched gentoo-devs seed (alice, bob) and no developer keys yet."""
    env.bootstrap()
    env.publish_seeds("gentoo-devs", ("alice", "bob"))
    assert env.run("fetch-seed", "-C", "gentoo-devs").code == 0
    return env


def _installed(env: GkeysEnv, category: str = "gentoo-devs") -> set[str]:
    listed = json.loads(env.run("--json", "list-key", "-C", category).out)
    return {k["fingerprint"] for k in listed["keys"] if k["installed"]}


def _exported(env: GkeysEnv, category: str = "gentoo-devs") -> bytes:
    path = env.state / "keyrings" / f"{category}.asc"
    return path.read_bytes() if path.exists() else b""


def test_keyserver_substitutes_another_key(seeded: GkeysEnv) -> None:
    env = seeded
    alice = env.keys.keys["alice"].fingerprint
    env.server.hkp[alice] = env.keys.public("mallory")
    env.server.hkp[env.keys.keys["bob"].fingerprint] = env.keys.public("bob")
    result = env.run("install-key", "-C", "gentoo-devs")
    assert result.code == 1
    assert "Fingerprint mismatch: alice" in result.text
    assert env.keys.keys["mallory"].fingerprint in result.text  # reported as dropped
    assert _installed(env) == {env.keys.keys["bob"].fingerprint}


def test_extra_keys_alongside_the_right_one_are_dropped(seeded: GkeysEnv) -> None:
    env = seeded
    for nick in ("alice", "bob"):
        env.server.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick, "mallory", "carol")
    result = env.run("install-key", "-C", "gentoo-devs")
    assert result.code == 0, result.text
    assert _installed(env) == {env.keys.keys["alice"].fingerprint, env.keys.keys["bob"].fingerprint}
    # The exported keyring for Portage holds exactly the pinned keys too.
    check = env.root / "check-home"
    from gkeys_portage.openpgp.gnupg import GnuPG

    imported = set(GnuPG(check).import_keys(_exported(env)))
    assert imported == {env.keys.keys["alice"].fingerprint, env.keys.keys["bob"].fingerprint}


def test_wkd_is_tried_before_the_keyserver_and_falls_back(seeded: GkeysEnv) -> None:
    env = seeded
    env.server.publish_wkd("alice@gentoo.org", env.keys.public("alice", armor=False))
    env.server.publish_wkd("bob@gentoo.org", env.keys.public("mallory", armor=False), method="direct")
    env.server.hkp[env.keys.keys["bob"].fingerprint] = env.keys.public("bob")
    result = env.run("--json", "install-key", "-C", "gentoo-devs")
    assert result.code == 0, result.out
    sources = {k["nick"]: k["source"] for k in json.loads(result.out)["keys"]}
    assert sources["alice"].startswith("wkd-advanced")
    assert sources["bob"].startswith("keyserver")  # WKD direct answered with the wrong key: next source


def test_second_keyserver_is_used_when_the_first_is_down(seeded: GkeysEnv) -> None:
    env = seeded
    env.write_config(keyservers=f"http://127.0.0.1:1 {env.server.url}")
    for nick in ("alice", "bob"):
        env.server.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick)
    result = env.run("install-key", "-C", "gentoo-devs")
    assert result.code == 0, result.text
    assert len(_installed(env)) == 2


def _fault(kind: str) -> object:
    def respond(info: RequestInfo) -> Response:
        if kind == "500":
            return Response(500, b"oops")
        if kind == "slow":
            return Response(200, b"late", stall=5)
        return Response(200, os.urandom(700))
    return respond


@pytest.mark.parametrize("kind", ["down", "500", "slow", "garbage"])
def test_keyserver_failures_exit_3_and_change_nothing(seeded: GkeysEnv, kind: str) -> None:
    env = seeded
    env.write_config("\n[policy]\n", keyservers="http://127.0.0.1:1" if kind == "down" else None)
    conf = env.config.read_text().replace("wkd = yes", "wkd = no")
    env.config.write_text(conf)
    if kind != "down":
        env.server.routes["/pks/lookup"] = _fault(kind)  # type: ignore[assignment]
    before = env.snapshot()
    started = time.monotonic()
    result = env.run("install-key", "-C", "gentoo-devs")
    assert result.code == 3, result.text
    assert "Traceback" not in result.text
    assert "could not reach any key source" in result.text
    assert env.snapshot() == before
    assert time.monotonic() - started < 30  # timeouts are enforced (generous bound, not a benchmark)


def test_import_key_checks_the_fingerprint(seeded: GkeysEnv) -> None:
    env = seeded
    wrong = env.root / "wrong.asc"
    wrong.write_bytes(env.keys.public("mallory"))
    result = env.run("import-key", "-C", "gentoo-devs", "-n", "alice", "-F", str(wrong))
    assert result.code == 1 and "mismatch" in result.text.lower()
    assert _installed(env) == set()
    right = env.root / "right.asc"
    right.write_bytes(env.keys.public("alice", "mallory"))
    assert env.run("import-key", "-C", "gentoo-devs", "-n", "alice", "-F", str(right)).code == 0
    assert _installed(env) == {env.keys.keys["alice"].fingerprint}
    url = env.server.publish("keys/bob.asc", env.keys.public("bob"))
    assert env.run("import-key", "-C", "gentoo-devs", "-n", "bob", "-F", url).code == 0
    garbage = env.root / "garbage.asc"
    garbage.write_bytes(b"not a key")
    assert env.run("import-key", "-C", "gentoo-devs", "-n", "bob", "-F", str(garbage)).code == 3
    assert env.run("import-key", "-C", "gentoo-devs", "-n", "nobody", "-F", str(right)).code == 2


def test_refresh_applies_a_revocation_and_respects_the_interval(seeded: GkeysEnv) -> None:
    env = seeded
    for nick in ("alice", "bob"):
        env.server.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick)
    assert env.run("install-key", "-C", "gentoo-devs").code == 0
    first = env.run("refresh-key", "-C", "gentoo-devs")  # an install is no refresh: this one runs
    assert first.code == 0 and "skipped" not in first.text, first.text
    skipped = env.run("refresh-key", "-C", "gentoo-devs")
    assert skipped.code == 0 and "skipped" in skipped.text
    # The keyserver now knows that bob's key is revoked.
    from gkeys_portage.openpgp.gnupg import GnuPG

    scratch = GnuPG(env.root / "scratch")
    scratch.import_keys(env.keys.public("bob"))
    scratch.import_keys(env.keys.revocation("bob"))
    env.server.hkp[env.keys.keys["bob"].fingerprint] = scratch.export_keys([env.keys.keys["bob"].fingerprint])
    result = env.run("refresh-key", "-C", "gentoo-devs", "--force")
    assert result.code == 0, result.text
    signed = env.root / "doc"
    signed.write_bytes(b"doc")
    (env.root / "doc.asc").write_bytes(env.keys.sign("bob", signed))
    refused = env.run("verify", "-F", str(signed), "-C", "gentoo-devs")
    assert refused.code == 1 and "revoked" in refused.text


def test_failed_refresh_warns_until_max_age(seeded: GkeysEnv) -> None:
    env = seeded
    for nick in ("alice", "bob"):
        env.server.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick)
    assert env.run("install-key", "-C", "gentoo-devs").code == 0
    env.server.routes["/pks/lookup"] = _fault("500")  # type: ignore[assignment]
    conf = env.config.read_text().replace("wkd = yes", "wkd = no")
    env.config.write_text(conf)
    warned = env.run("refresh-key", "-C", "gentoo-devs", "--force")
    assert warned.code == 0 and "refresh failed" in warned.text
    record = env.state / "state" / "refresh.json"  # (install-key records no refresh: it asks one source)
    data = json.loads(record.read_text()) if record.exists() else {}
    data["gentoo-devs"] = time.time() - 40 * 86400
    record.write_text(json.dumps(data))
    failed = env.run("refresh-key", "-C", "gentoo-devs", "--force")
    assert failed.code == 3 and "40 days ago" in failed.text and env.server.url in failed.text, failed.text


def _spawn_install(env: GkeysEnv) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "gkeys_portage.cli.main", "-c", str(env.config), "install-key", "-C", "gentoo-devs"],
        cwd=PROJECT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )


@pytest.mark.parametrize("delay", [0.05, 0.3, 0.6])
def test_sigkill_during_install_key_leaves_a_working_keyring(seeded: GkeysEnv, delay: float) -> None:
    """Kill -9 at several points of an install (fetching, importing, committing)."""
    env = seeded
    for nick in ("alice", "bob"):
        env.server.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick)
    assert env.run("install-key", "-C", "gentoo-devs", "-n", "alice").code == 0
    doc = env.root / "doc"
    doc.write_bytes(b"doc")
    (env.root / "doc.asc").write_bytes(env.keys.sign("alice", doc))
    env.server.latency = 0.5
    requests = len(env.server.log)
    process = _spawn_install(env)
    kill_group_during(process, delay, lambda: len(env.server.log) > requests)  # from its first request
    env.server.latency = 0
    result = env.run("verify", "-F", str(doc), "-C", "gentoo-devs")
    assert result.code == 0, result.text
    assert env.keys.keys["alice"].fingerprint in _installed(env)
    # Leftover staging directories do not disturb the next normal run.
    assert env.run("install-key", "-C", "gentoo-devs").code == 0
    assert len(_installed(env)) == 2


def test_two_runs_at_once_are_serialized(seeded: GkeysEnv) -> None:
    env = seeded
    for nick in ("alice", "bob"):
        env.server.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick)
    env.server.latency = 0.1
    runs = [_spawn_install(env) for _ in range(3)]
    assert [p.wait(timeout=120) for p in runs] == [0, 0, 0]
    assert len(_installed(env)) == 2


def test_export_keyring(seeded: GkeysEnv, tmp_path: Path) -> None:
    env = seeded
    empty = env.run("export-keyring", "-C", "gentoo-devs", "-o", str(tmp_path / "k.asc"))
    assert empty.code == 2 and "empty" in empty.text
    env.server.hkp[env.keys.keys["alice"].fingerprint] = env.keys.public("alice")
    assert env.run("install-key", "-C", "gentoo-devs", "-n", "alice").code == 0
    assert env.run("export-keyring", "-C", "gentoo-devs", "-o", str(tmp_path / "k.gpg"), "--no-armor").code == 0
    assert not (tmp_path / "k.gpg").read_bytes().startswith(b"-----BEGIN")
