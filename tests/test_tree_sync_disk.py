"""The ``sync-type = gkeys`` sync judged by what is on disk (issue 12 items 7 and 8), called directly.

* A first clone writes no file of the tree before its commits verified, removes staging directories
  an interrupted sync left, and a fetch cannot write without bound.
* An update whose checkout fails part-way leaves the last verified revision on disk, not a mix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import build, context, head, install_devs, records

from gkeys_portage.demo.tree_repo import RepoBuilder, git_environment
from gkeys_portage.portage.treesync import SyncOutcome, SyncRequest, clone_verified, update_verified
from gkeys_portage.verify.git.objects import GitRepo
from gkeys_portage.verify.git.tree import TreeOptions, TreeReport, TreeVerifier

LONG_NAME = "dev-test/" + "z" * 300  # a path component over 255 bytes: the checkout fails part-way


def _sync(env: Any, location: Path, upstream: Path, lines: list[tuple[str, str]] | None = None) -> SyncOutcome:
    request = SyncRequest(location, f"file://{upstream}", TreeOptions(policy="all", jobs=1), git_env=git_environment())
    action = update_verified if (location / ".git").exists() else clone_verified
    return action(context(env), request, lambda level, text: (lines if lines is not None else []).append((level, text)))


def _status(path: Path) -> bytes:
    return subprocess.run(["git", "-C", str(path), "-c", f"safe.directory={path}", "status", "--porcelain",
                           "--ignored", "--untracked-files=all"], env=git_environment(), capture_output=True,
                          check=True).stdout


def _staging(location: Path) -> list[str]:
    return sorted(p.name for p in location.parent.iterdir() if p.name.startswith(f".{location.name}.gkeys-"))


def test_first_clone_writes_no_tree_file_before_verifying(env: Any, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 7: clone with --no-checkout, verify, then check out (the real verifier, observed)."""
    install_devs(env, ("alice",))
    seen: list[list[str]] = []
    real_verify = TreeVerifier.verify

    def observed(self: TreeVerifier, repo: GitRepo, hashes: Sequence[str], **kwargs: Any) -> TreeReport:
        seen.append(sorted(p.name for p in repo.path.iterdir()))
        return real_verify(self, repo, hashes, **kwargs)

    monkeypatch.setattr(TreeVerifier, "verify", observed)
    bad = build(tmp_path / "bad", env.keys, ["alice", None])  # a keyless mirror's commit on top
    location = tmp_path / "repos" / "gentoo"
    assert not _sync(env, location, bad.path).ok
    assert seen == [[".git"]] and not location.exists() and _staging(location) == []

    good = build(tmp_path / "good", env.keys, ["alice", "alice"])
    assert _sync(env, location, good.path).ok
    assert seen[-1] == [".git"]  # still nothing but git's objects while verifying
    assert head(location) == good.head() and (location / "dev-test" / "pkg" / "file2").is_file()
    assert _status(location) == b""


def test_stale_staging_directories_are_removed(env: Any, tmp_path: Path) -> None:
    """Item 7: a SIGKILLed first clone's staging directory does not stay for good."""
    install_devs(env, ("alice",))
    upstream = build(tmp_path / "upstream", env.keys, ["alice"])
    location = tmp_path / "repos" / "gentoo"
    stale = location.parent / ".gentoo.gkeys-k1ll3d"
    (stale / ".git").mkdir(parents=True)
    (stale / "big-unverified-blob").write_bytes(b"\0" * 4096)
    (location.parent / ".gentoo.gkeys-link").symlink_to(tmp_path / "upstream")  # removed, never followed
    other = location.parent / ".other.gkeys-keep"
    other.mkdir()
    lines: list[tuple[str, str]] = []
    assert _sync(env, location, upstream.path, lines).ok
    assert _staging(location) == [] and other.is_dir() and (tmp_path / "upstream" / ".git").is_dir()
    assert any("left by an interrupted sync" in text for _, text in lines), lines

    (location.parent / ".gentoo.gkeys-again").mkdir()
    upstream.commit("alice")
    assert _sync(env, location, upstream.path).ok
    assert _staging(location) == []


