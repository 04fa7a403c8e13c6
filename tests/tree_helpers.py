"""Helpers for the tree-commit tests: signed repositories and a gentoo-devs keyring with chosen key versions."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from conftest import keys_installed_by_gnupg

from gkeys_portage.core.config import load_config
from gkeys_portage.demo.tree_repo import RepoBuilder
from gkeys_portage.demo.world import KeyFactory, past
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.verify.git.objects import GitRepo


def install_devs(env: Any, nicks: tuple[str, ...], public: dict[str, bytes] | None = None) -> None:
    """Like ``env.install_devs`` but the keyserver may serve a chosen version of a key."""
    env.bootstrap()
    env.publish_seeds("gentoo-devs", nicks)
    keys: KeyFactory = env.keys
    for nick in nicks:
        data = (public or {}).get(nick) or keys.public(nick)
        env.server.hkp[keys.keys[nick].fingerprint] = data
    with keys_installed_by_gnupg():
        result = env.run("update-seed", "-C", "gentoo-devs")
    assert result.code == 0, result.text


def context(env: Any) -> Gkeys:
    """A Gkeys context on the test's config."""
    return Gkeys(load_config(env.config))


def revoke(env: Any, nick: str) -> None:
    """Import ``nick``'s revocation certificate into the gentoo-devs keyring."""
    keys: KeyFactory = env.keys
    ctx = context(env)
    with ctx.lock, ctx.keyring("gentoo-devs").update() as gpg:
        gpg.import_keys(keys.revocation(nick))


def expiring_key(keys: KeyFactory, nick: str) -> bytes:
    """A key made 800 days ago that expired after a year; returns its public key as it expired."""
    if nick not in keys.keys:
        keys.create(nick, created=past(800), expire="1y")
    return keys.public(nick)


def extend_secret_key(keys: KeyFactory, nick: str) -> datetime:
    """Extend the expiry of ``nick``'s *secret* copy (dated 300 days ago), so it can sign after its old
    expiry; return such a moment.  The keyring under test keeps the old, expired public key."""
    extender = keys._at(past(300))
    key = keys.keys[nick]
    extender.set_expiry(key.fingerprint, "2y")
    # "*" skips an expired subkey; name it explicitly.
    result = extender.run(["--pinentry-mode", "loopback", "--passphrase-fd", "0", "--quick-set-expire",
                           key.fingerprint, "2y", key.signing_subkey], passphrase="")
    assert result.returncode == 0, result.stderr
    return past(200)


def build(path: Path, keys: KeyFactory, signers: list[str | None]) -> RepoBuilder:
    """A repository with one commit per entry of ``signers`` (None = unsigned)."""
    repo = RepoBuilder(path, keys)
    for signer in signers:
        repo.commit(signer)
    return repo


def records(env: Any) -> dict[str, dict[str, str]]:
    """The tree-revisions record (empty if absent)."""
    path = env.state / "state" / "tree-revisions.json"
    return json.loads(path.read_text()) if path.exists() else {}


PROJECT = Path(__file__).resolve().parent.parent


def head(path: Path) -> str:
    """The commit a work tree is at (git with the explicit environment; the tree may belong to a sync user)."""
    return GitRepo(path, owners={path.stat().st_uid}).resolve("HEAD")
