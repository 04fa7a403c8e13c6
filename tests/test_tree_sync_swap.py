"""``sync-type = gkeys`` over git builds the new revision beside the live tree and swaps it in (issues 35, 36).

* Issue 35 case 8: a signed update keeps what Portage keeps (``distfiles``, ``local``, ``packages`` of a
  volatile repository), with the real ``emerge --sync``.
* Issue 35 case 9: a refused fetch leaves the repository's ``.git`` as big as it was.
* Issue 35 item 2 (git): a signed revision with a symlink out of the tree or a submodule is not checked out.
* Issue 36 case 1: ``emerge --sync`` SIGKILLed during the checkout leaves exactly one verified revision, no
  lock that blocks, and the next sync succeeds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import build, context, head, install_devs

from gkeys_portage.demo.tree_repo import PortageSandbox, RepoBuilder, git_environment
from gkeys_portage.portage.treesync import SyncOutcome, SyncRequest, clone_verified, update_verified
from gkeys_portage.verify.git.tree import TreeOptions

pytestmark = pytest.mark.slow

LOCAL = {"distfiles/foo-1.tar.gz": b"a distfile\n", "packages/Packages": b"PACKAGES: 1\n",
         "local/profiles/package.mask": b"dev-lang/x\n"}


def _sync(env: Any, location: Path, upstream: Path) -> SyncOutcome:
    request = SyncRequest(location, f"file://{upstream}", TreeOptions(policy="all", jobs=1), git_env=git_environment())
    action = update_verified if (location / ".git").exists() else clone_verified
    return action(context(env), request, lambda level, text: None)


def _status(path: Path) -> bytes:
    return subprocess.run(["git", "-C", str(path), "-c", f"safe.directory={path}", "status", "--porcelain",
                           "--ignored", "--untracked-files=all"], env=git_environment(), capture_output=True,
                          check=True).stdout


def _disk_usage(path: Path) -> int:
    """Bytes the files below ``path`` occupy (each inode counted once)."""
    seen: dict[tuple[int, int], int] = {}
    for item in [path, *path.rglob("*")]:
        info = item.lstat()
        seen[(info.st_dev, info.st_ino)] = info.st_blocks * 512
    return sum(seen.values())


def _plant_local(location: Path) -> None:
    for rel, data in LOCAL.items():
        (location / rel).parent.mkdir(parents=True, exist_ok=True)
        (location / rel).write_bytes(data)


def test_signed_update_keeps_what_portage_keeps(env: Any, tmp_path: Path, portage_root: PortageSandbox) -> None:
    """Case 8: outside /var/db/repos Portage's git module never cleans a repository; neither does gkeys, and a
    revision that itself holds one of the names Portage keeps is refused."""
    install_devs(env, ("alice",))
    up = RepoBuilder(tmp_path / "upstream", env.keys)
    up.commit("alice")
    location = portage_root.add_repo("test", f"file://{up.path}", "gkeys", sync_gkeys_policy="all")
    assert portage_root.sync("test").returncode == 0
    _plant_local(location)
    (location / "stray").write_text("not the verified revision\n")
    good = up.commit("alice")
    result = portage_root.sync("test")
    assert result.returncode == 0, result.stdout
    assert head(location) == good and "kept distfiles, local, packages" in result.stdout, result.stdout
    assert {rel: (location / rel).read_bytes() for rel in LOCAL} == LOCAL
    assert not (location / "stray").exists()  # the tree is the verified revision plus only what Portage keeps

    up.commit("alice", files={"distfiles/foo-1.tar.gz": "the revision's own\n"})
    result = portage_root.sync("test")  # the user's distfile or the revision's: neither is dropped silently
    assert result.returncode != 0 and "the verified revision has distfiles/" in result.stdout, result.stdout
    assert head(location) == good and {rel: (location / rel).read_bytes() for rel in LOCAL} == LOCAL
    up.force(good)

    portage_root.add_repo("test", f"file://{up.path}", "gkeys", sync_gkeys_policy="all", volatile="no")
    up.commit("alice")
    result = portage_root.sync("test")  # volatile = no: Portage's own module runs git clean -fdx; gkeys too
    assert result.returncode == 0, result.stdout
    assert not any((location / rel).exists() for rel in LOCAL) and _status(location) == b""


def test_refused_fetch_leaves_the_repository_as_big_as_it_was(env: Any, tmp_path: Path) -> None:
    """Case 9: three refused 8 MiB histories do not stay in .git (before: +24 MiB)."""
    install_devs(env, ("alice",))
    up = build(tmp_path / "upstream", env.keys, ["alice"])
    location = tmp_path / "repos" / "gentoo"
    assert _sync(env, location, up.path).ok
    verified = head(location)
    before = _disk_usage(location / ".git")
    for _ in range(3):
        up.commit(None, files={"dev-test/pkg/blob": os.urandom(8 * 1024 * 1024).hex()[: 8 * 1024 * 1024]})
        outcome = _sync(env, location, up.path)
        assert not outcome.ok and "NOT updated" in outcome.reason, outcome.reason
        up.force(verified)
    after = _disk_usage(location / ".git")
    assert after - before < 256 * 1024, (before, after)
    assert head(location) == verified and _status(location) == b""
    assert not [p for p in location.parent.iterdir() if p.name.startswith(".gentoo.gkeys-")]


def test_a_symlink_out_of_the_tree_or_a_submodule_is_never_checked_out(env: Any, tmp_path: Path) -> None:
    """Item 2 (git): a validly signed revision may not plant a link to /etc/shadow, nor a submodule."""
    install_devs(env, ("alice",))
    up = RepoBuilder(tmp_path / "upstream", env.keys)
    up.commit("alice")
    (up.path / "dev-test" / "pkg" / "inside").symlink_to("file1")  # a link within the tree is fine
    (up.path / "eclass").mkdir()
    (up.path / "eclass" / "up").symlink_to("../dev-test")
    up.commit("alice")
    location = tmp_path / "repos" / "gentoo"
    assert _sync(env, location, up.path).ok
    verified = head(location)
    assert (location / "dev-test" / "pkg" / "inside").is_symlink()

    (up.path / "dev-test" / "pkg" / "shadow").symlink_to("../../eclass/up/../../../etc/shadow")
    up.commit("alice")
    outcome = _sync(env, location, up.path)
    assert not outcome.ok and "shadow: a symlink to ../../eclass/up/../../../etc/shadow, outside the repository" \
        in outcome.reason, outcome.reason
    assert head(location) == verified and not (location / "dev-test" / "pkg" / "shadow").is_symlink()

    up.force(verified)
    sub = up.path / "sub"
    sub.mkdir()
    env_git = {**git_environment(), "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
               "GIT_COMMITTER_EMAIL": "a@b"}
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", "-C", str(sub), *args], env=env_git, check=True, capture_output=True)
    up.commit("alice")  # `git add -A` records sub/ as a gitlink
    outcome = _sync(env, location, up.path)
    assert not outcome.ok and "sub: a submodule (gitlink)" in outcome.reason, outcome.reason
    assert head(location) == verified

    fresh = tmp_path / "repos" / "fresh"  # a first clone refuses it too, installing nothing
    assert not _sync(env, fresh, up.path).ok and not fresh.exists()


def _locks(location: Path) -> list[Path]:
    staged = location.parent.glob(f".{location.name}.gkeys-*/git/index.lock")  # root's git directory in the hold
    return [*([location / ".git" / "index.lock"] if (location / ".git" / "index.lock").exists() else []), *staged]


def test_emerge_sync_killed_during_the_checkout_leaves_one_verified_revision(
        env: Any, tmp_path: Path, portage_root: PortageSandbox) -> None:
    """Issue 36 case 1: before, a kill during `git reset --hard` left a mixed tree and an index.lock that made
    every later sync fail ("remove REPO and sync again")."""
    install_devs(env, ("alice",))
    up = RepoBuilder(tmp_path / "upstream", env.keys)
    old = up.commit("alice")
    location = portage_root.add_repo("test", f"file://{up.path}", "gkeys", sync_gkeys_policy="all")
    assert portage_root.sync("test").returncode == 0
    new = up.commit("alice", files={f"dev-test/big{i // 500}/f{i}": f"{i}\n" for i in range(3000)})

    child = subprocess.Popen(["emerge", "--sync", "test"], env=portage_root.env, cwd=portage_root.base,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while child.poll() is None and not _locks(location):  # git is checking the new revision out
            time.sleep(0.001)
        caught = child.poll() is None
        os.killpg(child.pid, signal.SIGKILL)
    finally:
        output = child.communicate()[0].decode(errors="replace")
    assert caught, f"the sync ended before its checkout was seen: {output}"

    assert head(location) in (old, new)  # exactly one verified revision, nothing of the other
    assert _status(location) == b"" and not (location / ".git" / "index.lock").exists()
    result = portage_root.sync("test")
    assert result.returncode == 0, result.stdout
    assert head(location) == new and _status(location) == b""
    assert not [p for p in location.parent.iterdir() if p.name.startswith(".test.gkeys-")]


def test_a_mixed_and_locked_tree_an_older_sync_left_is_replaced(env: Any, tmp_path: Path) -> None:
    """Issue 36 case 1, recovery: what a sync killed in `git reset --hard` left before (HEAD at the old revision,
    files of the new one, `.git/index.lock`) no longer blocks: the next sync swaps in a clean tree (before:
    "git reset failed ... index.lock: File exists ... remove REPO and sync again", every time)."""
    install_devs(env, ("alice",))
    up = build(tmp_path / "upstream", env.keys, ["alice"])
    location = tmp_path / "repos" / "gentoo"
    assert _sync(env, location, up.path).ok
    (location / ".git" / "index.lock").write_bytes(b"")
    (location / "dev-test" / "pkg" / "file1").write_text("half of the next revision\n")
    (location / "dev-test" / "pkg" / "file2").write_text("written before the kill\n")
    outcome = _sync(env, location, up.path)  # nothing new upstream: the tree is still put right
    assert outcome.ok, outcome.reason
    assert _status(location) == b"" and not (location / ".git" / "index.lock").exists()
    (location / ".git" / "index.lock").write_bytes(b"")
    new = up.commit("alice")
    assert _sync(env, location, up.path).ok and head(location) == new and _status(location) == b""


@pytest.mark.parametrize(("links", "path", "inside"), [
    ({"a/s": "..", "y": "a/s/../x"}, "y", False),  # inside by its text, outside once a/s is followed
    ({"a/s": ".."}, "a/s", True),
    ({"up": "a/b/c", "x": "up/../.."}, "x", True),  # outside by its text, inside once up is followed
    ({"x": "/usr/portage/eclass"}, "x", False),
    ({"p/q": "../../etc/shadow"}, "p/q", False),
    ({"l1": "l2", "l2": "l1"}, "l1", False),  # a loop
    ({"dev-test/pkg/inside": "file1"}, "dev-test/pkg/inside", True),
])
def test_symlinks_are_judged_where_they_lead(links: dict[str, str], path: str, inside: bool) -> None:
    from gkeys_portage.verify.git.contents import _resolve

    assert _resolve(path, links) is inside
