"""Issue 35, cases 1-5: what a hostile rsync mirror serves beside a validly signed tree never reaches the live tree.

A real ``rsync --daemon`` on 127.0.0.1 serves trees signed with ``gemato create``; the mirror sets modes,
adds entries no Manifest covers (gemato skips dot entries and IGNOREd paths), serves another tree to each
connection.  The live tree must hold only what the Manifests cover (plus the timestamp files Gentoo's tree
IGNOREs), with files 0644, directories 0755 and the syncing user as owner; a refused sync must leave every
live file as it was; the no-change path must not keep a local edit; nothing a mirror plants may block the
next sync.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rsync_helpers import RsyncDaemon, make_tree, pin_repository_keys
from test_rsync_sync import Syncer

from gkeys_portage.demo.world import past

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed")
FAST = "the files not hashed again"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[RsyncDaemon]:
    served = RsyncDaemon(tmp_path / "rsyncd")
    yield served
    served.close()


@pytest.fixture
def pinned(env: Any) -> Any:
    return pin_repository_keys(env)


def _entries(root: Path) -> dict[str, os.stat_result]:
    """Every entry under ``root`` (lstat), by relative path."""
    found = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            found[str(path.relative_to(root))] = path.lstat()
    return found


def _live_files(location: Path) -> dict[str, tuple[int, int, int, int, int, int, bytes | None]]:
    """Every live entry's inode, mode, owner, size, modification time and content (files)."""
    return {rel: (st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns,
                  (location / rel).read_bytes() if stat.S_ISREG(st.st_mode) else None)
            for rel, st in _entries(location).items()}


