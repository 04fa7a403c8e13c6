"""End to end: real ``emerge --sync`` (PyPI portage) with ``sync-type = gkeys`` and with the git hooks.

Each test builds a signed upstream repository, a throwaway PORTAGE_CONFIGROOT/EPREFIX and a gkeys
root, and checks what is on disk after every sync.  Git's system and global config are temp files,
so Portage's ``git config --system`` never touches /etc/gitconfig.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import PROJECT, expiring_key, extend_secret_key, head, install_devs, records, revoke

from gkeys_portage.demo.tree_repo import GARBAGE_SIGNATURE, PortageSandbox, RepoBuilder, serve_repo, sync_module_missing

pytestmark = pytest.mark.slow





def _bad_cases(keys: Any, when_after_expiry: Callable[[], datetime]) -> dict[str, Callable[[RepoBuilder], str]]:
    return {
        "unsigned": lambda up: up.commit(None),
        "not-in-seeds": lambda up: up.commit("mallory"),
        "forged-gpgsig": lambda up: up.commit("alice", signature=GARBAGE_SIGNATURE),
        "expired-key-after-expiry": lambda up: up.commit("treexp2", when=when_after_expiry()),
        "revoked-key": lambda up: up.commit("carol"),
    }


def test_gkeys_sync_verifies_every_new_commit(env: Any, tmp_path: Path, portage_root: PortageSandbox) -> None:
    public = expiring_key(env.keys, "treexp2")
    install_devs(env, ("alice", "bob", "carol", "treexp2"), {"treexp2": public})
    up = RepoBuilder(tmp_path / "upstream", env.keys)
    up.commit("alice")
    up.commit("treexp2", when=datetime.fromtimestamp(time.time() - 600 * 86400, UTC))  # before its expiry: fine
    side = up.commit("bob", parents=[up.head() or ""], move=False)
    up.commit("alice")
    up.commit("bob", parents=[up.head() or "", side], message="merge")
    location = portage_root.add_repo("test", f"file://{up.path}", "gkeys", sync_gkeys_policy="all")

    result = portage_root.sync("test")
    assert result.returncode == 0, result.stdout
    verified = head(location)
    assert verified == up.head() and records(env)[str(location.resolve())]["revision"] == verified

    cases = _bad_cases(env.keys, lambda: extend_secret_key(env.keys, "treexp2"))
    for name, make_bad in cases.items():
        if name == "revoked-key":
            revoke(env, "carol")
        bad = make_bad(up)
        up.commit("bob")  # a good top commit above the bad one
        result = portage_root.sync("test")
        assert result.returncode != 0, (name, result.stdout)
        assert bad[:12] in result.stdout, (name, result.stdout)
        assert head(location) == verified, name
        assert not (location / "dev-test" / "pkg" / f"file{up.counter}").exists(), name
        up.force(verified)  # upstream repairs its branch

    good = up.commit("alice")
    result = portage_root.sync("test")
    assert result.returncode == 0, result.stdout
    assert head(location) == good


def test_gkeys_sync_refuses_force_push_and_bad_first_clone(env: Any, tmp_path: Path,
                                                           portage_root: PortageSandbox) -> None:
    install_devs(env, ("alice", "bob"))
    up = RepoBuilder(tmp_path / "upstream", env.keys)
    root = up.commit("alice")
    up.commit("bob")
    location = portage_root.add_repo("test", f"file://{up.path}", "gkeys")
    assert portage_root.sync("test").returncode == 0
    verified = head(location)

    up.force(root)
    up.commit("bob", message="validly signed, but rewrites verified history")
    result = portage_root.sync("test")
    assert result.returncode != 0 and "history was rewritten" in result.stdout, result.stdout
    assert head(location) == verified

    bad_up = RepoBuilder(tmp_path / "bad-upstream", env.keys, name="bad")
    bad_up.commit("alice")
    bad_up.commit(None)
    bad_up.commit("alice")
    bad_location = portage_root.add_repo("bad", f"file://{bad_up.path}", "gkeys", sync_gkeys_policy="all")
    result = portage_root.sync("bad")
    assert result.returncode != 0 and "NOT verified" in result.stdout, result.stdout
    assert not bad_location.exists() or not any(bad_location.iterdir())  # Portage's directory stays, empty
    assert not [p for p in portage_root.repos.iterdir() if p.name.startswith(".bad")]


def test_git_sync_with_hooks_rolls_back_and_fails_emerge(env: Any, tmp_path: Path,
                                                         portage_root: PortageSandbox) -> None:
    install_devs(env, ("alice", "bob"))
    up = RepoBuilder(tmp_path / "upstream", env.keys)
    up.commit("alice")
    up.commit("bob")
    portage_root.install_hooks(PROJECT / "hooks")
    location = portage_root.add_repo("test", f"file://{up.path}", "git", clone_depth="0", sync_depth="0")
    result = portage_root.sync("test")
    assert result.returncode == 0, result.stdout
    verified = head(location)
    assert records(env)[str(location.resolve())]["revision"] == verified
    assert str(location) in portage_root.git_system.read_text()  # Portage's safe.directory went to the temp file

    bad = up.commit(None)
    up.commit("alice")
    result = portage_root.sync("test")
    assert result.returncode != 0, result.stdout
    assert bad[:12] in result.stdout and "NOT verified" in result.stdout
    assert head(location) == verified  # rolled back
    markers = list((env.state / "state" / "tree-failed").glob("*.json"))
    assert [json.loads(m.read_text())["repo"] for m in markers] == ["test"]

    up.force(verified)
    good = up.commit("bob")
    result = portage_root.sync("test")
    assert result.returncode == 0, result.stdout
    assert head(location) == good and not list((env.state / "state" / "tree-failed").glob("*.json"))


def test_git_sync_hooks_check_the_work_tree_not_only_head(env: Any, tmp_path: Path,
                                                           portage_root: PortageSandbox) -> None:
    """Issue 12 item 5: a merge that fails part-way leaves HEAD verified and the attacker's files on disk."""
    install_devs(env, ("alice",))
    up = RepoBuilder(tmp_path / "upstream", env.keys)
    up.commit("alice", files={"eclass/test.eclass": "# verified\n"})
    portage_root.install_hooks(PROJECT / "hooks")
    location = portage_root.add_repo("test", f"file://{up.path}", "git", clone_depth="0", sync_depth="0")
    assert portage_root.sync("test").returncode == 0
    verified = head(location)

    up.commit(None, files={"eclass/test.eclass": "# attacker\n", "dev-test/evil/evil-1.ebuild": "EAPI=8\n"},
              index_only={"dev-test/" + "z" * 300: b"too long a name\n"})
    result = portage_root.sync("test")
    assert result.returncode != 0, result.stdout
    assert "NOT verified" in result.stdout and "not the verified revision" in result.stdout, result.stdout
    assert head(location) == verified
    assert (location / "eclass" / "test.eclass").read_text() == "# verified\n"
    assert not (location / "dev-test" / "evil").exists()
    assert [json.loads(m.read_text())["repo"] for m in (env.state / "state" / "tree-failed").glob("*.json")] == ["test"]

    result = portage_root.sync("test")  # each later sync writes the files again: refused again
    assert result.returncode != 0 and not (location / "dev-test" / "evil").exists(), result.stdout


