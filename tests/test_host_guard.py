"""The test-suite guard (tests/host_guard.py, the session fixture ``_host_untouched``) sees what a run changed."""

from __future__ import annotations

import os
from pathlib import Path

from host_guard import changes, guarded_paths, listing


def test_guard_names_files_created_changed_and_removed(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "kept").write_text("a")
    (tmp_path / "state" / "gone").write_text("b")
    before = listing([tmp_path / "state", tmp_path / "absent"])
    (tmp_path / "state" / "new").write_text("c")
    (tmp_path / "state" / "kept").write_text("changed")
    (tmp_path / "state" / "gone").unlink()
    (tmp_path / "absent").mkdir()
    assert changes(before, listing([tmp_path / "state", tmp_path / "absent"])) == [
        f"changed {tmp_path / 'state'}", f"changed {tmp_path / 'state' / 'kept'}", f"created {tmp_path / 'absent'}",
        f"created {tmp_path / 'state' / 'new'}", f"removed {tmp_path / 'state' / 'gone'}"]


def test_guard_watches_gkeys_portage_and_the_real_home_not_the_whole_home() -> None:
    watched = {str(p) for p in guarded_paths("/home/u")}
    assert {"/var/lib/gkeys", "/etc/portage", "/etc/gkeys", "/home/u/.gnupg", "/home/u/.gitconfig",
            "/home/u/.config/gkeys"} <= watched
    assert "/home/u" not in watched and not any(".cache" in p for p in watched)


def test_setup_portage_with_eroot_keeps_its_record_under_that_root(tmp_path: Path) -> None:
    import subprocess
    import sys

    from conftest import PROJECT

    eroot = tmp_path / "eroot"
    (eroot / "etc/portage/repos.conf").mkdir(parents=True)
    (eroot / "etc/portage/repos.conf/gentoo.conf").write_text(
        "[gentoo]\nlocation = /var/db/repos/gentoo\nsync-type = git\nsync-uri = https://example.org/g.git\n")
    environ = {k: v for k, v in os.environ.items() if k != "GKEYS_CONFIG"}
    done = subprocess.run([sys.executable, "-m", "gkeys_portage.cli.main", "setup-portage", "--eroot", str(eroot)],
                          capture_output=True, text=True, cwd=PROJECT, env=environ, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(list((eroot / "var/lib/gkeys/state/setup-portage").glob("*.json"))) == 1
    done = subprocess.run([sys.executable, "-m", "gkeys_portage.cli.main", "setup-portage", "--eroot", str(eroot),
                           "--undo"], capture_output=True, text=True, cwd=PROJECT, env=environ, timeout=120)
    assert done.returncode == 0 and "remove" in done.stdout, done.stdout + done.stderr
    assert not (eroot / "etc/portage/repos.conf/zz-gkeys.conf").exists()


def test_guard_tells_the_suites_writes_to_the_real_gnupg_from_another_process(tmp_path: Path) -> None:
    """Below the real ``~/.gnupg`` only a file holding a key this run made is the suite's write; another
    program's socket, seed or import is reported, not failed; elsewhere every change is the suite's."""
    from host_guard import SUITE_MARKS, mark_keys, split_changes

    home = tmp_path / "home"
    gnupg = home / ".gnupg"
    gnupg.mkdir(parents=True)
    (gnupg / "random_seed").write_bytes(b"\x00" * 600)
    (gnupg / "pubring.kbx").write_bytes(b"KBX" + bytes.fromhex("AB" * 20))
    fingerprint = "CD" * 20
    marks = set(SUITE_MARKS)
    mark_keys([fingerprint])
    assert bytes.fromhex(fingerprint) in SUITE_MARKS and fingerprint.encode() in SUITE_MARKS
    changed = [f"changed {gnupg / 'random_seed'}", f"changed {gnupg / 'pubring.kbx'}", f"created {gnupg / 'S.x'}",
               f"changed {gnupg}", f"created {home / '.gitconfig'}"]
    ours, foreign = split_changes(changed, str(home), marks | {bytes.fromhex(fingerprint)})
    assert ours == [f"created {home / '.gitconfig'}"] and len(foreign) == 4
    (gnupg / "pubring.kbx").write_bytes(b"KBX" + bytes.fromhex(fingerprint))  # the suite's key landed there
    ours, foreign = split_changes(changed, str(home), {bytes.fromhex(fingerprint)})
    assert f"changed {gnupg / 'pubring.kbx'}" in ours and len(foreign) == 3
