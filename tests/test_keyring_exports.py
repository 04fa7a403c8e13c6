"""The armored keyring (``keyrings/CAT.asc``) written from an export the installer already checked.

``install-key`` into a fresh category and ``update-seed`` whose download is exactly the kept keys adopt
a home whose export was made (and checked with ``gpg --show-keys``) before: the ``.asc`` must hold
exactly the keys of the installed keybox, no more, no fewer.
"""

from __future__ import annotations

from conftest import GkeysEnv
from test_authority import CERTIFIED, Chain, _authority_env, _update, chain  # noqa: F401 - chain is a fixture

from gkeys_portage.openpgp.gnupg import GnuPG


def _asc_and_keybox(env: GkeysEnv, category: str) -> tuple[set[str], set[str]]:
    asc = (env.state / "keyrings" / f"{category}.asc").read_bytes()
    reader = GnuPG(env.root / "reader")
    in_asc = reader.show_primaries(asc)
    in_keybox = {k.fingerprint for k in GnuPG(env.state / "keyrings" / category, read_only=True).list_keys()}
    return set(in_asc), in_keybox


def test_fresh_install_key_exports_exactly_the_installed_keys(env: GkeysEnv) -> None:
    env.bootstrap()
    env.publish_seeds("gentoo-devs", ("alice", "bob"))
    assert env.run("fetch-seed", "-C", "gentoo-devs").code == 0
    for nick in ("alice", "bob"):
        env.server.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick)  # quarantine == keyring: adopted
    assert env.run("install-key", "-C", "gentoo-devs").code == 0
    in_asc, in_keybox = _asc_and_keybox(env, "gentoo-devs")
    assert in_asc == in_keybox == {env.keys.keys["alice"].fingerprint, env.keys.keys["bob"].fingerprint}


def test_update_seed_fast_path_exports_exactly_the_kept_keys(env: GkeysEnv, chain: Chain) -> None:  # noqa: F811
    _authority_env(env, chain)
    kept = [n for n in CERTIFIED if n != "frank"]
    env.server.publish("output/active-devs.gpg", chain.keys.public(*kept, armor=False))  # nothing to drop
    code, data = _update(env)
    assert code == 0, data
    in_asc, in_keybox = _asc_and_keybox(env, "devs")
    assert in_asc == in_keybox == {chain.keys.keys[n].fingerprint for n in kept}