@pytest.fixture
def public_portage_root(env: Any) -> Iterator[tuple[PortageSandbox, Path]]:
    """A PortageSandbox (and a place for upstream) in a directory the sync user can traverse."""
    if missing := sync_module_missing():
        pytest.skip(missing)
    if os.geteuid() != 0:
        pytest.skip("switching git to the sync user needs root")
    base = Path(tempfile.mkdtemp(prefix="gkeys-usersync-"))
    base.chmod(0o755)
    system = Path("/etc/gitconfig")
    before = system.read_bytes() if system.exists() else None
    try:
        yield PortageSandbox(base / "portage", env.config), base
        assert (system.read_bytes() if system.exists() else None) == before, "/etc/gitconfig was modified"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _owners(location: Path) -> set[tuple[int, int]]:
    return {(p.lstat().st_uid, p.lstat().st_gid) for p in [location, *location.rglob("*")]}


def test_gkeys_sync_honours_sync_user_and_umask(env: Any, public_portage_root: tuple[PortageSandbox, Path]) -> None:
    """Issue 12 item 10: git runs as sync-user, and the new tree keeps the owner and mode Portage gives it."""
    portage_root, base = public_portage_root
    (portage_root.eprefix / "tmp").mkdir(parents=True)  # Portage checks PORTAGE_TMPDIR when it drops privileges
    nobody, nogroup = pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid
    install_devs(env, ("alice",))
    up = RepoBuilder(base / "upstream", env.keys)
    up.commit("alice")
    # over HTTP (as in real life): git refuses a file:// upstream owned by another user (dubious ownership)
    uri = serve_repo(env.server, up.path, "usersync.git")
    location = portage_root.add_repo("test", uri, "gkeys", sync_user="nobody:nogroup", sync_umask="027",
                                     sync_gkeys_policy="all")
    result = portage_root.sync("test")
    assert result.returncode == 0, result.stdout
    assert head(location) == up.head()
    # the mode Portage's controller gave the location it created (0755: it applies sync-umask only to git)
    assert stat.S_IMODE(location.stat().st_mode) == 0o755, oct(location.stat().st_mode)
    assert _owners(location) == {(nobody, nogroup)}
    assert stat.S_IMODE((location / "dev-test" / "pkg" / "file1").stat().st_mode) == 0o640

    up.commit("alice")
    serve_repo(env.server, up.path, "usersync.git")
    result = portage_root.sync("test")
    assert result.returncode == 0, result.stdout
    assert head(location) == up.head() and _owners(location) == {(nobody, nogroup)}
    assert stat.S_IMODE((location / "dev-test" / "pkg" / "file2").stat().st_mode) == 0o640

    verified = up.head()
    up.commit(None)
    serve_repo(env.server, up.path, "usersync.git")
    result = portage_root.sync("test")
    assert result.returncode != 0 and "NOT updated" in result.stdout, result.stdout
    assert head(location) == verified and _owners(location) == {(nobody, nogroup)}


