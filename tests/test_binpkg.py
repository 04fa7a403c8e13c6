"""The binary package verification home (issue 17): only the binpkg pins are trusted, checked with
Portage's own GPKG signature code as ``nobody``; atomic replacement; a no-op when nothing changed;
SIGKILL and a dead network leave the previous home working."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from binpkg_helpers import getuto_home, install_gentoo, portage_accepts, public_dir
from conftest import PROJECT, GkeysEnv

from gkeys_portage.core.config import load_config
from gkeys_portage.core.types import Category
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.refresh import record_refresh
from gkeys_portage.portage import binpkg

__all__ = ["public_dir"]  # the fixture is used by name

DATA = b"metadata.tar of app-misc/hello-1\n" * 64


def _ctx(env: GkeysEnv) -> Gkeys:
    return Gkeys(load_config(env.config))


def _sign(env: GkeysEnv, keynick: str, data: bytes = DATA) -> bytes:
    return env.keys.sign_bytes(keynick, data, env.root)


def _helper(env: GkeysEnv, home: Path, *args: str, extra_env: dict[str, str] | None = None,
            **kwargs: object) -> subprocess.Popen[str]:
    """Start ``gkeys-trust-helper`` as Portage does (no arguments; config and home from the env)."""
    environ = dict(os.environ, GKEYS_CONFIG=str(env.config), BINPKG_GPG_VERIFY_GPG_HOME=str(home),
                   PYTHONPATH=str(PROJECT), **(extra_env or {}))
    return subprocess.Popen([sys.executable, "-c", "import sys; from gkeys_portage.portage.binpkg import main; "
                             "sys.exit(main())", *args], env=environ, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)  # type: ignore[call-overload]


def test_home_trusts_only_the_binpkg_pins(env: GkeysEnv, public_dir: Path) -> None:
    """Portage's check accepts the pinned key's signature and refuses the same-category key, an unknown
    key and tampered data; a getuto-style control home accepts the same-category key."""
    install_gentoo(env)
    home = public_dir / "gnupg"
    done = binpkg.update_home(_ctx(env), home, refresh=False)
    assert done.changed and done.keys == [env.keys.keys["releng"].fingerprint]

    assert portage_accepts(home, _sign(env, "releng"), DATA)
    assert not portage_accepts(home, _sign(env, "alice"), DATA)      # snapshot: same category, not pinned
    assert not portage_accepts(home, _sign(env, "mallory"), DATA)    # in no seed
    assert not portage_accepts(home, _sign(env, "releng"), DATA + b"tampered")

    # Verifying (as nobody) started no agent or dirmngr and wrote nothing into the home.
    assert {p.name for p in home.iterdir()} == set(binpkg.HOME_FILES)

    control = getuto_home(env, public_dir / "getuto", ["releng", "alice"])
    assert portage_accepts(control, _sign(env, "alice"), DATA)       # the difference is the point


def test_home_layout_is_sealed_and_offline(env: GkeysEnv, public_dir: Path) -> None:
    """Only gpg.conf, keybox, trustdb and stamp; 0644/0755; a symlink onto a sibling generation; the
    gpg.conf names no keyserver and turns every network path off."""
    install_gentoo(env)
    home = public_dir / "gnupg"
    binpkg.update_home(_ctx(env), home, refresh=False)
    assert home.is_symlink() and "/" not in os.readlink(home)
    assert {p.name for p in home.iterdir()} == set(binpkg.HOME_FILES)
    assert stat.S_IMODE(home.resolve().stat().st_mode) == 0o755
    for entry in home.iterdir():
        assert stat.S_IMODE(entry.stat().st_mode) == 0o644, entry
    conf = (home / "gpg.conf").read_text()
    assert "keyserver" not in conf.replace("no-auto-key-retrieve", "")
    for option in ("trust-model direct", "no-auto-key-retrieve", "no-auto-key-import", "disable-dirmngr",
                   "no-autostart"):
        assert option in conf.splitlines()
    assert not any(p.name.startswith("S.") for p in home.resolve().parent.rglob("S.*"))


def test_several_nicks_and_config_errors(env: GkeysEnv, public_dir: Path) -> None:
    """``nicks`` may name several seeds; unknown keys, an empty list and an unknown nick are errors."""
    install_gentoo(env)
    home = public_dir / "gnupg"
    env.write_config("[binpkg]\ncategory = gentoo\nnicks = weekly snapshot\n")
    done = binpkg.update_home(_ctx(env), home, refresh=False)
    assert set(done.keys) == {env.keys.keys["releng"].fingerprint, env.keys.keys["alice"].fingerprint}
    assert portage_accepts(home, _sign(env, "alice"), DATA)

    for bad, word in (("nick = weekly\n", "unknown key 'nick' (did you mean 'nicks'?)"), ("nicks =\n", "at least one"),
                      ("nicks = weekly nobody\n", "nobody")):
        env.write_config("[binpkg]\n" + bad)
        result = env.run("binpkg-keyring", "--gnupghome", str(home), "--no-refresh")
        assert result.code == 2, result.text
        assert word in result.text and "Traceback" not in result.text
    assert portage_accepts(home, _sign(env, "alice"), DATA)   # the previous home is untouched


def test_no_key_installed_is_one_line_with_the_fix(env: GkeysEnv, public_dir: Path) -> None:
    install_gentoo(env, imported=("snapshot",))
    result = env.run("binpkg-keyring", "--gnupghome", str(public_dir / "gnupg"), "--no-refresh")
    assert result.code != 0 and f"{env.gkeys} install-key -C gentoo" in result.text
    assert not (public_dir / "gnupg").exists()


@pytest.mark.parametrize("unsafe", ["group-writable", "world-writable", "owned by another user"])
def test_a_home_parent_others_could_change_is_refused(env: GkeysEnv, public_dir: Path, unsafe: str) -> None:
    """Issue 23 item 14: the home's parent directory was not checked: a group-writable /etc/portage (or one
    another user owns) let that user swap in a home trusting their key.  Refused before anything is built,
    by binpkg-keyring and by the helper's fast path, naming the directory and the fix."""
    install_gentoo(env)
    parent = public_dir / "etc-portage"
    parent.mkdir()
    home = parent / "gnupg"
    assert env.run("binpkg-keyring", "--gnupghome", str(home), "--no-refresh").code == 0  # a safe parent: built
    if unsafe == "owned by another user":
        os.chown(parent, 65534, 65534)
        needle = f"{parent} is owned by uid 65534"
    else:
        parent.chmod(0o775 if unsafe == "group-writable" else 0o757)
        needle = f"{parent} is {unsafe}"
    before = sorted(p.name for p in parent.iterdir())
    result = env.run("binpkg-keyring", "--gnupghome", str(home), "--no-refresh", "--force")
    assert result.code != 0 and needle in result.err, result.text
    assert f"chown root:root {parent} && chmod go-w {parent}" in result.err and "Traceback" not in result.text
    assert sorted(p.name for p in parent.iterdir()) == before
    helper = _helper(env, home, "--no-refresh")
    _out, err = helper.communicate(timeout=60)
    assert helper.returncode != 0 and needle in err, err


