"""Seeds from authority certifications (issue 13 item 1; keys/authority.py).

An L1 -> L2 -> developers chain built with real gpg in the test: every case of the issue is a
developer key, and the keyring is served over HTTP on 127.0.0.1 as Gentoo serves active-devs.gpg.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import REAL, GkeysEnv, shared_path

from gkeys_portage.cli.main import main
from gkeys_portage.core.config import load_config
from gkeys_portage.core.types import Fingerprint
from gkeys_portage.demo.world import KeyFactory, past
from gkeys_portage.keys.authority import CollisionError, _check_collisions
from gkeys_portage.keys.certification import Verdict, evaluate, root_certifiers
from gkeys_portage.openpgp.colons import parse_colons
from gkeys_portage.openpgp.gnupg import GnuPG

CERTIFIED = ("alice", "amy", "ann", "abe", "frank")
CASES = {
    "bob": "no-certification",
    "carol": "wrong-domain",
    "dave": "certifier-not-rooted",  # certified by an L2 that L1 never certified
    "gina": "key-revoked",
    "hank": "certifier-revoked",  # certified by an L2 its owner revoked
}
#: kept with a closed window (issue 41): a certification that expired (erin), one revoked (frank, retired)
RETIRED = {"erin": "certification expired", "frank": "certification revoked"}
KEPT = {*CERTIFIED, *RETIRED}


@dataclass
class Chain:
    """The generated authority world: keys, and keyring files as served before/after changes."""

    keys: KeyFactory
    auth: bytes  # l1, l2-dev, l2-rogue, l2-gone public keys (with L1's certifications)
    bare_l2: bytes  # l2-dev before L1 certified it (as a keyring without third-party certifications holds it)
    before: bytes  # the developers' keyring before frank's certification was revoked
    after: bytes  # the full keyring today


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    keys = KeyFactory(tmp_path_factory.mktemp("authority-keys"))
    born = past(800)
    for nick in ("l1", "l2-dev", "l2-rogue", "l2-gone"):
        keys.create(nick, email=f"openpgp-auth+{nick}@gentoo.org", created=born, expire="5y")
    bare_l2 = keys.public("l2-dev")
    keys.certify("l1", "l2-dev")
    keys.certify("l1", "l2-gone")
    devs = tuple(dict.fromkeys((*CERTIFIED, *CASES, *RETIRED)))
    for nick in devs:
        keys.create(nick, email="carol@example.org" if nick == "carol" else None, created=born, expire="5y")
    for nick in (*CERTIFIED, "carol", "gina"):
        if nick != "frank":
            keys.certify("l2-dev", nick, expire="1y")
    keys.certify("l2-dev", "frank", expire="1y", when=past(100))  # then retired (below): a window of 100 days
    keys.certify("l2-dev", "erin", expire="1y", when=past(400))
    keys.certify("l2-rogue", "dave", expire="1y")
    keys.certify("l2-gone", "hank", expire="1y")
    keys.revoke("l2-gone")  # by its owner, after it certified hank
    before = keys.public(*devs, armor=False)
    keys.revoke_certification("l2-dev", "frank")
    keys.revoke("gina")
    yield Chain(keys, keys.public("l1", "l2-dev", "l2-rogue", "l2-gone"), bare_l2, before,
                keys.public(*devs, armor=False))
    keys.close()


def _authority_env(env: GkeysEnv, chain: Chain, max_shrink: str = "10", auth: bytes | None = None,
                   publish_certifiers: bool = True) -> None:
    """Pin the generated authority keys as category 'auth' and serve the developers' keyring.

    Installed keyrings keep no third-party certifications (import-clean), so L1's certifications of the L2
    keys come from the certifiers as the keyserver publishes them (``publish_certifiers``)."""
    if publish_certifiers:
        for nick in ("l2-dev", "l2-rogue", "l2-gone"):
            env.server.hkp[chain.keys.keys[nick].fingerprint] = chain.keys.public(nick)
    for nick in ("l1", "l2-dev", "l2-rogue", "l2-gone"):
        key = chain.keys.keys[nick]
        assert env.run("add-seed", "-C", "auth", "-n", nick, "-N", nick, "-K", key.fingerprint).code == 0
    keyfile = env.root / "auth.asc"
    keyfile.write_bytes(auth or chain.auth)
    for nick in ("l1", "l2-dev", "l2-rogue", "l2-gone"):
        result = env.run("import-key", "-C", "auth", "-n", nick, "-F", str(keyfile))
        assert result.code == 0, result.text
    env.server.publish("output/active-devs.gpg", chain.after)
    env.write_config(f"[authority-seeds]\ndevs = {env.server.url}/output/active-devs.gpg auth/l2-dev auth/l2-rogue "
                     f"auth/l2-gone\n[authority]\nroots = auth/l1\ndomain = gentoo.org\nmax-shrink = {max_shrink}\n")


def _update(env: GkeysEnv, *extra: str) -> tuple[int, dict[str, object]]:
    result = env.run("--json", "update-seed", "-C", "devs", *extra)
    return result.code, json.loads(result.out) if result.out.strip() else {"error": result.err}


def test_chain_keeps_exactly_the_certified_developers(env: GkeysEnv, chain: Chain) -> None:
    _authority_env(env, chain)
    code, data = _update(env)
    assert code == 0, data
    update = data["updated"][0]  # type: ignore[index]
    kept = {v["nick"] for v in update["kept"]}
    assert kept == KEPT
    retired = {v["nick"]: v["windows"][-1] for v in update["kept"] if v["verdict"] == "retired"}
    assert {n: w["closed"] for n, w in retired.items()} == RETIRED and all(w["until"] for w in retired.values())
    fingerprints = {chain.keys.keys[n].fingerprint: n for n in chain.keys.keys}
    dropped = {fingerprints[v["fingerprint"]]: v["verdict"] for v in update["dropped"]}
    assert dropped == CASES
    seeds = json.loads((env.state / "seeds" / "devs.seeds").read_text())
    assert set(seeds) == kept
    alice = chain.keys.keys["alice"]
    # one window, from L2's certification on; its expiry (in a year) is still ahead, so it is open: the update after
    # it closes it unless L2 certified again (a user who has not updated is never frozen by a renewal)
    windows = seeds["alice"].pop("windows")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert [(w["by"], w["until"], w["closed"]) for w in windows[alice.fingerprint]] == [("auth/l2-dev", None, "")]
    assert windows[alice.fingerprint][0]["from"] <= now
    assert seeds["alice"] == {"fingerprint": [alice.fingerprint], "keydir": "alice", "keys": [alice.fingerprint],
                              "name": "Alice", "nick": "alice", "uid": [alice.uid]}
    listed = env.run("--json", "list-key", "-C", "devs")
    installed = {k["fingerprint"] for k in json.loads(listed.out)["keys"] if k.get("installed", True)}
    assert {chain.keys.keys[n].fingerprint for n in kept} <= installed
    keyring = GnuPG(env.state / "keyrings" / "devs", read_only=True)
    assert {k.fingerprint for k in keyring.list_keys()} == {chain.keys.keys[n].fingerprint for n in kept}
    text = env.run("update-seed", "-C", "devs")
    assert text.code == 0 and "Retired on " in text.out and "frank" in text.out and "wrong-domain" in text.out
    assert "devs certifications" in text.err  # progress on stderr (download, import, check, install)
    assert "devs certifications: 4/4 stages" in text.err and "100/100" not in text.err  # items, not percent


def test_root_certification_comes_from_the_published_certifier(env: GkeysEnv, chain: Chain) -> None:
    """Installed keyrings keep no third-party certifications: L1's certification of L2 is taken from
    the certifier as WKD / keyservers publish it (checked by gpg against the pinned L1 all the same)."""
    bare = chain.bare_l2 + chain.keys.public("l1", "l2-rogue", "l2-gone")
    _authority_env(env, chain, auth=bare, publish_certifiers=False)
    state = env.snapshot()
    refused = env.run("update-seed", "-C", "devs")
    assert refused.code == 1 and "no certifier is usable" in refused.err, refused.text
    assert f"{env.gkeys} update-seed -C auth" in refused.err and "gentoo-auth" not in refused.err  # the pinned category
    after = env.snapshot()
    seen = json.loads(after.pop("state/authority.json"))["devs"]  # only the revocations seen are recorded
    assert chain.keys.keys["l2-gone"].fingerprint in seen["keys"] and after == state
    env.server.hkp[chain.keys.keys["l2-dev"].fingerprint] = chain.keys.public("l2-dev")
    code, data = _update(env)
    assert code == 0, data
    assert {v["nick"] for v in data["updated"][0]["kept"]} == KEPT  # type: ignore[index]
    # A keyserver that serves extra keys cannot add developers: only keys of the download count.
    env.server.hkp[chain.keys.keys["l2-dev"].fingerprint] = chain.keys.public("l2-dev", "amy")
    env.server.publish("output/active-devs.gpg", chain.keys.public("alice", "ann", "abe", armor=False))
    code, data = _update(env, "--allow-shrink")
    assert code == 0 and {v["nick"] for v in data["updated"][0]["kept"]} == {"alice", "ann", "abe"}  # type: ignore
    assert not data["updated"][0]["dropped"]  # type: ignore[index]


def test_truncated_keyring_is_refused_by_max_shrink(env: GkeysEnv, chain: Chain) -> None:
    _authority_env(env, chain)
    assert _update(env)[0] == 0
    state = env.snapshot()
    env.server.publish("output/active-devs.gpg", chain.keys.public("alice", "amy", armor=False))
    result = env.run("update-seed", "-C", "devs")
    assert result.code == 1
    assert "max-shrink" in result.err and "--allow-shrink" in result.err and "Traceback" not in result.err
    assert env.snapshot() == state
    env.server.publish("output/active-devs.gpg", b"")
    assert env.run("update-seed", "-C", "devs", "--allow-shrink").code == 1  # never to nothing
    assert env.snapshot() == state
    code, data = _update(env, "--allow-shrink")
    assert code == 1 and env.snapshot() == state
    env.server.publish("output/active-devs.gpg", chain.keys.public("alice", "amy", armor=False))
    code, data = _update(env, "--allow-shrink")
    assert code == 0, data
    # accepted by hand: the keys gone from the download are kept retired (issue 41), their windows closed now
    seeds = json.loads((env.state / "seeds" / "devs.seeds").read_text())
    assert set(seeds) == KEPT and not data["updated"][0]["changes"]["removed"]  # type: ignore[index]
    left = {v["nick"]: v["window"] for v in data["updated"][0]["left"]}  # type: ignore[index]
    assert set(left) == {"abe", "ann"}
    assert {w["closed"] for w in left.values()} == {"no longer in the authority keyring"}
    assert {n for n, seed in seeds.items() if all(w["until"] is None for spans in seed["windows"].values()
                                                  for w in spans)} == {"alice", "amy"}


def test_replayed_keyring_does_not_undo_a_seen_revocation(env: GkeysEnv, chain: Chain) -> None:
    """Also: revocations apply at once (2 of 5 seeds go although max-shrink is 10%: signed evidence)."""
    _authority_env(env, chain)
    env.server.publish("output/active-devs.gpg", chain.before)
    assert _update(env)[0] == 0
    assert "frank" in json.loads((env.state / "seeds" / "devs.seeds").read_text())
    env.server.publish("output/active-devs.gpg", chain.after)
    code, data = _update(env)
    assert code == 0 and data["updated"][0]["changes"]["removed"] == ["gina"]  # type: ignore[index]
    frank = chain.keys.keys["frank"].fingerprint
    closed = json.loads((env.state / "seeds" / "devs.seeds").read_text())["frank"]["windows"][frank][-1]
    assert closed["until"] and closed["closed"] == "certification revoked"  # retired: kept, its window closed
    env.server.publish("output/active-devs.gpg", chain.before)  # the older keyring, without the revocation
    code, data = _update(env)
    assert code == 0, data
    seeds = json.loads((env.state / "seeds" / "devs.seeds").read_text())
    assert "gina" not in seeds and seeds["frank"]["windows"][frank][-1] == closed  # the window stays closed
    verdicts = {v["fingerprint"]: v["verdict"] for v in (*data["updated"][0]["dropped"],  # type: ignore[index]
                                                         *data["updated"][0]["kept"])}  # type: ignore[index]
    assert verdicts[frank] == "retired"
    assert verdicts[chain.keys.keys["gina"].fingerprint] == "key-revoked"


def test_refresh_rereads_the_keyring_and_survives_a_bad_network(env: GkeysEnv, chain: Chain) -> None:
    _authority_env(env, chain)
    env.server.publish("output/active-devs.gpg", chain.before)
    assert _update(env)[0] == 0
    assert "skipped" not in env.run("refresh-key", "-C", "devs").out  # update-seed is no key refresh
    skipped = env.run("refresh-key", "-C", "devs")
    assert skipped.code == 0 and "skipped" in skipped.out
    state = env.snapshot()
    state.pop("state/refresh-sources.json", None)
    for broken in (chain.keys.public("alice", armor=False), None):  # truncated, then gone (404)
        if broken is None:
            del env.server.files["/output/active-devs.gpg"]
        else:
            env.server.publish("output/active-devs.gpg", broken)
        result = env.run("refresh-key", "-C", "devs", "--force")
        assert result.code == 0 and "refresh failed" in result.err and "keeping the keys" in result.err, result.text
        after = env.snapshot()
        after.pop("state/refresh-sources.json")  # the key sources answered (the key refresh ran all the same)
        assert after == state  # no refresh of the category recorded, nothing else changed
    late_policy = "[policy]\nmax-refresh-age = 0\n[authority]\n"
    env.config.write_text(env.config.read_text().replace("[authority]\n", late_policy))
    late = env.run("refresh-key", "-C", "devs", "--force")
    assert late.code == 3 and "max-refresh-age" in late.err and "Traceback" not in late.err
    env.server.publish("output/active-devs.gpg", chain.after)
    result = env.run("--json", "refresh-key", "-C", "devs", "--force")
    assert result.code == 0, result.text
    assert json.loads(result.out)["authority"][0]["changes"]["removed"] == ["gina"]



def test_a_shrink_refused_during_refresh_names_the_command_that_applies_it(env: GkeysEnv, chain: Chain) -> None:
    """refresh-key has no --allow-shrink: the refusal names the update-seed command that has it."""
    _authority_env(env, chain)
    assert _update(env)[0] == 0
    env.server.publish("output/active-devs.gpg", chain.keys.public("alice", armor=False))
    result = env.run("refresh-key", "-C", "devs", "--force")
    assert result.code == 0 and f"{env.gkeys} update-seed -C devs --allow-shrink" in result.err, result.text


def test_unpinned_certifier_or_missing_authority_key_fails_closed(env: GkeysEnv, chain: Chain) -> None:
    _authority_env(env, chain)
    env.write_config(f"[authority-seeds]\ndevs = {env.server.url}/output/active-devs.gpg auth/nobody\n"
                     "[authority]\nroots = auth/l1\n")
    result = env.run("update-seed", "-C", "devs")
    assert result.code != 0 and "auth/nobody" in result.err and "Traceback" not in result.err
    env.write_config(f"[authority-seeds]\ndevs = {env.server.url}/output/active-devs.gpg auth/l2-rogue\n"
                     "[authority]\nroots = auth/l1\n")
    result = env.run("update-seed", "-C", "devs")
    assert result.code == 1 and "no certifier is usable" in result.err
    assert not (env.state / "seeds" / "devs.seeds").exists()


@pytest.mark.parametrize("text", ["[authority]\nroot = auth/l1\n", "[authority]\nmax-shrink = lots\n",
                                  "[authority-seeds]\ndevs = https://example.org/k.gpg\n",
                                  "[authority-seeds]\ndevs = https://example.org/k.gpg not-a-ref\n",
                                  "[authority-seeds]\ngentoo-devs = https://example.org/k.gpg auth/l2\n"])
def test_authority_config_typos_are_errors(env: GkeysEnv, text: str) -> None:
    env.write_config(text)
    result = env.run("list-cats")
    assert result.code == 2 and "Traceback" not in result.err


def test_real_l1_certifies_the_real_l2_keys(tmp_path: Path) -> None:
    """The 2019 copies of Gentoo's L1, L2-dev and L2-srv, and the 2024 L1 + L2-infra."""
    keys_dir = shared_path("fixtures", "real", "keys")
    l1, dev, srv = (Fingerprint(f) for f in ("ABD00913019D6354BA1D9A132839FE0D796198B1",
                                              "2C13823B8237310FA213034930D132FF0FF50EEB",
                                              "18F703D702B1B9591373148C55D3238EC050396E"))
    infra = Fingerprint("ABA5E4E7F4E407ABE9CA7EC7422C9066E21F705A")
    for files, certifiers, when in (
        ([f"{l1}.asc", f"{dev}.asc", f"{srv}.asc"], [dev, srv], datetime(2019, 12, 1, tzinfo=UTC)),
        (["hockeypuck-gentoo-l1.asc", "hockeypuck-gentoo-l2-infra.asc"], [infra], datetime(2025, 6, 1, tzinfo=UTC)),
    ):
        home = GnuPG(tmp_path / when.strftime("%Y"))
        for name in files:
            home.import_with_certifications((keys_dir / name).read_bytes())
        listing = {k.fingerprint: k for k in home.check_sigs()}
        status = root_certifiers(listing, [l1], certifiers, when.timestamp(), 600)
        assert status == dict.fromkeys(certifiers, ""), status
        # A certifier is rooted by L1's certification only: as its own root, or with L1 unpinned, it is not.
        assert all(root_certifiers(listing, certifiers[:1], certifiers, when.timestamp(), 600).values())
        # The same material evaluated after the keys expired: no certifier counts any more.
        assert all(root_certifiers(listing, [l1], certifiers, datetime(2026, 12, 1, tzinfo=UTC).timestamp(),
                                   600).values())
        home.close()
    assert REAL.is_dir()


