"""Entry points of the Portage hooks for repositories that keep ``sync-type = git`` (or rsync).

* ``repo.postsync.d/gkeys-verify REPO_NAME SYNC_URI LOCATION`` verifies the commits a git sync just
  merged and checks that the work tree is that revision (nothing else on disk, no fetched tip left
  unmerged).  On failure it rolls the work tree back to the last verified revision (``git reset
  --hard`` plus ``git clean -ffdx``) and writes a failure marker; with no verified revision (a refused
  first clone) it moves the clone out of Portage's reach.  Portage ignores the exit status of these
  hooks, hence the marker.  Run as root on a tree another user owns (``sync-user``,
  ``FEATURES=usersync``), git runs as that owner, so a rollback leaves no root-owned files.
* ``postsync.d/gkeys-verify`` runs once at the end of ``emerge --sync``; it exits non-zero (which
  does fail emerge) while a marker of a repository in repos.conf exists, naming the repositories.

A "pending" marker is written *before* verifying and removed only once the repository verified, so a
hook that crashes or is killed half-way still fails emerge.  Any error while verifying (not only a
refused commit: a gpg timeout, a git error, missing seeds, an unexpected exception) rolls the work
tree back like a refused commit.  A marker is removed when a later sync of that repository verifies,
when the repository is no longer in repos.conf (neither its location nor its name; said once), or by
``gkeys verify-tree --clear-marker``.  Nothing is decided by the name Portage gives a repository: Portage
takes it from the tree (``profiles/repo_name``), which an unverified tree controls.
Only repositories whose configured ``sync-type`` is ``git`` are verified, whatever their directory holds: an
rsync repository with a leftover ``.git`` (``sync-rsync-vcs-ignore = true``) is skipped (its Manifests are
Portage's business), as is a location no configuration names that holds no ``.git``.  In a repository
Portage treats as volatile (:func:`portage_volatile`) the top-level ``distfiles``, ``local`` and
``packages`` are the user's, as Portage's own git module keeps them: neither counted as files that are not
the verified revision nor removed by a rollback (except files in them that a refused fetched revision
tracks: a merge that failed part-way wrote those).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from gkeys_portage.core.config import load_config
from gkeys_portage.core.errors import BadInputError, GkeysError
from gkeys_portage.core.fs import fdtree
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.portage.reposconf import RepoConfig, read_repos, read_string
from gkeys_portage.ui.output import say
from gkeys_portage.verify.git.contents import unsafe_entries
from gkeys_portage.verify.git.markers import clear_markers_at, failure_markers, location_key, marker_path, write_marker
from gkeys_portage.verify.git.objects import GitRepo
from gkeys_portage.verify.git.records import last_verified, record_verified
from gkeys_portage.verify.git.spawn import SpawnSettings
from gkeys_portage.verify.git.staging import LOCAL_DIRECTORIES
from gkeys_portage.verify.git.tree import TreeOptions, TreeVerifier, journal_tree
from gkeys_portage.verify.git.worktree import describe_changes, restore_revision, unmerged_fetch, worktree_changes


def verify_synced_repo(ctx: Gkeys, repo_name: str, location: Path, keep: Sequence[str] = ()) -> tuple[bool, str]:
    """Verify a repository right after a plain git sync; roll back and mark on failure.

    Fail-closed: the marker is written before verifying and removed only after success; whatever
    goes wrong (any exception) rolls the work tree back to the last verified revision.  Verified
    means what is on disk, not only HEAD: every commit up to HEAD verified, the work tree equal to
    HEAD (nothing modified, untracked or ignored: a merge that failed part-way leaves HEAD alone
    but writes files), and no fetched tip left outside HEAD.  ``keep``: top-level directories that are the
    user's (:data:`LOCAL_DIRECTORIES` in a volatile repository).  Returns ``(verified, one-line message)``.
    """
    marker = marker_path(ctx.layout, repo_name)
    if not (location / ".git").exists():
        marker.unlink(missing_ok=True)
        return True, f"{repo_name}: not a git repository, nothing for gkeys to verify"
    recorded = last_verified(ctx.layout, location)
    write_marker(marker, repo_name, location, "verification did not complete (interrupted or crashed)", "")
    repo: GitRepo | None = None
    spawn = SpawnSettings.owner_of(location)  # a usersync tree stays owned by its user after a rollback
    try:
        repo = GitRepo(location, spawn=spawn)
        if not repo.is_repository():
            raise BadInputError(f"{location} is not a git repository")
        options = TreeOptions.from_config(ctx)
        verifier = TreeVerifier(ctx, options)
        tip = repo.resolve("HEAD")
        base, hashes = verifier.plan(repo, tip, recorded)
        report = verifier.verify(repo, hashes, tip=tip, base=base)
        for level, text in report.describe():
            say(level, text)
        unsafe = unsafe_entries(repo, tip) if report.ok else []
        reason: str | None
        if unsafe:  # signed, but HEAD itself is not a tree gkeys checks out: never a revision to roll back to
            reason = f"the revision {tip[:12]} holds what gkeys never checks out: {'; '.join(unsafe[:2])}"
            journal_tree(ctx, report, options, location, refused=("unsafe-entry", reason))
        elif report.ok:
            record_verified(ctx, location, tip)  # HEAD's history verified: a revision to roll back to
            recorded = tip
            reason = _disk_problem(repo, tip, keep)
            if reason is None:
                marker.unlink(missing_ok=True)
                clear_markers_at(ctx.layout, location)  # also those written under another name
                journal_tree(ctx, report, options, location)  # the final verdict: HEAD and the disk verified
                return True, report.summary()
            journal_tree(ctx, report, options, location, refused=("worktree-changed", reason))
        else:
            reason = report.summary()
            journal_tree(ctx, report, options, location)
    except GkeysError as exc:
        reason = exc.message or type(exc).__name__
    except Exception as exc:  # fail closed on anything: an unverified HEAD must not stay live
        reason = f"verification failed: {type(exc).__name__}: {exc}"
    except BaseException:  # interrupted (Ctrl-C, SystemExit): roll back too, keep the pending marker
        with contextlib.suppress(Exception):
            _roll_back(repo or GitRepo(location, spawn=spawn), recorded, keep)
        raise
    rolled: str | None = None
    where = "NO verified revision to roll back to"
    try:
        rolled = _roll_back(repo or GitRepo(location, spawn=spawn), recorded, keep)
    except Exception as exc:
        where = f"rolling back to {(recorded or '')[:12]} FAILED: {getattr(exc, 'message', None) or exc}"
    if rolled:
        where = f"rolled back to {rolled[:12]}"
    else:
        where += f"; {_set_aside(location)}"
    write_marker(marker, repo_name, location, reason, rolled or "")
    return False, f"{repo_name}: NOT verified ({where}): {reason}"


def _set_aside(location: Path) -> str:
    """Take a tree with no verified revision out of Portage's reach; say where it went.

    Without a revision to roll back to, the refused tree would otherwise stay on disk for Portage to
    use (and only the marker would stand between it and the user).  The clone is moved to a hidden
    sibling (replacing an earlier one), so the next sync clones afresh; where a rename is impossible
    (a mount point), the location is emptied instead.
    """
    aside = location.with_name(f".{location.name}.gkeys-unverified")
    try:
        _remove(aside)
        os.rename(location, aside)
        return f"the unverified clone was moved to {aside}, out of Portage's reach; the next sync clones again"
    except OSError:
        pass
    try:
        for child in location.iterdir():
            _remove(child)
    except OSError as exc:
        return f"the unverified clone could NOT be removed from {location} ({exc.strerror}): remove it by hand"
    return f"the unverified clone was removed from {location}; the next sync clones again"


def _remove(path: Path) -> None:
    """Remove a file, a symlink or a whole directory by descriptor (never following a link, never crossing a
    mount, never recursing in Python: the tree is its owner's); nothing if absent."""
    parent = fdtree.open_dir(path.parent)
    try:
        fdtree.remove_tree(parent, path.name)
    finally:
        os.close(parent)


def _disk_problem(repo: GitRepo, head: str, keep: Sequence[str]) -> str | None:
    """Why the work tree is not the verified HEAD (files git wrote but HEAD lacks, an unmerged fetch)."""
    changes = worktree_changes(repo, keep)
    if changes:
        return f"the work tree holds files that are not the verified revision: {describe_changes(changes)}"
    fetched = unmerged_fetch(repo, head)
    if fetched is not None:
        return (f"the fetched revision {fetched[:12]} never became HEAD (the merge failed), so it was not "
                "verified")
    return None


def _roll_back(repo: GitRepo | None, recorded: str | None, keep: Sequence[str]) -> str | None:
    """Reset index and work tree to ``recorded`` and remove every other file but ``keep`` (checked afterwards)."""
    if repo is None or not recorded or not repo.has_commit(recorded):
        return None
    restore_revision(repo, recorded, keep)
    return recorded


def portage_volatile(repo: RepoConfig | None, location: Path) -> bool:
    """Whether Portage treats the repository as volatile (its git module then never cleans or resets it).

    Portage 3.0.83's rule (``portage/repository/config.py``): ``volatile = yes|true`` or ``no|false`` when set;
    unset, volatile unless the location is under ``/var/db/repos``, owned by root or portage, and the tree
    names itself (``profiles/repo_name``).  Anything unreadable counts as volatile, as in Portage.
    """
    value = repo.get("volatile") if repo is not None else ""
    if value:
        return value in ("true", "yes")
    try:
        owner = location.owner()
        return (not str(location).startswith("/var/db/repos") or owner not in ("root", "portage")
                or not (location / "profiles" / "repo_name").is_file())
    except (OSError, KeyError):
        return True


def _context() -> Gkeys:
    """The gkeys context of a hook: Portage hands its hooks its settings' ``EPREFIX`` in the environment."""
    ctx = Gkeys(load_config(None, prefix=os.environ.get("EPREFIX", "")))
    ctx.ensure_layout()
    return ctx


def configured_repositories(environ: Mapping[str, str] | None = None) -> dict[str, RepoConfig] | None:
    """The repository configuration emerge synced with, or None when it cannot be told.

    That is ``PORTAGE_REPOSITORIES``, which emerge puts in its hooks' environment (and which, when set,
    replaces every repos.conf file for Portage); only without it the repos.conf files under
    ``PORTAGE_CONFIGROOT``.  Reading the files while emerge used ``PORTAGE_REPOSITORIES`` would skip a
    repository emerge synced with plain git, unverified.  No configuration, an unreadable one and an
    empty one are all None ("cannot tell"): a hook that reads no repositories reads the wrong
    configuration.  Never Portage's own repository objects: Portage names a repository from its tree
    (``profiles/repo_name``, ``layout.conf`` aliases), which an unverified tree controls.
    """
    env = os.environ if environ is None else environ
    given = env.get("PORTAGE_REPOSITORIES")
    config_root = env.get("PORTAGE_CONFIGROOT")
    try:
        if given is not None:
            repos = read_string(given, Path("PORTAGE_REPOSITORIES"))
        elif config_root:
            repos = read_repos(Path(config_root))
        else:
            return None
    except GkeysError:
        return None
    return repos or None


def repository_at(location: Path, repos: Mapping[str, RepoConfig]) -> RepoConfig | None:
    """The configured repository whose ``location`` is ``location`` (symlinks resolved), if any.

    The location is what the configuration says; the name Portage hands a hook may come from the
    synced tree itself, so nothing is looked up by it.
    """
    wanted = location_key(str(location))
    for repo in repos.values():
        if repo.get("location") and location_key(repo.get("location")) == wanted:
            return repo
    return None


def configured_repository(location: Path, environ: Mapping[str, str] | None = None) -> RepoConfig | None:
    """The repository emerge's configuration has at ``location``; None when that cannot be told."""
    repos = configured_repositories(environ)
    return repository_at(location, repos) if repos else None


def synced_by_gkeys_module(location: Path, environ: Mapping[str, str] | None = None) -> bool:
    """True when emerge's configuration syncs the repository at ``location`` with ``sync-type = gkeys``:
    the sync module verified it before merging, and refused revisions stay fetched but unmerged, which
    this hook would report a second time.  Anything unclear (no configuration, an unreadable one, no
    repository at that location) is False: the hook then verifies as usual."""
    repo = configured_repository(location, environ)
    return repo is not None and repo.get("sync-type") == "gkeys"


def repo_postsync_main(argv: Sequence[str]) -> int:
    """``repo.postsync.d`` hook: ``REPO_NAME SYNC_URI LOCATION``."""
    if len(argv) < 3:
        say("error", "gkeys-verify: expected REPO_NAME SYNC_URI LOCATION")
        return 2
    repo_name, location = argv[0], Path(argv[2])
    configured = configured_repository(location)
    sync_type = configured.get("sync-type") if configured is not None else None
    if sync_type == "gkeys":
        _clear_marker_verified_by_module(repo_name, location)
        return 0  # sync-type = gkeys: the sync module verified (or refused) before merging, and said so
    if sync_type is not None and sync_type != "git":
        _clear_marker_of_non_git(repo_name, location)
        say("info", f"gkeys: {repo_name}: sync-type = {sync_type or '(none)'}, not git: nothing for gkeys to verify")
        return 0  # whatever the directory holds (a leftover .git of an rsync tree): never rolled back
    keep = LOCAL_DIRECTORIES if portage_volatile(configured, location) else ()
    try:
        ok, message = verify_synced_repo(_context(), repo_name, location, keep)
    except Exception as exc:  # e.g. no usable configuration or state: mark if at all possible
        text = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        ok, message = False, f"{repo_name}: {text}"
        try:
            ctx = _context()
            write_marker(marker_path(ctx.layout, repo_name), repo_name, location, text, "")
        except Exception as inner:
            message += (" (and the failure marker could not be written: "
                        f"{getattr(inner, 'message', None) or inner})")
    say("info" if ok else "error", f"gkeys: {message}")
    return 0 if ok else 1


def _clear_marker_verified_by_module(repo_name: str, location: Path) -> None:
    """Remove the marker an earlier ``sync-type = git`` sync left, once the sync module has verified HEAD.

    Nothing else would: the sync module writes no markers, and this hook no longer verifies the
    repository, so the marker would fail every ``emerge --sync`` although the tree verified.  Anything
    unclear (no context, HEAD not the revision gkeys last verified) leaves the marker in place.
    """
    with contextlib.suppress(Exception):
        layout = _context().layout
        marker = marker_path(layout, repo_name)
        if not marker.exists():
            return
        recorded = last_verified(layout, location)
        if recorded and GitRepo(location, spawn=SpawnSettings.owner_of(location)).resolve("HEAD") == recorded:
            marker.unlink(missing_ok=True)
            say("info", f"gkeys: {repo_name} now syncs with sync-type = gkeys and verified; removed the failure "
                        "marker an earlier git sync left")


def _clear_marker_of_non_git(repo_name: str, location: Path) -> None:
    """Remove the marker an earlier git sync of a repository that no longer syncs with git left (nothing else
    would: this hook no longer verifies it)."""
    with contextlib.suppress(Exception):
        layout = _context().layout
        marker_path(layout, repo_name).unlink(missing_ok=True)
        clear_markers_at(layout, location)


def postsync_main(argv: Sequence[str] = ()) -> int:
    """``postsync.d`` hook: fail emerge while any configured repository failed verification.

    Markers of repositories no longer in repos.conf cannot be fixed by syncing again: each is
    reported once and removed.  "No longer in repos.conf" means that neither the marker's location
    nor its name is in the configuration's text; a configured location keeps its marker whatever
    name the tree now gives itself.
    """
    try:
        layout = _context().layout
        markers = failure_markers(layout)
    except GkeysError as exc:
        say("error", f"gkeys: cannot read the verification markers: {exc.message}")
        return 1
    configured = configured_repositories() if markers else None
    locations = {location_key(repo.get("location")) for repo in (configured or {}).values()}
    failed = []
    for marker in markers:
        name = marker.get("repo", "")
        if configured is not None and name not in configured and location_key(marker.get("location", "")) \
                not in locations:
            marker_path(layout, name).unlink(missing_ok=True)
            say("warn", f"gkeys: repository {name} is no longer in repos.conf; removed its failure marker "
                        f"(it had failed: {marker.get('reason')})")
            continue
        failed.append(name)
        say("error", f"gkeys: repository {name} at {marker.get('location')} is NOT verified: "
                     f"{marker.get('reason')}")
    if failed:
        say("error", "gkeys: the repositories above failed commit verification; fix the cause and sync again "
                     f"(if a repository is gone for good: gkeys verify-tree --clear-marker {failed[0]})")
        return 1
    return 0
