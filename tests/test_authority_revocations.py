"""Revocations at every level of an authority chain apply at once (issue 23 items 3-5, 8; keys/authority.py).

A real L1 -> L2 -> developers chain (gpg in the test), the developers' keyring and the certifiers served
over HTTP on 127.0.0.1 as Gentoo serves active-devs.gpg and keys.gentoo.org.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import GkeysEnv

from gkeys_portage.demo.world import KeyFactory, LoopbackServer, past
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.keyblocks import split_keyblocks

DEVS = ("alice", "amy", "ann")  # certified by l2-dev
OTHER = ("sam",)  # certified by l2-srv


@dataclass
class Revoked:
    """One chain, exported as it stood before and after each revocation."""

    keys: KeyFactory
    auth: bytes  # l1, l2-dev, l2-srv as installed (L1's certifications are dropped by the clean import)
    l2_ok: bytes  # l2-dev as a keyserver publishes it: certified by L1
    l2_decertified: bytes  # ... after L1 revoked that certification
    l2_revoked: bytes  # ... after its owner revoked it (L1's certification still there)
    l2_srv: bytes
    devs: bytes  # the developers' keyring (binary, as active-devs.gpg)
    devs_only: bytes  # ... without l2-srv's developers (a truncated copy)
    devs_uid_gone: bytes  # ... after L2 revoked amy's certification and amy revoked that user id
    alice_revoked: bytes  # alice as the keyservers publish her after she revoked her key


def _with(home: Path, *blobs: bytes, fpr: str) -> bytes:
    gpg = GnuPG(home)
    for blob in blobs:
        gpg.import_with_certifications(blob)
    data = gpg.export_keys([fpr], clean=False)
    gpg.close()
    return data


@pytest.fixture(scope="module")
def revoked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Revoked]:
    keys = KeyFactory(tmp_path_factory.mktemp("revoked-chain"))
    born = past(800)
    for nick in ("l1", "l2-dev", "l2-srv"):
        keys.create(nick, email=f"openpgp-auth+{nick}@gentoo.org", created=born, expire="5y")
    keys.certify("l1", "l2-dev")
    keys.certify("l1", "l2-srv")
    for nick in (*DEVS, *OTHER):
        keys.create(nick, created=born, expire="5y")
        if nick == "amy":  # a second user id, so that the gentoo.org one can be revoked
            keys.gpg.add_uid(keys.keys[nick].fingerprint, "Amy <amy@example.org>")
        keys.certify("l2-srv" if nick in OTHER else "l2-dev", nick, expire="1y")
    l2_ok = keys.public("l2-dev")
    devs = keys.public(*DEVS, *OTHER, armor=False)
    devs_only = keys.public(*DEVS, armor=False)
    alice = keys.keys["alice"].fingerprint
    alice_revoked = _with(tmp_path_factory.mktemp("alice-revoked"), keys.public("alice"), keys.revocation("alice"),
                          fpr=alice)
    fpr = keys.keys["l2-dev"].fingerprint
    l2_revoked = _with(tmp_path_factory.mktemp("l2-revoked"), l2_ok, keys.revocation("l2-dev"), fpr=fpr)
    # The roots' file is exported before L1's revocation: a kept copy of the file (air-gapped installs) holds
    # every certification it carried, so a file exported later would itself bring the revocation.
    auth = keys.public("l1", "l2-dev", "l2-srv")
    keys.revoke_certification("l1", "l2-dev")
    l2_decertified = keys.public("l2-dev")
    keys.revoke_certification("l2-dev", "amy")
    amy = keys.keys["amy"]
    keys.gpg.revoke_uid(amy.fingerprint, amy.uid)
    yield Revoked(keys, auth, l2_ok, l2_decertified, l2_revoked,
                  keys.public("l2-srv"), devs, devs_only, keys.public(*DEVS, *OTHER, armor=False),
                  alice_revoked)
    keys.close()


def _setup(env: GkeysEnv, chain: Revoked, certifiers: tuple[str, ...] = ("l2-dev", "l2-srv"),
           extra: str = "", keyservers: str | None = None, max_shrink: int = 10) -> None:
    """Pin l1/l2-dev/l2-srv as category auth (imported from a file), serve the certifiers and the keyring."""
    env.server.hkp[chain.keys.keys["l2-dev"].fingerprint] = chain.l2_ok
    env.server.hkp[chain.keys.keys["l2-srv"].fingerprint] = chain.l2_srv
    keyfile = env.root / "auth.asc"
    keyfile.write_bytes(chain.auth)
    for nick in ("l1", "l2-dev", "l2-srv"):
        key = chain.keys.keys[nick]
        assert env.run("add-seed", "-C", "auth", "-n", nick, "-N", nick, "-K", key.fingerprint).code == 0
        result = env.run("import-key", "-C", "auth", "-n", nick, "-F", str(keyfile))
        assert result.code == 0, result.text
    env.server.publish("output/active-devs.gpg", chain.devs)
    refs = " ".join(f"auth/{c}" for c in certifiers)
    env.write_config(f"[authority-seeds]\ndevs = {env.server.url}/output/active-devs.gpg {refs}\n"
                     f"[authority]\nroots = auth/l1\ndomain = gentoo.org\nmax-shrink = {max_shrink}\n" + extra,
                     keyservers=keyservers)


def _seeds(env: GkeysEnv) -> set[str]:
    """The seeds with a key still authorized (issue 41: a key gone from the keyring is kept, retired)."""
    seeds = json.loads((env.state / "seeds" / "devs.seeds").read_text())
    return {nick for nick, seed in seeds.items()
            if any(any(w["until"] is None for w in seed.get("windows", {}).get(f, [{"until": None}]))
                   for f in seed["keys"])}


def _keyring(env: GkeysEnv, chain: Revoked) -> set[str]:
    names = {k.fingerprint: n for n, k in chain.keys.keys.items()}
    home = GnuPG(env.state / "keyrings" / "devs", read_only=True)
    return {names[k.fingerprint] for k in home.list_keys()}


def test_root_decertifying_a_certifier_drops_its_developers_at_once(env: GkeysEnv, revoked: Revoked) -> None:
    """L1 revokes its certification of l2-dev: 3 of 4 seeds go (75 %, max-shrink 10 %), exit 0."""
    _setup(env, revoked)
    assert env.run("update-seed", "-C", "devs").code == 0
    assert _seeds(env) == {*DEVS, *OTHER}
    env.server.hkp[revoked.keys.keys["l2-dev"].fingerprint] = revoked.l2_decertified
    result = env.run("--json", "update-seed", "-C", "devs")
    assert result.code == 0, result.text
    assert _seeds(env) == set(OTHER) and _keyring(env, revoked) == set(OTHER)
    update = json.loads(result.out)["updated"][0]
    assert {v["verdict"] for v in update["dropped"]} == {"certifier-revoked"}
    assert "revoked" in update["certifiers"][revoked.keys.keys["l2-dev"].fingerprint]
    # Served the older copy of l2-dev again (L1's certification, not its revocation): still dropped.
    env.server.hkp[revoked.keys.keys["l2-dev"].fingerprint] = revoked.l2_ok
    assert env.run("update-seed", "-C", "devs").code == 0
    assert _seeds(env) == set(OTHER)
    # the trust journal: the certifier's change is one history line, the update that changed nothing none
    history = env.run("history", "-C", "devs").out.splitlines()
    l2_dev = revoked.keys.keys["l2-dev"].fingerprint
    assert [line for line in history if "3 removed" in line and f"{l2_dev} rooted -> " in line], history
    assert len([line for line in history if "from certifications" in line]) == 2, history


def test_a_revoked_only_certifier_empties_the_seeds_in_update_and_refresh(env: GkeysEnv, revoked: Revoked) -> None:
    """l2-dev's owner revokes it: update-seed applies it (no "no certifier is usable ... nothing changed"),
    and so does refresh-key (never exit 0 with the developers still trusted)."""
    _setup(env, revoked, certifiers=("l2-dev",))
    env.server.publish("output/active-devs.gpg", revoked.devs_only)
    assert env.run("update-seed", "-C", "devs").code == 0
    assert _seeds(env) == set(DEVS)
    env.server.hkp[revoked.keys.keys["l2-dev"].fingerprint] = revoked.l2_revoked
    result = env.run("refresh-key", "-C", "devs", "--force")
    assert result.code == 0 and "refresh failed" not in result.err, result.text
    assert _seeds(env) == set() and _keyring(env, revoked) == set()


def test_revocations_survive_a_refused_update_and_a_malformed_record_is_an_error(
        env: GkeysEnv, revoked: Revoked) -> None:
    _setup(env, revoked)
    assert env.run("update-seed", "-C", "devs").code == 0
    # L1's revocation arrives with a truncated keyring (sam missing: a shrink no revocation explains).
    env.server.hkp[revoked.keys.keys["l2-dev"].fingerprint] = revoked.l2_decertified
    env.server.publish("output/active-devs.gpg", revoked.devs_only)
    refused = env.run("update-seed", "-C", "devs")
    assert refused.code == 1 and "refusing to empty" in refused.err and "revoked keys were removed" in refused.err
    assert _seeds(env) == set(OTHER) and _keyring(env, revoked) == set(OTHER)  # the revocation applied
    # The whole, older world again: the recorded revocation keeps l2-dev's developers out.
    env.server.hkp[revoked.keys.keys["l2-dev"].fingerprint] = revoked.l2_ok
    env.server.publish("output/active-devs.gpg", revoked.devs)
    assert env.run("update-seed", "-C", "devs").code == 0
    assert _seeds(env) == set(OTHER)
    record = env.state / "state" / "authority.json"
    assert record.is_file(), sorted(p.name for p in env.state.rglob("*.json"))
    data = json.loads(record.read_text())
    data["devs"]["certifications"] = ["not", "an", "object"]
    record.write_text(json.dumps(data))
    broken = env.run("update-seed", "-C", "devs")
    assert broken.code != 0 and "malformed" in broken.err and "Traceback" not in broken.err


def test_a_stale_first_keyserver_does_not_hide_the_roots_revocation(env: GkeysEnv, revoked: Revoked) -> None:
    """The first keyserver serves l2-dev as it was (certified by L1), the second with L1's revocation of
    that certification: every source is asked and the answers merged, so the revocation applies."""
    second = LoopbackServer()
    try:
        _setup(env, revoked, keyservers=f"{env.server.url} {second.url}")
        assert env.run("update-seed", "-C", "devs").code == 0
        assert _seeds(env) == {*DEVS, *OTHER}
        second.hkp[revoked.keys.keys["l2-dev"].fingerprint] = revoked.l2_decertified
        result = env.run("update-seed", "-C", "devs")
        assert result.code == 0, result.text
        assert _seeds(env) == set(OTHER) and _keyring(env, revoked) == set(OTHER)
    finally:
        second.close()


def test_refresh_of_an_authority_category_asks_every_key_source(env: GkeysEnv, revoked: Revoked) -> None:
    """alice revokes her key on the keyserver; active-devs.gpg still carries the old copy.  refresh-key
    --force re-reads the keyring *and* refreshes the kept keys from every source: the revocation applies,
    and a later update-seed from the stale keyring does not bring her back."""
    _setup(env, revoked)
    assert env.run("update-seed", "-C", "devs").code == 0
    alice = revoked.keys.keys["alice"].fingerprint
    env.server.hkp[alice] = revoked.alice_revoked
    result = env.run("refresh-key", "-C", "devs", "--force")
    assert result.code == 0, result.text
    home = GnuPG(env.state / "keyrings" / "devs", read_only=True)
    assert {k.fingerprint: k.primary.revoked for k in home.list_keys()}[alice] is True
    assert env.run("update-seed", "-C", "devs").code == 0
    assert _seeds(env) == {*DEVS, *OTHER} - {"alice"}


def test_a_revoked_user_id_keeps_its_revoked_certification_on_record(env: GkeysEnv, revoked: Revoked) -> None:
    """L2 revokes its certification of amy@gentoo.org and amy revokes that user id: serving the older
    keyring afterwards must not bring her back (the certification revocation sat on a revoked user id,
    which was skipped before revocations were noted)."""
    _setup(env, revoked)
    assert env.run("update-seed", "-C", "devs").code == 0
    env.server.publish("output/active-devs.gpg", revoked.devs_uid_gone)
    assert env.run("update-seed", "-C", "devs").code == 0
    assert _seeds(env) == {*DEVS, *OTHER} - {"amy"}
    env.server.publish("output/active-devs.gpg", revoked.devs)  # replayed: amy as she was
    result = env.run("--json", "update-seed", "-C", "devs")
    assert result.code == 0, result.text
    assert _seeds(env) == {*DEVS, *OTHER} - {"amy"} and "amy" not in _keyring(env, revoked)
    verdicts = {v["nick"]: v["verdict"] for v in json.loads(result.out)["updated"][0]["dropped"]}
    assert verdicts == {"amy": "uid-revoked"}


def _without(chain: Revoked, *nicks: str) -> bytes:
    gone = {chain.keys.keys[n].fingerprint for n in nicks}
    return b"".join(block.data for block in split_keyblocks(chain.devs) if block.primary not in gone)


def test_max_shrink_counts_from_the_largest_recent_set_not_the_last_one(env: GkeysEnv, revoked: Revoked) -> None:
    """A mirror dropping one developer per run (each step within max-shrink = 40 % of the last set) is
    refused once the loss from the largest set seen within shrink-window passes 40 %."""
    _setup(env, revoked, max_shrink=40)
    assert env.run("update-seed", "-C", "devs").code == 0  # 4 seeds
    env.server.publish("output/active-devs.gpg", _without(revoked, "ann"))
    assert env.run("update-seed", "-C", "devs").code == 0  # 3 of 4: 25 %
    env.server.publish("output/active-devs.gpg", _without(revoked, "ann", "alice"))
    refused = env.run("update-seed", "-C", "devs")  # 2 of 3 would be 33 %, but 2 of 4 is 50 %
    assert refused.code == 1 and "would remove 2 of 4 seeds" in refused.err, refused.text
    assert "largest set installed in the last 30 days" in refused.err
    assert _seeds(env) == {"alice", "amy", "sam"}
    assert env.run("update-seed", "-C", "devs", "--allow-shrink").code == 0  # accepted by hand: the new reference
    assert _seeds(env) == {"amy", "sam"}
    env.server.publish("output/active-devs.gpg", revoked.devs)
    assert env.run("update-seed", "-C", "devs").code == 0
    # Outside the window the reference is the installed set again.
    env.config.write_text(env.config.read_text().replace("max-shrink = 40", "max-shrink = 40\nshrink-window = 0"))
    env.server.publish("output/active-devs.gpg", _without(revoked, "ann"))
    assert env.run("update-seed", "-C", "devs").code == 0
    env.server.publish("output/active-devs.gpg", _without(revoked, "ann", "alice"))
    assert env.run("update-seed", "-C", "devs").code == 0


def test_a_blocked_keyring_download_does_not_keep_a_revoked_certifiers_developers(
        env: GkeysEnv, revoked: Revoked) -> None:
    """The keyring download fails (blocked) while the keyserver publishes l2-dev's revocation: with no
    certifier left, every developer goes; refresh-key still warns (the keyring was not read)."""
    _setup(env, revoked, certifiers=("l2-dev",))
    env.server.publish("output/active-devs.gpg", revoked.devs_only)
    assert env.run("update-seed", "-C", "devs").code == 0
    del env.server.files["/output/active-devs.gpg"]
    env.server.hkp[revoked.keys.keys["l2-dev"].fingerprint] = revoked.l2_revoked
    result = env.run("refresh-key", "-C", "devs", "--force")
    assert result.code == 0 and "every certifier of devs is revoked" in result.err, result.text
    assert _seeds(env) == set() and _keyring(env, revoked) == set()
