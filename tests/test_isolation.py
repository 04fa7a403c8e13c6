"""gpg is isolated from the caller's environment, config files and agent; unsafe config is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import GkeysEnv

from gkeys_portage.core.gpg import GnuPG


def test_hostile_gnupghome_and_gpg_conf_do_not_change_the_verdict(env: GkeysEnv, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A GNUPGHOME holding mallory's key, a gpg.conf that trusts everything and fetches keys: no effect."""
    env.install_devs("alice")
    hostile = tmp_path / "hostile-gnupg"
    GnuPG(hostile).import_keys(env.keys.public("mallory"))
    (hostile / "gpg.conf").write_text("trust-model always\nauto-key-retrieve\nkeyserver hkp://127.0.0.1:1\n")
    monkeypatch.setenv("GNUPGHOME", str(hostile))
    monkeypatch.setenv("GPG_AGENT_INFO", str(hostile / "S.gpg-agent:1:1"))
    doc = tmp_path / "doc"
    doc.write_bytes(b"doc")
    (tmp_path / "doc.asc").write_bytes(env.keys.sign("mallory", doc))
    result = env.run("verify", "-F", str(doc), "-C", "gentoo-devs")
    assert result.code == 1 and "unknown key" in result.text
    # A gpg.conf inside the category's own keyring home is ignored too (--no-options).
    (env.state / "keyrings" / "gentoo-devs" / "gpg.conf").write_text("keyring " + str(hostile / "pubring.kbx") + "\n")
    result = env.run("verify", "-F", str(doc), "-C", "gentoo-devs")
    assert result.code == 1 and "unknown key" in result.text


def test_world_writable_config_is_refused(env: GkeysEnv) -> None:
    os.chmod(env.config, 0o666)
    result = env.run("list-cats")
    assert result.code == 2 and "world-writable" in result.text
