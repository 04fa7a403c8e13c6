"""verify/manifest/custody: the staging tree taken from the sync user before it is judged (issue 46)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from rsync_helpers import deep_tree

from gkeys_portage.core.fs import fdtree
from gkeys_portage.verify.manifest import custody
from gkeys_portage.verify.manifest.shape import ChangedInCustody, shape

USER = 4321  # a uid nobody on the test machine uses: the "sync user"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="taking a tree from another user needs root")


def _staging(parent: Path, live: Path) -> Path:
    staging = parent / ".gentoo.gkeys-1-x-gkstage"
    (staging / "cat" / "pkg").mkdir(parents=True)
    (staging / "cat" / "pkg" / "a.ebuild").write_text("EAPI=8\n")
    (staging / "cat" / "pkg" / "b.ebuild").write_text("EAPI=8\n")
    (staging / "Manifest").write_text("m\n")
    os.link(live, staging / "cat" / "pkg" / "shared.ebuild")  # what rsync --link-dest does
    victim = parent / "victim"  # a third user's file outside the tree, which a link in it names
    victim.write_text("v")
    os.chown(victim, 4998, 4998)
    (staging / "victim-link").symlink_to(victim)
    for path in [staging, *staging.rglob("*")]:
        os.chown(path, USER, USER, follow_symlinks=False)
    return staging


def _take(tmp_path: Path) -> tuple[Path, int, int, custody.Taken, Path]:
    live = tmp_path / "live.ebuild"
    live.write_text("EAPI=8\n")
    os.chown(live, USER, USER)
    staging = _staging(tmp_path, live)
    holder, fd = custody.open_holder(tmp_path, ".gentoo.gkeys-")
    parent = fdtree.open_dir(tmp_path)
    writer = os.open(staging / "cat" / "pkg" / "b.ebuild", os.O_RDWR)  # the sync user's, opened before
    try:
        taken = custody.Taken()
        custody.take_over(fd, parent, staging.name, frozenset({USER, 0}), taken)
        os.pwrite(writer, b"EAPI=0\n", 0)  # after the takeover: lands in the inode gkeys no longer holds
    finally:
        os.close(writer)
    return holder, fd, parent, taken, live


def test_the_takeover_makes_the_tree_roots_and_breaks_away_from_writers(tmp_path: Path) -> None:
    holder, fd, parent, taken, live = _take(tmp_path)
    try:
        tree = holder / custody.TREE
        assert stat.S_IMODE(holder.stat().st_mode) == 0o700 and not (tmp_path / ".gentoo.gkeys-1-x-gkstage").exists()
        for path in [tree, *tree.rglob("*")]:
            st = path.lstat()
            assert (st.st_uid, st.st_gid) == (0, 0), path
            if path.is_dir():
                assert stat.S_IMODE(st.st_mode) == 0o700
        assert (tree / "cat" / "pkg" / "b.ebuild").read_text() == "EAPI=8\n"  # the writer's inode left the tree
        assert live.stat().st_uid == 0  # shared with the live file: root's until handed over or given back
        assert (tmp_path / "victim").stat().st_uid == 4998  # the link was made root's, never what it names
        custody.give_back(fd, taken)
        assert (live.stat().st_uid, live.stat().st_gid) == (USER, USER)
    finally:
        os.close(fd)
        os.close(parent)


def test_a_change_after_the_takeover_refuses_the_shaping(tmp_path: Path) -> None:
    holder, fd, parent, taken, _ = _take(tmp_path)
    try:
        covered = frozenset({"Manifest", "cat/pkg/a.ebuild", "cat/pkg/b.ebuild", "cat/pkg/shared.ebuild"})
        ebuild = holder / custody.TREE / "cat" / "pkg" / "a.ebuild"
        st = ebuild.stat()
        ebuild.write_text("EAPI=0\n")
        os.utime(ebuild, ns=(st.st_atime_ns, st.st_mtime_ns))  # size and time kept: only the change time tells
        with pytest.raises(ChangedInCustody, match="cat/pkg/a.ebuild changed after gkeys took the tree over"):
            shape(holder / custody.TREE, covered, taken.fingerprints)
    finally:
        os.close(fd)
        os.close(parent)


def test_an_entry_of_another_owner_refuses_the_takeover(tmp_path: Path) -> None:
    live = tmp_path / "live.ebuild"
    live.write_text("x")
    staging = _staging(tmp_path, live)
    os.chown(staging / "cat" / "pkg" / "a.ebuild", 4999, 4999)
    holder, fd = custody.open_holder(tmp_path, ".gentoo.gkeys-")
    parent = fdtree.open_dir(tmp_path)
    try:
        with pytest.raises(custody.ForeignEntry, match="belongs to uid 4999"):
            custody.take_over(fd, parent, staging.name, frozenset({USER, 0}), custody.Taken())
        assert (holder / custody.TREE / "cat" / "pkg" / "a.ebuild").stat().st_uid == 4999  # never taken
    finally:
        os.close(fd)
        os.close(parent)


def test_a_tree_deeper_than_64_levels_is_refused_naming_the_path(tmp_path: Path) -> None:
    """What a mirror may send is bounded (``shape.TREE_LIMITS``): the takeover refuses past 64 levels, naming the
    path, before gemato or the shaping walks it."""
    staging = tmp_path / ".gentoo.gkeys-1-x-gkstage"
    deep_tree(staging / "lost+found", 70)
    holder, fd = custody.open_holder(tmp_path, ".gentoo.gkeys-")
    parent = fdtree.open_dir(tmp_path)
    try:
        with pytest.raises(custody.TreeTooLarge, match=r"lost\+found/d/d/.*deeper than 64 levels"):
            custody.take_over(fd, parent, staging.name, frozenset({USER, 0}), custody.Taken())
    finally:
        os.close(fd)
        os.close(parent)


def test_hand_over_reaches_no_entry_before_its_inventory_is_taken(tmp_path: Path) -> None:
    """The location's files are handed over before the location gets its owner (``then``), every directory after
    everything in it: nothing is reachable by the sync user's paths before gkeys took its ``lstat``."""
    from gkeys_portage.verify.manifest.shape import Owner, hand_over, shape

    root = tmp_path / "tree"
    (root / "cat" / "pkg").mkdir(parents=True)
    (root / "cat" / "pkg" / "a.ebuild").write_text("a")
    (root / "Manifest").write_text("m")
    for path in [root, *root.rglob("*")]:
        path.chmod(0o700 if path.is_dir() else 0o644)
    kept = shape(root, frozenset({"Manifest", "cat/pkg/a.ebuild"})).kept
    states: dict[str, tuple[int, int]] = {}

    def then() -> None:
        for rel in ("Manifest", "cat", "cat/pkg/a.ebuild"):
            st = (root / rel).lstat()
            states[rel] = (st.st_uid, stat.S_IMODE(st.st_mode))

    entries: list[tuple[bytes, os.stat_result]] = []
    top = fdtree.open_dir(root)
    try:
        assert hand_over(top, kept, Owner(USER, USER), then=then, record=lambda rel, st: entries.append((rel, st)))
    finally:
        os.close(top)
    assert states == {"Manifest": (USER, 0o644), "cat": (0, 0o700), "cat/pkg/a.ebuild": (0, 0o644)}
    assert len(entries) == 4 and all((st.st_uid, st.st_gid) == (USER, USER) for _, st in entries)
    assert {stat.S_IMODE((root / d).lstat().st_mode) for d in ("cat", "cat/pkg")} == {0o755}
