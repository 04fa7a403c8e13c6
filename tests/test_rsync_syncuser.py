"""Issue 43, "no leftover ever blocks a sync": switching a repository's sync user (repos.conf ``sync-user``,
``FEATURES=usersync`` on or off) never blocks a sync.  On main, root → ``nobody`` failed every time (rsync exit 23:
the staging directory was given the live tree's owner, root, so ``nobody`` could write nothing in it) and
``nobody`` → root failed every time ("the staging directory … belongs to uid 65534 … refused: sync again"; with
``--link-dest`` the staging tree also held ``nobody``'s linked files, which the takeover refuses).  A real
``rsync --daemon`` on 127.0.0.1, gemato-signed trees, :func:`sync_rsync` with the spawn settings Portage hands its
sync modules; the git path the same way (on main its first update as ``nobody`` failed copying root's ``.git``:
"Permission denied", and as root after ``nobody`` it refused to run git in a repository another user owns)."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rsync_helpers import BASE_FILES, CATEGORY, RsyncDaemon, make_tree, pin_repository_keys
from tree_helpers import build, context, head, install_devs

from gkeys_portage.core.config import load_config
from gkeys_portage.demo.tree_repo import git_environment
from gkeys_portage.demo.world import past
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.portage.rsyncsync import RsyncRequest, sync_rsync
from gkeys_portage.portage.treesync import SyncRequest, clone_verified, update_verified
from gkeys_portage.verify.git.spawn import SpawnSettings
from gkeys_portage.verify.git.tree import TreeOptions

pytestmark = pytest.mark.skipif(not shutil.which("rsync"), reason="rsync is not installed")
SAME_TIME = 1_700_000_000  # the time of the files every served tree has


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory ``nobody`` can reach (pytest's own are root's, 0700)."""
    if os.geteuid() != 0:
        pytest.skip("switching rsync to the sync user needs root")
    path = Path(tempfile.mkdtemp(prefix="gkeys-rsync-syncuser-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _nobody() -> SpawnSettings:
    """The spawn settings Portage gives a repository with ``sync-user = nobody``."""
    user = pwd.getpwnam("nobody")
    return SpawnSettings(uid=user.pw_uid, gid=user.pw_gid, groups=(user.pw_gid,), umask=0o022)


class Switching:
    """:func:`sync_rsync` of ``BASE/repos/gentoo`` from a daemon, as root or as ``nobody``."""

    def __init__(self, env: Any, base: Path) -> None:
        self.env = pin_repository_keys(env)
        self.base = base
        self.daemon = RsyncDaemon(base / "rsyncd")
        self.location = base / "repos" / "gentoo"
        self.ctx = Gkeys(load_config(env.config))
        self.lines: list[str] = []

    def serve(self, day: int) -> None:
        """A newer signed tree with ``dev-test/pkg/dayN.txt``; the files every day has keep one time (rsync's
        quick check then finds them unchanged: what ``--link-dest`` would link)."""
        name = f"day{day}"
        tree = make_tree(self.base / name, self.env.keys, "infra", when=past(0.5 - day / 10),
                         files={f"dev-test/pkg/{name}.txt": name})
        for rel in BASE_FILES:
            os.utime(tree / rel, (SAME_TIME, SAME_TIME))
        self.daemon.serve(tree)

    def sync(self, spawn: SpawnSettings) -> Any:
        self.lines = []
        request = RsyncRequest(location=self.location, uri=self.daemon.url, category=CATEGORY, quiet=True,
                               spawn=spawn)
        return sync_rsync(self.ctx, request, lambda level, text: self.lines.append(f"{level}: {text}"))

    def owners(self) -> set[int]:
        return {p.lstat().st_uid for p in [self.location, *self.location.rglob("*")]}


@pytest.fixture
def switching(env: Any, base: Path) -> Iterator[Switching]:
    sync = Switching(env, base)
    try:
        yield sync
    finally:
        sync.daemon.close()


def test_root_then_nobody_then_root_each_sync_succeeds(switching: Switching) -> None:
    """Each switch of the sync user takes effect at the first sync after it, with the verified tree, given to the
    new sync user; a sync that changes nothing after a switch still gives the tree to the new user."""
    nobody = _nobody().uid
    for day, (spawn, uid) in enumerate([(SpawnSettings(), 0), (_nobody(), nobody), (SpawnSettings(), 0)], 1):
        switching.serve(day)
        outcome = switching.sync(spawn)
        assert outcome.ok, (day, outcome.reason, switching.lines)
        assert (switching.location / f"dev-test/pkg/day{day}.txt").read_text() == f"day{day}"
        assert switching.owners() == {uid}, day
        assert sorted(p.name for p in switching.location.parent.iterdir()) == ["gentoo"]
    outcome = switching.sync(_nobody())  # the mirror serves the same tree: the switch alone
    assert outcome.ok and switching.owners() == {nobody}, (outcome.reason, switching.lines)


def test_a_leftover_staging_directory_of_the_previous_sync_user_is_removed_with_a_warning(
        switching: Switching) -> None:
    """A staging directory (with a symbolic link out of it) that an interrupted sync as ``nobody`` left is removed
    by the next sync as root, by descriptor (what the link points at stays), with a warning naming its owner."""
    nobody = _nobody()
    switching.serve(1)
    assert switching.sync(nobody).ok, switching.lines
    outside = switching.base / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not gkeys'")
    leftover = switching.location.parent / ".gentoo.gkeys-12345-x-gkstale"
    (leftover / "dev-test").mkdir(parents=True)
    (leftover / "dev-test" / "out").symlink_to(outside)
    for path in [leftover, *leftover.rglob("*")]:
        os.chown(path, nobody.uid, nobody.gid, follow_symlinks=False)
    switching.serve(2)
    outcome = switching.sync(SpawnSettings())
    assert outcome.ok, (outcome.reason, switching.lines)
    assert (switching.location / "dev-test/pkg/day2.txt").is_file() and switching.owners() == {0}
    assert sorted(p.name for p in switching.location.parent.iterdir()) == ["gentoo"]
    assert (outside / "keep").read_text() == "not gkeys'"
    assert any(line.startswith("warn:") and f"uid {nobody.uid}" in line and leftover.name in line
               for line in switching.lines), switching.lines



def _lend(path: Path, uid: int) -> None:
    """Give the test's upstream to ``uid`` (git fetches only from a repository of the fetching user's)."""
    for entry in [path, *path.rglob("*")]:
        os.chown(entry, uid, -1, follow_symlinks=False)


def test_a_git_repository_root_then_nobody_then_root_each_sync_succeeds(env: Any, base: Path) -> None:
    """The git path (``sync-type = gkeys`` with a git ``sync-uri``): each switch of the sync user takes effect at
    the first sync after it, the verified revision checked out and given to the new sync user."""
    install_devs(env, ("alice",))
    up = build(base / "upstream", env.keys, ["alice"])
    location = base / "repos" / "gentoo"
    nobody = _nobody()
    for turn, (spawn, uid) in enumerate([(SpawnSettings(), 0), (nobody, nobody.uid), (SpawnSettings(), 0)]):
        request = SyncRequest(location, f"file://{up.path}", TreeOptions(policy="all", jobs=1),
                              git_env=git_environment(), spawn=spawn, keep_local=True)
        lines: list[str] = []
        tip = up.head()
        _lend(up.path, uid)
        action = update_verified if turn else clone_verified
        outcome = action(context(env), request, lambda level, text, into=lines: into.append(text))
        assert outcome.ok and head(location) == tip, (turn, outcome.reason, lines)
        owners = {p.lstat().st_uid for p in [location, *location.rglob("*")] if "distfiles" not in p.parts}
        assert owners == {uid}, (turn, owners)
        if turn == 0:  # the user's own files beside the tree (Portage's volatile repositories keep them)
            (location / "distfiles").mkdir()
            (location / "distfiles" / "big.tar").write_text("the user's")
        assert (location / "distfiles" / "big.tar").read_text() == "the user's"  # carried over as it is
        _lend(up.path, 0)
        up.commit("alice")
