"""What root verifies and checks out in a git sync is exactly the signed commit, whatever the tree's owner did
(issue 46 for git, issue 43 items 4 and 5).

Under ``usersync`` the repository belongs to the sync user (``portage``, the account builds run as), which can
edit the live tree, its ``.git`` and the spare at any time.  These tests play that user in-process (the files
are this user's anyway); ``test_tree_sync_race.py`` plays it as a real second user against ``emerge --sync``.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import build, context, head, install_devs

from gkeys_portage.core.errors import BadInputError
from gkeys_portage.core.fs import trash
from gkeys_portage.demo.tree_repo import git_environment
from gkeys_portage.portage.treesync import SyncOutcome, SyncRequest, clone_verified, update_verified
from gkeys_portage.verify.git import proof
from gkeys_portage.verify.git.objects import GitRepo
from gkeys_portage.verify.git.tree import TreeOptions

pytestmark = pytest.mark.slow


def _sync(env: Any, location: Path, upstream: Path, lines: list[str] | None = None, *,
          clone: bool | None = None) -> SyncOutcome:
    request = SyncRequest(location, f"file://{upstream}", TreeOptions(policy="all", jobs=1), git_env=git_environment())
    first = not (location / ".git").exists() if clone is None else clone
    action = clone_verified if first else update_verified
    return action(context(env), request, lambda level, text: (lines if lines is not None else []).append(text))


def _edit_in_place(path: Path, text: str) -> None:
    """Rewrite ``path`` through its inode with ``text`` (the same size) and put its modification time back."""
    before = path.stat()
    assert len(text.encode()) == before.st_size
    with open(path, "r+b") as handle:
        handle.write(text.encode())
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)


def _tree_files(path: Path) -> dict[str, str]:
    return {p.relative_to(path).as_posix(): p.read_text() for p in path.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(path).parts}


def test_an_in_place_edit_survives_no_sync_and_never_reaches_the_next_tree(env: Any, tmp_path: Path) -> None:
    """Issue 43 item 4: a live file rewritten with its size and mtime put back stayed through a no-change sync
    ("verified") and reached the next verified tree through the spare's shared inode; now the live tree is
    trusted only when it matches the inventory taken when it was proven, and every staging file is hashed."""
    install_devs(env, ("alice",))
    up = build(tmp_path / "upstream", env.keys, ["alice"])
    location = tmp_path / "repos" / "gentoo"
    assert _sync(env, location, up.path).ok
    up.commit("alice")
    assert _sync(env, location, up.path).ok  # the spare now shares every unchanged file with the live tree
    target = location / "dev-test" / "pkg" / "file1"
    spare_copy = trash.spare_path(location) / "dev-test" / "pkg" / "file1"
    assert spare_copy.stat().st_ino == target.stat().st_ino
    expected = _tree_files(location)

    _edit_in_place(target, "EVIL 1!!\n")
    outcome = _sync(env, location, up.path)  # nothing new upstream
    assert outcome.ok, outcome.reason
    assert _tree_files(location) == expected, "the edit survived a no-change sync"

    _edit_in_place(location / "dev-test" / "pkg" / "file1", "EVIL 2!!\n")
    good = up.commit("alice")
    outcome = _sync(env, location, up.path)
    assert outcome.ok and head(location) == good, outcome.reason
    assert (location / "dev-test" / "pkg" / "file1").read_text() == expected["dev-test/pkg/file1"]
    assert _tree_files(location) == {**expected, f"dev-test/pkg/file{up.counter}": f"change {up.counter}\n"}

    outcome = _sync(env, location, up.path)  # and an untouched tree is trusted as it is: no swap
    inode = location.stat().st_ino
    assert outcome.ok and not outcome.changed and location.stat().st_ino == inode


def test_a_failed_first_clone_keeps_the_location_portage_made(env: Any, tmp_path: Path) -> None:
    """Issue 43 item 5: the location (made by Portage, under usersync owned by the sync user) was removed by the
    failed clone's cleanup, and Portage made it again as root: every later sync ran as root."""
    install_devs(env, ("alice",))
    up = build(tmp_path / "upstream", env.keys, ["alice", None])
    location = tmp_path / "repos" / "gentoo"
    location.mkdir(parents=True)
    location.chmod(0o750)
    if os.geteuid() == 0:
        os.chown(location, 65534, 65534)  # nobody: the clone as its owner fails too (the upstream is root's)
    before = location.stat()
    outcome = _sync(env, location, up.path)
    assert not outcome.ok
    after = location.stat()
    assert (after.st_ino, after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == \
        (before.st_ino, before.st_uid, before.st_gid, 0o750)
    assert not any(location.iterdir())
    assert [p.name for p in location.parent.iterdir()] == ["gentoo"]  # no staging left beside it

    if os.geteuid() == 0:
        os.chown(location, 0, 0)
    up.commit("alice")
    up.force(up.commit("alice", parents=[]))  # a signed history from scratch
    outcome = _sync(env, location, up.path)
    assert outcome.ok, outcome.reason
    assert location.stat().st_ino == before.st_ino and stat.S_IMODE(location.stat().st_mode) == 0o750
    assert head(location) == up.head()


def test_root_never_obeys_the_git_configuration_the_tree_owner_wrote(env: Any, tmp_path: Path) -> None:
    """Issue 46: the staging copy of .git comes from the owner's; root's git runs with a git directory of its own,
    so a filter, fsmonitor or hook the owner configured never runs (here it would write a marker)."""
    install_devs(env, ("alice",))
    up = build(tmp_path / "upstream", env.keys, ["alice"])
    location = tmp_path / "repos" / "gentoo"
    assert _sync(env, location, up.path).ok
    marker = tmp_path / "ran"
    command = f"sh -c 'echo $0 >> {marker}; cat'"
    git_dir = location / ".git"
    with open(git_dir / "config", "a") as handle:
        handle.write(f"[filter \"x\"]\n\tsmudge = {command}\n\tclean = {command}\n\trequired = true\n"
                     f"[core]\n\tfsmonitor = {command}\n\thooksPath = {tmp_path / 'hooks'}\n"
                     f"[include]\n\tpath = {tmp_path / 'included'}\n")
    (tmp_path / "included").write_text(f"[diff \"x\"]\n\ttextconv = {command}\n")
    (git_dir / "info").mkdir(exist_ok=True)
    (git_dir / "info" / "attributes").write_text("* filter=x diff=x\n")
    (tmp_path / "hooks").mkdir()
    for hook in ("post-checkout", "post-merge", "reference-transaction", "post-index-change"):
        (tmp_path / "hooks" / hook).write_text(f"#!/bin/sh\necho {hook} >> {marker}\n")
        (tmp_path / "hooks" / hook).chmod(0o755)
    up.commit("alice", files={"dev-test/pkg/new": "new\n"})
    outcome = _sync(env, location, up.path)
    assert outcome.ok, outcome.reason
    assert not marker.exists(), marker.read_text()
    assert (location / "dev-test" / "pkg" / "new").read_text() == "new\n" and head(location) == up.head()


def object_id(kind: str, body: bytes) -> str:
    """The SHA-1 object name git gives ``body`` as a ``kind``."""
    return hashlib.sha1(b"%s %d\0" % (kind.encode(), len(body)) + body).hexdigest()


def test_an_object_changed_in_the_store_is_never_checked_out(env: Any, tmp_path: Path) -> None:
    """Issue 46 item 4: the objects verified are the objects checked out.  The tree's owner plants, under the
    name of a blob the next signed commit will hold, an object with other content (the fetch does not fetch
    an object it has), and git checks a blob out by name without hashing it: before, only git's re-read of a
    file written in the same second as its index caught it (a status after the checkout).  Now the checkout is
    hashed against the signed tree, and the sync refuses naming the fix."""
    install_devs(env, ("alice",))
    up = build(tmp_path / "upstream", env.keys, ["alice"])
    location = tmp_path / "repos" / "gentoo"
    assert _sync(env, location, up.path).ok
    verified = head(location)
    genuine = b"the signed content\n"
    name = object_id("blob", genuine)
    path = location / ".git" / "objects" / name[:2] / name[2:]
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(zlib.compress(b"blob %d\0" % len(genuine) + b"THE OWNER'S BYTES!\n"))  # same length
    up.commit("alice", files={"eclass/x.eclass": genuine.decode()})
    lines: list[str] = []
    outcome = _sync(env, location, up.path, lines)
    assert not (location / "eclass" / "x.eclass").exists() or \
        (location / "eclass" / "x.eclass").read_bytes() == genuine
    if outcome.ok:  # a fetch that brought the object again would be fine too
        assert head(location) == up.head()
    else:
        assert "does not hash to its signed tree" in outcome.reason and f"remove {location}" in outcome.reason, \
            outcome.reason
        assert head(location) == verified


def test_a_commit_object_changed_in_the_store_is_refused(env: Any, tmp_path: Path) -> None:
    """A commit is read through its hash: an object under a commit's name that holds other bytes (another signed
    commit's, say: the owner of a store can write its files) is refused, never verified as that name."""
    up = build(tmp_path / "upstream", env.keys, ["alice", "alice"])  # loose objects only
    raw = subprocess.run(["git", "-C", str(up.path), "cat-file", "commit", "HEAD~1"], env=git_environment(),
                         capture_output=True, check=True).stdout
    tip = up.head() or ""
    path = up.path / ".git" / "objects" / tip[:2] / tip[2:]
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"commit %d\0" % len(raw) + raw))
    with pytest.raises(BadInputError, match="does not hash to its name"):
        GitRepo(up.path).read_commits([tip])