def test_unchanged_pins_leave_the_home_untouched(env: GkeysEnv, public_dir: Path) -> None:
    """The second run compares stamps and returns without starting gpg or writing anything; a change
    of the pinned set rebuilds and keeps one previous generation."""
    install_gentoo(env)
    home = public_dir / "gnupg"
    first = binpkg.update_home(_ctx(env), home, refresh=False)
    target = os.readlink(home)
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in home.iterdir()}
    again = binpkg.update_home(_ctx(env), home, refresh=False)
    assert first.changed and not again.changed
    assert os.readlink(home) == target
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in home.iterdir()} == before

    env.write_config("[binpkg]\nnicks = weekly snapshot\n")
    assert binpkg.update_home(_ctx(env), home, refresh=False).changed
    assert os.readlink(home) != target
    assert (public_dir / target).is_dir()            # the previous generation is kept for readers
    env.write_config("[binpkg]\nnicks = weekly\n")
    binpkg.update_home(_ctx(env), home, refresh=False)
    generations = sorted(p.name for p in public_dir.glob(".gnupg.gkeys-*"))
    assert len(generations) == 2 and target not in generations


def test_getuto_home_is_moved_aside_and_replaced(env: GkeysEnv, public_dir: Path) -> None:
    install_gentoo(env)
    home = getuto_home(env, public_dir / "gnupg", ["releng", "alice"])
    done = binpkg.update_home(_ctx(env), home, refresh=False)
    assert done.replaced is not None and (done.replaced / "pubring.kbx").is_file()
    assert home.is_symlink()
    assert portage_accepts(home, _sign(env, "releng"), DATA)
    assert not portage_accepts(home, _sign(env, "alice"), DATA)


