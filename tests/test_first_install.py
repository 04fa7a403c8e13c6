"""A first install as a new user runs it (issue 23, item 19): ``gkeys update-seed`` with no category named.

Categories are updated after those whose keys they need; offline, every source's real cause (DNS, refused,
timeout) is said and the run exits 3 and names the offline way; Gentoo's own key files work as ``[keyrings]``
files, and a root's certification of a certifier imported from a file is kept for an air-gapped authority update.
The sources are real sockets on 127.0.0.1 and a host name that glibc refuses to look up (too long for DNS: no
query leaves the machine).
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import GkeysEnv
from test_authority import KEPT, Chain, _authority_env, _update, chain  # noqa: F401 (chain: the fixture)

from gkeys_portage.core.config import load_config
from gkeys_portage.core.types import Category
from gkeys_portage.keys.prerequisites import FIRST_STEP, update_order

PROJECT = Path(__file__).resolve().parent.parent
#: Four 63-letter labels: longer than DNS allows (253), so the resolver refuses it without sending a query.
NO_SUCH_HOST = ".".join(["a" * 63] * 4) + ".invalid"


@pytest.fixture
def dead_ports() -> Iterator[tuple[int, int]]:
    """(a closed port: connection refused, a port that accepts and never answers: timeout) on 127.0.0.1."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # the kernel completes the handshakes; nobody ever reads or answers
    port = closed.getsockname()[1]
    closed.close()
    yield port, silent.getsockname()[1]
    silent.close()


def test_offline_update_seed_says_each_cause_and_the_offline_way(env: GkeysEnv,
                                                                  dead_ports: tuple[int, int]) -> None:
    refused, silent = dead_ports
    env.config.write_text(f"[base]\ngkeysdir = {env.state}\n[sources]\n"
                          f"keyservers = http://127.0.0.1:{refused} http://{NO_SUCH_HOST} http://127.0.0.1:{silent}\n"
                          "wkd = no\ntimeout = 0.5\nretries = 1\nbackoff = 0.05\n")
    result = env.run("update-seed")
    assert result.code == 3, result.text  # a network failure, not "run update-seed -C gentoo-auth first" (2)
    steps = re.findall(r"update-seed (\S+) \((\d)/4\)", result.err)
    assert [c for c, _ in steps] == ["gentoo", "gentoo-auth", "gentoo-devs", "gentoo-infra"]
    failure = next(line for line in result.err.splitlines() if "could not reach any key source for l1" in line)
    assert f"http://127.0.0.1:{refused}: connection refused" in failure
    assert f"http://{NO_SUCH_HOST}: host name not found (DNS)" in failure
    assert f"http://127.0.0.1:{silent}: timed out" in failure
    assert failure.count("connection refused") == 1 and "after" not in failure  # once per source, no URL noise
    assert "gentoo-devs: not updated: it needs the keys of gentoo-auth" in result.err
    assert "update-seed -C gentoo-auth' first" not in result.err  # it was not run out of order
    assert "/usr/share/openpgp-keys/gentoo-release.asc" in result.err and "Offline first install" in result.err
    data = json.loads(env.run("--json", "update-seed").out)
    assert data["exit"] == 3
    assert [u["category"] for u in data["updated"] if "error" in u] == ["gentoo", "gentoo-auth", "gentoo-devs",
                                                                         "gentoo-infra"]


def test_update_order_puts_the_authority_keys_first(tmp_path: Path) -> None:
    conf = tmp_path / "gkeys.conf"
    conf.write_text("[seedurls]\na-overlay = https://example.org/a.seeds\n"
                    "[verify-seeds]\na-overlay = zz-signers me\n"
                    "[authority-seeds]\nb-devs = https://example.org/devs.gpg y-auth/l2\n"
                    "[authority]\nroots = x-root/l1\n")
    config = load_config(conf, tmp_path / "root")
    order = update_order(config, [Category(c) for c in ("a-overlay", "b-devs", "x-root", "y-auth", "zz-signers")])
    assert order.index(Category("zz-signers")) < order.index(Category("a-overlay"))
    assert order.index(Category("x-root")) < order.index(Category("b-devs"))
    assert order.index(Category("y-auth")) < order.index(Category("b-devs"))
    assert order == ["x-root", "y-auth", "b-devs", "zz-signers", "a-overlay"]


def test_air_gapped_root_certification_comes_from_the_imported_file(env: GkeysEnv, chain: Chain) -> None:  # noqa: F811
    """No key source publishes the certifiers; the file they were imported from carries L1's certification."""
    _authority_env(env, chain, publish_certifiers=False)
    code, data = _update(env)
    assert code == 0, data
    assert {v["nick"] for v in data["updated"][0]["kept"]} == KEPT  # type: ignore[index]


def test_offline_install_from_keyring_files(env: GkeysEnv, chain: Chain,  # noqa: F811
                                            dead_ports: tuple[int, int]) -> None:
    """The offline way: the authority keys from a ``[keyrings]`` file, the developers' keyring from a file."""
    auth_file, devs_file = env.root / "gentoo-auth.asc", env.root / "gentoo-developers.gpg"
    auth_file.write_bytes(chain.auth)
    devs_file.write_bytes(chain.after)
    for nick in ("l1", "l2-dev", "l2-rogue", "l2-gone"):
        key = chain.keys.keys[nick]
        assert env.run("add-seed", "-C", "auth", "-n", nick, "-N", nick, "-K", key.fingerprint).code == 0
    env.config.write_text(f"[base]\ngkeysdir = {env.state}\n[sources]\nkeyservers = http://127.0.0.1:{dead_ports[0]}\n"
                          f"wkd = no\ntimeout = 0.5\nretries = 0\n[keyrings]\nauth = {auth_file}\n"
                          f"[authority-seeds]\ndevs = {devs_file} auth/l2-dev auth/l2-rogue auth/l2-gone\n"
                          "[authority]\nroots = auth/l1\ndomain = gentoo.org\n")
    installed = env.run("install-key", "-C", "auth")
    assert installed.code == 0, installed.text
    code, data = _update(env)
    assert code == 0, data
    assert {v["nick"] for v in data["updated"][0]["kept"]} == KEPT  # type: ignore[index]


def test_docs_ebuild_and_doctor_name_the_same_first_step(env: GkeysEnv, tmp_path: Path) -> None:
    portage_md = (PROJECT / "docs" / "portage.md").read_text()
    assert f"{FIRST_STEP}  " in portage_md or f"{FIRST_STEP}\n" in portage_md
    assert "Offline first install" in portage_md and "[keyrings]" in portage_md
    assert "/usr/share/openpgp-keys/gentoo-release.asc" in portage_md
    for ebuild in sorted((PROJECT / "packaging/gentoo/app-crypt/gkeys-portage").glob("*.ebuild")):
        elog = [line for line in ebuild.read_text().splitlines() if "elog" in line]
        assert any(f'"    {FIRST_STEP} ' in line or f'"    {FIRST_STEP}"' in line for line in elog), ebuild.name
        assert any("Offline first install" in line for line in elog), ebuild.name
    eroot = tmp_path / "eroot"
    (eroot / "etc/portage").mkdir(parents=True)
    env.config.write_text(f"[base]\ngkeysdir = {env.state}\n")
    doctor = env.run("--json", "doctor", "--eroot", str(eroot))
    fixes = [finding["fix"] for finding in json.loads(doctor.out)["findings"]]
    assert fixes and fixes[0].replace(f" -c {env.config}", "") == FIRST_STEP, fixes  # (-c kept; runnable as printed)