def test_a_file_proven_before_is_hashed_again_once_it_changed(tmp_path: Path) -> None:
    """The proof reuses what an earlier proof of root's hashed only for the very inode untouched since (its change
    time says so): a file rewritten in place with its size and modification time put back is hashed again, and
    the proof names it; untouched, the same tree proves again without reading a file."""
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "cat").mkdir()
    (work / "cat" / "file1").write_text("good 1!!\n")
    (work / "file2").write_text("two\n")
    subprocess.run(["git", "-C", str(work), "add", "-A"], check=True)
    tree = subprocess.run(["git", "-C", str(work), "write-tree"], check=True, capture_output=True,
                          text=True).stdout.strip()
    owner = (os.getuid(), os.getgid())
    repo = GitRepo(work)
    first, known = proof.prove(os.open(work, os.O_RDONLY | os.O_DIRECTORY), owner, repo, tree, ())
    again, _ = proof.prove(os.open(work, os.O_RDONLY | os.O_DIRECTORY), owner, repo, tree, (), known)
    assert again == first
    _edit_in_place(work / "cat" / "file1", "EVIL 1!!\n")
    with pytest.raises(proof.Mismatch) as refused:
        proof.prove(os.open(work, os.O_RDONLY | os.O_DIRECTORY), owner, repo, tree, (), known)
    assert refused.value.paths == ["cat/file1"], refused.value.paths
