"""Git runs only where, and only as, the verifier means it to (SECURITY.md, git hardening).

Real git repositories, real gpg, the real sync code path: a repository another user owns never gets
its configuration obeyed, replace refs never swap the commit that is verified, a hostile
``.gitmodules`` never stops a later fetch, and the caller's environment never redirects git.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import build, head, install_devs

from gkeys_portage.core.config import load_config
from gkeys_portage.core.errors import BadInputError, UntrustedRepositoryError
from gkeys_portage.demo.tree_repo import RepoBuilder
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.portage.hooks import postsync_main, repo_postsync_main
from gkeys_portage.portage.treesync import SyncRequest, clone_verified, update_verified
from gkeys_portage.verify.git import objects as gitobjects
from gkeys_portage.verify.git import tree
from gkeys_portage.verify.git.objects import GitRepo, git_environment

NOBODY = 65534


def chown_tree(path: Path, uid: int) -> None:
    """``chown -R uid path`` without following symlinks."""
    os.lchown(path, uid, -1)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, -1)


def hostile_config(repo: RepoBuilder, marker_dir: Path) -> dict[str, Path]:
    """Make ``repo`` a promisor clone whose config runs commands, with a commit object missing (so any
    walk of the history triggers a lazy fetch); return the marker files each command would create."""
    markers = {name: marker_dir / f"{name}-PWNED" for name in ("uploadpack", "fsmonitor", "ssh", "alternates")}
    parent = repo.git("rev-parse", "HEAD~1").strip()
    (repo.path / ".git" / "objects" / parent[:2] / parent[2:]).unlink()
    for key, value in (("core.repositoryformatversion", "1"), ("extensions.partialClone", "origin"),
                       ("remote.origin.url", str(repo.path)), ("remote.origin.promisor", "true"),
                       ("remote.origin.partialclonefilter", "blob:none"),
                       ("remote.origin.uploadpack", f"touch {markers['uploadpack']}; false"),
                       ("core.fsmonitor", f"touch {markers['fsmonitor']}; false"),
                       ("core.sshCommand", f"touch {markers['ssh']}; false"),
                       ("core.alternateRefsCommand", f"touch {markers['alternates']}; false")):
        repo.git("config", key, value)
    return markers


def hostile_repo(env: Any, tmp_path: Path) -> tuple[RepoBuilder, dict[str, Path]]:
    repo = build(tmp_path / "repo", env.keys, ["alice", "alice", "alice"])
    return repo, hostile_config(repo, tmp_path)


# -- issue 11 item 7: a repository another user owns --------------------------------------------------

def test_foreign_owned_repository_config_never_runs(env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    install_devs(env, ("alice",))
    repo, markers = hostile_repo(env, tmp_path)
    chown_tree(repo.path, NOBODY)
    result = env.run("verify-tree", str(repo.path), "--policy", "all")
    assert result.code == 1, result.text
    lines = result.text.strip().splitlines()
    assert len(lines) == 1 and "owned by nobody (uid 65534)" in lines[0], result.text
    assert "run the command as that user" in lines[0] and "chown -R" in lines[0]
    assert "Traceback" not in result.text
    code_json = env.run("--json", "verify-tree", str(repo.path))
    assert code_json.code == 1
    # the Portage hook refuses too and leaves a marker; it runs git as the tree's owner (a usersync tree), never
    # as root, so the owner's configuration gains nothing (here nobody cannot even enter pytest's 0700 tmp dir)
    monkeypatch.setenv("GKEYS_CONFIG", str(env.config))
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 1
    assert "NOT verified" in capsys.readouterr().err
    assert postsync_main() == 1
    aside = repo.path.with_name(".repo.gkeys-unverified")  # never verified: moved out of Portage's reach
    assert not repo.path.exists() and aside.is_dir()
    with pytest.raises(UntrustedRepositoryError, match="owned by nobody"):
        GitRepo(aside).resolve("HEAD")
    assert not [m.name for m in markers.values() if m.exists() and m.stat().st_uid == 0]


def test_foreign_owned_git_directory_alone_is_refused(env: Any, tmp_path: Path) -> None:
    install_devs(env, ("alice",))
    repo = build(tmp_path / "repo", env.keys, ["alice"])
    chown_tree(repo.path / ".git", NOBODY)  # the work tree is ours, the configuration is not
    result = env.run("verify-tree", str(repo.path))
    assert result.code == 1 and "/.git is owned by nobody" in result.text, result.text


def test_git_directory_named_by_a_gitfile_is_checked_too(env: Any, tmp_path: Path) -> None:
    """A ``.git`` file (``gitdir: …``, as in worktrees and submodules) or symlink leads git to another
    directory, whose owner counts as well."""
    install_devs(env, ("alice",))
    repo = build(tmp_path / "repo", env.keys, ["alice"])
    elsewhere = tmp_path / "elsewhere.git"
    (repo.path / ".git").rename(elsewhere)
    chown_tree(elsewhere, NOBODY)
    (repo.path / ".git").write_text(f"gitdir: {elsewhere}\n")
    result = env.run("verify-tree", str(repo.path))
    assert result.code == 1 and f"{elsewhere} is owned by nobody" in result.text, result.text
    (repo.path / ".git").unlink()
    (repo.path / ".git").symlink_to(elsewhere)
    result = env.run("verify-tree", str(repo.path))
    assert result.code == 1 and f"{elsewhere} is owned by nobody" in result.text, result.text


def test_repository_of_a_named_owner_is_read(env: Any, tmp_path: Path) -> None:
    """The sync user Portage names (``owners``) may own the repository: git then runs with
    ``safe.directory`` for that path only."""
    install_devs(env, ("alice",))
    repo = build(tmp_path / "repo", env.keys, ["alice"])
    tip = repo.head()
    chown_tree(repo.path, NOBODY)
    assert GitRepo(repo.path, owners={NOBODY}).resolve("HEAD") == tip
    with pytest.raises(UntrustedRepositoryError):
        GitRepo(repo.path, owners={NOBODY + 1}).resolve("HEAD")


def test_repository_of_the_portage_account_is_verified(env: Any, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A FEATURES=usersync tree belongs to ``portage``: root verifies it (git gets ``safe.directory`` for that
    path only); the test stands in ``nobody`` for the account, which the container may not have."""
    install_devs(env, ("alice",))
    repo = build(tmp_path / "repo", env.keys, ["alice", "alice"])
    chown_tree(repo.path, NOBODY)
    monkeypatch.setattr(gitobjects, "PORTAGE_ACCOUNTS", ("nobody",))
    result = env.run("verify-tree", str(repo.path), "--policy", "all")
    assert result.code == 0, result.text
    # the hook runs git as the tree's owner: test_tree_hooks.py::test_rollback_of_a_usersync_tree_runs_git_as_its_owner
    assert GitRepo(repo.path).command("status")[4:6] == ["-c", "log.showSignature=false"]  # no safe.directory
    assert GitRepo(repo.path).command("status", safe_directory=True)[4:6] == ["-c", f"safe.directory={repo.path}"]


