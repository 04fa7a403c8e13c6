"""verify/git/hold: root's hold on a git staging tree the sync user filled (issue 46), on its own and fast.

``test_tree_sync_race.py`` plays the sync user as a real second user against ``emerge --sync``; here the tree is
made that user's (a uid nobody has) and :func:`take`, :func:`give` and :func:`remove` are called directly.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gkeys_portage.verify.git import hold as holds
from gkeys_portage.verify.git.spawn import SpawnSettings

USER = 4321  # a uid nobody on the test machine uses: the "sync user"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="taking a tree from another user needs root")


def _filled(hold: holds.Hold, victim: Path) -> None:
    """What the sync user's git leaves in the staging tree, and a link to a root-only directory in it."""
    tree = hold.tree
    for sub in (".git/objects/ab", ".git/refs/heads", "dev-test/pkg"):
        (tree / sub).mkdir(parents=True, exist_ok=True)
    (tree / ".git" / "objects" / "ab" / "cdef").write_bytes(b"object")
    (tree / "dev-test" / "pkg" / "file1").write_text("one\n")
    (tree / "eclass").symlink_to(victim)
    for path in [tree, *tree.rglob("*")]:
        os.chown(path, USER, USER, follow_symlinks=False)
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)


def test_take_makes_the_hold_and_every_directory_roots_alone_and_give_hands_them_back(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    (victim / "secret").write_text("s")
    (tmp_path / "repos").mkdir()
    spawn = SpawnSettings(uid=USER, gid=USER, groups=(USER,), umask=0o022)
    with holds.hold_directory(tmp_path / "repos", ".gentoo.gkeys-", spawn, like=None) as hold:
        assert stat.S_IMODE(hold.top.stat().st_mode) == 0o711  # the sync user reaches tree, creates nothing beside
        _filled(hold, victim)
        holds.take(hold)
        assert stat.S_IMODE(hold.top.stat().st_mode) == 0o700
        directories = [hold.tree, *(p for p in hold.tree.rglob("*") if p.is_dir() and not p.is_symlink())]
        assert len(directories) == 8
        for path in directories:
            st = path.lstat()
            assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o700), path
        assert (hold.tree / "eclass").is_symlink()  # a link is met as the link: never entered
        st = victim.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700)
        holds.give(hold)
        for path in directories:
            st = path.lstat()
            assert (st.st_uid, st.st_gid) == (USER, USER), path
        assert stat.S_IMODE(hold.top.stat().st_mode) == 0o711
    assert not list((tmp_path / "repos").iterdir())


def test_what_cannot_be_removed_is_named_with_its_command_never_raised(tmp_path: Path) -> None:
    """A leftover (here an immutable file, ``chattr +i``) never blocks a sync: it is a warning for the caller."""
    if not shutil.which("chattr"):
        pytest.skip("chattr +i needs root")
    stale = tmp_path / ".gentoo.gkeys-12345-x"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub" / "stuck").write_text("x")
    if subprocess.run(["chattr", "+i", str(stale / "sub" / "stuck")], capture_output=True).returncode != 0:
        pytest.skip("this file system has no immutable flag")
    left: list[str] = []
    try:
        holds.remove(tmp_path, stale.name, left)
    finally:
        subprocess.run(["chattr", "-i", str(stale / "sub" / "stuck")], check=False)
    assert len(left) == 1 and f"rm -rf --one-file-system {stale}" in left[0], left


_MOUNTED = textwrap.dedent("""
    import os, subprocess, sys
    from pathlib import Path
    from gkeys_portage.core.errors import UsageError
    from gkeys_portage.verify.git import hold as holds
    from gkeys_portage.verify.git.spawn import SpawnSettings
    hold = holds.Hold(Path(sys.argv[1]), SpawnSettings())
    (hold.tree / "distfiles").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "none", str(hold.tree / "distfiles")], check=True)
    (hold.tree / "distfiles" / "d").mkdir()
    os.chown(hold.tree / "distfiles" / "d", 4321, 4321)
    try:
        holds.take(hold)
    except UsageError as exc:
        assert "distfiles is a mount point inside the repository" in exc.message, exc.message
    else:
        raise AssertionError("the take walked into a mount point")
    assert os.stat(hold.tree / "distfiles" / "d").st_uid == 4321
    subprocess.run(["umount", str(hold.tree / "distfiles")], check=True)
    print("ok")
""")


def test_the_take_never_crosses_a_mount_point(tmp_path: Path) -> None:
    """A tmpfs mounted inside the staging tree (in a private mount namespace: ``unshare -m``) refuses the take,
    and nothing on it changes owner."""
    if not shutil.which("unshare") or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode:
        pytest.skip("needs root and unshare -m for a private mount namespace")
    env = {**os.environ, "PYTHONPATH": str(Path(holds.__file__).parents[3])}
    result = subprocess.run(["unshare", "-m", sys.executable, "-c", _MOUNTED, str(tmp_path / "hold")],
                            capture_output=True, text=True, env=env, check=False, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