def test_evaluate_is_pure_on_a_listing(chain: Chain, tmp_path: Path) -> None:
    """The decision needs only a --check-sigs listing: the same listing, the same verdicts."""
    home = GnuPG(tmp_path / "home")
    home.import_with_certifications(chain.auth + chain.keys.public("alice", "bob", "l2-dev"))
    listing = home.check_sigs()
    fpr = {n: chain.keys.keys[n].fingerprint for n in ("l1", "l2-dev", "alice", "bob")}
    result = evaluate(listing, {fpr["l1"]: "auth/l1"}, {fpr["l2-dev"]: "auth/l2-dev"}, "gentoo.org")
    verdicts = {v.fingerprint: v.verdict for v in result.verdicts}
    assert verdicts[fpr["alice"]] is Verdict.CERTIFIED and verdicts[fpr["bob"]] is Verdict.NO_CERTIFICATION
    # Another domain: alice's certified UID no longer counts.
    other = evaluate(listing, {fpr["l1"]: "auth/l1"}, {fpr["l2-dev"]: "auth/l2-dev"}, "example.org")
    assert {v.verdict for v in other.verdicts if v.fingerprint in (fpr["alice"], fpr["bob"])} == {
        Verdict.WRONG_DOMAIN}
    home.close()


GENTOO_TODAY = {
    "gentoo": {"weekly": "13EBBDBEDE7A12775DFDB1BABB572E0E2D182910",
               "snapshot": "DCD05B71EAB94199527F44ACDB6B8C1F96D8BF6D",
               "releng": "D99EAC7379A850BCE47DA5F29E6438C817072058",
               "mirror": "EF9538C9E8E64311A52CDEDFA13D0EF1914E7A72"},
    "gentoo-auth": {"l1": "ABD00913019D6354BA1D9A132839FE0D796198B1",
                    "l2-dev": "2C13823B8237310FA213034930D132FF0FF50EEB",
                    "l2-srv": "18F703D702B1B9591373148C55D3238EC050396E",
                    "l2-infra": "ABA5E4E7F4E407ABE9CA7EC7422C9066E21F705A"},
    "gentoo-infra": {"mirror": "EF9538C9E8E64311A52CDEDFA13D0EF1914E7A72"},
}


