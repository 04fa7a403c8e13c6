"""A verified git update removes the old tree off its critical path (issue 36: the swap's price).

Removing the tree an exchange replaced was 13.5 s of a 17.8 s update of 50,000 files (``bench/gitsync.py``):
the old tree now goes to the location's trash (``.NAME.gkeys.old``) and a detached child removes it.  These
tests stop that child (as a reboot or the OOM killer would) to show what the next sync does with the rest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import build, context, head, install_devs

from gkeys_portage.core.fs import trash
from gkeys_portage.core.fs.trash import trash_path
from gkeys_portage.demo.tree_repo import git_environment
from gkeys_portage.portage.treesync import SyncOutcome, SyncRequest, clone_verified, update_verified
from gkeys_portage.verify.git.tree import TreeOptions

pytestmark = pytest.mark.slow


def _sync(env: Any, location: Path, upstream: Path, lines: list[str] | None = None) -> SyncOutcome:
    request = SyncRequest(location, f"file://{upstream}", TreeOptions(policy="all", jobs=1), git_env=git_environment())
    action = update_verified if (location / ".git").exists() else clone_verified
    return action(context(env), request, lambda level, text: (lines if lines is not None else []).append(text))


def _status(path: Path) -> bytes:
    return subprocess.run(["git", "-C", str(path), "-c", f"safe.directory={path}", "status", "--porcelain",
                           "--ignored", "--untracked-files=all"], env=git_environment(), capture_output=True,
                          check=True).stdout


def test_an_update_starts_from_the_tree_the_last_one_replaced_and_a_killed_removal_is_finished(
        env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each update keeps the tree it replaced as the spare (sharing every unchanged file with the live tree)
    and the next one is built from it (its directories moved, not the whole tree linked again); what is not
    reused goes to the trash, whose removal is killed here at once: the next sync finishes it before it makes
    another, so there is never more than one old tree and one trash."""
    install_devs(env, ("alice",))
    up = build(tmp_path / "upstream", env.keys, ["alice"])
    location = tmp_path / "repos" / "gentoo"
    spare, trash_dir = trash.spare_path(location), trash_path(location)
    assert _sync(env, location, up.path).ok
    monkeypatch.setattr(trash, "_BACKGROUND", ":")  # the detached removal dies before it removes anything
    revisions = [head(location)]
    for round_ in range(3):
        revisions.append(up.commit("alice", files={f"dev-test/round{round_}/f": f"{round_}\n"}))
        reused = (spare / "dev-test").stat().st_ino if spare.exists() else None
        lines: list[str] = []
        outcome = _sync(env, location, up.path, lines)
        assert outcome.ok and outcome.changed, outcome.reason
        assert head(location) == revisions[-1] and _status(location) == b""
        assert (location / "dev-test").stat().st_ino == (reused or (location / "dev-test").stat().st_ino)
        siblings = sorted(p.name for p in location.parent.iterdir())
        assert siblings == sorted(["gentoo", spare.name, *([trash_dir.name] if round_ else [])]), siblings
        assert head(spare) == revisions[-2]  # the tree this update replaced, not an older one
        assert (spare / "dev-test" / "pkg" / "file1").stat().st_ino == \
            (location / "dev-test" / "pkg" / "file1").stat().st_ino  # an unchanged file costs no disk
        assert (round_ > 1) == any("removed what an earlier sync left" in line for line in lines), lines
        if round_:
            assert not (trash_dir / "left-half-removed").exists()  # the earlier trash went whole
            (trash_dir / "left-half-removed").write_text(f"{round_}\n")

    monkeypatch.undo()  # the real detached removal: the trash goes without another sync
    revisions.append(up.commit("alice"))
    assert _sync(env, location, up.path).ok and head(location) == revisions[-1]
    for _ in range(600):  # a wait for the child, not a time limit on it
        if not trash_dir.exists():
            break
        time.sleep(0.1)
    assert not trash_dir.exists() and _status(location) == b"" and head(spare) == revisions[-2]


