"""For comparison: Portage's own rsync module (gemato, ``sync-rsync-verify-metamanifest = yes``) against a real
``rsync --daemon`` on 127.0.0.1, and the same attack on ``sync-type = gkeys``.

The mirror serves yesterday's genuinely signed tree with a forged, newer ``metadata/timestamp.chk`` (every
Manifest IGNOREs that file, so the signature still verifies).  Portage's only rollback check compares that
unsigned file: it accepts the older tree and an ebuild vanishes.  gkeys compares the signed ``TIMESTAMP``
with the high-water mark in its own state and refuses, leaving the tree as it was.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rsync_helpers import CATEGORY, RsyncDaemon, make_tree, pin_repository_keys

from gkeys_portage.demo.tree_repo import PortageSandbox, sync_module_missing
from gkeys_portage.demo.world import past

pytestmark = pytest.mark.slow
_MISSING = sync_module_missing()
RSYNC_OPTS = ("--recursive --links --safe-links --perms --times --omit-dir-times --compress --force --whole-file "
              "--delete --stats --human-readable --timeout=180 --exclude=/distfiles --exclude=/local "
              "--exclude=/packages --exclude=/.git")


@pytest.fixture
def daemon(tmp_path: Path) -> Any:
    served = RsyncDaemon(tmp_path / "rsyncd")
    yield served
    served.close()


def _chk(tree: Path, when: datetime) -> Path:
    (tree / "metadata" / "timestamp.chk").write_text(f"{when:%a, %d %b %Y %H:%M:%S} +0000\n")  # unsigned
    return tree


def _trees(env: Any, tmp_path: Path) -> tuple[Path, Path]:
    now = datetime.now(UTC).replace(microsecond=0)
    today = _chk(make_tree(tmp_path / "today", env.keys, "infra", when=now - timedelta(minutes=10),
                           files={"dev-test/pkg/pkg-2.ebuild": "EAPI=8\nSLOT=0\n"}), now - timedelta(minutes=10))
    yesterday = make_tree(tmp_path / "yesterday", env.keys, "infra", when=now - timedelta(hours=20))
    stamp = (now - timedelta(hours=20)).timestamp()
    for path in yesterday.rglob("*"):  # its files were written yesterday (else rsync's size-and-time check
        os.utime(path, (stamp, stamp))  # could keep today's top Manifest of the same size and second)
    return today, _chk(yesterday, now + timedelta(minutes=1))  # forged: "newer" than today's


@pytest.mark.parametrize("sync_type", ["rsync", "gkeys"])
def test_older_signed_tree_with_forged_timestamp_chk(env: Any, daemon: RsyncDaemon, tmp_path: Path,
                                                     sync_type: str) -> None:
    if _MISSING:
        pytest.skip(_MISSING)
    pin_repository_keys(env)
    today, yesterday = _trees(env, tmp_path)
    portage = PortageSandbox(tmp_path / "portage", env.config)
    if sync_type == "rsync":
        key = tmp_path / "infra.asc"
        key.write_bytes(env.keys.public("infra"))
        with open(portage.etc / "make.conf", "a") as conf:  # Gentoo's make.globals value (not in PyPI portage)
            conf.write(f'PORTAGE_RSYNC_OPTS="{RSYNC_OPTS}"\nPORTAGE_RSYNC_RETRIES="0"\n')
        location = portage.add_repo("gentoo", daemon.url, "rsync", sync_rsync_verify_metamanifest="yes",
                                    sync_openpgp_key_path=str(key), sync_openpgp_key_refresh="no")
    else:
        location = portage.add_repo("gentoo", daemon.url, "gkeys", sync_gkeys_category=CATEGORY)
    daemon.serve(today)
    result = portage.sync("gentoo")
    assert result.returncode == 0, result.stdout
    assert (location / "dev-test/pkg/pkg-2.ebuild").is_file()

    daemon.serve(yesterday)
    result = portage.sync("gentoo")
    if sync_type == "rsync":  # what Portage does today: the rollback lands
        assert result.returncode == 0, result.stdout
        assert not (location / "dev-test/pkg/pkg-2.ebuild").exists()
    else:
        assert result.returncode != 0 and "older than" in result.stdout, result.stdout
        assert (location / "dev-test/pkg/pkg-2.ebuild").is_file()


# Issue 35 item 9: the same hostile mirror against Portage's own rsync module and against sync-type = gkeys.

PLANTED = {"metadata/news/.2026-12-01-hidden/.2026-12-01-hidden.en.txt": "Title: hidden\n",
           "lost+found/sh": "#!/bin/sh\nexec /bin/sh -p\n", ".hg/requires": "store\n", ".svn/entries": "12\n"}


def _repo(env: Any, daemon: RsyncDaemon, tmp_path: Path, sync_type: str) -> tuple[Any, Path]:
    """A PortageSandbox with ``gentoo`` on ``sync_type`` from the daemon (rsync: verify-metamanifest on)."""
    pin_repository_keys(env)
    portage = PortageSandbox(tmp_path / "portage", env.config)
    if sync_type == "gkeys":
        return portage, portage.add_repo("gentoo", daemon.url, "gkeys", sync_gkeys_category=CATEGORY)
    key = tmp_path / "infra.asc"
    key.write_bytes(env.keys.public("infra"))
    with open(portage.etc / "make.conf", "a") as conf:  # Gentoo's make.globals value (not in PyPI portage)
        conf.write(f'PORTAGE_RSYNC_OPTS="{RSYNC_OPTS}"\nPORTAGE_RSYNC_RETRIES="0"\n')
    return portage, portage.add_repo("gentoo", daemon.url, "rsync", sync_rsync_verify_metamanifest="yes",
                                     sync_openpgp_key_path=str(key), sync_openpgp_key_refresh="no")


def _stamped(tree: Path, when: datetime) -> Path:
    """``metadata/timestamp.chk`` as Gentoo's mirrors write it (Portage skips a sync when it is unchanged)."""
    return _chk(tree, when)


