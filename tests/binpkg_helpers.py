"""Shared set-up for the binary package home tests: pinned seeds, a home readable by ``nobody``, and
Portage's own signature check (``portage.gpkg.checksum_helper``) run the way Portage runs it."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import GkeysEnv

from gkeys_portage.core.types import Nick
from gkeys_portage.keys.seeds import Seed, dump_seeds
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.portage.binpkg import GPG_CONF_TEXT

#: Which session key plays which Gentoo role: ``weekly`` is pinned for binpkgs, ``snapshot`` is in the
#: same category but not pinned (getuto would trust it), ``mallory`` is in no seed.
ROLES = {"weekly": "releng", "snapshot": "alice"}


def install_gentoo(env: GkeysEnv, roles: dict[str, str] = ROLES, imported: tuple[str, ...] | None = None) -> None:
    """Write a ``gentoo`` seed file for ``roles`` and import each role's key (or only ``imported``)."""
    seeds = {}
    for nick, keynick in roles.items():
        key = env.keys.keys[keynick]
        seeds[Nick(nick)] = Seed(Nick(nick), key.name, nick, [key.fingerprint],
                                 [key.fingerprint, key.signing_subkey], [key.uid])
    seed_dir = env.state / "seeds"
    seed_dir.mkdir(parents=True, exist_ok=True)
    (seed_dir / "gentoo.seeds").write_bytes(dump_seeds(seeds))
    for nick, keynick in roles.items():
        if imported is not None and nick not in imported:
            continue
        keyfile = env.root / f"{keynick}.asc"
        keyfile.write_bytes(env.keys.public(keynick))
        result = env.run("import-key", "-C", "gentoo", "-n", nick, "-F", str(keyfile))
        assert result.code == 0, result.text


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A directory ``nobody`` can read (pytest's tmp dirs are 0700), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="gkeys-binpkg-test-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def portage_globals() -> dict[str, str]:
    """Portage's own ``make.globals`` (the verify command, the user it drops to)."""
    from portage.const import GLOBAL_CONFIG_PATH
    from portage.util import getconfig

    path = Path(GLOBAL_CONFIG_PATH) / "make.globals"
    if not path.is_file():  # the PyPI wheel installs it under the venv's prefix
        path = Path(sys.prefix) / "share/portage/config/make.globals"
    values = getconfig(str(path), expand=False)
    assert values and "BINPKG_GPG_VERIFY_BASE_COMMAND" in values, path
    return dict(values)


class _Settings(dict[str, str]):
    """The two things ``checksum_helper`` asks of Portage's config object."""

    features: frozenset[str] = frozenset({"binpkg-request-signature"})

    def environ(self) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C"}


def portage_accepts(home: Path, signature: bytes, data: bytes) -> bool:
    """True if Portage's GPKG signature check (``checksum_helper``, VERIFY) accepts ``signature`` over
    ``data`` with ``home`` as ``BINPKG_GPG_VERIFY_GPG_HOME`` (as root it drops to ``nobody`` itself)."""
    from portage.exception import InvalidSignature
    from portage.gpkg import checksum_helper

    settings = _Settings(portage_globals())
    settings["BINPKG_GPG_VERIFY_GPG_HOME"] = str(home)
    helper = checksum_helper(settings, gpg_operation=checksum_helper.VERIFY, signature=signature)
    helper.update(data)
    try:
        helper.finish()
    except InvalidSignature:
        return False
    return True


def getuto_home(env: GkeysEnv, path: Path, keynicks: list[str]) -> Path:
    """A control home with getuto's trust set: every key of the category trusted for binary packages
    (same gpg.conf and trust mechanism as ours, so only the set of keys differs)."""
    gpg = GnuPG(path)
    gpg.import_keys(env.keys.public(*keynicks, armor=False))
    gpg.import_ownertrust({env.keys.keys[k].fingerprint: 5 for k in keynicks})
    (path / "gpg.conf").write_text(GPG_CONF_TEXT)
    for entry in path.iterdir():
        os.chmod(entry, 0o755 if entry.is_dir() else 0o644)
    os.chmod(path, 0o755)
    return path
