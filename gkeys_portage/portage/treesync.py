"""Verified git syncing: fetch, verify every new commit, and only then write the tree.

Used by the ``sync-type = gkeys`` Portage module (:mod:`gkeys_portage.portage.sync_module`) and kept
free of Portage imports so it can be tested and reused on its own.

* Nothing is downloaded before the seeds and keys of every category the sync verifies with are installed
  (:func:`trusted_verifier`): the refusal names the command that installs them.
* A first clone goes into a private directory beside the repository location with ``--no-checkout``
  (only git's object store is written), its commits are verified, only then is the verified tip
  checked out, and the directory is renamed into place (or its entries moved into the location Portage
  made, which is never removed and keeps its owner and mode); on failure nothing is left in the location.
  Staging directories left by an interrupted sync (``.<name>.gkeys-*``) are removed first, under a
  lock per location.
* An update never writes where Portage reads (:mod:`gkeys_portage.verify.git.staging`): the live ``.git``
  is copied into a staging directory beside the tree (objects hard-linked), the fetch goes there and the new
  commits are verified there; a refused fetch leaves with the staging directory (the live repository is
  exactly as it was, not one object bigger).  Once verified, the tree is checked for what gkeys never checks
  out (:mod:`gkeys_portage.verify.git.contents`), the staging directory gets a work tree (the *spare* the
  last update kept, its directories moved in, or else the live work tree hard-linked in:
  :mod:`gkeys_portage.core.fs.trash`), ``reset --hard`` + ``clean -ffdx`` move it to the new top (git replaces
  each file it changes by a new one, so no live file is written), it is checked clean, the user's
  ``distfiles``, ``local`` and ``packages`` are carried over when Portage treats the repository as volatile
  (as Portage's own git module never cleans those), and the staging tree is exchanged with the live one in
  one ``renameat2`` call (:mod:`gkeys_portage.core.fs.swap`).  Killed at any instant, the location holds the
  whole old revision or the whole new one, and a later sync removes what the killed one left.  The tree it
  replaced is kept as the next spare; what is not reused is removed in the background.  A sync that brings
  nothing new to a tree that matches the inventory recorded with its proof swaps nothing.
* Root never acts on what the sync user can change (:mod:`gkeys_portage.verify.git.hold`): the sync user
  only fetches (and links the live tree in); root then takes the staging tree, verifies and checks out with
  a git directory of its own, hashes the checkout up to the signed tree, and gives it back last.
* Git runs with Portage's spawn settings (``sync-user``, ``FEATURES=usersync``, ``sync-umask``), and a
  new tree gets the owner and mode Portage gave the location.  Every file a fetch writes is capped at
  ``[tree] max-fetch-mib`` (default 8192 MiB, 0 = no cap); a first checkout must fit in the free space.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import os
import shutil
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.core.errors import BadInputError, GkeysError, UsageError
from gkeys_portage.core.fs import fdtree
from gkeys_portage.core.fs.swap import recover, swap_in
from gkeys_portage.core.fs.trash import discard, keep_spare, sweep, usable_spare
from gkeys_portage.core.state import StateLock
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.verify.git.contents import require_safe_contents
from gkeys_portage.verify.git.hold import (
    SPARE,
    WORK,
    Hold,
    adopt,
    clear,
    discard_paths,
    finish_git_dir,
    give,
    hold_directory,
    move_entries,
    remove,
    root_git,
    take,
    tree_of,
)
from gkeys_portage.verify.git.objects import NO_SUBMODULES, GitRepo
from gkeys_portage.verify.git.proof import Inventory, Known, LiveInventory, Mismatch, prove
from gkeys_portage.verify.git.records import (
    last_verified,
    proven_files,
    record_proven_files,
    record_verified,
    recorded_inventory,
)
from gkeys_portage.verify.git.spawn import SpawnSettings
from gkeys_portage.verify.git.staging import LOCAL_DIRECTORIES, carry_local, copy_git_dir, link_work_tree
from gkeys_portage.verify.git.tree import TreeOptions, TreeReport, TreeVerifier, journal_tree

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
    """Remove the staging directories an interrupted sync of ``location`` left (by descriptor: never a link
    followed, never a mount crossed); return how many.  Raises :class:`OSError` naming what stays, and the
    command that removes it, once every one was tried.

    Call only under :func:`location_lock` (a running sync's staging directory is not stale).
    """
    removed = 0
    left: list[str] = []
    if not location.parent.is_dir():
        return 0
    for path in location.parent.iterdir():
        if path.name.startswith(staging_prefix(location)):
            remove(location.parent, path.name, left)
            removed += 1
    if left:
        raise OSError(errno.ENOTEMPTY, "; ".join(left))
    return removed


def _sweep(location: Path, log: Log) -> None:
    """Remove what earlier syncs of ``location`` left: staging directories, the old tree in the trash.  What
    cannot be removed is a warning naming it and the command, never the reason a sync fails."""
    try:
        removed = remove_stale_staging(location)
    except OSError as exc:
        log("warn", f"gkeys: could not remove {exc.strerror}")
    else:
        if removed:
            log("info", f"gkeys: removed {removed} staging director{'y' if removed == 1 else 'ies'} "
                        "left by an interrupted sync")
    try:
        if sweep(location):
            log("info", "gkeys: removed what an earlier sync left to remove in the background")
    except GkeysError as exc:
        log("warn", f"gkeys: {exc.message}")


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
    """First clone into a staging directory without a checkout; check out and move into place once verified.

    A location that exists (Portage creates it, under ``usersync`` owned by the sync user) is never removed and
    keeps its owner and mode: the verified tree's entries are moved into it."""
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


@contextlib.contextmanager
def _held(location: Path, request: SyncRequest, log: Log, like: Path | None) -> Iterator[Hold]:
    """A hold beside ``location`` (:func:`hold_directory`); what of it could not be removed is a warning."""
    removed: list[str] = []
    try:
        with hold_directory(location.parent, staging_prefix(location), request.spawn, like=like) as hold:
            removed = hold.removed
            yield hold
    finally:
        for text in removed:
            log("warn", f"gkeys: could not remove {text}")


def _checkout(hold: Hold, root: GitRepo, tip: str, skip: Sequence[str], location: Path,
              known: Known) -> tuple[Inventory, Known]:
    """Bring the taken tree to ``tip`` with root's git and prove it by hash (:func:`prove`); what differs is
    removed and written afresh once; return the inventory."""
    tree = tree_of(root, tip)
    _reset(root, tip)
    try:
        return prove(hold.open(), hold.owner, root, tree, skip, known)
    except Mismatch as exc:  # a shared file edited in place, an object rewritten: written afresh from the objects
        discard_paths(hold, exc.paths)
        _reset(root, tip)
    try:
        return prove(hold.open(), hold.owner, root, tree, skip)  # nothing taken on trust this time
    except Mismatch as exc:
        raise BadInputError(f"the checkout of {tip[:12]} does not hash to its signed tree: {exc.message}; the "
                            f"repository's object store was changed: remove {hold.top.parent / _name(hold)} and "
                            "sync again to clone afresh") from exc


def _name(hold: Hold) -> str:
    return hold.top.name.split(".gkeys-", 1)[0].lstrip(".")


def _reset(root: GitRepo, tip: str) -> None:
    """``reset --hard`` + ``clean -ffdx`` with root's git (the proof that follows checks the result).  The change
    time is not compared: the reused files are links, whose change time every link changed."""
    reset = ("-c", "core.trustctime=false", "reset", "--hard", "--quiet", "--no-recurse-submodules", tip)
    try:
        root.run(*reset)
    except GkeysError:  # the copied index (a stat cache) is unreadable: check out from scratch
        (root.git_dir or root.path / ".git").joinpath("index").unlink(missing_ok=True)
        root.run(*reset)
    root.run("clean", "-ffdxq")


def _clone(ctx: Gkeys, request: SyncRequest, log: Log) -> SyncOutcome:
    location = request.location
    if location.is_symlink() or (location.exists() and (not location.is_dir() or any(location.iterdir()))):
        return _failure(log, f"gkeys: {location} exists and is not empty; refusing to clone over it")
    verifier = trusted_verifier(ctx, request.options)  # trust before download
    with _held(location, request, log, like=location if location.is_dir() else None) as hold:
        repo = GitRepo(hold.tree, extra_env=request.git_env, spawn=request.spawn)
        depth = request.clone_depth
        if depth is None:
            depth = 1 if request.options.policy == "top" else 0
        args = ["clone", "--no-checkout", "--no-tags", *NO_SUBMODULES] + (["--depth", str(depth)] if depth else [])
        args += (["--quiet"] if request.quiet else []) + list(request.clone_opts) + ["--", request.uri, "."]
        log("info", f"gkeys: cloning {request.uri} into a staging directory")
        repo.run(*args, max_file_size=fetch_cap(ctx))
        tip = repo.resolve("HEAD")  # the sync user's word: verified below, with root's git only
        take(hold)  # from here on nobody else can change what is verified and checked out
        root = root_git(hold, tip, dict(request.git_env))
        base, hashes = verifier.plan(root, tip, None)
        verifier.shown_as = location
        report = verifier.verify(root, hashes, tip=tip, base=base)
        report.repo = location  # report the place the user knows, not the staging directory
        if not report.ok:
            journal_tree(ctx, report, request.options, location)
            return _failure(log, f"gkeys: first clone of {request.uri} NOT verified; nothing installed at "
                                 f"{location}", report)
        _require_safe(ctx, report, request.options, location, root)
        _require_space(root, tip)
        found, proven = _checkout(hold, root, tip, (), location, {})  # the first file of the tree is written only now
        finish_git_dir(hold, tip)
        give(hold)  # last, after every check
        _emit(log, report)
        _place(hold, location)
        record_verified(ctx, location, tip, inventory=found)  # replaces any older record of the location
        record_proven_files(ctx, location, proven)
        journal_tree(ctx, report, request.options, location)  # applied: the record comes last
        return SyncOutcome(True, True, report=report)


def _require_safe(ctx: Gkeys, report: TreeReport, options: TreeOptions, location: Path, repo: GitRepo) -> None:
    """:func:`require_safe_contents` of the verified tip; a refusal is journaled as one (never as accepted)."""
    try:
        require_safe_contents(repo, report.tip)
    except GkeysError as exc:
        journal_tree(ctx, report, options, location, refused=(exc.reason, exc.message))
        raise


def _place(hold: Hold, location: Path) -> None:
    """Move the given-back tree to ``location``: renamed there if it is absent; else (the directory Portage made,
    empty, with the owner and mode it chose) its entries are moved in, ``.git`` first."""
    parent = fdtree.open_dir(location.parent)
    try:
        try:
            st = fdtree.lstat_at(parent, location.name)
        except FileNotFoundError:
            os.rename(hold.tree, location)
            return
        if not stat.S_ISDIR(st.st_mode):
            raise BadInputError(f"{location} is not a directory; refusing to clone over it")
        target = fdtree.open_dir(location.name, parent, expect=st)
        tree = hold.open()
        try:
            if fdtree.names(target):
                raise BadInputError(f"{location} is not empty any more; refusing to clone over it")
            os.rename(".git", ".git", src_dir_fd=tree, dst_dir_fd=target)
            move_entries(tree, target)
            os.fsync(target)
        finally:
            os.close(tree)
            os.close(target)
    finally:
        os.close(parent)


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
            if recover(request.location, lambda text: log("warn", text)):
                log("info", f"gkeys: {request.location} put back as it was before an interrupted sync")
            _sweep(request.location, log)
            return _update(ctx, request, log)
    except GkeysError as exc:
        return _failure(log, f"gkeys: {request.location} NOT updated (the tree is as it was): {exc.message}")
    except OSError as exc:  # e.g. a stale staging directory that cannot be removed
        return _failure(log, f"gkeys: {request.location} NOT updated (the tree is as it was): {exc}")


def _update(ctx: Gkeys, request: SyncRequest, log: Log) -> SyncOutcome:
    location = request.location
    own = request.spawn.owns(location)  # False after a switch of the sync user: nothing of the old tree linked
    # a previous sync user's tree is read by its owner's git (root's never obeys another user's configuration)
    live = GitRepo(location, extra_env=request.git_env,
                   spawn=request.spawn if own else SpawnSettings.owner_of(location))
    recorded = last_verified(ctx.layout, live.path)
    verifier = trusted_verifier(ctx, request.options)  # trust before download
    remote, tracking = _upstream(live)
    keep = LOCAL_DIRECTORIES if request.keep_local else ()
    expected = recorded_inventory(ctx.layout, location) if own else None  # a switched user's tree: rewritten
    with _held(location, request, log, like=location if own else None) as hold, \
            LiveInventory(location, keep, wanted=expected is not None) as walked:  # beside the copy and the fetch
        copy_git_dir(location, hold.tree, request.spawn, link=own)  # the fetch's objects stay here until verified
        repo = GitRepo(hold.tree, extra_env=request.git_env, spawn=request.spawn)
        url = repo.run("remote", "get-url", remote, check=False).stdout.decode("utf-8", "replace").strip()
        if request.uri and url != request.uri:
            repo.run("remote", "set-url", remote, request.uri)
        repo.run("fetch", "--no-tags", *NO_SUBMODULES, *(["--quiet"] if request.quiet else []),
                 *request.fetch_opts, remote, max_file_size=fetch_cap(ctx))
        tip = repo.resolve(tracking)  # the sync user's word: verified below, with root's git only
        if tip != recorded:
            walked.stop()  # something new: the tree is proven afresh, its inventory is not asked
        take(hold)  # from here on nobody else can change what is verified and checked out
        root = root_git(hold, tip, dict(request.git_env))
        base, hashes = verifier.plan(root, tip, recorded)
        report = verifier.verify(root, hashes, tip=tip, base=base)
        report.repo = location  # report the place the user knows, not the staging directory
        if not report.ok:
            journal_tree(ctx, report, request.options, location)
            return _failure(log, f"gkeys: {location} NOT updated (the tree is as it was; nothing fetched was "
                                 f"kept): {report.reason()}", report)
        _emit(log, report)
        _require_safe(ctx, report, request.options, location, root)
        _require_no_local(root, tip, keep, location)
        if tip == recorded and expected is not None and _head(live) == tip and walked.result() == expected:
            record_verified(ctx, live.path, tip, inventory=expected)  # nothing new, the tree as verified: no swap
            journal_tree(ctx, report, request.options, location)
            return SyncOutcome(True, False, report=report)
        _work_tree(hold, location, request, reuse=own)
        take(hold)
        found, proven = _checkout(hold, root, tip, keep, location, proven_files(ctx.layout, location))
        finish_git_dir(hold, tip)
        give(hold)  # last, after every check
        kept = carry_local(location, hold.tree, request.spawn, by_root=not own) if keep else []
        if kept:
            log("info", f"gkeys: kept {', '.join(kept)} (Portage keeps them in this repository)")
        swap_in(hold.tree, location)  # one exchange: the location holds the old revision or the new one
        record_verified(ctx, live.path, tip, inventory=found)
        record_proven_files(ctx, location, proven)
        journal_tree(ctx, report, request.options, location)  # applied: the record comes last
        keep_spare(hold.tree, location)  # the old tree: the next update starts from it
    return SyncOutcome(True, tip != recorded, report=report)


def _head(live: GitRepo) -> str | None:
    """The live tree's HEAD as its owner's git reads it (None if unreadable): a branch moved by hand makes the
    sync write it again, though the inventory (files only) still matches."""
    try:
        return live.resolve("HEAD")
    except GkeysError:
        return None


def _require_no_local(root: GitRepo, tip: str, keep: Sequence[str], location: Path) -> None:
    """Refuse a verified revision that itself holds one of the names Portage keeps as the user's."""
    if not keep:
        return
    out = root.run("ls-tree", "-z", "--name-only", "--full-tree", tip, "--", *keep).stdout
    for name in (item.decode("utf-8", "replace") for item in out.split(b"\0") if item):
        raise UsageError(f"the verified revision has {name}/, which Portage keeps as yours in {location}: move "
                         f"{location / name} away and sync again")


def _work_tree(hold: Hold, location: Path, request: SyncRequest, reuse: bool) -> None:
    """Give the taken tree a work tree to reset: the spare's entries (root moves them in), else the live tree
    hard-linked in by the sync user (into a directory of its own in the hold, moved in by root); nothing when
    the live tree is another user's (``reuse`` False: the sync user changed), the checkout writes every file."""
    skip = (".git", *LOCAL_DIRECTORIES)
    clear(hold)
    if not reuse:  # the old spare, the previous user's, is discarded by the next sync's usable_spare
        return
    spare = usable_spare(location)
    if spare is not None:
        try:
            adopted = adopt(hold, location.parent, spare.name, skip)
        finally:
            if (hold.top / SPARE).exists():
                discard(hold.top / SPARE, location)  # its .git and what Portage keeps, removed in the background
        if adopted:
            return
    work = hold.top / WORK
    os.mkdir(work, 0o700)
    request.spawn.prepare_directory(work, like=location)
    hold.reach(0o711)
    link_work_tree(location, work, request.spawn)
    hold.reach(0o700)
    source, tree = hold.open(WORK), hold.open()
    try:
        move_entries(source, tree, skip)
    finally:
        os.close(source)
        os.close(tree)
