"""SIGKILL in the known windows of issue 36 (cases 2, 3 and 4): each run is killed at one exact step (see
kill_helpers), then the state is checked as a user would meet it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import GkeysEnv
from kill_helpers import kill_group_during, run_killed
from test_setup_portage import _serve_revoked, _webrsync_set_up, snapshot

KILLED = -9


def _empty_root(tmp_path: Path) -> Path:
    root = tmp_path / "empty"
    root.mkdir()
    return root


@pytest.mark.parametrize("when", ["before", "after"])
def test_undo_after_a_setup_killed_around_a_rename_leaves_the_root_as_it_was(env: GkeysEnv, tmp_path: Path,
                                                                            when: str) -> None:
    """Killed just before zz-gkeys.conf is renamed in (its temp file written) or just after (not recorded
    yet): --undo removes the file and the temp file, so ::gentoo is not left on sync-type = gkeys."""
    root = _empty_root(tmp_path)
    assert run_killed(env.config, ["setup-portage", "--eroot", str(root)], function="rename",
                      match="zz-gkeys.conf", when=when) == KILLED
    leftovers = list((root / "etc/portage/repos.conf").iterdir())
    assert leftovers, "the kill did not land where the test wants it"
    result = env.run("setup-portage", "--eroot", str(root), "--undo")
    assert result.code == 0, result.text
    assert snapshot(root) == {}, result.text


def test_setup_again_after_a_kill_between_rename_and_record_records_the_file(env: GkeysEnv, tmp_path: Path) -> None:
    """A rerun after the kill finishes what was started: the file it finds is recorded, so --undo removes it."""
    root = _empty_root(tmp_path)
    assert run_killed(env.config, ["setup-portage", "--eroot", str(root)], function="rename",
                      match="zz-gkeys.conf") == KILLED
    result = env.run("setup-portage", "--eroot", str(root))
    assert result.code == 0, result.text
    result = env.run("setup-portage", "--eroot", str(root), "--undo")
    assert result.code == 0 and snapshot(root) == {}, result.text


def test_a_webrsync_keyring_rewritten_by_a_killed_refresh_is_still_setups(env: GkeysEnv, tmp_path: Path) -> None:
    """refresh-key killed after rewriting the webrsync keyring, before the record: the next refresh does not call
    it edited by hand, and --undo removes it."""
    keyring = _webrsync_set_up(env, tmp_path)
    root = keyring.parents[3]
    _serve_revoked(env, tmp_path, "bob")
    assert run_killed(env.config, ["refresh-key", "-C", "gentoo", "--force"], function="rename",
                      match="gentoo.asc") == KILLED
    result = env.run("refresh-key", "-C", "gentoo", "--force", "--json")
    assert result.code == 0 and '"edited"' not in result.out, result.text
    result = env.run("setup-portage", "--eroot", str(root), "--undo")
    assert result.code == 0 and not keyring.exists() and not list(keyring.parent.glob(".*")), result.text


def _doc(env: GkeysEnv, nick: str) -> Path:
    doc = env.root / f"doc-{nick}"
    doc.write_bytes(b"doc")
    (env.root / f"doc-{nick}.asc").write_bytes(env.keys.sign(nick, doc))
    return doc


def _views(env: GkeysEnv, doc: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """verify's exit status as the keyring's owner (the keybox) and as a read-only reader (the export)."""
    owner = env.run("verify", "-F", str(doc), "-C", "gentoo-devs").code
    with monkeypatch.context() as patch:
        patch.setenv("GKEYS_READ_ONLY_KEYRINGS", "1")
        reader = env.run("verify", "-F", str(doc), "-C", "gentoo-devs").code
    return owner, reader


@pytest.mark.parametrize("match", ["pubring.kbx", "gentoo-devs.asc"])
def test_a_refresh_killed_between_keybox_and_export_leaves_one_view(env: GkeysEnv, tmp_path: Path, match: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """refresh-key brings bob's revocation; killed right after either of the keyring's two files is renamed in,
    the owner (keybox) and Portage's unprivileged readers (export) still agree: both see the revocation or
    neither does.  The next run finishes it, and no staging home stays in keyrings/."""
    env.install_devs("alice", "bob")
    doc = _doc(env, "bob")
    assert _views(env, doc, monkeypatch) == (0, 0)
    _serve_revoked(env, tmp_path, "bob")
    assert run_killed(env.config, ["refresh-key", "-C", "gentoo-devs", "--force"], function="replace",
                      match=match) == KILLED
    owner, reader = _views(env, doc, monkeypatch)
    assert owner == reader, f"the keybox says {owner}, the export {reader}"
    assert env.run("refresh-key", "-C", "gentoo-devs", "--force").code == 0
    assert 0 not in _views(env, doc, monkeypatch)
    assert not [p.name for p in (env.state / "keyrings").iterdir() if p.name.startswith(".")]


def test_an_update_killed_between_export_and_keybox_leaves_one_view_of_a_new_key(
        env: GkeysEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """update-seed brings carol's key; killed right after the export is renamed in (the keybox still the old
    one), the owner reads the export as Portage's readers do: both verify carol's signature.  (A revocation is
    no test of this: the key history, written first, carries it to the owner whichever file it reads.)"""
    env.install_devs("alice")
    doc = _doc(env, "carol")
    env.publish_seeds("gentoo-devs", ("alice", "carol"))
    env.server.hkp[env.keys.keys["carol"].fingerprint] = env.keys.public("carol")
    assert run_killed(env.config, ["update-seed", "-C", "gentoo-devs"], function="replace",
                      match="gentoo-devs.asc") == KILLED
    owner, reader = _views(env, doc, monkeypatch)
    assert (owner, reader) == (0, 0), f"the keybox says {owner}, the export {reader}"


def test_a_killed_key_operation_leaves_no_staging_or_quarantine_home(env: GkeysEnv, tmp_path: Path) -> None:
    """update-seed killed while its quarantine and staging homes exist: the next key operation removes them."""
    env.install_devs("alice")
    env.publish_seeds("gentoo-devs", ("alice", "bob"))
    env.server.hkp[env.keys.keys["bob"].fingerprint] = env.keys.public("bob")
    assert run_killed(env.config, ["update-seed", "-C", "gentoo-devs"], function="replace",
                      match="pubring.kbx", when="before") == KILLED
    keyrings = env.state / "keyrings"
    assert [p for p in keyrings.iterdir() if p.name.startswith(".staging-")], "the kill did not land"
    assert env.run("update-seed", "-C", "gentoo-devs").code == 0
    assert not [p.name for p in keyrings.iterdir() if p.name.startswith(".")]


SCRATCH_CODE = """
from pathlib import Path
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp import engine
engine.probe()
gpg = GnuPG(Path({home!r}))
sig, data = Path({sig!r}).read_bytes(), Path({data!r}).read_bytes()
gpg.verify_detached(sig, data)
gpg.verify_detached_many([(sig, data)], scratch={scratch!r})
"""


@pytest.mark.parametrize(("function", "match"), [("mkdir", "gkeys-engine-*"), ("open", "gkeys-sig-*"),
                                                 ("mkdir", "gkeys-multifile-*")])
def test_scratch_of_a_killed_run_is_removed_by_the_next_at_once(env: GkeysEnv, tmp_path: Path, function: str,
                                                                match: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe home, a signature file, a multifile copy (in /dev/shm: memory) of a SIGKILLed run: the next run
    removes them at once, not a day later; another run's scratch (alive) stays."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    data = _doc(env, "alice")
    home = tmp_path / "verifier"
    home.mkdir(mode=0o700)
    code = SCRATCH_CODE.format(home=str(home), sig=f"{data}.asc", data=str(data), scratch=str(scratch))
    child = dict(os.environ, TMPDIR=str(scratch))
    assert run_killed(None, [], function=function, match=match, code=code, env=child) == KILLED
    prefix = match[:-1]
    assert [p for p in scratch.iterdir() if p.name.startswith(prefix)], "the kill did not land"
    from gkeys_portage.core import scratch as scratch_module
    from gkeys_portage.openpgp import engine
    from gkeys_portage.openpgp.gnupg import GnuPG

    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(scratch_module, "_SWEPT", set(), raising=False)  # swept once per process
    engine.forget("gpg")
    try:
        gpg = GnuPG(home)
        signature, payload = Path(f"{data}.asc").read_bytes(), data.read_bytes()
        gpg.verify_detached(signature, payload)
        gpg.verify_detached_many([(signature, payload)], scratch=str(scratch))
    finally:
        engine.forget("gpg")
    assert not [p.name for p in scratch.iterdir() if p.name.startswith(prefix)]


def test_a_kill_that_lands_on_an_ended_run_fails_the_test() -> None:
    """A fault test proves its kill landed (SECURITY.md row 373): a run that ended before the kill (a fast machine,
    a short run) fails the test instead of passing while it injected nothing; a running one is killed by SIGKILL."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    ended.wait()
    with pytest.raises(AssertionError, match="before the kill"):
        kill_group_during(ended, 0.0, lambda: True)
    running = subprocess.Popen(["sleep", "30"], start_new_session=True)
    kill_group_during(running, 0.0, lambda: True)
    assert running.returncode == -9
