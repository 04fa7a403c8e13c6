"""Verified git syncing: fetch, verify every new commit, and only then move the tree.

Used by the ``sync-type = gkeys`` Portage module (:mod:`gkeys_portage.portage.sync_module`) and kept
free of Portage imports so it can be tested and reused on its own.

* A first clone goes into a private directory beside the repository location and is renamed into
  place only after its commits verified; on failure nothing is left at the location.
* An update fetches into the remote-tracking branch, verifies the commits between the last verified
  revision and the fetched top, and resets the work tree to the new top only if all passed.  On
  failure the work tree stays at (or is put back to) the last verified revision.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.core.context import Gkeys
from gkeys_portage.core.errors import BadInputError, GkeysError, NotVerifiedError
from gkeys_portage.core.state import staging_directory
from gkeys_portage.verify.gitobjects import NO_SUBMODULES, GitRepo
from gkeys_portage.verify.tree import TreeOptions, TreeReport, TreeVerifier, last_verified, record_verified

Log = Callable[[str, str], None]  # (level, text): level is info, good, warn or error


@dataclass
class SyncRequest:
    """What to sync and how."""

    location: Path
    uri: str
    options: TreeOptions
    clone_depth: int | None = None  # None: 1 under policy top, full history under all
    git_env: Mapping[str, str] = field(default_factory=dict)
    clone_opts: Sequence[str] = ()
    fetch_opts: Sequence[str] = ()
    quiet: bool = False


@dataclass
class SyncOutcome:
    """The result: exit status, whether the tree changed, the one-line reason on failure."""

    ok: bool
    changed: bool = False
    reason: str = ""
    report: TreeReport | None = None


def _emit(log: Log, report: TreeReport) -> None:
    for level, text in report.describe():
        log(level, text)


def _failure(log: Log, reason: str, report: TreeReport | None = None) -> SyncOutcome:
    if report is not None:
        _emit(log, report)
    log("error", reason)
    return SyncOutcome(False, False, reason, report)


def clone_verified(ctx: Gkeys, request: SyncRequest, log: Log) -> SyncOutcome:
    """First clone into a staging directory; move it into place only once verified."""
    location = request.location
    location.parent.mkdir(parents=True, exist_ok=True)
    if location.exists() and (not location.is_dir() or any(location.iterdir())):
        return _failure(log, f"gkeys: {location} exists and is not empty; refusing to clone over it")
    try:
        with staging_directory(location.parent, f".{location.name}.gkeys-") as staging:
            repo = GitRepo(staging, extra_env=request.git_env)
            depth = request.clone_depth
            if depth is None:
                depth = 1 if request.options.policy == "top" else 0
            args = ["clone", "--no-tags", *NO_SUBMODULES] + (["--depth", str(depth)] if depth else [])
            args += (["--quiet"] if request.quiet else []) + list(request.clone_opts) + ["--", request.uri, "."]
            log("info", f"gkeys: cloning {request.uri} into a staging directory")
            repo.run(*args)
            verifier = TreeVerifier(ctx, request.options)
            tip = repo.resolve("HEAD")
            base, hashes = verifier.plan(repo, tip, None)
            report = verifier.verify(repo, hashes, tip=tip, base=base)
            report.repo = location  # report the place the user knows, not the staging directory
            if not report.ok:
                return _failure(log, f"gkeys: first clone of {request.uri} NOT verified; nothing installed at "
                                     f"{location}", report)
            _emit(log, report)
            with contextlib.suppress(FileNotFoundError):
                location.rmdir()  # the empty directory Portage created
            os.rename(staging, location)
            record_verified(ctx, location, tip)  # replaces any older record of the location
            return SyncOutcome(True, True, report=report)
    except GkeysError as exc:
        return _failure(log, f"gkeys: {exc.message}")
    finally:
        with contextlib.suppress(OSError):
            if location.is_dir() and not (location / ".git").exists() and not any(location.iterdir()):
                location.rmdir()


def _upstream(repo: GitRepo) -> tuple[str, str]:
    """``(remote, tracking ref)`` of the checked-out branch, e.g. ``("origin", "refs/remotes/origin/master")``."""
    result = repo.run("rev-parse", "--symbolic-full-name", "@{upstream}", check=False)
    ref = result.stdout.decode("utf-8", "replace").strip()
    if result.returncode != 0 or not ref.startswith("refs/remotes/"):
        raise BadInputError(f"{repo.path}: the checked-out branch has no upstream branch")
    return ref[len("refs/remotes/"):].split("/", 1)[0], ref


def update_verified(ctx: Gkeys, request: SyncRequest, log: Log) -> SyncOutcome:
    """Fetch, verify the new commits, and move the work tree only if all of them verified."""
    repo = GitRepo(request.location, extra_env=request.git_env)
    recorded = last_verified(ctx.layout, repo.path)
    try:
        previous = repo.resolve("HEAD")
        remote, tracking = _upstream(repo)
        url = repo.run("remote", "get-url", remote, check=False).stdout.decode("utf-8", "replace").strip()
        if request.uri and url != request.uri:
            repo.run("remote", "set-url", remote, request.uri)
        repo.run("fetch", "--no-tags", *NO_SUBMODULES, *(["--quiet"] if request.quiet else []),
                 *request.fetch_opts, remote)
        tip = repo.resolve(tracking)
        verifier = TreeVerifier(ctx, request.options)
        base, hashes = verifier.plan(repo, tip, recorded)
        report = verifier.verify(repo, hashes, tip=tip, base=base)
        if not report.ok:
            _restore(repo, recorded, previous, log)
            return _failure(log, f"gkeys: {request.location} NOT updated: {report.reason()}", report)
        _emit(log, report)
        repo.run("reset", "--hard", "--quiet", tip)
        record_verified(ctx, repo.path, tip)
        return SyncOutcome(True, tip != previous, report=report)
    except NotVerifiedError as exc:
        with contextlib.suppress(GkeysError):
            _restore(repo, recorded, repo.resolve("HEAD"), log)
        return _failure(log, f"gkeys: {request.location} NOT updated: {exc.message}")
    except GkeysError as exc:
        return _failure(log, f"gkeys: {request.location} NOT updated: {exc.message}")


def _restore(repo: GitRepo, recorded: str | None, current: str, log: Log) -> None:
    """Put the work tree back at the last verified revision if it is anywhere else."""
    if recorded and current != recorded and repo.has_commit(recorded):
        repo.run("reset", "--hard", "--quiet", recorded)
        log("warn", f"gkeys: work tree reset to the last verified revision {recorded[:12]}")
