"""Fault injection on the network paths of the core (seed fetch, key install).

After every fault: a clear one-line error with exit 3, the previous verified state byte-for-byte
intact, and the next normal run succeeds.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import GkeysEnv

from gkeys_portage.demo.world import LoopbackServer, Response

Fault = Callable[[bytes, str], Response]

FAULTS: dict[str, Fault] = {
    "http 503": lambda body, path: Response(503, b"busy"),
    "reset mid-body": lambda body, path: Response(200, body, abort_after=len(body) // 2),
    "wrong content-length": lambda body, path: Response(200, body, {"Content-Length": str(len(body) + 500)}),
    "stall": lambda body, path: Response(200, body, stall=5),
    "redirect loop": lambda body, path: Response(302, b"", {"Location": path}),
}


@pytest.fixture
def installed(env: GkeysEnv) -> GkeysEnv:
    env.install_devs("alice", "bob")
    env.publish_seeds("gentoo-devs", ("alice", "bob", "carol"))
    env.server.hkp[env.keys.keys["carol"].fingerprint] = env.keys.public("carol")
    return env


def _break(server: LoopbackServer, path: str, fault: Fault) -> None:
    body = server.files[path]
    server.routes[path] = lambda info: fault(body, path)


@pytest.mark.parametrize("kind", list(FAULTS))
@pytest.mark.parametrize("target", ["/seeds/gentoo-devs.seeds", "/seeds/gentoo-devs.seeds.sig"])
def test_seed_download_faults(installed: GkeysEnv, kind: str, target: str) -> None:
    env = installed
    before = env.snapshot()
    _break(env.server, target, FAULTS[kind])
    result = env.run("update-seed", "-C", "gentoo-devs")
    assert result.code == 3, result.text
    said = [line for line in result.text.strip().splitlines() if " * waiting for " not in f" {line}"]  # issue 45
    assert "Traceback" not in result.text and len(said) == 1, result.text
    assert env.snapshot() == before
    env.server.routes.clear()
    fixed = env.run("update-seed", "-C", "gentoo-devs")
    assert fixed.code == 0, fixed.text
    assert "Added: carol" in fixed.text


def test_redirect_to_another_host_is_followed_but_the_signature_decides(installed: GkeysEnv) -> None:
    env = installed
    other = LoopbackServer()
    try:
        other.files.update(env.server.files)
        env.server.routes["/seeds/gentoo-devs.seeds"] = lambda info: Response(
            302, b"", {"Location": other.url + "/seeds/gentoo-devs.seeds"})
        assert env.run("fetch-seed", "-C", "gentoo-devs").code == 0
        other.files["/seeds/gentoo-devs.seeds"] = env.seed_bytes("alice", "mallory")
        before = env.snapshot()
        refused = env.run("fetch-seed", "-C", "gentoo-devs")
        assert refused.code == 1 and "BAD signature" in refused.text
        assert env.snapshot() == before
    finally:
        other.close()


@pytest.mark.parametrize("kind", ["reset mid-body", "wrong content-length"])
def test_key_download_faults(installed: GkeysEnv, kind: str) -> None:
    env = installed
    conf = env.config.read_text().replace("wkd = yes", "wkd = no")
    env.config.write_text(conf)
    assert env.run("fetch-seed", "-C", "gentoo-devs").code == 0
    before = env.snapshot()
    carol = env.keys.public("carol")
    env.server.routes["/pks/lookup"] = lambda info: FAULTS[kind](carol, "/pks/lookup")
    result = env.run("install-key", "-C", "gentoo-devs", "-n", "carol")
    assert result.code == 3, result.text
    assert env.snapshot() == before
    env.server.routes.clear()
    assert env.run("install-key", "-C", "gentoo-devs", "-n", "carol").code == 0
