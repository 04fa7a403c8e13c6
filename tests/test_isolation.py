"""gpg is isolated from the caller's environment, config files and agent; unsafe config is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import GkeysEnv

from gkeys_portage.openpgp.gnupg import GnuPG


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


def test_symlink_planted_as_a_keyring_home_is_refused(env: GkeysEnv, tmp_path: Path) -> None:
    """A local user who can write into the state dir must not redirect a keyring to their own."""
    env.install_devs("alice")
    home = env.state / "keyrings" / "gentoo-devs"
    hostile = tmp_path / "hostile-home"
    GnuPG(hostile).import_keys(env.keys.public("mallory"))
    home.rename(tmp_path / "moved-away")
    home.symlink_to(hostile)
    doc = tmp_path / "doc"
    doc.write_bytes(b"doc")
    (tmp_path / "doc.asc").write_bytes(env.keys.sign("mallory", doc))
    result = env.run("verify", "-F", str(doc), "-C", "gentoo-devs")
    assert result.code == 2 and "symbolic link" in result.text


def test_symlinked_seed_file_is_replaced_not_followed(env: GkeysEnv, tmp_path: Path) -> None:
    """Atomic writes rename over a planted symlink; the file it pointed to is never written."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (env.state / "seeds").mkdir(parents=True)
    (env.state / "seeds" / "devs.seeds").symlink_to(victim)
    assert env.run("add-seed", "-C", "devs", "-n", "a", "-N", "A", "-K", "A" * 40).code == 2  # unreadable target
    (env.state / "seeds" / "devs.seeds").unlink()
    (env.state / "seeds" / "devs.seeds").symlink_to(tmp_path / "dangling")
    assert env.run("add-seed", "-C", "devs", "-n", "a", "-N", "A", "-K", "A" * 40).code == 0
    assert victim.read_text() == "precious\n" and not (tmp_path / "dangling").exists()
    assert not (env.state / "seeds" / "devs.seeds").is_symlink()


def test_multiple_clearsigned_blocks_are_refused(env: GkeysEnv, tmp_path: Path) -> None:
    env.install_devs("alice")
    one, two = tmp_path / "one", tmp_path / "two"
    one.write_text("first block\n")
    two.write_text("second block\n")
    doubled = tmp_path / "doubled.txt"
    doubled.write_bytes(env.keys.sign("alice", one, clearsign=True) + env.keys.sign("alice", two, clearsign=True))
    result = env.run("verify", "-F", str(doubled), "-C", "gentoo-devs")
    assert result.code != 0 and "more than one signed message" in result.text