def test_nothing_in_the_spare_is_trusted(env: Any, tmp_path: Path) -> None:
    """A spare whose file was edited in place or replaced (same size and time, other content) and which gained a
    file still gives exactly the verified revision; a symlink at the spare's name is discarded, never followed."""
    install_devs(env, ("alice",))
    up = build(tmp_path / "upstream", env.keys, ["alice"])
    location = tmp_path / "repos" / "gentoo"
    spare = trash.spare_path(location)
    assert _sync(env, location, up.path).ok
    time.sleep(1.1)  # the next index is written over a second after the files: git trusts their stat (not racy)
    up.commit("alice", files={"dev-test/pkg/new": "1\n"})
    assert _sync(env, location, up.path).ok and spare.is_dir()
    # a file the spare shares with the live tree, edited in place with its size and time put back (only its
    # change time tells, which the checkout does not compare): hashed again, never taken as proven before
    target = spare / "dev-test" / "pkg" / "file1"
    info, data = target.stat(), target.read_bytes()
    assert info.st_ino == (location / "dev-test" / "pkg" / "file1").stat().st_ino
    with open(target, "r+b") as handle:
        handle.write(bytes(len(data)))
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    up.commit("alice", files={"dev-test/pkg/new": "1b\n"})
    assert _sync(env, location, up.path).ok and (location / "dev-test" / "pkg" / "file1").read_bytes() == data
    info = target.stat()  # the edited file is the old tree's now, the spare's
    target.unlink()
    target.write_bytes(bytes(len(data)))  # a new inode, same size, same modification time
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    (spare / "dev-test" / "planted").write_text("not in any revision\n")
    new = up.commit("alice", files={"dev-test/pkg/new": "2\n"})
    assert _sync(env, location, up.path).ok and head(location) == new and _status(location) == b""
    assert (location / "dev-test" / "pkg" / "file1").read_bytes() == data
    assert not (location / "dev-test" / "planted").exists()

    precious = tmp_path / "precious"
    (precious / "dev-test").mkdir(parents=True)
    (precious / "dev-test" / "file").write_text("keep me\n")
    shutil.rmtree(spare)
    spare.symlink_to(precious)
    newer = up.commit("alice", files={"dev-test/pkg/new": "3\n"})
    assert _sync(env, location, up.path).ok and head(location) == newer and _status(location) == b""
    assert spare.is_dir() and not spare.is_symlink() and head(spare) == new
    assert sorted(p.name for p in precious.rglob("*")) == ["dev-test", "file"]


def test_a_symlink_at_the_trash_name_is_removed_as_a_link_never_followed(
        env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever sits at the trash name is removed as itself: a link to another directory does not empty it,
    and a nothing-new sync removes a leftover too."""
    install_devs(env, ("alice",))
    up = build(tmp_path / "upstream", env.keys, ["alice"])
    location = tmp_path / "repos" / "gentoo"
    assert _sync(env, location, up.path).ok
    precious = tmp_path / "precious"
    (precious / "sub").mkdir(parents=True)
    (precious / "sub" / "file").write_text("keep me\n")
    trash_path(location).symlink_to(precious)
    outcome = _sync(env, location, up.path)  # nothing new: no swap, but the leftover goes
    assert outcome.ok and not outcome.changed, outcome.reason
    assert not trash_path(location).is_symlink() and (precious / "sub" / "file").read_text() == "keep me\n"


def test_a_spare_a_killed_update_half_moved_gives_way_to_links(env: Any, tmp_path: Path) -> None:
    """A run killed while it moved the spare's directories leaves a spare with only its ``.git``: the next
    update links the live tree instead of checking every file out again (unchanged files keep their inode)."""
    install_devs(env, ("alice",))
    up = build(tmp_path / "upstream", env.keys, ["alice"])
    location = tmp_path / "repos" / "gentoo"
    spare = trash.spare_path(location)
    assert _sync(env, location, up.path).ok
    up.commit("alice", files={"dev-test/pkg/new": "1\n"})
    assert _sync(env, location, up.path).ok
    for path in spare.iterdir():
        if path.name != ".git":
            shutil.rmtree(path)
    before = (location / "dev-test" / "pkg" / "file1").stat().st_ino
    new = up.commit("alice", files={"dev-test/pkg/new": "2\n"})
    assert _sync(env, location, up.path).ok and head(location) == new and _status(location) == b""
    assert (location / "dev-test" / "pkg" / "file1").stat().st_ino == before
