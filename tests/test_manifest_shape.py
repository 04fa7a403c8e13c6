"""verify/manifest/shape.py on trees gemato verified: what the rsync filters already keep out must still never
be installed if it arrives (a user's ``sync-rsync-extra-opts``, another transport), and nothing the shaping
does may write a file that is a live file's inode."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from rsync_helpers import CATEGORY, make_tree, pin_repository_keys

from gkeys_portage.core.config import load_config
from gkeys_portage.core.errors import TreeMismatchError
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.verify.manifest.purpose import purpose_keyring, repository_pins
from gkeys_portage.verify.manifest.shape import Owner, shape_tree, shown
from gkeys_portage.verify.manifest.tree import verify_tree

ME = Owner(os.geteuid(), os.getegid())


@pytest.fixture
def tree(env: Any, tmp_path: Path) -> tuple[Path, frozenset[str]]:
    """A signed tree (with a symlinked file and a symlinked directory) and the paths its Manifests cover."""
    pinned = pin_repository_keys(env)
    root = tmp_path / "tree"
    (root / "eclass").mkdir(parents=True)
    (root / "eclass/real.eclass").write_text("# an eclass\n")
    (root / "eclass/alias.eclass").symlink_to("real.eclass")
    make_tree(root, pinned.keys, "infra")
    ctx = Gkeys(load_config(pinned.config))
    pins, _ = repository_pins(ctx, CATEGORY)
    verified = verify_tree(root, purpose_keyring(ctx, CATEGORY, pins), pins)
    assert "eclass/alias.eclass" in verified.covered and "dev-test/pkg/pkg-1.ebuild" in verified.covered
    return root, verified.covered


def test_devices_fifos_dot_entries_and_ignored_paths_are_dropped_and_named(tree: tuple[Path, frozenset[str]]) -> None:
    root, covered = tree
    os.mkfifo(root / "metadata/fifo")
    (root / "lost+found").mkdir()
    (root / "lost+found/sh").write_text("#!/bin/sh\n")
    (root / ".hg").mkdir()
    (root / "metadata/news/.X").mkdir(parents=True)
    (root / "metadata/news/.X/.X.en.txt").write_text("Title: hidden\n")
    (root / "metadata/timestamp.x").write_text("1765000000 Sun Dec 6 00:45:01 2026 +0000\n")
    (root / "empty").mkdir()
    (root / "distfiles").mkdir()  # never the mirror's: the live tree's own is carried over after the shaping
    (root / "distfiles/foo.tar.gz").write_text("from the mirror\n")
    shaped = shape_tree(root, covered, ME)
    assert set(shaped.dropped) >= {"metadata/fifo", "lost+found", ".hg", "metadata/news/.X", "empty",
                                   "distfiles"}, shaped
    assert (root / "metadata/timestamp.x").is_file() and not (root / "lost+found").exists()
    assert not (root / "metadata/news/.X").exists() and not (root / "metadata/fifo").exists()


def test_a_set_user_id_file_is_replaced_by_a_plain_copy_never_changed_in_place(
        tree: tuple[Path, frozenset[str]], tmp_path: Path) -> None:
    """A covered file with the mirror's mode may be a hard link to a live file: it gets a new inode with mode
    0755 (its execute bit kept, set-user-id and group write dropped); the other name (the live file) keeps its
    inode and mode."""
    root, covered = tree
    ebuild = root / "dev-test/pkg/pkg-1.ebuild"
    live = tmp_path / "live-ebuild"
    os.link(ebuild, live)
    ebuild.chmod(0o4775)
    before = live.stat()
    shaped = shape_tree(root, covered, ME)
    assert shaped.renewed == ["dev-test/pkg/pkg-1.ebuild"]
    assert stat.S_IMODE(ebuild.stat().st_mode) == 0o755 and ebuild.stat().st_ino != before.st_ino  # x kept
    assert ebuild.read_bytes() == live.read_bytes()
    after = live.stat()
    assert (after.st_ino, after.st_mode, after.st_mtime_ns) == (before.st_ino, before.st_mode, before.st_mtime_ns)


def test_directories_get_0755_whatever_they_had(tree: tuple[Path, frozenset[str]]) -> None:
    root, covered = tree
    (root / "dev-test").chmod(0o2777)
    shape_tree(root, covered, ME)
    assert stat.S_IMODE((root / "dev-test").stat().st_mode) == 0o755


def test_a_link_inside_the_tree_to_a_covered_file_is_kept(tree: tuple[Path, frozenset[str]]) -> None:
    root, covered = tree
    shape_tree(root, covered, ME)
    assert (root / "eclass/alias.eclass").is_symlink()


@pytest.mark.parametrize("target", ["/etc/passwd", "../../../outside", "../metadata/.hidden"])
def test_a_covered_link_out_of_the_tree_or_to_an_uncovered_entry_is_refused(
        tree: tuple[Path, frozenset[str]], target: str) -> None:
    """gemato reads a file through a link; what the link names must be inside the tree and covered."""
    root, covered = tree
    (root / "metadata/.hidden").write_text("# an eclass\n")
    (root / "eclass/alias.eclass").unlink()
    (root / "eclass/alias.eclass").symlink_to(target)
    with pytest.raises(TreeMismatchError, match="alias.eclass is a symbolic link"):
        shape_tree(root, covered, ME)


def test_a_covered_path_that_is_not_a_regular_file_is_refused(tree: tuple[Path, frozenset[str]]) -> None:
    root, covered = tree
    (root / "eclass/real.eclass").unlink()
    os.mkfifo(root / "eclass/real.eclass")
    with pytest.raises(TreeMismatchError, match="real.eclass is covered by a Manifest but is not a regular file"):
        shape_tree(root, covered, ME)


def test_a_dropped_name_reaches_the_terminal_escaped(tree: tuple[Path, frozenset[str]]) -> None:
    """Names come from the mirror: a control character in one is shown escaped, never sent to the terminal."""
    root, covered = tree
    (root / "metadata/news/\x1b[2Jnews").mkdir(parents=True)
    shaped = shape_tree(root, covered, ME)
    assert "metadata/news/\x1b[2Jnews" in shaped.dropped
    assert "\x1b" not in shown("metadata/news/\x1b[2Jnews") and shown("dev-test/pkg") == "dev-test/pkg"


def test_modes_follow_only_the_served_execute_bit() -> None:
    """0644, or 0755 for a file served with any execute bit: never set-user-id, set-group-id, sticky or writable
    by group or others, whatever the mirror serves."""
    from gkeys_portage.verify.manifest.shape import file_mode

    assert {oct(m): oct(file_mode(m)) for m in (0o600, 0o666, 0o4644, 0o2664, 0o1777, 0o700, 0o4755, 0o6711, 0o001)} \
        == {"0o600": "0o644", "0o666": "0o644", "0o4644": "0o644", "0o2664": "0o644", "0o1777": "0o755",
            "0o700": "0o755", "0o4755": "0o755", "0o6711": "0o755", "0o1": "0o755"}
