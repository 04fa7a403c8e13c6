"""Verified git syncing: fetch, verify every new commit, and only then write the tree.

Used by the ``sync-type = gkeys`` Portage module (:mod:`gkeys_portage.portage.sync_module`) and kept
free of Portage imports so it can be tested and reused on its own.

* Nothing is downloaded before the seeds and keys of every category the sync verifies with are installed
  (:func:`trusted_verifier`): the refusal names the command that installs them.
* A first clone goes into a private directory beside the repository location with ``--no-checkout``
  (only git's object store is written), its commits are verified, only then is the verified tip
  checked out, and the directory is renamed into place; on failure nothing is left at the location.
  Staging directories left by an interrupted sync (``.<name>.gkeys-*``) are removed first, under a
  lock per location.
* An update never writes where Portage reads (:mod:`gkeys_portage.verify.git.staging`): the live ``.git``
  is copied into a staging directory beside the tree (objects hard-linked), the fetch goes there and the new
  commits are verified there; a refused fetch leaves with the staging directory (the live repository is
  exactly as it was, not one object bigger).  Once verified, the tree is checked for what gkeys never checks
  out (:mod:`gkeys_portage.verify.git.contents`), the staging directory gets a work tree (the *spare* the
  last update kept, its directories moved in, or else the live work tree hard-linked in:
  :mod:`gkeys_portage.core.trash`), ``reset --hard`` + ``clean -ffdx`` move it to the new top (git replaces
  each file it changes by a new one, so no live file is written), it is checked clean, the user's
  ``distfiles``, ``local`` and ``packages`` are carried over when Portage treats the repository as volatile
  (as Portage's own git module never cleans those), and the staging tree is exchanged with the live one in
  one ``renameat2`` call (:mod:`gkeys_portage.core.swap`).  Killed at any instant, the location holds the
  whole old revision or the whole new one, and a later sync removes what the killed one left.  The tree it
  replaced is kept as the next spare; what is not reused is removed in the background.  A sync that brings
  nothing new to a clean tree swaps nothing.
* Git runs with Portage's spawn settings (``sync-user``, ``FEATURES=usersync``, ``sync-umask``), and a
  new tree gets the owner and mode Portage gave the location.  Every file a fetch writes is capped at
  ``[tree] max-fetch-mib`` (default 8192 MiB, 0 = no cap); a first checkout must fit in the free space.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.core.errors import BadInputError, GkeysError, UsageError
from gkeys_portage.core.state import StateLock, staging_directory
from gkeys_portage.core.swap import recover, swap_in
from gkeys_portage.core.trash import discard, keep_spare, sweep, usable_spare
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.verify.git.contents import require_safe_contents
from gkeys_portage.verify.git.objects import NO_SUBMODULES, GitRepo
from gkeys_portage.verify.git.records import last_verified, record_verified
from gkeys_portage.verify.git.spawn import SpawnSettings
from gkeys_portage.verify.git.staging import LOCAL_DIRECTORIES, adopt_spare, carry_local, copy_git_dir, link_work_tree
from gkeys_portage.verify.git.tree import TreeOptions, TreeReport, TreeVerifier, journal_tree
from gkeys_portage.verify.git.worktree import restore_revision, worktree_changes

Log = Callable[[str, str], None]  # (level, text): level is info, good, warn or error

#: Default cap on every file one fetch or clone may write (``[tree] max-fetch-mib``).
DEFAULT_MAX_FETCH_MIB = 8192.0
_MIB = 1024 * 1024


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
    spawn: SpawnSettings = field(default_factory=SpawnSettings)  # Portage's uid/gid/umask for git
    keep_local: bool = False  # keep distfiles/, local/, packages/ (Portage's volatile repositories)


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


def staging_prefix(location: Path) -> str:
    """The name prefix of the staging directories of ``location`` (``.<name>.gkeys-``)."""
    return f".{location.name}.gkeys-"


@contextlib.contextmanager
def location_lock(ctx: Gkeys, location: Path) -> Iterator[None]:
    """Serialize syncs of one location (a lock file per location in the gkeys state directory)."""
    ctx.ensure_layout()
    digest = hashlib.sha256(str(Path(location).resolve()).encode()).hexdigest()[:24]
    path = ctx.layout.state_dir / "sync-locks" / f"{digest}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with StateLock(ctx.layout, path=path):
        yield


def remove_stale_staging(location: Path) -> int:
    """Remove the staging directories an interrupted sync of ``location`` left; return how many.

    Call only under :func:`location_lock` (a running sync's staging directory is not stale).
    """
    removed = 0
    if not location.parent.is_dir():
        return 0
    for path in location.parent.iterdir():
        if not path.name.startswith(staging_prefix(location)):
            continue
        if path.is_symlink() or not path.is_dir():
            path.unlink()
        else:
            shutil.rmtree(path)
        removed += 1
    return removed


def _sweep(location: Path, log: Log) -> None:
    """Remove what earlier syncs of ``location`` left: staging directories, the old tree in the trash."""
    removed = remove_stale_staging(location)
    if removed:
        log("info", f"gkeys: removed {removed} staging director{'y' if removed == 1 else 'ies'} "
                    "left by an interrupted sync")
    if sweep(location):
        log("info", "gkeys: removed what an earlier sync left to remove in the background")


def fetch_cap(ctx: Gkeys) -> int | None:
    """The cap in bytes on each file a fetch writes (``[tree] max-fetch-mib``; None when 0)."""
    mib = ctx.config.number("tree", "max-fetch-mib", DEFAULT_MAX_FETCH_MIB)
    return int(mib * _MIB) or None


def _checkout_size(repo: GitRepo, revision: str) -> int:
    """Bytes a checkout of ``revision`` writes (file sizes rounded up to 4 KiB blocks)."""
    out = repo.run("ls-tree", "-r", "-l", "-z", "--full-tree", revision).stdout
    total = 0
    for entry in out.split(b"\0"):
        fields = entry.split(b"\t", 1)[0].split()
        if len(fields) == 4 and fields[3].isdigit():
            total += (int(fields[3]) + 4095) // 4096 * 4096
    return total


def _require_space(repo: GitRepo, revision: str) -> None:
    """Refuse a checkout that cannot fit in the free space of the repository's file system."""
    needed = _checkout_size(repo, revision)
    free = shutil.disk_usage(repo.path).free
    if needed > free:
        raise BadInputError(f"checking out {revision[:12]} needs {needed // _MIB} MiB but {repo.path.parent} "
                            f"has {free // _MIB} MiB free; free some space and sync again")


def trusted_verifier(ctx: Gkeys, options: TreeOptions) -> TreeVerifier:
    """The verifier of ``options``, made before anything is downloaded: without seeds or keys for a category
    nothing could verify a commit, so a sync must refuse before fetching a single object (a first clone of
    ::gentoo is hundreds of MiB).  Raises :class:`UsageError` naming the command that installs them."""
    try:
        verifier = TreeVerifier(ctx, options)
    except GkeysError as exc:
        raise UsageError(f"{exc.message}; nothing was downloaded") from exc
    categories = [*options.categories, *([options.top_category] if options.top_category else [])]
    for category in dict.fromkeys(categories):
        if not ctx.keyring(category).installed():
            raise UsageError(f"no keys installed for category {category!r}, so no commit could verify; nothing was "
                             f"downloaded (run: gkeys install-key -C {category})")
    return verifier


def clone_verified(ctx: Gkeys, request: SyncRequest, log: Log) -> SyncOutcome:
    """First clone into a staging directory without a checkout; check out and move into place once verified."""
    location = request.location
    location.parent.mkdir(parents=True, exist_ok=True)
    try:
        with location_lock(ctx, location):
            _sweep(location, log)
            return _clone(ctx, request, log)
    except GkeysError as exc:
        return _failure(log, f"gkeys: first clone into {location} failed, nothing installed: {exc.message}")
    except OSError as exc:
        return _failure(log, f"gkeys: first clone into {location} failed, nothing installed: {exc}")
    finally:
        with contextlib.suppress(OSError):
            if location.is_dir() and not (location / ".git").exists() and not any(location.iterdir()):
                location.rmdir()


def _clone(ctx: Gkeys, request: SyncRequest, log: Log) -> SyncOutcome:
    location = request.location
    if location.exists() and (not location.is_dir() or any(location.iterdir())):
        return _failure(log, f"gkeys: {location} exists and is not empty; refusing to clone over it")
    verifier = trusted_verifier(ctx, request.options)  # trust before download
    with staging_directory(location.parent, staging_prefix(location)) as staging:
        request.spawn.prepare_directory(staging, like=location if location.is_dir() else None)
        repo = GitRepo(staging, extra_env=request.git_env, spawn=request.spawn)
        depth = request.clone_depth
        if depth is None:
            depth = 1 if request.options.policy == "top" else 0
        args = ["clone", "--no-checkout", "--no-tags", *NO_SUBMODULES] + (["--depth", str(depth)] if depth else [])
        args += (["--quiet"] if request.quiet else []) + list(request.clone_opts) + ["--", request.uri, "."]
        log("info", f"gkeys: cloning {request.uri} into a staging directory")
        repo.run(*args, max_file_size=fetch_cap(ctx))
        tip = repo.resolve("HEAD")
        base, hashes = verifier.plan(repo, tip, None)
        report = verifier.verify(repo, hashes, tip=tip, base=base)
        report.repo = location  # report the place the user knows, not the staging directory
        if not report.ok:
            journal_tree(ctx, report, request.options, location)
            return _failure(log, f"gkeys: first clone of {request.uri} NOT verified; nothing installed at "
                                 f"{location}", report)
        _require_safe(ctx, report, request.options, location, repo)
        _require_space(repo, tip)
        restore_revision(repo, tip)  # the first file of the tree is written only now
        _emit(log, report)
        with contextlib.suppress(FileNotFoundError):
            location.rmdir()  # the empty directory Portage created
        os.rename(staging, location)
        record_verified(ctx, location, tip)  # replaces any older record of the location
        journal_tree(ctx, report, request.options, location)  # applied: the record comes last
        return SyncOutcome(True, True, report=report)


def _require_safe(ctx: Gkeys, report: TreeReport, options: TreeOptions, location: Path, repo: GitRepo) -> None:
    """:func:`require_safe_contents` of the verified tip; a refusal is journaled as one (never as accepted)."""
    try:
        require_safe_contents(repo, report.tip)
    except GkeysError as exc:
        journal_tree(ctx, report, options, location, refused=(exc.reason, exc.message))
        raise


def _upstream(repo: GitRepo) -> tuple[str, str]:
    """``(remote, tracking ref)`` of the checked-out branch, e.g. ``("origin", "refs/remotes/origin/master")``."""
    result = repo.run("rev-parse", "--symbolic-full-name", "@{upstream}", check=False)
    ref = result.stdout.decode("utf-8", "replace").strip()
    if result.returncode != 0 or not ref.startswith("refs/remotes/"):
        raise BadInputError(f"{repo.path}: the checked-out branch has no upstream branch")
    return ref[len("refs/remotes/"):].split("/", 1)[0], ref


def update_verified(ctx: Gkeys, request: SyncRequest, log: Log) -> SyncOutcome:
    """Fetch and verify in a staging copy beside the tree; swap the checked-out copy in only if all verified.

    On any failure the live tree and its ``.git`` are as they were (the staging copy is dropped).
    """
    if request.location.is_symlink():  # the staging copy must sit beside the real directory
        request = dataclasses.replace(request, location=request.location.resolve())
    try:
        with location_lock(ctx, request.location):
            if recover(request.location):
                log("info", f"gkeys: {request.location} put back as it was before an interrupted sync")
            _sweep(request.location, log)
            return _update(ctx, request, log)
    except GkeysError as exc:
        return _failure(log, f"gkeys: {request.location} NOT updated (the tree is as it was): {exc.message}")
    except OSError as exc:  # e.g. a stale staging directory that cannot be removed
        return _failure(log, f"gkeys: {request.location} NOT updated (the tree is as it was): {exc}")


def _update(ctx: Gkeys, request: SyncRequest, log: Log) -> SyncOutcome:
    location = request.location
    live = GitRepo(location, extra_env=request.git_env, spawn=request.spawn)
    recorded = last_verified(ctx.layout, live.path)
    verifier = trusted_verifier(ctx, request.options)  # trust before download
    previous = live.resolve("HEAD")
    remote, tracking = _upstream(live)
    keep = LOCAL_DIRECTORIES if request.keep_local else ()
    with staging_directory(location.parent, staging_prefix(location)) as staging:
        request.spawn.prepare_directory(staging, like=location)
        copy_git_dir(location, staging, request.spawn)  # the fetch's objects stay here until verified
        repo = GitRepo(staging, extra_env=request.git_env, spawn=request.spawn)
        url = repo.run("remote", "get-url", remote, check=False).stdout.decode("utf-8", "replace").strip()
        if request.uri and url != request.uri:
            repo.run("remote", "set-url", remote, request.uri)
        repo.run("fetch", "--no-tags", *NO_SUBMODULES, *(["--quiet"] if request.quiet else []),
                 *request.fetch_opts, remote, max_file_size=fetch_cap(ctx))
        tip = repo.resolve(tracking)
        base, hashes = verifier.plan(repo, tip, recorded)
        report = verifier.verify(repo, hashes, tip=tip, base=base)
        report.repo = location  # report the place the user knows, not the staging directory
        if not report.ok:
            journal_tree(ctx, report, request.options, location)
            return _failure(log, f"gkeys: {location} NOT updated (the tree is as it was; nothing fetched was "
                                 f"kept): {report.reason()}", report)
        _emit(log, report)
        _require_safe(ctx, report, request.options, location, repo)
        if tip == previous and not (location / ".git" / "index.lock").exists() and \
                not worktree_changes(live, exclude=keep):
            record_verified(ctx, live.path, tip)  # nothing new, nothing changed on disk: no swap
            journal_tree(ctx, report, request.options, location)
            return SyncOutcome(True, False, report=report)
        spare = usable_spare(location)
        if spare is None or not adopt_spare(spare, staging):  # else git rewrites what differs from the spare
            link_work_tree(location, staging, request.spawn)
        if spare is not None:
            discard(spare, location)  # its .git and what Portage keeps, removed in the background
        try:  # reset --hard + clean -ffdx in the staging tree, checked clean (the check trusts no time)
            restore_revision(repo, tip, trust_ctime=False)
        except GkeysError:  # a live file edited in place, an index a killed git left: check out from scratch
            (staging / ".git" / "index").unlink(missing_ok=True)
            restore_revision(repo, tip)
        kept = carry_local(location, staging, request.spawn) if keep else []
        if kept:
            log("info", f"gkeys: kept {', '.join(kept)} (Portage keeps them in this repository)")
        swap_in(staging, location)  # one exchange: the location holds the old revision or the new one
        record_verified(ctx, live.path, tip)
        journal_tree(ctx, report, request.options, location)  # applied: the record comes last
        keep_spare(staging, location)  # the old tree: the next update starts from it
    return SyncOutcome(True, tip != previous, report=report)
