"""export-wkd: a WKD tree of pinned keys, served on 127.0.0.1 and installed with gkeys' own WKD source."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import GkeysEnv

from gkeys_portage.core.types import Nick
from gkeys_portage.demo.world import KeyFactory, LoopbackServer
from gkeys_portage.keys.seeds import dump_seeds
from gkeys_portage.keys.sources import wkd_hash
from gkeys_portage.openpgp.colons import parse_colons
from gkeys_portage.openpgp.gnupg import GnuPG

DORA_UIDS = ("Dora <dora@example.org>", "Dora <dörte@gentoo.org>")


def _dora(keys: KeyFactory) -> None:
    """A key whose first user id has upper-case letters, plus one at another domain and one non-ASCII."""
    if "dora" in keys.keys:
        return
    key = keys.create("dora", name="Dora", email="Dora.Upper@gentoo.org")
    for uid in DORA_UIDS:
        result = keys.gpg.run(["--quick-add-uid", key.fingerprint, uid])
        assert result.returncode == 0, result.stderr


def _install_devs(env: GkeysEnv, *nicks: str, named: dict[str, tuple[str, ...]] | None = None) -> None:
    """install_devs, with dora's seed naming all her user ids (a key is published only under the addresses
    its seed names, issue 23 item 13); ``named`` gives other seeds' uids."""
    uids = {"dora": (env.keys.keys["dora"].uid, *DORA_UIDS)} if "dora" in nicks else {}
    uids.update(named or {})
    env.bootstrap()
    seeds = {}
    for nick in nicks:
        seed = env.seed(nick)
        seed.uid = list(uids.get(nick, seed.uid))
        seeds[Nick(nick)] = seed
        env.server.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick)
    env.publish_seeds("gentoo-devs", (), data=dump_seeds(seeds))
    result = env.run("update-seed", "-C", "gentoo-devs")
    assert result.code == 0, result.text


def _show(env: GkeysEnv, data: bytes) -> list[tuple[str, list[str]]]:
    """(primary, user ids) of each key gpg sees in ``data``."""
    gpg = GnuPG(env.root / "show")
    try:
        listed = parse_colons(gpg.run(["--with-colons", "--fixed-list-mode", "--with-fingerprint", "--show-keys"],
                                      data).stdout.decode("utf-8"))
    finally:
        gpg.close()
    return [(k.fingerprint, [u.text for u in k.uids]) for k in listed]


@pytest.fixture
def exported(env: GkeysEnv) -> Iterator[Path]:
    _dora(env.keys)
    _install_devs(env, "alice", "bob", "dora")
    out = env.root / "wkd"
    result = env.run("export-wkd", "-C", "gentoo-devs", "-o", str(out), "--domain", "gentoo.org", "--method", "both")
    assert result.code == 0, result.text
    assert "dörte@gentoo.org" in result.text and "not an ASCII address" in result.text
    yield out


def test_each_file_holds_only_the_user_id_of_its_address(env: GkeysEnv, exported: Path) -> None:
    direct = exported / ".well-known" / "openpgpkey"
    advanced = direct / "gentoo.org"
    assert (direct / "policy").read_bytes() == b"" and (advanced / "policy").read_bytes() == b""
    for nick, local in (("alice", "alice"), ("bob", "bob"), ("dora", "dora.upper")):
        key = env.keys.keys[nick]
        for root in (direct, advanced):
            data = (root / "hu" / wkd_hash(local)).read_bytes()
            assert _show(env, data) == [(key.fingerprint, [key.uid])]
    # Upper-case letters are lower-cased for the hash (as WKD clients do); nothing for the other domain
    # or for the non-ASCII address.
    assert wkd_hash("Dora.Upper") == wkd_hash("dora.upper")
    names = sorted(p.name for p in (advanced / "hu").iterdir())
    assert names == sorted(wkd_hash(n) for n in ("alice", "bob", "dora.upper"))


def _serve(server: LoopbackServer, tree: Path, methods: tuple[str, ...]) -> None:
    base = tree / ".well-known" / "openpgpkey"
    for path in base.rglob("*"):
        if not path.is_file():
            continue
        relative = path.relative_to(base).as_posix()
        if "advanced" in methods and relative.startswith("gentoo.org/"):
            server.publish(f"wkd-advanced/gentoo.org/.well-known/openpgpkey/{relative}", path.read_bytes())
        if "direct" in methods and not relative.startswith("gentoo.org/"):
            server.publish(f"wkd-direct/gentoo.org/.well-known/openpgpkey/{relative}", path.read_bytes())


@pytest.mark.parametrize("methods", [("advanced",), ("direct",)])
def test_served_tree_installs_with_gkeys_own_wkd_source(env: GkeysEnv, exported: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        methods: tuple[str, ...]) -> None:
    user_server = LoopbackServer()
    try:
        _serve(user_server, exported, methods)
        (tmp_path / "user").mkdir()
        user = GkeysEnv(tmp_path / "user", user_server, env.keys, capsys)
        user.write_config(keyservers="")  # WKD only: no keyserver at all
        user.bootstrap()
        user.publish_seeds("gentoo-devs", ("alice", "bob", "dora"))
        assert user.run("fetch-seed", "-C", "gentoo-devs").code == 0
        result = user.run("--json", "install-key", "-C", "gentoo-devs")
        assert result.code == 0, result.text
        assert {k["source"].split()[0] for k in json.loads(result.out)["keys"]} == {f"wkd-{methods[0]}"}
    finally:
        user_server.close()


