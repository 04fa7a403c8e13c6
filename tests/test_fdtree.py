"""core/fs/fdtree: every tree operation through descriptors (no link followed, no mount crossed, no recursion)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from rsync_helpers import deep_tree

from gkeys_portage.core.fs import fdtree


def _tree(root: Path) -> None:
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("f")
    (root / "a" / "g").write_text("g")
    (root / "top").write_text("t")


def _walk_all(root: Path, **kwargs: object) -> list[str]:
    seen: list[str] = []
    fd = fdtree.open_dir(root)
    try:
        fdtree.walk(fd, lambda entry: seen.append(os.fsdecode(entry.rel)) or True, **kwargs)  # type: ignore[arg-type]
    finally:
        os.close(fd)
    return seen


def test_walk_visits_every_entry_depth_first(tmp_path: Path) -> None:
    _tree(tmp_path / "t")
    assert _walk_all(tmp_path / "t") == ["a", "a/b", "a/b/f", "a/g", "top"]


def test_walk_never_follows_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "secret").write_text("s")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "link").symlink_to(victim)
    assert _walk_all(tmp_path / "t") == ["link"]


def test_a_directory_swapped_for_a_link_after_lstat_is_never_entered(tmp_path: Path) -> None:
    """The race of issue 46: between the walk's lstat of ``a`` and its open, ``a`` is renamed away and a link to a
    root-only directory put in its place.  The open (``O_NOFOLLOW``) or the inode check refuses: nothing of the
    victim is ever seen."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "secret").write_text("s")
    _tree(tmp_path / "t")
    seen: list[str] = []

    def visit(entry: fdtree.Entry) -> bool:
        seen.append(os.fsdecode(entry.rel))
        if entry.rel == b"a":
            os.rename(tmp_path / "t" / "a", tmp_path / "t" / "a.moved")
            os.symlink(victim, tmp_path / "t" / "a")
        return True

    fd = fdtree.open_dir(tmp_path / "t")
    try:
        with pytest.raises((fdtree.Changed, OSError)):
            fdtree.walk(fd, visit)
    finally:
        os.close(fd)
    assert not any("secret" in name for name in seen)


def test_open_dir_never_opens_through_a_link(tmp_path: Path) -> None:
    """``O_NOFOLLOW``: a link where a directory was is refused even when it leads to the very inode expected."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(NotADirectoryError):  # O_DIRECTORY | O_NOFOLLOW on a link
        fdtree.open_dir(tmp_path / "link")
    parent = fdtree.open_dir(tmp_path)
    try:
        with pytest.raises(NotADirectoryError):  # O_DIRECTORY | O_NOFOLLOW on a link
            fdtree.open_dir("link", parent, expect=os.stat(tmp_path / "real"))
    finally:
        os.close(parent)


def test_a_directory_replaced_by_another_directory_is_changed(tmp_path: Path) -> None:
    _tree(tmp_path / "t")

    def visit(entry: fdtree.Entry) -> bool:
        if entry.rel == b"a":
            os.rename(tmp_path / "t" / "a", tmp_path / "t" / "a.moved")
            (tmp_path / "t" / "a").mkdir()
        return True

    fd = fdtree.open_dir(tmp_path / "t")
    try:
        with pytest.raises(fdtree.Changed):
            fdtree.walk(fd, visit)
    finally:
        os.close(fd)


def test_a_swap_between_levels_is_seen_as_a_link(tmp_path: Path) -> None:
    """Swapped after the walk opened ``a`` (the ``entered`` hook, before ``a`` is listed): ``a/b`` is then met as
    the link it is, and not entered; a chown done in ``visit`` by ``parent`` + name touches the link only."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "secret").write_text("s")
    victim.chmod(0o700)
    _tree(tmp_path / "t")

    def entered(fd: int, entry: fdtree.Entry) -> None:
        if entry.rel == b"a":
            os.rename(tmp_path / "t" / "a" / "b", tmp_path / "t" / "b.moved")
            os.symlink(victim, tmp_path / "t" / "a" / "b")

    seen: dict[str, int] = {}

    def visit(entry: fdtree.Entry) -> bool:
        seen[os.fsdecode(entry.rel)] = entry.st.st_mode
        os.chown(entry.name, 1234, 1234, dir_fd=entry.parent, follow_symlinks=False)
        return True

    fd = fdtree.open_dir(tmp_path / "t")
    try:
        fdtree.walk(fd, visit, entered=entered)
    finally:
        os.close(fd)
    assert stat.S_ISLNK(seen["a/b"]) and "a/b/f" not in seen
    assert victim.stat().st_uid == os.geteuid() and (victim / "secret").stat().st_uid == os.geteuid()


def test_walk_is_bounded_and_never_recursive(tmp_path: Path) -> None:
    deep = deep_tree(tmp_path / "t", 1010)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(150)
    try:
        with pytest.raises(fdtree.LimitExceeded, match="deeper than 128 levels"):
            _walk_all(deep)
        assert len(_walk_all(deep, limits=fdtree.Limits(depth=2000))) == 1011
        with pytest.raises(fdtree.LimitExceeded, match="more than 10 entries"):
            _walk_all(deep, limits=fdtree.Limits(depth=2000, entries=10))
    finally:
        sys.setrecursionlimit(old)
        _remove(deep)