def test_the_mirror_does_not_set_modes_or_owners(pinned: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    """Case 1: directories 0777, an ebuild 0666 and a covered file 4755 on the mirror; the live tree gets 0755
    and 0644 and belongs to the user who synced it, whoever runs the test."""
    served = make_tree(tmp_path / "served", pinned.keys, "infra", when=past(0.1),
                       files={"dev-test/pkg/files/helper.sh": "#!/bin/sh\necho helper\n"})
    for directory in [served, *[p for p in served.rglob("*") if p.is_dir()]]:
        directory.chmod(0o777)
    (served / "dev-test/pkg/pkg-1.ebuild").chmod(0o666)
    (served / "dev-test/pkg/files/helper.sh").chmod(0o4755)
    daemon.serve(served)
    location = tmp_path / "repos" / "gentoo"
    sync = Syncer(pinned, location, daemon.url)
    assert sync().ok, sync.lines
    entries = _entries(location)
    assert "dev-test/pkg/files/helper.sh" in entries and "dev-test/pkg/pkg-1.ebuild" in entries
    # the served execute bit stays (as git trees carry 100755), nothing else of the mirror's modes does
    executable = {"dev-test/pkg/files/helper.sh"}
    wrong = {rel: oct(st.st_mode) for rel, st in entries.items()
             if stat.S_IMODE(st.st_mode) != (0o755 if stat.S_ISDIR(st.st_mode) or rel in executable else 0o644)}
    assert not wrong, wrong
    assert stat.S_IMODE(location.stat().st_mode) == 0o755
    owners = {(st.st_uid, st.st_gid) for st in entries.values()}
    assert owners == {(os.geteuid(), os.getegid())}, owners


def test_entries_no_manifest_covers_never_reach_the_live_tree(pinned: Any, daemon: RsyncDaemon,
                                                                tmp_path: Path) -> None:
    """Case 2: a hidden news item, a set-user-id file in the IGNOREd ``lost+found/``, dot files; only the
    covered files and the timestamp files Gentoo's tree IGNOREs arrive."""
    served = make_tree(tmp_path / "served", pinned.keys, "infra", when=past(0.1))
    covered = set(_entries(served))
    planted = {"metadata/news/.2026-12-01-hidden/2026-12-01-hidden.en.txt": "Title: run this as root\n",
               "lost+found/sh": "#!/bin/sh\nexec /bin/sh -p\n", ".hidden": "x\n", "dev-test/pkg/.pkg-9.ebuild": "x\n"}
    for rel, text in planted.items():
        (served / rel).parent.mkdir(parents=True, exist_ok=True)
        (served / rel).write_text(text)
    (served / "lost+found/sh").chmod(0o4755)
    (served / "metadata/timestamp.chk").write_text("Sun, 06 Dec 2026 00:45:01 +0000\n")  # IGNOREd, needed
    daemon.serve(served)
    location = tmp_path / "repos" / "gentoo"
    sync = Syncer(pinned, location, daemon.url)
    assert sync().ok, sync.lines
    entries = _entries(location)
    assert set(entries) == covered | {"metadata/timestamp.chk"}, set(entries) ^ covered
    assert not any(st.st_mode & (stat.S_ISUID | stat.S_ISGID) for st in entries.values())


def test_uncovered_entries_in_a_live_tree_go_with_the_next_sync(pinned: Any, daemon: RsyncDaemon,
                                                                  tmp_path: Path) -> None:
    """Case 3, a tree synced before this rule: ``.hg`` and ``.svn`` a mirror left in it are no work tree; the next
    verified tree replaces them (the sync used to fail for good: "is a hg work tree")."""
    daemon.serve(make_tree(tmp_path / "day1", pinned.keys, "infra", when=past(0.2)))
    location = tmp_path / "repos" / "gentoo"
    sync = Syncer(pinned, location, daemon.url)
    assert sync().ok, sync.lines
    for planted in (".hg/store/00changelog.i", ".svn/wc.db", "metadata/news/.hidden/item.en.txt"):
        (location / planted).parent.mkdir(parents=True, exist_ok=True)
        (location / planted).write_text("left by an older sync\n")
    shutil.copytree(tmp_path / "day1", tmp_path / "day2")
    daemon.serve(make_tree(tmp_path / "day2", pinned.keys, "infra", files={"dev-test/pkg/pkg-2.ebuild": "EAPI=8\n"}))
    outcome = sync()
    assert outcome.ok and outcome.changed, sync.lines
    assert (location / "dev-test/pkg/pkg-2.ebuild").is_file()
    assert not [p for p in (".hg", ".svn", "metadata/news/.hidden") if (location / p).exists()]


def test_a_signed_tree_with_hg_and_svn_does_not_freeze_later_syncs(pinned: Any, daemon: RsyncDaemon,
                                                                    tmp_path: Path) -> None:
    """Case 3: the freeze tree (signed, with uncovered ``.hg/`` and ``.svn/``), then a newer honest tree."""
    freeze = make_tree(tmp_path / "freeze", pinned.keys, "infra", when=past(0.2))
    for planted in (".hg/requires", ".svn/entries"):
        (freeze / planted).parent.mkdir(parents=True, exist_ok=True)
        (freeze / planted).write_text("planted\n")
    daemon.serve(freeze)
    location = tmp_path / "repos" / "gentoo"
    sync = Syncer(pinned, location, daemon.url)
    assert sync().ok, sync.lines
    assert not (location / ".hg").exists() and not (location / ".svn").exists()
    daemon.serve(make_tree(tmp_path / "honest", pinned.keys, "infra", files={"dev-test/pkg/pkg-2.ebuild": "EAPI=8\n"}))
    outcome = sync()
    assert outcome.ok and outcome.changed, sync.lines
    assert (location / "dev-test/pkg/pkg-2.ebuild").is_file()


def test_a_refused_sync_changes_no_live_file(pinned: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    """Case 4: the first fetch links an ebuild whose content changed under the same size and time (so gkeys
    fetches again, comparing contents); the mirror answers the re-fetch with the live tree's contents under
    new times and modes, plus a stray file (refused).  Every live entry keeps its inode, mode, owner, times
    and content."""
    live_tree = make_tree(tmp_path / "a", pinned.keys, "infra", when=past(0.3))
    daemon.serve(live_tree)
    location = tmp_path / "repos" / "gentoo"
    sync = Syncer(pinned, location, daemon.url)
    assert sync().ok, sync.lines
    ebuild = "dev-test/pkg/pkg-1.ebuild"
    same_size = make_tree(tmp_path / "x", pinned.keys, "infra", when=past(0.2),
                          files={ebuild: (live_tree / ebuild).read_text().replace("amd64", "arm64")})
    stamp = (live_tree / ebuild).stat().st_mtime_ns
    os.utime(same_size / ebuild, ns=(stamp, stamp))  # rsync's quick check links the live file
    moved = tmp_path / "y"
    shutil.copytree(live_tree, moved)
    for path in moved.rglob("*"):
        os.utime(path, (stamp / 1e9 + 3600, stamp / 1e9 + 3600))
        path.chmod(0o775 if path.is_dir() else 0o664)
    (moved / "dev-test/pkg/pkg-9.ebuild").write_text("EAPI=8\n")  # in no Manifest: the tree is refused
    daemon.serve_in_turn(same_size, same_size, moved)  # the dry run, the fetch, the re-fetch
    before = _live_files(location)
    outcome = sync()
    assert not outcome.ok and "pkg-9.ebuild" in outcome.reason, sync.lines
    assert any("fetching again" in line for line in sync.lines), sync.lines
    after = _live_files(location)
    changed = {rel for rel in before.keys() | after.keys() if before.get(rel) != after.get(rel)}
    assert not changed, changed


def test_the_no_change_path_does_not_keep_a_local_edit(pinned: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    """Case 5: an ebuild edited in the live tree under the same size, its modification time put back: rsync's
    dry run sees nothing, but the live tree is not the one gkeys swapped in, so the sync verifies in full and
    restores the file."""
    served = make_tree(tmp_path / "served", pinned.keys, "infra", when=past(0.1))
    daemon.serve(served)
    location = tmp_path / "repos" / "gentoo"
    sync = Syncer(pinned, location, daemon.url)
    assert sync().ok, sync.lines
    ebuild = location / "dev-test/pkg/pkg-1.ebuild"
    original = ebuild.read_text()
    st = ebuild.stat()
    ebuild.write_text(original.replace("amd64", "arm64"))
    os.utime(ebuild, ns=(st.st_atime_ns, st.st_mtime_ns))
    outcome = sync()
    assert outcome.ok and not any(FAST in line for line in sync.lines), sync.lines
    assert ebuild.read_text() == original
    outcome = sync()  # the restored tree is proven again: the fast path is back
    assert outcome.ok and any(FAST in line for line in sync.lines), sync.lines
