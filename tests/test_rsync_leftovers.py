"""Issue 43 items 1, 2, 3 and 7 on the rsync path: no leftover ever blocks a sync, and the user's own entries
beside the tree (``distfiles``, ``packages``, ``local``: directory, symbolic link or mount point) are what they
were.  A real ``rsync --daemon`` on 127.0.0.1, gemato-signed trees, :func:`sync_rsync` as ``emerge`` calls it."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rsync_helpers import CATEGORY, RsyncDaemon, deep_tree, make_tree, pin_repository_keys

from gkeys_portage.core.config import load_config
from gkeys_portage.core.fs import fdtree
from gkeys_portage.demo.world import past
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.portage.rsyncsync import RsyncRequest, sync_rsync

pytestmark = pytest.mark.skipif(not shutil.which("rsync"), reason="rsync is not installed")


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[RsyncDaemon]:
    served = RsyncDaemon(tmp_path / "rsyncd")
    yield served
    served.close()
    for deep in [*tmp_path.glob("*/lost+found"), *tmp_path.glob("repos/.gentoo.gkeys-*")]:
        with contextlib.suppress(OSError):  # pytest's own clean-up of old temporary directories recurses
            _remove(deep)


class Syncer:
    """:func:`sync_rsync` for one location, keeping what it logged."""

    def __init__(self, env: Any, location: Path, uri: str) -> None:
        self.ctx = Gkeys(load_config(env.config))
        self.request = RsyncRequest(location=location, uri=uri, category=CATEGORY, quiet=True)
        self.lines: list[str] = []

    def __call__(self) -> Any:
        self.lines = []
        return sync_rsync(self.ctx, self.request, lambda level, text: self.lines.append(f"{level}: {text}"))




def _synced(env: Any, daemon: RsyncDaemon, tmp_path: Path) -> tuple[Syncer, Path]:
    """A location synced once from a signed tree."""
    pinned = pin_repository_keys(env)
    location = tmp_path / "repos" / "gentoo"
    daemon.serve(make_tree(tmp_path / "day1", pinned.keys, "infra", when=past(0.2)))
    sync = Syncer(pinned, location, daemon.url)
    assert sync().ok, sync.lines
    return sync, location


def _newer(env: Any, daemon: RsyncDaemon, tmp_path: Path, name: str = "day2", when: float = 0.1) -> Path:
    tree = make_tree(tmp_path / name, env.keys, "infra", when=past(when), files={f"dev-test/pkg/{name}.txt": name})
    daemon.serve(tree)
    return tree


def test_a_mirror_sending_1010_levels_is_refused_and_freezes_nothing(env: Any, daemon: RsyncDaemon,
                                                                      tmp_path: Path) -> None:
    """Item 1: the genuine signed tree plus ``lost+found/d/…/f`` 1,010 levels deep (gemato IGNOREs it).  On main
    the shaping's ``rmtree`` raised RecursionError, the staging directory stayed and every later sync failed;
    now the tree is refused for its depth, nothing stays beside the location, and the next tree syncs."""
    sync, location = _synced(env, daemon, tmp_path)
    hostile = _newer(env, daemon, tmp_path)
    deep_tree(hostile / "lost+found", 1010)
    outcome = sync()
    assert not outcome.ok and "deeper than 64 levels" in outcome.reason, sync.lines
    assert "RecursionError" not in "\n".join(sync.lines) and "internal error" not in outcome.reason
    assert sorted(p.name for p in location.parent.iterdir()) == ["gentoo"], "a staging directory stayed"
    _newer(env, daemon, tmp_path, "day3", 0.05)
    outcome = sync()
    assert outcome.ok and (location / "dev-test/pkg/day3.txt").is_file(), sync.lines


def _remove(path: Path) -> None:
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fdtree.remove_tree(parent, path.name)
    finally:
        os.close(parent)


def test_a_deep_leftover_of_a_killed_sync_is_removed_by_the_next(env: Any, daemon: RsyncDaemon,
                                                                  tmp_path: Path) -> None:
    """Item 1: a staging directory 1,100 levels deep (what a sync killed with such a tree leaves) is removed at the
    start of the next sync, without recursion."""
    sync, location = _synced(env, daemon, tmp_path)
    deep_tree(location.parent / ".gentoo.gkeys-12345-x-gkstale", 1100)
    _newer(env, daemon, tmp_path)
    outcome = sync()
    assert outcome.ok and (location / "dev-test/pkg/day2.txt").is_file(), sync.lines
    assert sorted(p.name for p in location.parent.iterdir()) == ["gentoo"]
    assert any("removed 1 staging directory" in line for line in sync.lines), sync.lines


def test_a_leftover_gkeys_cannot_remove_is_a_warning_never_a_failed_sync(env: Any, daemon: RsyncDaemon,
                                                                          tmp_path: Path) -> None:
    """Item 1: what cannot be removed (here an immutable file, ``chattr +i``) is named with the command that
    removes it; the sync goes on."""
    if os.geteuid() != 0 or not shutil.which("chattr"):
        pytest.skip("chattr +i needs root")
    sync, location = _synced(env, daemon, tmp_path)
    stale = location.parent / ".gentoo.gkeys-12345-x-gkstale"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub" / "stuck").write_text("x")
    if subprocess.run(["chattr", "+i", str(stale / "sub" / "stuck")], capture_output=True).returncode != 0:
        pytest.skip("this file system has no immutable flag")
    try:
        _newer(env, daemon, tmp_path)
        outcome = sync()
        assert outcome.ok and (location / "dev-test/pkg/day2.txt").is_file(), sync.lines
        warned = [line for line in sync.lines if line.startswith("warn:") and str(stale) in line]
        assert warned and f"rm -rf --one-file-system {stale}" in warned[0], sync.lines
    finally:
        subprocess.run(["chattr", "-i", str(stale / "sub" / "stuck")], check=False)


def test_the_users_entries_stay_what_they_were_links_included(env: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    """Item 2: a symlinked ``packages`` (and ``local``) stays the same link after a signed update (main dropped
    it); a real ``distfiles`` keeps its owner, mode and files (gkeys never owns a directory it did not make)."""
    sync, location = _synced(env, daemon, tmp_path)
    (tmp_path / "binpkgs").mkdir()
    (tmp_path / "binpkgs" / "a.gpkg.tar").write_text("binary")
    (location / "packages").symlink_to("../../binpkgs")
    (location / "local").symlink_to("/nonexistent/overlay")
    (location / "distfiles" / "sub").mkdir(parents=True)
    (location / "distfiles" / "sub" / "x.tar.gz").write_text("user data")
    (location / "distfiles").chmod(0o2775)
    os.chown(location / "distfiles", 4321, 4322)
    _newer(env, daemon, tmp_path)
    outcome = sync()
    assert outcome.ok and (location / "dev-test/pkg/day2.txt").is_file(), sync.lines
    assert os.readlink(location / "packages") == "../../binpkgs" and (location / "packages" / "a.gpkg.tar").is_file()
    assert os.readlink(location / "local") == "/nonexistent/overlay"
    st = (location / "distfiles").lstat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o2775, 4321, 4322)
    assert (location / "distfiles" / "sub" / "x.tar.gz").read_text() == "user data"


def test_a_link_at_the_previous_name_is_a_warning_never_a_blocked_sync(env: Any, daemon: RsyncDaemon,
                                                                      tmp_path: Path) -> None:
    """Item 7: ``.gentoo.previous`` a symbolic link (to a directory): main followed it (``is_dir``) and failed every
    sync with "Cannot call rmtree on a symbolic link"; now it is left alone and named with its fix."""
    sync, location = _synced(env, daemon, tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "keep").write_text("keep")
    parked = location.parent / ".gentoo.previous"
    parked.symlink_to(tmp_path / "elsewhere")
    _newer(env, daemon, tmp_path)
    outcome = sync()
    assert outcome.ok and (location / "dev-test/pkg/day2.txt").is_file(), sync.lines
    assert any(str(parked) in line and f"rm {parked}" in line for line in sync.lines if line.startswith("warn:"))
    assert parked.is_symlink() and (tmp_path / "elsewhere" / "keep").read_text() == "keep"


_MOUNTED = textwrap.dedent("""
    import json, subprocess, sys
    from pathlib import Path
    from gkeys_portage.core.config import load_config
    from gkeys_portage.keys.context import Gkeys
    from gkeys_portage.portage.rsyncsync import RsyncRequest, sync_rsync
    config, location, uri, category = sys.argv[1:5]
    distfiles = Path(location) / "distfiles"
    subprocess.run(["mount", "-t", "tmpfs", "none", str(distfiles)], check=True)
    (distfiles / "on-tmpfs.tar").write_text("user data")
    lines = []
    outcome = sync_rsync(Gkeys(load_config(Path(config))), RsyncRequest(location=Path(location), uri=uri,
                         category=category, quiet=True), lambda level, text: lines.append(f"{level}: {text}"))
    still = (distfiles / "on-tmpfs.tar").read_text() if (distfiles / "on-tmpfs.tar").exists() else None
    mounted = any(line.split()[4] == str(distfiles) for line in open("/proc/self/mountinfo"))
    print(json.dumps({"ok": outcome.ok, "reason": outcome.reason, "lines": lines, "still": still,
                      "mounted": mounted, "day2": (Path(location) / "dev-test/pkg/day2.txt").is_file()}))
""")


def test_a_mount_point_at_distfiles_stays_and_never_blocks_a_sync(env: Any, daemon: RsyncDaemon,
                                                                   tmp_path: Path) -> None:
    """Item 3: a file system mounted at ``distfiles`` (a tmpfs in a private mount namespace).  On main every sync
    failed with EXDEV and a raw list of copy errors; now the mount stays where it is, as it was, and the tree's
    other entries are exchanged one by one."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("no private mount namespace here")
    import json

    sync, location = _synced(env, daemon, tmp_path)
    (location / "distfiles").mkdir()
    _newer(env, daemon, tmp_path)
    result = subprocess.run(["unshare", "-m", sys.executable, "-c", _MOUNTED, str(sync.ctx.config.path), str(location),
                             daemon.url, CATEGORY], capture_output=True, text=True, check=False, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["ok"] and seen["day2"], seen
    assert seen["still"] == "user data" and seen["mounted"], seen
    assert not any("EXDEV" in line or "Errno 18" in line for line in seen["lines"]), seen