@pytest.mark.parametrize("sync_type", ["rsync", "gkeys"])
def test_a_hostile_mirror_sets_modes_plants_entries_and_freezes(env: Any, daemon: RsyncDaemon, tmp_path: Path,
                                                                 sync_type: str) -> None:
    """Cases 1-3: a signed tree served with directories 0777 and an ebuild 0666, plus a hidden news item, a
    set-user-id file in ``lost+found/``, ``.hg/`` and ``.svn/`` (no Manifest covers them); then a newer honest
    tree.  Portage installs the modes and the planted entries (all but ``lost+found/``, which its quarantine
leaves behind) and refuses every later sync (the tree "is under version control");
    gkeys installs neither and syncs the next tree."""
    if _MISSING:
        pytest.skip(_MISSING)
    portage, location = _repo(env, daemon, tmp_path, sync_type)
    now = datetime.now(UTC).replace(microsecond=0)
    hostile = _stamped(make_tree(tmp_path / "hostile", env.keys, "infra", when=now - timedelta(hours=2)),
                       now - timedelta(hours=2))
    for rel, text in PLANTED.items():
        (hostile / rel).parent.mkdir(parents=True, exist_ok=True)
        (hostile / rel).write_text(text)
    (hostile / "lost+found/sh").chmod(0o4755)
    for directory in [p for p in hostile.rglob("*") if p.is_dir()]:
        directory.chmod(0o777)
    (hostile / "dev-test/pkg/pkg-1.ebuild").chmod(0o666)
    daemon.serve(hostile)
    result = portage.sync("gentoo")
    assert result.returncode == 0, result.stdout
    entries = [location / rel for rel in ("dev-test", "dev-test/pkg", "dev-test/pkg/pkg-1.ebuild")]
    seen = {"writable by others": any(p.lstat().st_mode & 0o022 for p in entries),
            "planted": sorted(rel for rel in PLANTED if (location / rel).exists())}
    daemon.serve(_stamped(make_tree(tmp_path / "honest", env.keys, "infra", when=now - timedelta(minutes=5),
                                    files={"dev-test/pkg/pkg-2.ebuild": "EAPI=8\n"}), now - timedelta(minutes=5)))
    result = portage.sync("gentoo")
    seen["next tree synced"] = result.returncode == 0 and (location / "dev-test/pkg/pkg-2.ebuild").is_file()
    if sync_type == "rsync":  # measured with Portage 3.0.83
        # its quarantine is moved in with --exclude=/lost+found: everything else planted lands
        planted = sorted(rel for rel in PLANTED if not rel.startswith("lost+found/"))
        assert seen == {"writable by others": True, "planted": planted, "next tree synced": False}, seen
        assert "under revision control" in result.stdout, result.stdout
    else:
        assert seen == {"writable by others": False, "planted": [], "next tree synced": True}, (seen, result.stdout)