def test_helper_script_uses_portage_environment(env: GkeysEnv, public_dir: Path) -> None:
    """Portage runs the helper with no arguments: the home comes from BINPKG_GPG_VERIFY_GPG_HOME."""
    install_gentoo(env)
    record_refresh(_ctx(env), Category("gentoo"))
    home = public_dir / "gnupg"
    proc = _helper(env, home)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert env.keys.keys["releng"].fingerprint in out
    assert portage_accepts(home, _sign(env, "releng"), DATA)


def test_sigkill_during_the_helper_keeps_the_previous_home(env: GkeysEnv, public_dir: Path,
                                                           tmp_path: Path) -> None:
    """The helper is killed while building a new home (gpg stalled on the owner trust import): Portage
    still verifies with the previous home, and the next run cleans up and finishes."""
    install_gentoo(env)
    record_refresh(_ctx(env), Category("gentoo"))
    home = public_dir / "gnupg"
    binpkg.update_home(_ctx(env), home, refresh=False)
    target = os.readlink(home)
    env.write_config("[binpkg]\nnicks = weekly snapshot\n")

    marker = tmp_path / "stalled"
    stall = tmp_path / "gpg"
    stall.write_text("#!/bin/sh\n"   # gpg runs with a minimal environment: the marker path is baked in
                     f'case " $* " in *" --import-ownertrust "*) touch "{marker}"; exec sleep 60;; esac\n'
                     'exec gpg "$@"\n')
    stall.chmod(0o755)
    proc = _helper(env, home, extra_env={"GKEYS_GPG": str(stall)},
                   start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)    # the helper and its stalled gpg: a group we started
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL

    assert os.readlink(home) == target
    assert portage_accepts(home, _sign(env, "releng"), DATA)
    assert not portage_accepts(home, _sign(env, "alice"), DATA)
    assert len(list(public_dir.glob(".gnupg.gkeys-*"))) == 2          # the killed run's staging

    done = binpkg.update_home(_ctx(env), home, refresh=False)
    assert done.changed and portage_accepts(home, _sign(env, "alice"), DATA)
    assert {p.name for p in public_dir.glob(".gnupg.gkeys-*")} == {target, os.readlink(home)}


@pytest.mark.parametrize("due", [False, True], ids=["fresh-keys", "refresh-due"])
def test_network_down_exits_0_and_keeps_the_home(env: GkeysEnv, public_dir: Path, due: bool) -> None:
    """Keyservers and WKD unreachable: with fresh keys nothing is tried; with a refresh due it fails,
    is a warning within max-refresh-age, and the home stays as it was."""
    install_gentoo(env)
    home = public_dir / "gnupg"
    binpkg.update_home(_ctx(env), home, refresh=False)
    target = os.readlink(home)
    before = {p.name: p.read_bytes() for p in home.iterdir()}
    env.write_config("[policy]\nrefresh-interval = 0\n" if due else "", keyservers="http://127.0.0.1:9")
    env.config.write_text(env.config.read_text().replace("wkd = yes", "wkd = no"))
    record_refresh(_ctx(env), Category("gentoo"))
    proc = _helper(env, home)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert ("refresh failed" in err) == due
    assert "Traceback" not in err
    assert os.readlink(home) == target
    assert {p.name: p.read_bytes() for p in home.iterdir()} == before



def test_revocation_reaches_the_home_on_the_next_run(env: GkeysEnv, public_dir: Path) -> None:
    """A revocation merged into the category keyring (as a refresh does) changes the keybox, so the
    next helper run rebuilds the home and Portage refuses the revoked key's packages."""
    install_gentoo(env, {"weekly": "carol", "snapshot": "alice"})
    home = public_dir / "gnupg"
    ctx = _ctx(env)
    binpkg.update_home(ctx, home, refresh=False)
    signature = _sign(env, "carol")
    assert portage_accepts(home, signature, DATA)
    with ctx.lock, ctx.keyring("gentoo").update() as gpg:
        gpg.import_keys(env.keys.revocation("carol"))
    done = binpkg.update_home(_ctx(env), home, refresh=False)
    assert done.changed and "revoked or expired" in " ".join(done.warnings)
    assert not portage_accepts(home, signature, DATA)


