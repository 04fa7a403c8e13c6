"""The Portage hooks' entry points, called directly (no emerge): markers, rollback, non-git repos."""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import build, install_devs

from gkeys_portage.demo.tree_repo import git_environment
from gkeys_portage.portage.hooks import postsync_main, repo_postsync_main
from gkeys_portage.verify.git.objects import GitRepo


@pytest.fixture
def hook_env(env: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("GKEYS_CONFIG", str(env.config))
    install_devs(env, ("alice",))
    return env


def set_aside(location: Path) -> Path:
    """Where the hook moved a refused clone that had no verified revision (checked to be there)."""
    aside = location.with_name(f".{location.name}.gkeys-unverified")
    assert not location.exists() and (aside / ".git").is_dir(), aside
    return aside


def markers(env: Any) -> list[str]:
    return sorted(p.name for p in (env.state / "state" / "tree-failed").glob("*.json"))


def test_non_git_repository_is_skipped(hook_env: Any, tmp_path: Path) -> None:
    (tmp_path / "rsync-repo").mkdir()
    assert repo_postsync_main(["gentoo", "rsync://example", str(tmp_path / "rsync-repo")]) == 0
    assert markers(hook_env) == [] and postsync_main() == 0


def test_bad_first_sync_marks_then_a_good_sync_clears(hook_env: Any, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    repo = build(tmp_path / "repo", hook_env.keys, ["alice", "mallory"])
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 1
    assert markers(hook_env) == ["test.json"]
    assert "NO verified revision to roll back to" in capsys.readouterr().err
    assert postsync_main() == 1
    assert "repository test" in capsys.readouterr().err
    aside = set_aside(repo.path)  # with nothing to roll back to, the refused clone left Portage's reach
    aside.rename(repo.path)  # as if the next sync cloned again
    good = repo.commit("alice", parents=[repo.git("rev-parse", "HEAD~1").strip()])
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 0
    assert markers(hook_env) == [] and postsync_main() == 0
    repo.commit(None)
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 1
    assert repo.head() == good  # rolled back to the last verified revision
    assert repo_postsync_main(["too", "few"]) == 2


LONG_NAME = "dev-test/" + "z" * 300  # one path component over 255 bytes: no file system accepts it


def _git(path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(path), "-c", f"safe.directory={path}", *args], env=git_environment(),
                          capture_output=True, check=False)


def test_files_on_disk_that_head_lacks_fail_and_are_removed(hook_env: Any, tmp_path: Path) -> None:
    """Issue 12 item 5: HEAD verified but the work tree holds other files -> refused, reset and cleaned."""
    repo = build(tmp_path / "repo", hook_env.keys, ["alice", "alice"])
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 0
    verified = repo.head()
    tracked = repo.path / "dev-test" / "pkg" / "file1"
    tracked.write_text("rewritten by a merge that failed part-way\n")
    ebuild = repo.path / "dev-test" / "evil" / "evil-1.ebuild"
    ebuild.parent.mkdir(parents=True)
    ebuild.write_text("EAPI=8\n")
    (repo.path / ".gitignore").write_text("ignored-*\n")
    (repo.path / "ignored-file").write_text("x\n")
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 1
    assert markers(hook_env) == ["test.json"] and postsync_main() == 1
    assert repo.head() == verified and tracked.read_text() == "change 1\n"
    assert not ebuild.exists() and not (repo.path / ".gitignore").exists() and not (repo.path / "ignored-file").exists()
    assert _git(repo.path, "status", "--porcelain", "--ignored", "--untracked-files=all").stdout == b""
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 0  # clean again: the marker goes
    assert markers(hook_env) == []


def test_fetched_tip_that_never_became_head_fails(hook_env: Any, tmp_path: Path) -> None:
    """Issue 12 item 5: a fetch whose merge failed (HEAD unchanged, tree clean) is not a verified sync."""
    upstream = build(tmp_path / "upstream", hook_env.keys, ["alice"])
    local = tmp_path / "local"
    assert _git(tmp_path, "clone", "-q", f"file://{upstream.path}", str(local)).returncode == 0
    assert repo_postsync_main(["test", "file:///up", str(local)]) == 0
    verified = upstream.head()
    fetched = upstream.commit(None, index_only={LONG_NAME: b"payload\n"})
    assert _git(local, "fetch", "-q", "origin").returncode == 0
    assert _git(local, "merge", "-q", "refs/remotes/origin/master").returncode != 0  # the long name fails
    assert repo_postsync_main(["test", "file:///up", str(local)]) == 1
    assert markers(hook_env) == ["test.json"]
    assert GitRepo(local).resolve("HEAD") == verified
    assert _git(local, "status", "--porcelain", "--ignored", "--untracked-files=all").stdout == b""
    reason = json.loads((hook_env.state / "state" / "tree-failed" / "test.json").read_text())["reason"]
    assert fetched[:12] in reason and "never became HEAD" in reason, reason


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the tree belongs to another user")
def test_rollback_of_a_usersync_tree_runs_git_as_its_owner(hook_env: Any) -> None:
    """Issue 12 item 10 for the hooks: run as root, a rollback must not leave root-owned files in nobody's tree."""
    nobody, nogroup = pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid
    base = Path(tempfile.mkdtemp(prefix="gkeys-hook-usersync-"))
    try:
        base.chmod(0o755)
        repo = build(base / "repo", hook_env.keys, ["alice", "alice"])
        for path in [repo.path, *repo.path.rglob("*")]:
            os.lchown(path, nobody, nogroup)
        assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 0
        shutil.rmtree(repo.path / "dev-test")  # a half-applied merge removed a tracked directory ...
        (repo.path / "eclass").mkdir()  # ... and added an untracked one
        (repo.path / "eclass" / "evil.eclass").write_text("die\n")
        for path in (repo.path / "eclass", repo.path / "eclass" / "evil.eclass"):  # git wrote them as nobody
            os.lchown(path, nobody, nogroup)
        assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 1
        assert (repo.path / "dev-test" / "pkg" / "file2").is_file() and not (repo.path / "eclass").exists()
        owners = {(p.lstat().st_uid, p.lstat().st_gid) for p in [repo.path, *repo.path.rglob("*")]}
        assert owners == {(nobody, nogroup)}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_hostile_file_names_reach_the_terminal_escaped(hook_env: Any, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A name the attacker chose (an escape sequence) is shown as \\x1b, never sent to the terminal raw."""
    repo = build(tmp_path / "repo", hook_env.keys, ["alice"])
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 0
    capsys.readouterr()
    (repo.path / "evil\x1b[2J.ebuild").write_text("EAPI=8\n")
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 1
    err = capsys.readouterr().err
    assert "evil\\x1b[2J.ebuild" in err and "\x1b[2J" not in err, err


def test_hook_leaves_sync_type_gkeys_repositories_to_the_sync_module(tmp_path: Path) -> None:
    """The sync module verifies before merging and leaves a refused revision fetched but unmerged; the
    hook must not report it a second time (and leave a marker) — but only when repos.conf says so."""
    from gkeys_portage.portage.hooks import synced_by_gkeys_module

    conf = tmp_path / "etc" / "portage" / "repos.conf"
    conf.mkdir(parents=True)
    viagkeys, viagit = tmp_path / "viagkeys", tmp_path / "viagit"
    (conf / "a.conf").write_text(f"[viagkeys]\nlocation = {viagkeys}\nsync-type = git\n"
                                 f"[viagit]\nlocation = {viagit}\nsync-type = git\n")
    (conf / "b.conf").write_text("[viagkeys]\nsync-type = gkeys\n")  # read later: wins
    env = {"PORTAGE_CONFIGROOT": str(tmp_path)}
    assert synced_by_gkeys_module(viagkeys, env)
    assert not synced_by_gkeys_module(viagit, env)
    assert not synced_by_gkeys_module(tmp_path / "unknown", env)
    assert not synced_by_gkeys_module(viagkeys, {})  # not run by emerge: verify
    (conf / "c.conf").write_bytes(b"[broken\n")
    assert not synced_by_gkeys_module(viagkeys, env)  # unreadable configuration: verify


def test_hook_reads_the_repository_configuration_emerge_synced_with(tmp_path: Path) -> None:
    """emerge hands its hooks ``PORTAGE_REPOSITORIES`` (its merged configuration, which replaces every
    repos.conf file when set): a repository it synced with plain git must be verified by the hook even
    if the repos.conf files say ``sync-type = gkeys``."""
    from gkeys_portage.portage.hooks import synced_by_gkeys_module

    conf = tmp_path / "etc" / "portage" / "repos.conf"
    conf.mkdir(parents=True)
    (conf / "a.conf").write_text("[overlay]\nlocation = /var/db/repos/overlay\nsync-type = gkeys\n")
    given = "[overlay]\nlocation = /var/db/repos/overlay\nsync-type = git\nsync-uri = file:///up\n"
    overlay = Path("/var/db/repos/overlay")
    assert not synced_by_gkeys_module(overlay, {"PORTAGE_CONFIGROOT": str(tmp_path),
                                                "PORTAGE_REPOSITORIES": given})
    assert synced_by_gkeys_module(overlay, {"PORTAGE_CONFIGROOT": str(tmp_path),
                                            "PORTAGE_REPOSITORIES": given.replace("= git", "= gkeys")})


def test_a_marker_from_a_git_sync_is_cleared_once_the_sync_module_verified(hook_env: Any, tmp_path: Path) -> None:
    """A repository that failed under sync-type = git and then moved to sync-type = gkeys: the hook skips
    it, so it must drop the old marker once HEAD is the revision gkeys verified, or every emerge --sync
    fails for good; while HEAD is not that revision the marker stays."""
    from gkeys_portage.core.config import load_config
    from gkeys_portage.keys.context import Gkeys
    from gkeys_portage.verify.git.records import record_verified

    repo = build(tmp_path / "repo", hook_env.keys, ["alice", "mallory"])
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 1
    assert markers(hook_env) == ["test.json"]
    set_aside(repo.path).rename(repo.path)  # the refused first clone was moved aside; bring it back
    module_env = {"PORTAGE_REPOSITORIES": f"[test]\nlocation = {repo.path}\nsync-type = gkeys\n"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in module_env.items():
            mp.setenv(key, value)
        assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 0
        assert markers(hook_env) == ["test.json"]  # HEAD (mallory's) was never verified: the marker stays
        good = repo.commit("alice", parents=[repo.git("rev-parse", "HEAD~1").strip()])
        ctx = Gkeys(load_config(hook_env.config))
        record_verified(ctx, repo.path, good)  # what the sync module records after verifying
        assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 0
        assert markers(hook_env) == []
    assert postsync_main() == 0


def test_an_rsync_repository_with_a_leftover_git_is_never_rolled_back(hook_env: Any, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35 case 10: the hook decides by the configured sync-type, not by a .git in the directory (before:
    an rsync tree with `sync-rsync-vcs-ignore = true` was rolled back to the stale git HEAD)."""
    repo = build(tmp_path / "repo", hook_env.keys, ["alice", "alice"])
    assert repo_postsync_main(["gentoo", "file:///up", str(repo.path)]) == 0  # once a verified git tree
    (repo.path / "dev-test" / "pkg" / "file1").write_text("rsync brought this\n")
    (repo.path / "dev-test" / "new").mkdir()
    (repo.path / "dev-test" / "new" / "new-1.ebuild").write_text("EAPI=8\n")
    monkeypatch.setenv("PORTAGE_REPOSITORIES", f"[gentoo]\nlocation = {repo.path}\nsync-type = rsync\n"
                                               "sync-uri = rsync://rsync.gentoo.org/gentoo-portage\n"
                                               "sync-rsync-vcs-ignore = true\n")
    assert repo_postsync_main(["gentoo", "rsync://rsync.gentoo.org/gentoo-portage", str(repo.path)]) == 0
    assert (repo.path / "dev-test" / "pkg" / "file1").read_text() == "rsync brought this\n"
    assert (repo.path / "dev-test" / "new" / "new-1.ebuild").is_file()
    assert markers(hook_env) == [] and postsync_main() == 0


LOCAL = {"distfiles/foo-1.tar.gz": "a distfile\n", "packages/Packages": "PACKAGES: 1\n",
         "local/profiles/package.mask": "dev-lang/x\n"}


def test_a_volatile_repository_keeps_what_portage_keeps(hook_env: Any, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35 case 8 for the hooks: distfiles/, local/ and packages/ of a volatile repository are the user's
    (before: "files that are not the verified revision", rolled back and deleted); a file a refused fetch
    tracks there is still removed, and the rollback's clean of the rest of the tree leaves them too."""
    upstream = build(tmp_path / "upstream", hook_env.keys, ["alice"])
    local = tmp_path / "local"
    assert _git(tmp_path, "clone", "-q", f"file://{upstream.path}", str(local)).returncode == 0
    for rel, text in LOCAL.items():
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        (local / rel).write_text(text)
    conf = f"[test]\nlocation = {local}\nsync-type = git\nsync-uri = file://{upstream.path}\n"
    monkeypatch.setenv("PORTAGE_REPOSITORIES", conf)  # outside /var/db/repos: Portage calls it volatile
    assert repo_postsync_main(["test", "file:///up", str(local)]) == 0
    assert markers(hook_env) == [] and {rel: (local / rel).read_text() for rel in LOCAL} == LOCAL

    upstream.commit(None, files={"packages/dev-lang/evil-1.tbz2": "planted\n"})
    assert _git(local, "fetch", "-q", "origin").returncode == 0
    planted = local / "packages" / "dev-lang" / "evil-1.tbz2"
    planted.parent.mkdir()
    planted.write_text("planted\n")  # as a merge that failed part-way writes it
    (local / "dev-test" / "stray").write_text("merged part-way\n")  # the rollback's git clean runs
    assert repo_postsync_main(["test", "file:///up", str(local)]) == 1
    assert not planted.exists() and {rel: (local / rel).read_text() for rel in LOCAL} == LOCAL
    assert not (local / "dev-test" / "stray").exists()

    monkeypatch.setenv("PORTAGE_REPOSITORIES", conf + "volatile = no\n")  # Portage would git clean -fdx them
    assert repo_postsync_main(["test", "file:///up", str(local)]) == 1
    assert not any((local / rel).exists() for rel in LOCAL)


def test_a_signed_symlink_out_of_the_tree_is_rolled_back_by_the_hook(hook_env: Any, tmp_path: Path) -> None:
    """Issue 35 item 2 for the hooks: a validly signed HEAD that links outside the repository is refused."""
    repo = build(tmp_path / "repo", hook_env.keys, ["alice"])
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 0
    verified = repo.head()
    (repo.path / "dev-test" / "pkg" / "passwd").symlink_to("/etc/passwd")
    repo.commit("alice")
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 1
    assert repo.head() == verified and not (repo.path / "dev-test" / "pkg" / "passwd").is_symlink()
    reason = json.loads((hook_env.state / "state" / "tree-failed" / "test.json").read_text())["reason"]
    assert "passwd: a symlink to /etc/passwd, outside the repository" in reason, reason