@pytest.mark.parametrize("sync_type", ["rsync", "gkeys"])
def test_a_refused_sync_and_a_local_edit(env: Any, daemon: RsyncDaemon, tmp_path: Path, sync_type: str) -> None:
    """Cases 4 and 5: an ebuild edited in the live tree under the same size and time, then the same tree again
    (Portage keeps the edit; gkeys restores it); a newer tree whose files keep their contents and times but
    are served 0666, with a stray file (both refuse it; Portage has already changed the live files' modes)."""
    if _MISSING:
        pytest.skip(_MISSING)
    portage, location = _repo(env, daemon, tmp_path, sync_type)
    now = datetime.now(UTC).replace(microsecond=0)
    good = _stamped(make_tree(tmp_path / "good", env.keys, "infra", when=now - timedelta(hours=2)),
                    now - timedelta(hours=2))
    daemon.serve(good)
    assert portage.sync("gentoo").returncode == 0
    ebuild = location / "dev-test/pkg/pkg-1.ebuild"
    original, st = ebuild.read_text(), ebuild.stat()
    ebuild.write_text(original.replace("amd64", "arm64"))
    os.utime(ebuild, ns=(st.st_atime_ns, st.st_mtime_ns))
    result = portage.sync("gentoo")
    seen: dict[str, object] = {"edit kept": ebuild.read_text() != original, "first exit": result.returncode}
    ebuild.write_text(original)  # the rest starts from the verified tree in both cases
    os.utime(ebuild, ns=(st.st_atime_ns, st.st_mtime_ns))
    hostile = tmp_path / "hostile"
    shutil.copytree(good, hostile)
    _stamped(hostile, now - timedelta(minutes=5))
    for path in hostile.rglob("*"):
        if path.is_file():
            path.chmod(0o666)
    (hostile / "dev-test/pkg/pkg-9.ebuild").write_text("EAPI=8\n")  # in no Manifest
    daemon.serve(hostile)
    modes = {p: p.lstat().st_mode for p in location.rglob("*") if p.is_file() and p.name != "timestamp.chk"}
    result = portage.sync("gentoo")
    seen["refused"] = result.returncode != 0
    seen["live modes changed"] = sorted(str(p.relative_to(location)) for p, mode in modes.items()
                                        if p.lstat().st_mode != mode)
    if sync_type == "rsync":  # measured with Portage 3.0.83
        assert seen["edit kept"] and seen["first exit"] == 0 and seen["refused"], (seen, result.stdout)
        assert "dev-test/pkg/pkg-1.ebuild" in seen["live modes changed"], seen  # type: ignore[operator]
    else:
        assert seen == {"edit kept": False, "first exit": 0, "refused": True, "live modes changed": []}, seen


def test_a_sync_user_owns_the_tree_whatever_the_mirror_serves(env: Any, daemon: RsyncDaemon) -> None:
    """Case 1 with ``sync-user``: rsync runs as that user (as Portage's own module would), every entry belongs
    to it, files are 0644 and directories 0755 although the mirror serves 0777 and 0666."""
    if _MISSING:
        pytest.skip(_MISSING)
    if os.geteuid() != 0:
        pytest.skip("switching rsync to the sync user needs root")
    nobody, nogroup = pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid
    base = Path(tempfile.mkdtemp(prefix="gkeys-rsync-usersync-"))
    try:
        base.chmod(0o755)  # the sync user must reach the repository's parent
        pin_repository_keys(env)
        portage = PortageSandbox(base / "portage", env.config)
        (portage.eprefix / "tmp").mkdir(parents=True)  # Portage checks PORTAGE_TMPDIR when it drops privileges
        location = portage.add_repo("gentoo", daemon.url, "gkeys", sync_gkeys_category=CATEGORY,
                                    sync_user="nobody:nogroup")
        for day, when in (("day1", past(0.2)), ("day2", past(0.1))):
            tree = make_tree(base / day, env.keys, "infra", when=when, files={f"dev-test/pkg/{day}.txt": day})
            for path in [p for p in tree.rglob("*")]:
                path.chmod(0o777 if path.is_dir() else 0o666)
            daemon.serve(tree)
            result = portage.sync("gentoo")
            assert result.returncode == 0, result.stdout
            entries = [location, *location.rglob("*")]
            assert {(p.lstat().st_uid, p.lstat().st_gid) for p in entries} == {(nobody, nogroup)}
            assert {stat.S_IMODE(p.lstat().st_mode) for p in entries if p.is_dir()} == {0o755}
            assert {stat.S_IMODE(p.lstat().st_mode) for p in entries if p.is_file()} == {0o644}
    finally:
        shutil.rmtree(base, ignore_errors=True)


