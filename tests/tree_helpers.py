"""Helpers for the tree-commit tests: signed repositories and a gentoo-devs keyring with chosen key versions."""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from gkeys_portage.core.config import load_config
from gkeys_portage.core.context import Gkeys
from gkeys_portage.demo.tree_repo import RepoBuilder
from gkeys_portage.demo.world import KeyFactory, past
from gkeys_portage.verify.gitobjects import GitRepo


def install_devs(env: Any, nicks: tuple[str, ...], public: dict[str, bytes] | None = None) -> None:
    """Like ``env.install_devs`` but the keyserver may serve a chosen version of a key."""
    env.bootstrap()
    env.publish_seeds("gentoo-devs", nicks)
    keys: KeyFactory = env.keys
    for nick in nicks:
        data = (public or {}).get(nick) or keys.public(nick)
        env.server.hkp[keys.keys[nick].fingerprint] = data
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


# -- emerge --sync in a throwaway Portage configuration -----------------------------------------------

PROJECT = Path(__file__).resolve().parent.parent


def gkeys_sync_module_installed() -> str | None:
    """None if Portage offers ``sync-type = gkeys``; else why not (for a clear skip message)."""
    if shutil.which("emerge") is None:
        return "emerge is not on PATH (pip install portage)"
    probe = subprocess.run([sys.executable, "-c", "import portage.sync as s; print('gkeys' in s.module_names)"],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(PROJECT)},
                           cwd="/", check=False)
    if probe.stdout.strip() != "True":
        return ("the gkeys sync module is not installed in portage/sync/modules/gkeys "
                f"(run a non-editable `pip install .`): {probe.stderr.strip()[-200:]}")
    return None


class PortageRoot:
    """A PORTAGE_CONFIGROOT + EPREFIX in a temp dir, and ``emerge --sync`` run in it.

    Git's system and global config are temp files (Portage's ``git config --system --add
    safe.directory`` lands there); ``PYTHONPATH`` points at this checkout so the installed shim
    and the hooks run the code under test.
    """

    def __init__(self, base: Path, gkeys_config: Path) -> None:
        self.base = base
        self.config_root = base / "config-root"
        self.eprefix = base / "eprefix"
        self.repos = base / "repos"
        self.etc = self.config_root / "etc" / "portage"
        (self.etc / "repos.conf").mkdir(parents=True)
        self.repos.mkdir()
        self.git_system = base / "gitconfig-system"
        self.git_global = base / "gitconfig-global"
        self.git_system.write_text("")
        self.git_global.write_text("")
        (self.etc / "make.conf").write_text(
            f'PKGDIR="{self.eprefix}/packages"\nDISTDIR="{self.eprefix}/distfiles"\n'
            f'PORTAGE_TMPDIR="{self.eprefix}/tmp"\n')
        user = pwd.getpwuid(os.getuid()).pw_name
        group = grp.getgrgid(os.getgid()).gr_name
        self.env = {**os.environ, "PORTAGE_CONFIGROOT": str(self.config_root),
                    "PORTAGE_OVERRIDE_EPREFIX": str(self.eprefix), "PORTAGE_USERNAME": user,
                    "PORTAGE_GRPNAME": group, "GIT_CONFIG_SYSTEM": str(self.git_system),
                    "GIT_CONFIG_GLOBAL": str(self.git_global), "GKEYS_CONFIG": str(gkeys_config),
                    "PYTHONPATH": str(PROJECT), "HOME": str(base), "FEATURES": "-news"}

    def location(self, name: str) -> Path:
        """Where repository ``name`` is synced to."""
        return self.repos / name

    def add_repo(self, name: str, uri: str, sync_type: str, **options: str) -> Path:
        """Write repos.conf for one repository (``sync_gkeys_policy="all"`` -> ``sync-gkeys-policy = all``)."""
        lines = [f"[DEFAULT]\nmain-repo = {name}\n", f"[{name}]", f"location = {self.location(name)}",
                 f"sync-type = {sync_type}", f"sync-uri = {uri}", "auto-sync = yes"]
        lines += [f"{key.replace('_', '-')} = {value}" for key, value in options.items()]
        (self.etc / "repos.conf" / f"{name}.conf").write_text("\n".join(lines) + "\n")
        return self.location(name)

    def install_hooks(self) -> None:
        """Symlink the gkeys hooks into the config root, as the README tells users to."""
        for kind in ("repo.postsync.d", "postsync.d"):
            (self.etc / kind).mkdir(exist_ok=True)
            (self.etc / kind / "gkeys-verify").symlink_to(PROJECT / "hooks" / kind / "gkeys-verify")

    def sync(self, *repos: str) -> subprocess.CompletedProcess[str]:
        """``emerge --sync [repos]``; stdout and stderr together in ``.stdout``."""
        return subprocess.run(["emerge", "--sync", *repos], env=self.env, cwd=self.base, capture_output=False,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                              check=False)


def head(path: Path) -> str:
    """The commit a work tree is at (git with the explicit environment)."""
    return GitRepo(path).resolve("HEAD")