def _remove(path: Path) -> None:
    """Remove a deep tree (pytest's own clean-up of old temporary directories recurses)."""
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fdtree.remove_tree(parent, path.name)
    finally:
        os.close(parent)


def test_remove_tree_removes_1010_levels_without_recursion_within_few_descriptors(tmp_path: Path) -> None:
    deep = deep_tree(tmp_path / "t", 1100)
    (deep / "d" / "link").symlink_to(tmp_path / "keep")
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "x").write_text("x")
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(150)
    before = len(os.listdir("/proc/self/fd"))
    peak = [before]
    real_open = fdtree.open_dir

    def counting(*args: object, **kwargs: object) -> int:
        fd = real_open(*args, **kwargs)  # type: ignore[arg-type]
        peak[0] = max(peak[0], len(os.listdir("/proc/self/fd")))
        return fd

    try:
        fdtree.open_dir = counting  # type: ignore[assignment]
        parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fdtree.remove_tree(parent, "t", fd_depth=16)
        finally:
            os.close(parent)
    finally:
        fdtree.open_dir = real_open  # type: ignore[assignment]
        sys.setrecursionlimit(old)
    assert not deep.exists()
    assert (tmp_path / "keep" / "x").read_text() == "x"
    assert peak[0] - before <= 20


def test_remove_tree_of_a_link_or_file_removes_only_it(tmp_path: Path) -> None:
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "x").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "keep")
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fdtree.remove_tree(parent, "link")
        fdtree.remove_tree(parent, "gone")
    finally:
        os.close(parent)
    assert not os.path.lexists(tmp_path / "link") and (tmp_path / "keep" / "x").exists()