# Issue 43 item 6: a file name the mirror chose reaches neither the terminal nor emerge.log as itself.

FORGED = "x\x1b]0;pwned\x07\x1b[1A\x1b[2K\r\n * gkeys: Manifest tree verified"


def test_a_file_name_from_the_mirror_is_escaped_on_the_terminal_and_in_emerge_log(env: Any, daemon: RsyncDaemon,
                                                                                   tmp_path: Path) -> None:
    """A signed tree with a stray file named with ESC, BEL, CR and a newline is refused; the refusal names the
    file escaped (``\\x1b``), on the terminal and in ``emerge.log``, where it stays one line."""
    if _MISSING:
        pytest.skip(_MISSING)
    portage, location = _repo(env, daemon, tmp_path, "gkeys")
    now = datetime.now(UTC).replace(microsecond=0)
    tree = _stamped(make_tree(tmp_path / "hostile", env.keys, "infra", when=now - timedelta(hours=1)),
                    now - timedelta(hours=1))
    (tree / "dev-test" / "pkg" / FORGED).write_text("stray\n")
    daemon.serve(tree)
    result = portage.sync("gentoo")
    assert result.returncode != 0, result.stdout
    assert "in no Manifest" in result.stdout and "\\x1b]0;pwned\\x07" in result.stdout, result.stdout
    for raw in ("\x1b", "\x07", "\r"):
        assert raw not in result.stdout, repr(result.stdout)
    assert not any(line.startswith(" * gkeys: Manifest tree verified") for line in result.stdout.splitlines())
    logs = list(portage.eprefix.rglob("emerge.log"))
    assert logs, sorted(portage.eprefix.rglob("*"))
    log = logs[0].read_text(errors="replace")
    assert "\\x1b]0;pwned" in log and "\x1b" not in log and "\x07" not in log and "\r" not in log, repr(log)
    assert not any("Manifest tree verified" in line and "in no Manifest" not in line for line in log.splitlines())


def test_gemato_s_refusal_escapes_a_file_name_from_the_mirror(env: Any, tmp_path: Path) -> None:
    """The refusal itself (``verify/manifest/tree.py`` ``_refusal``), not only the sync module's door around it,
    names the stray file escaped: the message and gemato's words kept as detail go to the journal and to callers
    that print without the sync module."""
    from gkeys_portage.core.config import load_config
    from gkeys_portage.core.errors import TreeMismatchError
    from gkeys_portage.keys.context import Gkeys
    from gkeys_portage.verify.manifest.purpose import purpose_keyring, repository_pins
    from gkeys_portage.verify.manifest.tree import verify_tree

    pinned = pin_repository_keys(env)
    tree = make_tree(tmp_path / "hostile", pinned.keys, "infra")
    (tree / "dev-test" / "pkg" / FORGED).write_text("stray\n")
    ctx = Gkeys(load_config(pinned.config))
    pins, _ = repository_pins(ctx, CATEGORY)
    with pytest.raises(TreeMismatchError) as refused:
        verify_tree(tree, purpose_keyring(ctx, CATEGORY, pins), pins)
    assert "in no Manifest" in refused.value.message and "\\x1b]0;pwned\\x07" in refused.value.message
    for text in (refused.value.message, refused.value.detail or ""):
        assert not any(raw in text for raw in ("\x1b", "\x07", "\r", "\n")), repr(text)
