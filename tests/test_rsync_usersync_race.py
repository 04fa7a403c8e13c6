"""Issue 46, the rsync path: under ``FEATURES=usersync`` a process of the repository's owner races a real
``emerge --sync`` as root and must not steer root's file operations nor keep an edit in a "verified" tree.

A temporary root laid out as Gentoo installs it (the repositories directory root's, the repository owned by an
unprivileged user), a real ``rsync --daemon`` on 127.0.0.1 serving gemato-signed trees, real ``emerge --sync``
as root.  The attacker runs as that user for the whole sync: it plants a dot file in every category of the
staging tree (shaping used to drop them after gemato's verdict: the signal), holds descriptors on the staging
directory and an ebuild of each category (some also mapped shared and writable), and when a signal fires
swaps every other category for a link to a root-only directory (by path and through its descriptor) and
rewrites the ebuilds through its descriptors, its mappings and by path, size and modification time kept.
Over every trial: nothing in the root-only directory changes owner, mode or content; a sync either refuses
(the live tree stays the last verified one) or installs exactly the served tree, and gkeys' inventory never
vouches for a byte the Manifests do not hold.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rsync_helpers import CATEGORY, RsyncDaemon, make_tree, pin_repository_keys

from gkeys_portage.core.config import load_config
from gkeys_portage.demo.tree_repo import PortageSandbox, sync_module_missing
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.portage.rsyncsync import LOCAL_NAMES, mark_key
from gkeys_portage.verify.manifest import inventory

pytestmark = pytest.mark.slow
USER = "gkeys-race"
TRIALS = 8
CATEGORIES = [f"cat-{n:02d}" for n in range(24)]
EBUILD = 'EAPI=8\nSLOT=0\nKEYWORDS="amd64"\n'

_ATTACKER = r'''
import mmap, os, sys, time
repos, victim, stop, mode = sys.argv[1:5]
tops, planted, writers, maps, fired, log = {}, {}, {}, {}, set(), []

def rewrite(fd):
    st = os.fstat(fd)
    data = os.pread(fd, st.st_size, 0)
    if b"amd64" in data:
        os.pwrite(fd, data.replace(b"amd64", b"arm64"), 0)
        log.append("wrote")
    try:
        os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
    except OSError:
        pass

def swap(staging, top, category):
    for how in ("path", "descriptor"):
        try:
            if how == "path":
                os.rename(os.path.join(staging, category), os.path.join(staging, category + ".x"))
                os.symlink(victim, os.path.join(staging, category))
            else:
                os.rename(category, category + ".y", src_dir_fd=top, dst_dir_fd=top)
                os.symlink(victim, category, dir_fd=top)
            log.append("swapped by " + how)
        except OSError:
            pass

while not os.path.exists(stop):
    try:
        names = [n for n in os.listdir(repos) if n.startswith(".gentoo.gkeys-")]
    except OSError:
        names = []
    for name in names:
        staging = os.path.join(repos, name)
        if staging not in tops:
            try:
                tops[staging] = os.open(staging, os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                continue
        top = tops[staging]
        try:
            categories = [c for c in os.listdir(top) if c.startswith("cat-") and "." not in c]
        except OSError:
            continue
        for category in categories:
            if (staging, category) in planted:
                continue
            try:
                writer = os.open(category + "/pkg/pkg-1.ebuild", os.O_RDWR, dir_fd=top)
                os.close(os.open(category + "/.sig", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=top))
            except OSError:
                continue
            planted[(staging, category)] = True
            writers.setdefault(staging, []).append(writer)
            if category.endswith("0"):  # a shared writable mapping too (written through after the signal)
                try:
                    maps.setdefault(staging, []).append(mmap.mmap(writer, os.fstat(writer).st_size, mmap.MAP_SHARED))
                except (OSError, ValueError):
                    pass
    for (staging, category) in list(planted):
        if staging in fired:
            continue
        try:
            os.stat(category + "/.sig", dir_fd=tops[staging])
            continue
        except OSError:
            pass
        fired.add(staging)  # shaping (or gkeys' takeover) has begun: race
        log.append("fired")
        for (other, victim_category) in list(planted):
            if other == staging and victim_category != category:
                swap(staging, tops[staging], victim_category)
        for (other, some) in list(planted) if mode == "write" else ():
            if other == staging:
                try:
                    fd = os.open(os.path.join(staging, some, "pkg", "pkg-1.ebuild"), os.O_RDWR)
                    rewrite(fd)
                    os.close(fd)
                    log.append("wrote by path")
                except OSError:
                    pass
    for staging in fired if mode == "write" else ():
        for mapping in maps.get(staging, []):
            if b"amd64" in mapping[:]:
                mapping[:] = mapping[:].replace(b"amd64", b"arm64")
                log.append("wrote through a mapping")
        for writer in writers.get(staging, []):
            try:
                rewrite(writer)
            except OSError:
                pass
    time.sleep(0.0005)
print(" ".join(sorted(set(log))))
'''


def _user() -> tuple[int, int]:
    """The unprivileged user the repository belongs to (created as a system user when missing)."""
    if os.geteuid() != 0:
        pytest.skip("the race needs root (emerge --sync as root, the attacker as another user)")
    with contextlib.suppress(KeyError):
        entry = pwd.getpwnam(USER)
        return entry.pw_uid, entry.pw_gid
    if not shutil.which("useradd"):
        pytest.skip("useradd is not installed, so no unprivileged user can be made")
    subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                   check=True, capture_output=True)
    entry = pwd.getpwnam(USER)
    return entry.pw_uid, entry.pw_gid


def _snapshot(root: Path) -> dict[str, tuple[int, int, int, bytes | None]]:
    return {str(p.relative_to(root)): (st.st_uid, st.st_gid, st.st_mode, p.read_bytes() if p.is_file() else None)
            for p in [root, *sorted(root.rglob("*"))] for st in [p.lstat()]}


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink() and p.relative_to(root).parts[0] not in LOCAL_NAMES
            and p.name != "timestamp.chk"}


def _victim(base: Path) -> Path:
    """A directory only root can enter, laid out like a category (so a walk through a link to it would act)."""
    victim = base / "victim"
    (victim / "pkg").mkdir(parents=True)
    (victim / "pkg" / "pkg-1.ebuild").write_text("root's own\n")
    (victim / "Manifest").write_text("root's own\n")
    for path in (victim, victim / "pkg"):
        path.chmod(0o700)
    for path in (victim / "pkg" / "pkg-1.ebuild", victim / "Manifest"):
        path.chmod(0o600)
    return victim


def test_a_sync_user_process_racing_emerge_sync_steers_nothing(env: Any, tmp_path: Path) -> None:
    missing = sync_module_missing()
    if missing:
        pytest.skip(missing)
    uid, gid = _user()
    base = Path(tempfile.mkdtemp(prefix="gkeys-race-"))
    daemon = RsyncDaemon(tmp_path / "rsyncd")
    attacker_python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    try:
        base.chmod(0o755)
        pin_repository_keys(env)
        portage = PortageSandbox(base / "portage", env.config)
        portage.env["FEATURES"] = "usersync -news"
        (portage.eprefix / "tmp").mkdir(parents=True)
        location = portage.add_repo("gentoo", daemon.url, "gkeys", sync_gkeys_category=CATEGORY)
        location.mkdir()
        os.chown(location, uid, gid)  # the repository is the user's (Portage's usersync runs rsync as its owner)
        victim = _victim(base)
        before = _snapshot(victim)
        files = {"profiles/categories": "dev-test\n" + "".join(f"{c}\n" for c in CATEGORIES),
                 **{f"{c}/pkg/pkg-1.ebuild": EBUILD for c in CATEGORIES}}
        now = datetime.now(UTC).replace(microsecond=0)
        trees = [make_tree(base / f"tree{n}", env.keys, "infra", files=files,
                           when=now - timedelta(minutes=5 * (TRIALS + 1 - n))) for n in range(TRIALS + 1)]
        daemon.serve(trees[0])
        first = portage.sync("gentoo")
        assert first.returncode == 0, first.stdout
        ctx = Gkeys(load_config(env.config))
        accepted, outcomes, failures = trees[0], [], []
        for n in range(1, TRIALS + 1):
            daemon.serve(trees[n])
            stop = base / f"stop{n}"
            mode = "write" if n % 2 else "swap"  # swap only: a sync the race cannot spoil must succeed
            attacker = subprocess.Popen([attacker_python, "-c", _ATTACKER, str(portage.repos), str(victim), str(stop),
                                         mode],
                                        user=uid, group=gid, extra_groups=[], stdout=subprocess.PIPE, text=True,
                                        cwd="/")
            try:
                result = portage.sync("gentoo")
            finally:
                stop.write_text("")
                try:
                    seen, _ = attacker.communicate(timeout=20)
                except subprocess.TimeoutExpired:
                    attacker.send_signal(signal.SIGKILL)
                    seen, _ = attacker.communicate()
            problems = []
            if _snapshot(victim) != before:
                problems.append("the root-only directory changed")
                before = _snapshot(victim)
            if result.returncode == 0:
                accepted = trees[n]
            live = _files(location)
            recorded = inventory.recorded(ctx, mark_key(location))
            vouched = recorded is not None and inventory.matches(location, recorded, LOCAL_NAMES)
            if live != _files(accepted) and vouched:
                problems.append("an edit is in the tree gkeys vouches for")  # it would become the reference
            entries = [p for p in location.rglob("*") if p.relative_to(location).parts[0] not in LOCAL_NAMES]
            if any(stat.S_ISLNK(p.lstat().st_mode) for p in entries):
                problems.append("a link the Manifests do not hold is in the live tree")
            if any(p.lstat().st_uid != uid for p in entries):
                problems.append("an entry of the live tree is not the repository owner's")
            failures += [(n, problem, seen.strip()) for problem in problems]
            said = [line for line in result.stdout.splitlines() if "gkeys" in line][-2:]
            outcomes.append((mode, result.returncode, seen.strip(), live == _files(accepted),
                             said if result.returncode else ""))
        assert not failures, failures
        assert any("fired" in seen for _, _, seen, _, _ in outcomes), outcomes  # the attacker did race
        assert any("mapping" in seen for _, _, seen, _, _ in outcomes), outcomes
        assert all(exact for _, code, _, exact, _ in outcomes if code == 0), outcomes
        assert all(code == 0 for mode, code, _, _, _ in outcomes if mode == "swap"), outcomes
    finally:
        daemon.close()
        with contextlib.suppress(OSError):
            for path in [base, *base.rglob("*")]:
                path.chmod(0o755) if path.is_dir() and not path.is_symlink() else None
        shutil.rmtree(base, ignore_errors=True)