def test_direct_tree_needs_one_domain(env: GkeysEnv) -> None:
    _dora(env.keys)
    _install_devs(env, "dora")
    result = env.run("export-wkd", "-C", "gentoo-devs", "-o", str(env.root / "w"), "--method", "direct")
    assert result.code == 2 and "--domain" in result.text and "example.org" in result.text
    assert not (env.root / "w").exists()
    result = env.run("export-wkd", "-C", "gentoo-devs", "-o", str(env.root / "w"), "--domain", "example.org")
    assert result.code == 0, result.text
    data = (env.root / "w" / ".well-known" / "openpgpkey" / "example.org" / "hu" / wkd_hash("dora")).read_bytes()
    assert _show(env, data) == [(env.keys.keys["dora"].fingerprint, ["Dora <dora@example.org>"])]


def test_a_user_id_domain_that_is_no_dns_name_writes_nothing_outside_o(env: GkeysEnv) -> None:
    """Issue 23 item 12: ``M <m@../../../escaped>`` (the seed even names it) wrote ``escaped/...`` outside -o.
    Only DNS names are domains: the address is skipped and reported, nothing is written outside -o."""
    if "escaper" not in env.keys.keys:
        key = env.keys.create("escaper", name="M", email="m@gentoo.org")
        for uid in ("M <m@../../../escaped>", "M <m@..>", "M <m@a/b.org>"):
            result = env.keys.gpg.run(["--quick-add-uid", key.fingerprint, uid])
            assert result.returncode == 0, result.stderr
    _install_devs(env, "escaper", named={"escaper": ("M <m@gentoo.org>", "M <m@../../../escaped>", "M <m@..>",
                                                     "M <m@a/b.org>")})
    out = env.root / "deep" / "er" / "wkd"
    result = env.run("export-wkd", "-C", "gentoo-devs", "-o", str(out))
    assert result.code == 0, result.text
    assert "'../../../escaped' is not a DNS name" in result.text and "'a/b.org' is not a DNS name" in result.text
    assert not (env.root / "escaped").exists() and not (env.root / "deep" / "escaped").exists()
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert written == [f".well-known/openpgpkey/gentoo.org/hu/{wkd_hash('m')}",
                       ".well-known/openpgpkey/gentoo.org/policy"]
    bad = env.run("export-wkd", "-C", "gentoo-devs", "-o", str(out), "--domain", "../x")
    assert bad.code == 2 and "is not a DNS name" in bad.text


def test_a_symlink_leading_out_of_o_is_refused_before_writing(env: GkeysEnv) -> None:
    """Issue 23 item 12: every resolved target must stay under -o (a symlink inside -o pointing elsewhere)."""
    env.install_devs("alice")
    out, elsewhere = env.root / "wkd", env.root / "elsewhere"
    (out / ".well-known").mkdir(parents=True)
    elsewhere.mkdir()
    (out / ".well-known" / "openpgpkey").symlink_to(elsewhere)
    result = env.run("export-wkd", "-C", "gentoo-devs", "-o", str(out))
    assert result.code == 2 and "outside" in result.err and "Traceback" not in result.text, result.text
    assert list(elsewhere.iterdir()) == []


def test_another_pinned_key_is_not_published_under_a_developers_address(env: GkeysEnv) -> None:
    """Issue 23 item 13: mallory (pinned, seed uid mallory@) adds a self-signed ``Mallory <alice@gentoo.org>``;
    alice's WKD file served mallory's key.  A key is published only under the addresses its own seed names."""
    if "mallory-wkd" not in env.keys.keys:
        mallory = env.keys.create("mallory-wkd", name="Mallory", email="mallory.wkd@gentoo.org")
        result = env.keys.gpg.run(["--quick-add-uid", mallory.fingerprint, "Mallory <alice@gentoo.org>"])
        assert result.returncode == 0, result.stderr
    _install_devs(env, "alice", "mallory-wkd")
    out = env.root / "wkd"
    result = env.run("--json", "export-wkd", "-C", "gentoo-devs", "-o", str(out))
    assert result.code == 0, result.text
    doc = json.loads(result.out)
    assert doc["addresses"]["alice@gentoo.org"] == [env.keys.keys["alice"].fingerprint]
    assert any("alice@gentoo.org" in s and "not an address of the key's own seed" in s for s in doc["skipped"])
    data = (out / ".well-known" / "openpgpkey" / "gentoo.org" / "hu" / wkd_hash("alice")).read_bytes()
    assert [fpr for fpr, _ in _show(env, data)] == [env.keys.keys["alice"].fingerprint]