def test_fetch_is_capped(env: Any, tmp_path: Path) -> None:
    """Item 7: each file a clone or fetch writes is capped by [tree] max-fetch-mib (RLIMIT_FSIZE)."""
    install_devs(env, ("alice",))
    env.write_config("[tree]\nmax-fetch-mib = 1\n")
    upstream = RepoBuilder(tmp_path / "upstream", env.keys)
    upstream.commit("alice", files={"dev-test/pkg/data": os.urandom(3 * 1024 * 1024).hex()})  # signed, big
    location = tmp_path / "repos" / "gentoo"
    lines: list[tuple[str, str]] = []
    outcome = _sync(env, location, upstream.path, lines)
    assert not outcome.ok and "capped at 1 MiB" in outcome.reason, lines
    assert not location.exists() and _staging(location) == []

    env.write_config("[tree]\nmax-fetch-mib = 64\n")
    assert _sync(env, location, upstream.path).ok
    upstream.commit("alice", files={"dev-test/pkg/data2": os.urandom(3 * 1024 * 1024).hex()})
    env.write_config("[tree]\nmax-fetch-mib = 1\n")
    verified = head(location)
    outcome = _sync(env, location, upstream.path)
    assert not outcome.ok and "capped at 1 MiB" in outcome.reason
    assert head(location) == verified and _status(location) == b""


def test_failed_checkout_restores_the_verified_revision(env: Any, tmp_path: Path) -> None:
    """Item 8: a validly signed commit whose checkout fails part-way (a 300-byte name) leaves no mixed tree."""
    install_devs(env, ("alice",))
    upstream = RepoBuilder(tmp_path / "upstream", env.keys)
    upstream.commit("alice", files={"eclass/test.eclass": "# old\n", "profiles/package.mask": "\n"})
    location = tmp_path / "repos" / "gentoo"
    assert _sync(env, location, upstream.path).ok
    verified = head(location)

    upstream.commit("alice", files={"eclass/test.eclass": "# new\n", "profiles/package.mask": "dev-lang/x\n",
                                    "dev-test/new/new-1.ebuild": "EAPI=8\n"},
                    index_only={LONG_NAME: b"no file system takes this name\n"})
    lines: list[tuple[str, str]] = []
    outcome = _sync(env, location, upstream.path, lines)
    assert not outcome.ok and "NOT updated" in outcome.reason, lines
    assert head(location) == verified == records(env)[str(location.resolve())]["revision"]
    assert (location / "eclass" / "test.eclass").read_text() == "# old\n"
    assert (location / "profiles" / "package.mask").read_text() == "\n"
    assert not (location / "dev-test" / "new").exists()
    assert _status(location) == b""

    assert not _sync(env, location, upstream.path).ok  # the next sync: the same, never a mixed tree
    assert (location / "eclass" / "test.eclass").read_text() == "# old\n" and _status(location) == b""

    upstream.force(verified)
    fixed = upstream.commit("alice", files={"eclass/test.eclass": "# fixed\n"})
    (location / "stray-file").write_text("left behind\n")  # an update ends with exactly the verified tree
    assert _sync(env, location, upstream.path).ok
    assert head(location) == fixed and (location / "eclass" / "test.eclass").read_text() == "# fixed\n"
    assert _status(location) == b""


def test_first_checkout_must_fit_and_must_complete(env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 7/8 on a first clone: a verified tip that does not fit, or whose checkout fails, installs nothing."""
    install_devs(env, ("alice",))
    upstream = RepoBuilder(tmp_path / "upstream", env.keys)
    upstream.commit("alice", files={"dev-test/pkg/data": "x" * (1024 * 1024)})
    location = tmp_path / "repos" / "gentoo"
    real_usage = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage",  # the file system as if only 512 KiB were free
                        lambda path: real_usage(path)._replace(free=512 * 1024))
    outcome = _sync(env, location, upstream.path)
    assert not outcome.ok and "needs 1 MiB" in outcome.reason and "0 MiB free" in outcome.reason, outcome.reason
    assert not location.exists() and _staging(location) == []
    monkeypatch.undo()

    upstream.commit("alice", index_only={LONG_NAME: b"no file system takes this name\n"})  # signed, unwritable
    outcome = _sync(env, location, upstream.path)
    assert not outcome.ok and "File name too long" in outcome.reason, outcome.reason
    assert not location.exists() and _staging(location) == [] and records(env) == {}