def test_gkeys_sync_honours_feature_usersync(env: Any, public_portage_root: tuple[PortageSandbox, Path]) -> None:
    """Issue 12 item 10: FEATURES=usersync (no sync-user) runs git as the owner of the existing location."""
    portage_root, base = public_portage_root
    (portage_root.eprefix / "tmp").mkdir(parents=True)
    nobody, nogroup = pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid
    install_devs(env, ("alice",))
    up = RepoBuilder(base / "upstream", env.keys)
    up.commit("alice")
    uri = serve_repo(env.server, up.path, "usersync.git")
    location = portage_root.add_repo("test", uri, "gkeys", sync_gkeys_policy="all")
    location.mkdir(mode=0o775)
    location.chmod(0o775)
    os.chown(location, nobody, nogroup)
    portage_root.env["FEATURES"] = "-news usersync"
    result = portage_root.sync("test")
    assert result.returncode == 0, result.stdout
    assert _owners(location) == {(nobody, nogroup)}
    assert stat.S_IMODE(location.stat().st_mode) == 0o775  # the mode the location had
    assert stat.S_IMODE((location / "dev-test" / "pkg" / "file1").stat().st_mode) == 0o664  # umask 002 (g+w)


def test_git_sync_with_hooks_keeps_what_portage_keeps(env: Any, tmp_path: Path, portage_root: PortageSandbox) -> None:
    """Issue 35 case 8: outside /var/db/repos Portage's git module keeps distfiles/, local/ and packages/; the hook
    used to call them "files that are not the verified revision", roll back, delete them and fail every sync."""
    install_devs(env, ("alice",))
    up = RepoBuilder(tmp_path / "upstream", env.keys)
    up.commit("alice")
    portage_root.install_hooks(PROJECT / "hooks")
    location = portage_root.add_repo("test", f"file://{up.path}", "git", clone_depth="0", sync_depth="0")
    assert portage_root.sync("test").returncode == 0
    kept = {"distfiles/foo-1.tar.gz": "a distfile\n", "packages/Packages": "PACKAGES: 1\n",
            "local/profiles/package.mask": "dev-lang/x\n"}
    for rel, text in kept.items():
        (location / rel).parent.mkdir(parents=True, exist_ok=True)
        (location / rel).write_text(text)
    good = up.commit("alice")
    for _ in range(2):
        result = portage_root.sync("test")
        assert result.returncode == 0, result.stdout
        assert head(location) == good and {rel: (location / rel).read_text() for rel in kept} == kept