def test_first_switch_from_a_directory_is_one_exchange(tmp_path: Path) -> None:
    """renameat2(RENAME_EXCHANGE) swaps a real directory and the new symlink in one step (no moment
    without a home); the old directory ends up aside, nothing else is left behind."""
    old = tmp_path / "gnupg"
    old.mkdir()
    (old / "pubring.kbx").write_bytes(b"getuto")
    generation = tmp_path / ".gnupg.gkeys-new"
    generation.mkdir()
    replaced = binpkg._swap(old, generation)
    assert old.is_symlink() and os.readlink(old) == generation.name
    assert replaced is not None and (replaced / "pubring.kbx").read_bytes() == b"getuto"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["gnupg", generation.name, replaced.name])
    link, other = tmp_path / "a", tmp_path / "b"
    link.symlink_to("x")
    other.mkdir()
    assert binpkg._exchange(link, other)
    assert other.is_symlink() and link.is_dir()


def test_cli_binpkg_keyring_text_and_json(env: GkeysEnv, public_dir: Path) -> None:
    """``gkeys binpkg-keyring --eroot DIR`` builds DIR/etc/portage/gnupg; a second run is 'up to date';
    ``--json`` carries the same facts."""
    install_gentoo(env)
    eroot = public_dir / "root"
    first = env.run("binpkg-keyring", "--eroot", str(eroot), "--no-refresh")
    assert first.code == 0, first.text
    assert env.keys.keys["releng"].fingerprint in first.text
    home = eroot / "etc" / "portage" / "gnupg"
    assert portage_accepts(home, _sign(env, "releng"), DATA)
    second = env.run("--json", "binpkg-keyring", "--eroot", str(eroot), "--no-refresh")
    assert second.code == 0
    data = json.loads(second.out)
    assert data["changed"] is False and data["home"] == str(home) and data["nicks"] == ["weekly"]


def test_home_path_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """--gnupghome, then --eroot, then $BINPKG_GPG_VERIFY_GPG_HOME, then ${ROOT}${EPREFIX}/etc/portage/gnupg."""
    monkeypatch.setenv("BINPKG_GPG_VERIFY_GPG_HOME", str(tmp_path / "env-home"))
    assert binpkg.resolve_home(tmp_path / "explicit", tmp_path / "eroot") == tmp_path / "explicit"
    assert binpkg.resolve_home(None, tmp_path / "eroot") == tmp_path / "eroot/etc/portage/gnupg"
    assert binpkg.resolve_home() == tmp_path / "env-home"
    monkeypatch.delenv("BINPKG_GPG_VERIFY_GPG_HOME")
    monkeypatch.setenv("ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("EPREFIX", "/prefix")
    assert binpkg.resolve_home() == tmp_path / "root/prefix/etc/portage/gnupg"


def test_noop_helper_run_starts_no_gpg(env: GkeysEnv, public_dir: Path, tmp_path: Path) -> None:
    """Nothing changed and no refresh due: the helper decides from the stamp alone (any gpg it started
    here would fail and leave a marker); a refresh that falls due takes the full path again."""
    install_gentoo(env)
    record_refresh(_ctx(env), Category("gentoo"))
    home = public_dir / "gnupg"
    binpkg.update_home(_ctx(env), home, refresh=False)
    marker = tmp_path / "gpg-ran"
    fake = tmp_path / "gpg"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\nexit 2\n")
    fake.chmod(0o755)
    proc = _helper(env, home, extra_env={"GKEYS_GPG": str(fake)})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and not marker.exists() and not out, err
    assert binpkg.is_current(load_config(env.config), home)
    env.write_config("[policy]\nrefresh-interval = 0\n")
    assert not binpkg.is_current(load_config(env.config), home)
    assert binpkg.is_current(load_config(env.config), home, refresh=False)


def test_fast_path_reads_the_files_the_library_writes(env: GkeysEnv) -> None:
    """The stamp check reads the keybox, export and refresh record without importing gpg: the same
    paths and record name as core.keyring and core.keyops."""
    from gkeys_portage.keys import keyring
    from gkeys_portage.keys import refresh as keyops

    ctx = _ctx(env)
    ring = ctx.keyring(ctx.config.binpkg.category)
    assert binpkg.keyring_files(ctx.layout, ctx.config) == (ring.home / keyring.KEYBOX, ring.export_path)
    assert binpkg.REFRESH_RECORD == keyops.REFRESH_RECORD
    install_gentoo(env)
    assert binpkg.refresh_due(ctx.config, ctx.layout) == (keyops.last_refresh(ctx, Category("gentoo")) is None)
    record_refresh(ctx, Category("gentoo"))
    assert not binpkg.refresh_due(ctx.config, ctx.layout)