def test_remove_tree_names_what_it_cannot_remove(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root removes from a read-only directory; the mount test covers a leftover as root")
    (tmp_path / "t" / "ro").mkdir(parents=True)
    (tmp_path / "t" / "ro" / "f").write_text("f")
    (tmp_path / "t" / "ro").chmod(0o555)
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(fdtree.NotRemoved) as caught:
            fdtree.remove_tree(parent, "t")
    finally:
        os.close(parent)
        (tmp_path / "t" / "ro").chmod(0o755)
    assert "t/ro/f" in caught.value.left


_MOUNTED = textwrap.dedent("""
    import os, subprocess, sys
    from pathlib import Path
    from gkeys_portage.core.fs import fdtree
    base = Path(sys.argv[1])
    (base / "t" / "sub").mkdir(parents=True)
    (base / "t" / "file").write_text("f")
    subprocess.run(["mount", "-t", "tmpfs", "none", str(base / "t" / "sub")], check=True)
    (base / "t" / "sub" / "other").write_text("on another file system")
    seen = []
    fd = fdtree.open_dir(base / "t")
    fdtree.walk(fd, lambda e: seen.append(e.rel) or True)
    os.close(fd)
    assert seen == [b"file", b"sub"], seen
    parent = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fdtree.remove_tree(parent, "t")
    except fdtree.NotRemoved as exc:
        assert exc.left == ["t/sub"] and exc.cause == "a mount point", (exc.left, exc.cause)
    else:
        raise AssertionError("removed through a mount point")
    try:
        fdtree.remove_tree(os.open(base / "t", os.O_RDONLY | os.O_DIRECTORY), "sub")
    except fdtree.NotRemoved as exc:
        assert exc.cause == "a mount point"
    assert (base / "t" / "sub" / "other").read_text() == "on another file system"
    assert not (base / "t" / "file").exists()
    subprocess.run(["umount", str(base / "t" / "sub")], check=True)
    print("ok")
""")


def test_walk_and_remove_never_cross_a_mount_point(tmp_path: Path) -> None:
    """A tmpfs mounted inside the tree (in a private mount namespace: ``unshare -m``, root only)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here: {probe.stderr.decode().strip()}")
    env = {**os.environ, "PYTHONPATH": str(Path(fdtree.__file__).parents[2])}
    result = subprocess.run(["unshare", "-m", sys.executable, "-c", _MOUNTED, str(tmp_path)], capture_output=True,
                            text=True, env=env, check=False, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_copy_file_makes_a_new_inode_with_owner_mode_and_times(tmp_path: Path) -> None:
    (tmp_path / "src").write_bytes(b"x" * 3_000_000)
    os.utime(tmp_path / "src", ns=(1_000_000_000, 2_000_000_000))
    (tmp_path / "dst").mkdir()
    src = fdtree.open_dir(tmp_path)
    dst = fdtree.open_dir(tmp_path / "dst")
    try:
        st = fdtree.copy_file(src, "src", dst, "copy", mode=0o640)
        with pytest.raises(FileExistsError):
            fdtree.copy_file(src, "src", dst, "copy", mode=0o640)
        (tmp_path / "dst" / "link").symlink_to(tmp_path / "src")
        with pytest.raises(OSError):
            fdtree.copy_file(dst, "link", dst, "copy2", mode=0o640)
        with pytest.raises(fdtree.Changed):
            fdtree.copy_file(src, "src", dst, "copy3", mode=0o640, expect=os.stat(tmp_path / "dst"))
    finally:
        os.close(src)
        os.close(dst)
    copy = tmp_path / "dst" / "copy"
    assert copy.read_bytes() == b"x" * 3_000_000 and st.st_ino != os.stat(tmp_path / "src").st_ino
    assert stat.S_IMODE(copy.stat().st_mode) == 0o640 and copy.stat().st_mtime_ns == 2_000_000_000
    assert not (tmp_path / "dst" / "copy2").exists() and not (tmp_path / "dst" / "copy3").exists()


def test_set_owner_mode_acts_on_the_inode_seen_only(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("f")
    (tmp_path / "g").write_text("g")
    (tmp_path / "l").symlink_to(tmp_path / "f")
    fd = fdtree.open_dir(tmp_path)
    try:
        st = fdtree.lstat_at(fd, "f")
        after = fdtree.set_owner_mode(fd, "f", st, None, 0o600)
        assert stat.S_IMODE(after.st_mode) == 0o600
        with pytest.raises(fdtree.Changed):
            fdtree.set_owner_mode(fd, "g", st, None, 0o600)
        with pytest.raises(fdtree.Changed):
            fdtree.set_owner_mode(fd, "l", fdtree.lstat_at(fd, "l"), None, 0o600)
    finally:
        os.close(fd)
    assert stat.S_IMODE((tmp_path / "g").stat().st_mode) == 0o644


def test_open_for_writing_sees_a_writer_and_a_shared_writable_mapping(tmp_path: Path) -> None:
    import mmap

    path = tmp_path / "f"
    path.write_bytes(b"x" * 4096)
    reader = os.open(path, os.O_RDONLY)
    try:
        assert fdtree.open_for_writing(reader) is False
        writer = os.open(path, os.O_RDWR)
        assert fdtree.open_for_writing(reader) is True
        mapping = mmap.mmap(writer, 4096, mmap.MAP_SHARED, mmap.PROT_WRITE)
        os.close(writer)  # the mapping still writes the file
        assert fdtree.open_for_writing(reader) is True
        mapping.close()
        assert fdtree.open_for_writing(reader) is False
    finally:
        os.close(reader)


def test_link_tree_rebuilds_directories_and_links_everything_else(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "d" / "e").mkdir(parents=True)
    (src / "d" / "e" / "f").write_text("f")
    (src / "d" / "link").symlink_to("/nonexistent")
    (src / "d").chmod(0o2775)
    (tmp_path / "dst").mkdir()
    a, b = fdtree.open_dir(tmp_path), fdtree.open_dir(tmp_path / "dst")
    try:
        fdtree.link_tree(a, "src", b)
    finally:
        os.close(a)
        os.close(b)
    copy = tmp_path / "dst" / "src"
    assert (copy / "d" / "e" / "f").stat().st_ino == (src / "d" / "e" / "f").stat().st_ino
    assert os.readlink(copy / "d" / "link") == "/nonexistent"
    assert stat.S_IMODE((copy / "d").stat().st_mode) == 0o2775
    assert (copy / "d").stat().st_ino != (src / "d").stat().st_ino


def test_the_git_proof_walk_hashes_the_tree_as_git_does_and_never_follows_a_link(tmp_path: Path) -> None:
    from gkeys_portage.demo.tree_repo import git_environment
    from gkeys_portage.verify.git import proof

    repo = tmp_path / "repo"
    for path, data in {"a.b": "1", "a/b/c": "2", "a-b": "3", "a0": "4", "a.d/f": "5", "a b": "6"}.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(data)
    (repo / "a0").chmod(0o755)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("never hashed")
    (repo / "link").symlink_to(tmp_path / "outside")  # hashed as a link (its target), never entered
    env = git_environment()
    run = lambda *args: subprocess.run(["git", "-C", str(repo), *args], env=env, check=True,  # noqa: E731
                                       capture_output=True).stdout.decode().strip()
    run("init", "-q")
    run("add", "-A")
    run("-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "x")
    walk = proof._Walk(40, None, True, frozenset([b".git"]))
    walk.scan(fdtree.open_dir(repo))
    assert walk.top_tree()[0] == run("rev-parse", "HEAD^{tree}")
    assert b"link/secret" not in walk.proven
    # the live tree's inventory: walked in a thread, the same; stopped, none
    with proof.LiveInventory(repo, ()) as walked:
        assert walked.result() == proof.inventory(repo, ())
    stop = threading.Event()
    stop.set()
    assert proof.inventory(repo, (), stop) is None
    assert proof.LiveInventory(repo, (), wanted=False).result() is None
