"""Verified rsync syncing: build the new tree beside the live one, verify it with gemato, swap it in.

Used by ``sync-type = gkeys`` when ``sync-uri`` is ``rsync://`` or ``ssh+rsync://`` (a git URI takes
:mod:`gkeys_portage.portage.treesync`).  Free of Portage imports, like treesync.

1. Under the location's sync lock, undo an interrupted fallback swap and remove staging directories an
   interrupted sync left (``.<name>.gkeys-*``).
2. ``rsync --link-dest=<live tree>`` into a fresh staging directory beside the location: files the mirror
   did not change become hard links to the live ones, so an unchanged tree costs little disk and time.
   rsync runs with gkeys' modes and owner (:data:`TREE_SHAPE_OPTIONS`) and links only files whose content,
   mode and time already match; it never writes into a directory that holds links to live files a second
   time (the re-fetch comparing contents gets a fresh directory too), so nothing it does changes a live file.
3. gemato verifies the staging tree against a keyring holding exactly the pinned repository keys
   (:mod:`gkeys_portage.verify.manifest.tree`); the signed ``TIMESTAMP`` must be fresh
   (:mod:`gkeys_portage.verify.manifest.marks`: not older than the last verified one, not older than
   ``sync-gkeys-max-age`` hours).
4. The verified tree is cut down to what its Manifests cover, files 0644 and directories 0755 owned by the
   syncing user (:mod:`gkeys_portage.verify.manifest.shape`): what gemato does not look at (dot entries,
   IGNOREd paths, modes) never reaches Portage.
5. The mark is raised, then the staging tree is exchanged with the live one in one ``renameat2`` call
   (:mod:`gkeys_portage.core.swap`) and the old tree removed.  Killed before the exchange, the live tree is
   untouched; after it, the live tree is the new verified one.  A mark raised just before a kill only makes
   the next sync demand a tree at least that new, which the mirror has.  Last, the live tree's inventory is
   recorded (:mod:`gkeys_portage.verify.manifest.inventory`).

A sync that changes nothing builds no staging tree and hashes nothing (:func:`_live_walk`): ``rsync
--dry-run --itemize-changes`` compares the mirror with the live tree itself and must report nothing, the live
top Manifest must be byte-identical to the one recorded with the high-water mark, and the live tree must
match the inventory taken after the swap (every entry's inode, size, times, change time, mode and owner: a
file edited in place under the same size and time has another change time).  Then the mirror serves the tree
gkeys verified in full with that very Manifest.  The signature of the top Manifest is still verified against
today's keyring (a key revoked since refuses), its signer must still be a pinned repository key, and the
freshness rules (rollback, maximum age, clock) still apply.  Any doubt takes the full path.

rsync fetches no file larger than ``[tree] max-fetch-mib`` (the cap git fetches have; the tree then fails
verification).  The top-level ``distfiles``, ``local`` and ``packages`` directories are never synced (as Portage's rsync
module excludes them); if the live tree holds them, they are carried into the new one as hard links, so the
swap never drops a user's files.  Nothing here talks to a keyserver: keys are refreshed off the sync path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import urllib.parse
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from gkeys_portage.core import children, journal
from gkeys_portage.core.errors import GkeysError, NetworkError, TreeMismatchError, UsageError
from gkeys_portage.core.state import staging_directory
from gkeys_portage.core.swap import recover, swap_in
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.portage.treesync import (
    Log,
    SyncOutcome,
    fetch_cap,
    location_lock,
    remove_stale_staging,
    staging_prefix,
)
from gkeys_portage.verify.git.spawn import SpawnSettings
from gkeys_portage.verify.manifest import gematohome, inventory
from gkeys_portage.verify.manifest.marks import DEFAULT_MAX_AGE_HOURS, Freshness, Mark, last_mark
from gkeys_portage.verify.manifest.purpose import purpose_keyring, repository_pins
from gkeys_portage.verify.manifest.shape import DIRECTORY_MODE, Owner, Shaped, shape_tree, shown
from gkeys_portage.verify.manifest.tree import VerifiedTree, verify_tree

RSYNC_SCHEMES = ("rsync", "ssh+rsync")
#: Never synced, never removed: kept from the live tree (Portage's rsync module excludes them too).
LOCAL_DIRECTORIES = ("distfiles", "local", "packages")
LOCAL_NAMES = frozenset(LOCAL_DIRECTORIES)
#: After the user's options, so they always hold: gkeys' modes, the syncing user as owner, no device or special
#: file, no dot entry (gemato covers none: ``.hg``, ``.svn``, a hidden news item); :mod:`..verify.manifest.shape`
#: enforces the same on what arrives.
TREE_SHAPE_OPTIONS = ("--perms", f"--chmod=D{DIRECTORY_MODE:o},Fu=rwX,Fgo=rX,Fugo-st", "--no-owner", "--no-group",
                      "--no-devices", "--no-specials", "--exclude=.*")
#: rsync's I/O timeout and its daemon connect timeout, in seconds.
IO_TIMEOUT = 180
CONNECT_TIMEOUT = 60
DEFAULT_CATEGORY = "gentoo"


def is_rsync_uri(uri: str | None) -> bool:
    """True for the ``sync-uri`` values this module syncs (``rsync://``, ``ssh+rsync://``)."""
    return bool(uri) and urllib.parse.urlsplit(uri or "").scheme in RSYNC_SCHEMES


def mark_key(location: Path) -> str:
    """The high-water mark's key for the repository at ``location``."""
    return f"rsync:{Path(location).resolve()}"


@dataclass
class RsyncRequest:
    """What to sync and how."""

    location: Path
    uri: str
    category: str = DEFAULT_CATEGORY
    max_age_hours: float = DEFAULT_MAX_AGE_HOURS
    extra_opts: Sequence[str] = ()
    quiet: bool = False
    max_file_bytes: int | None = None  # larger files are not fetched (so the tree fails verification)
    spawn: SpawnSettings = field(default_factory=SpawnSettings)


def rsync_command(request: RsyncRequest, staging: Path, link_dest: Path | None, *, checksum: bool = False) -> list[str]:
    """The rsync command that fetches ``request.uri`` into ``staging`` (hard-linking unchanged files;
    ``checksum``: compare every file's content, not only its size and time)."""
    parts = urllib.parse.urlsplit(request.uri)
    args = ["rsync", "--recursive", "--links", "--safe-links", "--perms", "--times", "--omit-dir-times",
            "--delete", "--whole-file", "--prune-empty-dirs", f"--timeout={IO_TIMEOUT}",
            *([f"--max-size={request.max_file_bytes}"] if request.max_file_bytes else []),
            *(f"--exclude=/{name}" for name in LOCAL_DIRECTORIES), "--exclude=/.git"]
    if parts.scheme == "rsync":
        args.append(f"--contimeout={CONNECT_TIMEOUT}")
        source = request.uri
    else:
        if not parts.hostname or not parts.path:
            raise UsageError(f"sync-uri {request.uri!r}: expected ssh+rsync://[USER@]HOST[:PORT]/PATH")
        port = ["-p", str(parts.port)] if parts.port else []
        args += ["-e", " ".join(["ssh", *port])]
        user = f"{parts.username}@" if parts.username else ""
        source = f"{user}{parts.hostname}:{parts.path}"
    if link_dest is not None:
        args.append(f"--link-dest={link_dest.resolve()}")
    args += ["--quiet"] if request.quiet else []
    args += ["--checksum"] if checksum else []
    return [*args, *request.extra_opts, *TREE_SHAPE_OPTIONS, "--", source.rstrip("/") + "/", f"{staging}/"]


def _fetch(request: RsyncRequest, staging: Path, *, checksum: bool = False) -> None:
    live = request.location if request.location.is_dir() and any(request.location.iterdir()) else None
    command = rsync_command(request, staging, live, checksum=checksum)
    result = subprocess.run(command, capture_output=True, stdin=subprocess.DEVNULL, preexec_fn=children.preexec(),
                            check=False, **request.spawn.run_kwargs())
    if result.returncode != 0:
        words = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise NetworkError(f"rsync from {request.uri} failed (exit {result.returncode}): "
                           f"{words[-1] if words else 'no message'}; try again or another mirror")


def mirror_matches_live(request: RsyncRequest) -> bool:
    """True when ``rsync --dry-run --itemize-changes`` from the mirror into the live tree would transfer, delete
    and change nothing (same options as the real fetch: the same size-and-time check, the same excludes).
    Any output line, any failure or an rsync that cannot run means False: the caller takes the full path."""
    command = rsync_command(dataclasses.replace(request, quiet=False), request.location, None)
    split = command.index("--")
    command[split:split] = ["--dry-run", "--itemize-changes", "--no-motd"]
    try:
        result = subprocess.run(command, capture_output=True, stdin=subprocess.DEVNULL,
                                preexec_fn=children.preexec(), check=False, **request.spawn.run_kwargs())
    except OSError:
        return False
    return result.returncode == 0 and not result.stdout.strip()


def _carry_local(live: Path, staging: Path) -> None:
    """Hard-link the live tree's never-synced directories into the new tree (the originals stay put)."""
    for name in LOCAL_DIRECTORIES:
        source = live / name
        if source.is_dir() and not source.is_symlink() and not (staging / name).exists():
            shutil.copytree(source, staging / name, symlinks=True, copy_function=_link)


def _link(source: str, target: str) -> None:
    Path(target).hardlink_to(source)


def sync_rsync(ctx: Gkeys, request: RsyncRequest, log: Log) -> SyncOutcome:
    """Sync ``request.location`` from ``request.uri``: verified and swapped in, or left exactly as it was.

    A location that is a symlink is synced where it points (the staging tree must sit beside the real
    directory, and the link stays a link).
    """
    if request.location.is_symlink():
        request = dataclasses.replace(request, location=request.location.resolve())
    if request.max_file_bytes is None:
        request = dataclasses.replace(request, max_file_bytes=fetch_cap(ctx))
    location = request.location
    location.parent.mkdir(parents=True, exist_ok=True)
    try:
        with location_lock(ctx, location):
            if recover(location):
                log("info", f"gkeys: {location} put back as it was before an interrupted sync")
            try:
                remove_stale_staging(location)
                # a killed sync's gemato homes and agents, also when this sync takes the no-change path
                gematohome.remove_stale()
            except OSError as exc:  # harmless: this sync stages in a directory of its own; the next one retries
                log("warn", f"gkeys: could not remove a staging directory an interrupted sync left: {exc}")
            return _sync(ctx, request, log)
    except GkeysError as exc:
        reason = f"gkeys: {location} NOT updated (the tree is as it was): {exc.message}"
        journal.record(ctx, "rsync-refused", {"location": str(location), "uri": request.uri, "code": exc.reason})
    except OSError as exc:
        reason = f"gkeys: {location} NOT updated (the tree is as it was): {exc}"
    log("error", reason)
    return SyncOutcome(False, reason=reason)


def _log_verified(log: Log, tree: VerifiedTree) -> None:
    log("good", f"gkeys: Manifest tree signed by {tree.signer.category}/{tree.signer.nick} "
                f"({tree.signer.fingerprint}), TIMESTAMP {tree.timestamp:%Y-%m-%d %H:%M:%S} UTC: verified")


def _refuse_work_tree(location: Path, synced_before: bool) -> None:
    """A version-control work tree at the location is never replaced by an rsync tree.  ``.hg`` and ``.svn`` in a
    tree gkeys already synced from rsync (``synced_before``) are no work tree but what a mirror left there before
    gkeys dropped uncovered entries: the next verified tree replaces them."""
    for vcs in (".git",) if synced_before else (".git", ".hg", ".svn"):
        if (location / vcs).exists():
            raise UsageError(f"{location} is a {vcs[1:]} work tree; an rsync sync would replace it: give "
                             f"{location.name} a git sync-uri, or move the work tree away and sync again")


def _owner(spawn: SpawnSettings) -> Owner:
    """Who the synced tree belongs to: the user and group rsync runs as (Portage's ``sync-user``/``usersync``)."""
    return Owner(spawn.uid if spawn.uid is not None else os.geteuid(),
                 spawn.gid if spawn.gid is not None else os.getegid())


def _live_walk(ctx: Gkeys, request: RsyncRequest, previous: Mark | None, pool: ThreadPoolExecutor) -> Future[bool]:
    """Start comparing the live tree with the inventory gkeys recorded for the marked Manifest (inode, size,
    times, change time, mode and owner of every entry), in a thread: it runs while the keyring is prepared and
    rsync's dry run compares the mirror with the live tree.  A future of False when there is nothing to
    compare with."""
    expected = inventory.recorded(ctx, mark_key(request.location))
    if previous is None or expected is None or expected.manifest != previous.digest or not request.location.is_dir():
        done: Future[bool] = Future()
        done.set_result(False)
        return done
    return pool.submit(inventory.matches, request.location, expected, LOCAL_NAMES)


def _stage(request: RsyncRequest, stack: contextlib.ExitStack, *, checksum: bool = False) -> Path:
    """A fresh staging directory beside the location, filled by rsync."""
    location = request.location
    staging = stack.enter_context(staging_directory(location.parent, staging_prefix(location)))
    request.spawn.prepare_directory(staging, like=location if location.is_dir() else None)
    os.chmod(staging, DIRECTORY_MODE)  # no set-group-id or group write inherited from the location
    _fetch(request, staging, checksum=checksum)
    return staging


def _log_shaped(log: Log, shaped: Shaped) -> None:
    if shaped.dropped:
        more = len(shaped.dropped) - 8
        names = ", ".join(shown(path) for path in shaped.dropped[:8]) + (f" and {more} more" if more > 0 else "")
        log("warn", f"gkeys: left out of the tree, as no Manifest covers them: {names}")
    if shaped.renewed:
        log("info", f"gkeys: {len(shaped.renewed)} file(s) copied to give them mode 0644 and the repository's owner")


def _sync(ctx: Gkeys, request: RsyncRequest, log: Log) -> SyncOutcome:
    location = request.location
    key = mark_key(location)
    previous = last_mark(ctx, key)
    _refuse_work_tree(location, synced_before=previous is not None)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return _sync_from(ctx, request, log, previous, _live_walk(ctx, request, previous, pool))


def _sync_from(ctx: Gkeys, request: RsyncRequest, log: Log, previous: Mark | None, walked: Future[bool]) -> SyncOutcome:
    """The sync once the live tree's walk has started (``walked``: True when it matches its inventory)."""
    location = request.location
    key = mark_key(location)
    pins, _ = repository_pins(ctx, request.category)
    keyring = purpose_keyring(ctx, request.category, pins)
    freshness = Freshness(key, request.uri, request.max_age_hours,
                          override=f"sync-gkeys-max-age (hours) for {location.name} in repos.conf",
                          clock_skew=ctx.config.policy.clock_skew)
    fresh: list[bool] = []  # the freshness verdict, taken before gemato hashes every file

    def check(timestamp: datetime, digest: str) -> None:
        fresh[:] = [freshness.check(ctx, timestamp, digest)]

    if previous is not None and location.is_dir() and mirror_matches_live(request) and walked.result():
        with contextlib.suppress(TreeMismatchError):  # the live tree is not the marked one: the full path decides
            tree = verify_tree(location, keyring, pins, where=request.uri, before_files=check,
                               known_digest=previous.digest)
            log("info", "gkeys: the mirror serves the tree verified last time: its top Manifest's signature "
                        "checked again, the files not hashed again" if not tree.files_hashed else
                        "gkeys: the mirror serves the live tree: verified in full")
            _log_verified(log, tree)
            freshness.record(ctx, tree.timestamp, tree.digest)
            journal.record(ctx, "rsync-accepted", {"location": str(location), "uri": request.uri, **tree.to_json()})
            return SyncOutcome(True, changed=False)
    with contextlib.ExitStack() as stack:
        log("info", f"gkeys: rsync from {request.uri} into a staging directory")
        staging = _stage(request, stack)
        try:
            tree = verify_tree(staging, keyring, pins, where=request.uri, before_files=check)
        except TreeMismatchError:
            # rsync's quick check (size and time) hard-links a file whose content changed without either
            # changing (a live file edited in place, two builds in one second): compare contents, verify again,
            # in a fresh directory (rsync run again into the first one would change linked live files in place)
            log("info", "gkeys: a file does not match its Manifest; fetching again, comparing every file's content")
            shutil.rmtree(staging)
            staging = _stage(request, stack, checksum=True)
            tree = verify_tree(staging, keyring, pins, where=request.uri, before_files=check)
        _log_shaped(log, shape_tree(staging, tree.covered, _owner(request.spawn)))
        newer = fresh[0]
        _log_verified(log, tree)
        if location.is_dir():
            _carry_local(location, staging)
        freshness.record(ctx, tree.timestamp, tree.digest)
        inventory.record(ctx, key, None)  # the live tree is about to change: no fast path until the new record
        swap_in(staging, location)  # staging now holds the old tree
        # the old tree goes before the inventory is taken: unlinking its names changes shared files' change times
        shutil.rmtree(staging, ignore_errors=True)
        try:
            inventory.record(ctx, key, inventory.take(location, tree.digest, LOCAL_NAMES))
        except (OSError, GkeysError) as exc:  # the tree is in place; only the next sync's shortcut is lost
            log("warn", f"gkeys: could not record the new tree's inventory ({exc}); the next sync verifies it in full")
        journal.record(ctx, "rsync-accepted", {"location": str(location), "uri": request.uri, **tree.to_json()})
    return SyncOutcome(True, changed=newer)
