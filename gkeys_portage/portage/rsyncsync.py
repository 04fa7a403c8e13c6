"""Verified rsync syncing: build the new tree beside the live one, verify it with gemato, swap it in.

Used by ``sync-type = gkeys`` when ``sync-uri`` is ``rsync://`` or ``ssh+rsync://`` (a git URI takes
:mod:`gkeys_portage.portage.treesync`).  Free of Portage imports, like treesync.

1. Under the location's sync lock, undo an interrupted fallback swap and remove what an interrupted sync left
   beside the location (``.<name>.gkeys-*``, by descriptor: a leftover is a warning, never a failed sync).
2. ``rsync --link-dest=<live tree>`` (as the sync user) into a fresh staging directory beside the location: files
   the mirror did not change become hard links to the live ones.  rsync runs with gkeys' modes
   (:data:`TREE_SHAPE_OPTIONS`) and links only files whose content, mode and time already match; it never writes
   into a directory that holds links to live files a second time (the re-fetch comparing contents gets a fresh
   directory too), so nothing it does changes a live file.
3. The staging tree is taken from the sync user before anything judges it
   (:mod:`gkeys_portage.verify.manifest.custody`): renamed into a holder only root can enter, every entry made
   root's in one descriptor walk, a file still open for writing replaced by a copy, every entry recorded.
4. gemato verifies that tree against a keyring holding exactly the pinned repository keys
   (:mod:`gkeys_portage.verify.manifest.tree`); the signed ``TIMESTAMP`` must be fresh
   (:mod:`gkeys_portage.verify.manifest.marks`: not older than the last verified one, not older than
   ``sync-gkeys-max-age`` hours).
5. The verified tree is cut down to what its Manifests cover, files 0644 and directories 0755
   (:mod:`gkeys_portage.verify.manifest.shape`), every entry compared with the takeover's record: what gemato
   does not look at (dot entries, IGNOREd paths, modes) never reaches Portage, and nothing written since the
   takeover does either.
6. The mark is raised, then the staging tree is exchanged with the live one in one ``renameat2`` call
   (:mod:`gkeys_portage.core.fs.swap`; entry by entry when ``distfiles``/``local``/``packages`` is a mount point)
   and the old tree removed inside the holder.  Killed before the exchange, the live tree is untouched; after
   it, the live tree is the new verified one.  A mark raised just before a kill only makes the next sync
   demand a tree at least that new, which the mirror has.  Last, the tree is handed to the sync user by
   descriptor (:func:`gkeys_portage.verify.manifest.shape.hand_over`) and what was handed over recorded as the
   live tree's inventory (:mod:`gkeys_portage.verify.manifest.inventory`).

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
module excludes them); if the live tree holds them, they are carried into the new one as they are (hard links, the
same symbolic link), so the swap never drops a user's files; a mount point among them stays where it is.
Nothing here talks to a keyserver: keys are refreshed off the sync path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import stat
import subprocess
import tempfile
import urllib.parse
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from gkeys_portage.core import children, journal
from gkeys_portage.core.errors import GkeysError, NetworkError, TreeMismatchError, UsageError
from gkeys_portage.core.fs import fdtree
from gkeys_portage.core.fs.swap import exchange, recover, swap_in
from gkeys_portage.core.scratch import owned_prefix
from gkeys_portage.core.state import fsync_directory
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.portage.treesync import (
    Log,
    SyncOutcome,
    fetch_cap,
    location_lock,
    staging_prefix,
)
from gkeys_portage.verify.git.spawn import SpawnSettings
from gkeys_portage.verify.manifest import custody, gematohome, inventory
from gkeys_portage.verify.manifest.marks import DEFAULT_MAX_AGE_HOURS, Freshness, Mark, last_mark
from gkeys_portage.verify.manifest.purpose import purpose_keyring, repository_pins
from gkeys_portage.verify.manifest.shape import DIRECTORY_MODE, Owner, Shaped, hand_over, shape, shown
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
    # the sync user's own tree only: fs.protected_hardlinks refuses linking another user's files (rsync copies),
    # the takeover refuses them in a root sync; after a switch of the sync user the first sync fetches every file
    linked = request.spawn.owns(request.location) and any(request.location.iterdir())
    command = rsync_command(request, staging, request.location if linked else None, checksum=checksum)
    result = subprocess.run(children.tied(command), capture_output=True, stdin=subprocess.DEVNULL,
                            preexec_fn=children.preexec_for(),
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
        result = subprocess.run(children.tied(command), capture_output=True, stdin=subprocess.DEVNULL,
                                preexec_fn=children.preexec_for(), check=False, **request.spawn.run_kwargs())
    except OSError:
        return False
    return result.returncode == 0 and not result.stdout.strip()


def _carry_local(location: Path, live: int, tree: int) -> list[str]:
    """Give the live tree's never-synced entries (``distfiles``, ``local``, ``packages``) a name in the new tree,
    as they are: a directory is rebuilt with hard links (owner and mode kept), a symbolic link stays the same
    link, anything else is hard-linked.  All through descriptors (:func:`fdtree.link_tree`: the sync user owns
    these).  Returns the names that are mount points (or hold one): they cannot move into another directory,
    so the swap leaves them where they are (:func:`_swap_entries`)."""
    mounted = []
    for name in LOCAL_DIRECTORIES:
        try:
            st = fdtree.lstat_at(live, name)
        except FileNotFoundError:
            continue
        fdtree.remove_tree(tree, name)  # the mirror's is dropped by shaping already; never kept over the user's
        if stat.S_ISDIR(st.st_mode) and _is_mount_point(location, name):
            mounted.append(name)
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(name, dir_fd=live), name, dir_fd=tree)
            os.chown(name, st.st_uid, st.st_gid, dir_fd=tree, follow_symlinks=False)
        else:
            try:
                fdtree.link_tree(live, name, tree)
            except fdtree.MountInside:
                mounted.append(name)
    return mounted


def _is_mount_point(location: Path, name: str) -> bool:
    """``location/name`` is a mount point (of another file system, or a bind mount on the same one)."""
    target = os.fsencode(os.path.realpath(location / name))
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", "rb") as table:
        for line in table:
            fields = line.split(b" ")
            if len(fields) > 4 and _unescape(fields[4]) == target:
                return True
    return False


def _unescape(field: bytes) -> bytes:
    """A mount point as /proc/self/mountinfo writes it (space, tab, newline, backslash as octal escapes)."""
    for code in (b"\\040", b"\\011", b"\\012", b"\\134"):
        field = field.replace(code, bytes([int(code[1:], 8)]))
    return field


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
            if recover(location, lambda text: log("warn", text)):
                log("info", f"gkeys: {location} put back as it was before an interrupted sync")
            _sweep(location, log, frozenset({0, _owner(request.spawn).uid}))
            return _sync(ctx, request, log)
    except GkeysError as exc:
        reason = f"gkeys: {location} NOT updated (the tree is as it was): {exc.message}"
        journal.record(ctx, "rsync-refused", {"location": str(location), "uri": request.uri, "code": exc.reason})
    except OSError as exc:
        reason = f"gkeys: {location} NOT updated (the tree is as it was): {exc}"
    log("error", reason)
    return SyncOutcome(False, reason=reason)


def _sweep(location: Path, log: Log, owners: frozenset[int]) -> None:
    """Remove what an interrupted sync left beside the location (holders and staging trees, by descriptor) and
    its gemato homes: harmless when it fails (this sync stages in directories of its own), so a leftover is a
    warning naming the command that removes it, never the reason a sync fails.  A leftover of neither root nor
    the sync user (``owners``: the sync user changed since) is removed too, with a warning naming its owner."""
    removed, warnings = custody.remove_stale(location.parent, staging_prefix(location), owners)
    if removed:
        log("info", f"gkeys: removed {removed} staging director{'y' if removed == 1 else 'ies'} "
                    "left by an interrupted sync")
    for warning in warnings:
        log("warn", f"gkeys: {warning}")
    try:
        gematohome.remove_stale()  # a killed sync's gemato homes and agents, also on the no-change path
    except OSError as exc:
        log("warn", f"gkeys: could not remove a gemato home an interrupted sync left: {exc}")


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
    if (previous is None or expected is None or expected.manifest != previous.digest
            or not request.spawn.owns(request.location)):  # the previous sync user's: the full path hands it over
        done: Future[bool] = Future()
        done.set_result(False)
        return done
    return pool.submit(inventory.matches, request.location, expected, LOCAL_NAMES)


class _Held:
    """This sync's holder beside the location (root's, 0700: :mod:`gkeys_portage.verify.manifest.custody`) and the
    tree in it; :meth:`close` gives back what the takeover changed of live files and removes it all."""

    def __init__(self, request: RsyncRequest, log: Log) -> None:
        self.request, self.log = request, log
        self.location = request.location
        self.parent = fdtree.open_dir(self.location.parent)
        try:
            self.path, self.fd = custody.open_holder(self.location.parent, staging_prefix(self.location))
        except BaseException:
            os.close(self.parent)
            raise
        self.taken: custody.Taken | None = None
        self.swapped = False

    @property
    def tree(self) -> Path:
        """Where the tree in custody is (in the holder: no other user's path reaches it)."""
        return self.path / custody.TREE

    def _warn(self, warning: str | None) -> None:
        if warning is not None:
            self.log("warn", f"gkeys: {warning}")

    def stage(self, *, checksum: bool = False) -> custody.Taken:
        """rsync (as the sync user) into a fresh directory of that user's beside the location, then take the tree
        over (:func:`custody.take_over`): from here on no other user can change it."""
        self.discard()
        location = self.location
        staging = Path(tempfile.mkdtemp(prefix=owned_prefix(staging_prefix(location)), dir=location.parent))
        try:
            spawn = self.request.spawn
            spawn.prepare_directory(staging, like=location if spawn.owns(location) else None)
            os.chmod(staging, DIRECTORY_MODE)  # no set-group-id or group write inherited from the location
            _fetch(self.request, staging, checksum=checksum)
            self.taken = custody.Taken()
            custody.take_over(self.fd, self.parent, staging.name, frozenset({_owner(self.request.spawn).uid, 0}),
                              self.taken)
        finally:
            if os.path.lexists(staging):
                self._warn(custody.remove(self.parent, staging.name, staging))
        return self.taken

    def discard(self) -> None:
        """Remove the tree in the holder: before the swap the staging tree (its files shared with live ones given
        their owner back first), after it the old tree."""
        if self.taken is not None and not self.swapped:
            custody.give_back(self.fd, self.taken)
        self.taken = None
        self._warn(custody.remove(self.fd, custody.TREE, self.tree))

    def close(self) -> None:
        """Remove the holder and all it holds; what stays is a warning with the command that removes it."""
        try:
            self.discard()
        finally:
            os.close(self.fd)
            self._warn(custody.remove(self.parent, self.path.name, self.path))
            os.close(self.parent)

    def swap(self) -> list[str]:
        """Put the verified tree in place of the live one, carrying the user's own entries (:func:`_carry_local`).
        Returns the names that stayed in place because they are mount points (then every other top-level entry
        was exchanged one by one instead of the whole directory)."""
        mounted: list[str] = []
        tree = fdtree.open_dir(custody.TREE, self.fd)
        try:
            if self.location.is_dir() and not self.location.is_symlink():
                live = fdtree.open_dir(self.location)
                try:
                    mounted = _carry_local(self.location, live, tree)
                    if mounted:
                        for name in LOCAL_DIRECTORIES:
                            fdtree.remove_tree(tree, name)
                        self.swapped = True
                        _swap_entries(tree, live)
                        fsync_directory(self.location)
                        return mounted
                finally:
                    os.close(live)
        finally:
            os.close(tree)
        self.swapped = True
        swap_in(self.tree, self.location)  # the holder now holds the old tree
        return mounted


def _swap_entries(new: int, live: int) -> None:
    """Exchange every top-level entry of ``new`` with the live one of that name (or move it in), the top
    Manifest last, then move what the live tree has and the new one not into ``new``; the never-synced names
    stay where they are.  Each entry is swapped atomically, the tree as a whole is not: what a mount point at
    ``distfiles`` costs (a kill in between leaves a tree of both, which the next sync replaces)."""
    incoming = [name for name in fdtree.names(new) if os.fsdecode(name) not in LOCAL_NAMES]
    present = set(fdtree.names(live))
    for name in sorted(incoming, key=lambda name: name == b"Manifest"):
        if name in present:
            exchange(name, name, first_dir=new, second_dir=live)
        else:
            os.rename(name, name, src_dir_fd=new, dst_dir_fd=live)
    for name in present - set(incoming):
        if os.fsdecode(name) not in LOCAL_NAMES:
            os.rename(name, name, src_dir_fd=live, dst_dir_fd=new)


def _hand_over(location: Path, shaped: Shaped, owner: Owner, whole: bool) -> tuple[os.stat_result,
                                                                                   inventory.Entries | None]:
    """Give the swapped-in tree its owner and modes (:func:`hand_over`); when the whole directory was swapped in
    (``whole``) the location gets its owner once its own files are handed over (so a kill after that leaves the
    location the sync user's, as Portage's ``usersync`` needs) and mode 0755 last.  Returns the location's
    ``lstat`` and what was handed over (None when the tree changed meanwhile)."""
    top = fdtree.open_dir(location)
    entries = inventory.Entries()

    def own() -> None:
        st = os.fstat(top)
        if (st.st_uid, st.st_gid) != (owner.uid, owner.gid):
            os.fchown(top, owner.uid, owner.gid)

    try:
        try:
            sound = hand_over(top, shaped.kept, owner, skip=frozenset(os.fsencode(n) for n in LOCAL_DIRECTORIES),
                              then=own if whole else None, record=entries.add)
        finally:
            if whole:
                own()
                os.fchmod(top, DIRECTORY_MODE)
        return os.fstat(top), entries if sound else None
    finally:
        os.close(top)


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
                               known_digest=previous.digest, only_known=True)
            log("info", "gkeys: the mirror serves the tree verified last time: its top Manifest's signature "
                        "checked again, the files not hashed again")
            _log_verified(log, tree)
            freshness.record(ctx, tree.timestamp, tree.digest)
            journal.record(ctx, "rsync-accepted", {"location": str(location), "uri": request.uri, **tree.to_json()})
            return SyncOutcome(True, changed=False)
    log("info", f"gkeys: rsync from {request.uri} into a staging directory")
    held = _Held(request, log)
    try:
        taken = held.stage()
        try:
            tree = verify_tree(held.tree, keyring, pins, where=request.uri, before_files=check)
        except TreeMismatchError:
            # rsync's quick check (size and time) hard-links a file whose content changed without either
            # changing (a live file edited in place, two builds in one second): compare contents, verify again,
            # in a fresh directory (rsync run again into the first one would change linked live files in place)
            log("info", "gkeys: a file does not match its Manifest; fetching again, comparing every file's content")
            taken = held.stage(checksum=True)
            tree = verify_tree(held.tree, keyring, pins, where=request.uri, before_files=check)
        shaped = shape(held.tree, tree.covered, taken.fingerprints)
        _log_shaped(log, shaped)
        newer = fresh[0]
        _log_verified(log, tree)
        freshness.record(ctx, tree.timestamp, tree.digest)
        inventory.record(ctx, key, None)  # the live tree is about to change: no fast path until the new record
        mounted = held.swap()
        if mounted:
            log("info", f"gkeys: {', '.join(mounted)} left in place (a mount point); the tree's other entries "
                        "were exchanged one by one")
        held.discard()  # the old tree goes first: unlinking its names changes shared files' change times
        try:
            top, entries = _hand_over(location, shaped, _owner(request.spawn), whole=not mounted)
            if entries is None:
                log("warn", "gkeys: the tree changed while gkeys gave it to its owner; the next sync verifies it in "
                            "full")
            else:
                inventory.record(ctx, key, inventory.of_entries(top, entries, tree.digest))
        except (OSError, GkeysError) as exc:  # the tree is in place; only the next sync's shortcut is lost
            log("warn", f"gkeys: could not record the new tree's inventory ({exc}); the next sync verifies it in full")
        journal.record(ctx, "rsync-accepted", {"location": str(location), "uri": request.uri, **tree.to_json()})
    finally:
        held.close()
    return SyncOutcome(True, changed=newer)