def test_own_repository_config_cannot_run_hooks_fsmonitor_or_a_lazy_fetch(env: Any, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Defence in depth in a repository we own: the verdict and the rollback run no configured command."""
    install_devs(env, ("alice",))
    repo, markers = hostile_repo(env, tmp_path)
    hook = repo.path / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {tmp_path / 'hook-PWNED'}\n")
    hook.chmod(0o755)
    result = env.run("verify-tree", str(repo.path), "--policy", "all")
    assert result.code != 0 and "owned by" not in result.text  # the missing commit is not verified
    monkeypatch.setenv("GKEYS_CONFIG", str(env.config))
    repo_postsync_main(["test", "file:///up", str(repo.path)])  # policy top: the top commit is good
    GitRepo(repo.path).run("reset", "--hard", "--quiet", "HEAD")  # rollback's command: no fsmonitor, no hook
    GitRepo(repo.path).run("status", "--porcelain")
    assert not [m.name for m in [*markers.values(), tmp_path / "hook-PWNED"] if m.exists()]


# -- issue 11 item 8: replace refs ---------------------------------------------------------------------

def test_replace_ref_does_not_swap_the_verified_commit(env: Any, tmp_path: Path) -> None:
    install_devs(env, ("alice",))
    repo = build(tmp_path / "repo", env.keys, ["alice"])
    base = repo.head()
    assert base
    unsigned = repo.commit(None, files={"dev-test/evil/evil.ebuild": "rm -rf /\n"})  # the work tree holds it
    signed = repo.commit("alice", parents=[base], move=False)
    repo.git("replace", unsigned, signed)
    plain = {k: v for k, v in git_environment().items() if k != "GIT_NO_REPLACE_OBJECTS"}
    shown = subprocess.run(["git", "-C", str(repo.path), "cat-file", "-p", unsigned], env=plain,
                           capture_output=True, check=True).stdout
    assert shown.count(b"gpgsig") == 1  # plain git shows the signed replacement for the unsigned commit
    result = env.run("--json", "verify-tree", str(repo.path), "--policy", "all")
    data = json.loads(result.out)
    assert result.code == 1 and data["verified"] is False, data
    assert unsigned[:12] in result.out and "no-signature" in result.out
    raw = GitRepo(repo.path).read_commits([unsigned])[unsigned]
    assert raw.signature is None and b"evil" not in raw.raw  # the object itself, not its replacement
    assert head(repo.path) == unsigned


# -- issue 12 item 9: a hostile .gitmodules must not freeze the sync ---------------------------------

@pytest.mark.parametrize("gitmodules", [
    '[submodule "x"]\n\tpath = x\n\turl = ./x\n\tupdate = !touch {marker}\n',
    '[submodule "x"\n\tpath = x\n',  # a syntax error
])
def test_hostile_gitmodules_keeps_syncing(env: Any, tmp_path: Path, gitmodules: str) -> None:
    install_devs(env, ("alice",))
    marker = tmp_path / "submodule-PWNED"
    upstream = build(tmp_path / "upstream", env.keys, ["alice"])
    location = tmp_path / "repos" / "gentoo"
    options = tree.TreeOptions(policy="all", jobs=1)
    request = SyncRequest(location, str(upstream.path), options, git_env=git_environment(), quiet=True)
    ctx = Gkeys(load_config(env.config))
    lines: list[tuple[str, str]] = []
    assert clone_verified(ctx, request, lambda *line: lines.append(line)).ok, lines
    upstream.commit("alice", files={".gitmodules": gitmodules.format(marker=marker)})
    assert update_verified(ctx, request, lambda *line: lines.append(line)).ok, lines
    assert (location / ".gitmodules").exists()
    fixed = upstream.commit("alice", files={".gitmodules": "", "dev-test/pkg/revert": "revert\n"})
    outcome = update_verified(ctx, request, lambda *line: lines.append(line))
    assert outcome.ok and outcome.changed, (outcome.reason, lines)
    assert head(location) == fixed and not marker.exists()
    fresh = tmp_path / "repos" / "fresh"  # a first clone of the hostile state works as well
    assert clone_verified(ctx, SyncRequest(fresh, str(upstream.path), options, quiet=True),
                          lambda *line: lines.append(line)).ok


# -- held: the caller's environment never redirects git ----------------------------------------------

def test_git_dir_and_config_in_the_environment_change_nothing(env: Any, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    install_devs(env, ("alice",))
    good = build(tmp_path / "good", env.keys, ["alice", "alice"])
    bad = build(tmp_path / "bad", env.keys, ["alice", None])
    monkeypatch.setenv("GIT_DIR", str(good.path / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(good.path))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'safe.directory'='*' 'core.fsmonitor'='touch /nonexistent/x'")
    monkeypatch.setenv("GIT_ALLOW_PROTOCOL", "ext")
    monkeypatch.setenv("GIT_REPLACE_REF_BASE", "refs/nothing/")
    result = env.run("verify-tree", str(bad.path), "--policy", "all")
    assert result.code == 1 and f"bad commit {bad.head()[:12]}" in result.text, result.text
    assert head(bad.path) == bad.head()
    chown_tree(bad.path, NOBODY)
    assert "owned by nobody" in env.run("verify-tree", str(bad.path)).text


@pytest.mark.parametrize("name", ["GIT_DIR", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0",
                                  "GIT_OBJECT_DIRECTORY", "GIT_ALLOW_PROTOCOL", "GIT_REPLACE_REF_BASE"])
def test_sync_git_env_may_not_redirect_git(name: str) -> None:
    with pytest.raises(BadInputError, match=name):
        git_environment({name: "x"})


def test_sync_git_env_cannot_lift_the_hardened_settings() -> None:
    env = git_environment({"GIT_CONFIG_GLOBAL": "/root/.gitconfig", "GIT_CONFIG_NOSYSTEM": "0",
                           "GIT_NO_REPLACE_OBJECTS": "0", "HTTPS_PROXY": "http://127.0.0.1:1"})
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null" and env["GIT_CONFIG_NOSYSTEM"] == "1"
    assert env["GIT_NO_REPLACE_OBJECTS"] == "1" and env["GIT_NO_LAZY_FETCH"] == "1"
    assert env["HTTPS_PROXY"] == "http://127.0.0.1:1"


def test_ext_transport_is_never_run(env: Any, tmp_path: Path) -> None:
    install_devs(env, ("alice",))
    marker = tmp_path / "ext-PWNED"
    request = SyncRequest(tmp_path / "repos" / "x", f"ext::sh -c touch% {marker}", tree.TreeOptions(jobs=1),
                          quiet=True)
    lines: list[tuple[str, str]] = []
    outcome = clone_verified(Gkeys(load_config(env.config)), request, lambda *line: lines.append(line))
    assert not outcome.ok and not marker.exists()


# -- held: SHA-256 repositories, the signature header git itself uses ------------------------------

def git_verify_commit(repo: RepoBuilder, home: Path, commit: str) -> int:
    """``git verify-commit`` with the demo keys' GnuPG home: git's own verdict, for comparison."""
    result = subprocess.run(["git", "-C", str(repo.path), "verify-commit", commit],
                            env={**git_environment(), "GNUPGHOME": str(home)}, capture_output=True, check=False)
    return result.returncode


@pytest.mark.parametrize("object_format", ["sha1", "sha256"])
def test_signature_header_of_each_object_format_agrees_with_git(env: Any, tmp_path: Path,
                                                                object_format: str) -> None:
    """A SHA-256 repository signs in ``gpgsig-sha256``, a SHA-1 one in ``gpgsig``; a signature under the
    other format's header is no signature, for gkeys and for ``git verify-commit`` alike."""
    install_devs(env, ("alice", "bob"))
    repo = RepoBuilder(tmp_path / "repo", env.keys, object_format=object_format)
    repo.commit("alice")
    good = repo.commit("bob")
    assert len(good) == (64 if object_format == "sha256" else 40)
    result = env.run("verify-tree", str(repo.path), "--policy", "all")
    assert result.code == 0, result.text
    assert git_verify_commit(repo, env.keys.home, good) == 0
    other = "gpgsig" if object_format == "sha256" else "gpgsig-sha256"
    wrong = repo.commit("alice", header=other)
    result = env.run("--json", "verify-tree", str(repo.path))
    assert result.code == 1 and wrong[:12] in result.out and "no-signature" in result.out, result.out
    assert git_verify_commit(repo, env.keys.home, wrong) != 0