def test_packaged_roots_pin_exactly_todays_fingerprints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Out of the box (no config file): the §8 fingerprints and nothing else, subkeys never as primaries."""
    config = tmp_path / "gkeys.conf"
    config.write_text(f"[base]\ngkeysdir = {tmp_path / 'state'}\n")
    assert main(["-c", str(config), "--json", "list-seed"]) == 0
    seeds = json.loads(capsys.readouterr().out)["seeds"]
    pinned: dict[str, dict[str, str]] = {}
    for seed in seeds:
        assert seed["keys"] == seed["fingerprint"] and len(seed["keys"]) == 1, seed
        pinned.setdefault(seed["category"], {})[seed["nick"]] = seed["keys"][0]
    assert pinned == GENTOO_TODAY
    assert "534E4209AB49EEE1C19D96162C44695DB9F6043D" not in json.dumps(seeds)  # the weekly signing subkey
    # No dead URL is tried: packaged categories say so, gentoo-devs comes from certifications.
    assert main(["-c", str(config), "fetch-seed", "-C", "gentoo"]) == 0
    assert "packaged with gkeys-portage (no seed URL" in capsys.readouterr().out
    assert main(["-c", str(config), "fetch-seed", "-C", "gentoo-devs"]) == 0
    assert "authority certifications" in capsys.readouterr().out
    loaded = load_config(config)
    assert loaded.seedurls == {} and loaded.verify_seeds == {}
    devs = loaded.authority.sources["gentoo-devs"]
    assert devs.location == "https://qa-reports.gentoo.org/output/active-devs.gpg"
    assert [str(c) for c in devs.certifiers] == ["gentoo-auth/l2-dev"]
    assert [str(r) for r in loaded.authority.roots] == ["gentoo-auth/l1"] and loaded.authority.domain == "gentoo.org"


def test_key_id_collision_with_a_pinned_certifier_refuses_the_keyring() -> None:
    """A downloaded key whose 64-bit key id equals a pinned certifier's could be checked in its place."""
    pinned = Fingerprint("2C13823B8237310FA213034930D132FF0FF50EEB")
    forged = "AAAAAAAAAAAAAAAAAAAAAAAA30D132FF0FF50EEB"
    listing = parse_colons(f"pub:-:255:22:30D132FF0FF50EEB:1554117745:::-:::cC:::::ed25519:::0:\n"
                           f"fpr:::::::::{forged}:\nuid:-::::1554117745::X::Forged <l2@gentoo.org>:::::::::0:\n")
    with pytest.raises(CollisionError, match="collides with auth/l2-dev"):
        _check_collisions(listing, {pinned: "auth/l2-dev"})
    _check_collisions(listing, {Fingerprint("ABD00913019D6354BA1D9A132839FE0D796198B1"): "auth/l1"})


def test_a_retirement_applies_even_when_the_update_is_refused(env: GkeysEnv, chain: Chain) -> None:
    """A truncated keyring that shows frank's certification revoked: the update is refused (max-shrink), yet
    frank's window closes at once, as a revocation applies at once (issue 41: kept, not removed)."""
    _authority_env(env, chain)
    env.server.publish("output/active-devs.gpg", chain.before)
    assert _update(env)[0] == 0
    frank = chain.keys.keys["frank"].fingerprint
    seeds = json.loads((env.state / "seeds" / "devs.seeds").read_text())
    assert seeds["frank"]["windows"][frank][-1]["until"] is None  # open
    nicks = set(seeds)
    env.server.publish("output/active-devs.gpg", chain.keys.public("alice", "frank", armor=False))
    code, data = _update(env)
    assert code == 1 and "max-shrink" in str(data), data
    seeds = json.loads((env.state / "seeds" / "devs.seeds").read_text())
    assert seeds["frank"]["windows"][frank][-1]["closed"] == "certification revoked", seeds["frank"]
    assert set(seeds) == nicks  # nothing else changed
