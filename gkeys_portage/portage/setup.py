"""``gkeys setup-portage``: wire Portage to gkeys with new files only, and take them away again.

What it writes under ``EROOT`` (nothing else, and never a file that already exists with other content):

* ``etc/portage/repo.postsync.d/gkeys-verify`` and ``etc/portage/postsync.d/gkeys-verify`` (and with
  ``overlays`` ``postsync.d/gkeys-overlays``): the hooks, with their ``#!`` line rewritten to the
  interpreter gkeys runs under (``sys.executable``), so they import this installation of gkeys_portage;
* ``etc/portage/repos.conf/zz-gkeys.conf`` (read last): the named repositories switched to ``sync-type = gkeys``
  (::gentoo with the settings of the Gentoo mirror: developer commits, mirror key on top; a ::gentoo on an
  rsync:// URI keeps rsync, verified by the gkeys module);
* when ``EROOT/etc/systemd/system`` exists and ``gkeys-refresh.timer`` is installed under EROOT: the symlink
  ``systemctl enable gkeys-refresh.timer`` would make in ``timers.target.wants`` (the daily key refresh,
  off the sync path); otherwise a note with the OpenRC/cron way;
* for a repository on ``sync-type = webrsync``: its section in ``zz-gkeys.conf`` keeps webrsync but sets
  ``sync-webrsync-verify-signature = yes`` and ``sync-openpgp-key-path`` to ``etc/portage/gkeys/<repo>.asc``,
  a keyring of exactly the repository-purpose keys gkeys pins (never a developer or release key);
* with ``fetch_wrapper``: a make.conf fragment with ``FETCH_WRAPPER`` (``make.conf/gkeys-fetch.conf``
  when make.conf is a directory; otherwise ``etc/portage/gkeys-fetch.conf`` to ``source`` from it).

What it created (files with their SHA-256, directories) is recorded in gkeys' own state
(``state/setup-portage/<EROOT digest>.json``), never in ``EROOT``, which another user may be able to write;
:func:`undo` removes exactly those files (only while unchanged) and directories (only while empty), so
setup followed by undo leaves ``EROOT`` as it was.  Running setup twice changes nothing the second time,
except that a file setup wrote and nobody changed since is brought up to date (the webrsync keyring after
a key refresh).
An existing file with other content stops the whole install: nothing is written.  Every path below
``EROOT`` is reached without following a symlink, through directories owned by the running user or root
and writable by nobody else (:mod:`gkeys_portage.portage.confined`).
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage import installfiles
from gkeys_portage.core.config import eprefix
from gkeys_portage.core.errors import BadInputError
from gkeys_portage.core.faultpoint import checkpoint
from gkeys_portage.core.types import parse_category
from gkeys_portage.portage.confined import ConfinedRoot
from gkeys_portage.portage.reposconf import RepoConfig, config_files, read_after, read_files, read_repos
from gkeys_portage.portage.rsyncsync import is_rsync_uri
from gkeys_portage.portage.setuprecord import (
    ETC,
    LINK,
    RECORDS,
    REFRESH_TIMER,
    SYSTEMD_ETC,
    TIMER_LINK,
    Pending,
    SetupRecord,
    read_record,
    settle,
    sha256,
    temp_name,
    write_record,
)

#: where setup-portage before issue 26 kept its record (inside EROOT); never trusted now
LEGACY_MANIFEST = ETC / ".gkeys-setup-portage.json"
# "zz-": Portage reads repos.conf/ in sorted order and the last value wins; a file sorting after this one
# that sets the same keys would switch the repository back (setup refuses that case).
REPOS_FRAGMENT = ETC / "repos.conf" / "zz-gkeys.conf"
TREE_HOOKS = ("repo.postsync.d/gkeys-verify", "postsync.d/gkeys-verify")
OVERLAYS_HOOK = "postsync.d/gkeys-overlays"
GENTOO_MIRROR = "https://github.com/gentoo-mirror/gentoo.git"
# ::gentoo as docs/portage.md recommends: every commit by a developer key or the mirror key (the sync
# repository's merge and timestamp commits lie between two syncs, not only on top).  The top-category
# line is implied by the category list (redundant, harmless).
GENTOO_SETTINGS = (("sync-gkeys-category", "gentoo-devs gentoo-infra"), ("sync-gkeys-top-category", "gentoo-infra"),
                   ("sync-gkeys-policy", "top"))
GIT_TYPES = ("git", "gkeys")
RSYNC_TYPES = ("rsync", "gkeys")  # ::gentoo on rsync (or already on gkeys with an rsync URI) stays on rsync
REPO_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_+-]*")  # Portage's repository names
SAFE_PATH = re.compile(r"[A-Za-z0-9_./+-]+")  # a path Portage can take as one word of FETCH_WRAPPER
WEBRSYNC_KEYRINGS = ETC / "gkeys"  # <repo>.asc: the repository keys emerge-webrsync may accept
#: makes the webrsync keyring of a category (its repository keys, armored); raises NotVerifiedError without one
KeyringSource = Callable[[str], bytes]
#: where the unit may be installed below EROOT, in systemd's order (the ebuild's unit dir: usr/lib/systemd/system)
UNIT_DIRS = (SYSTEMD_ETC, Path("usr/lib/systemd/system"), Path("lib/systemd/system"))
CRON_NOTE = ("without systemd, keys are refreshed off the sync path by the cron.daily script gkeys-refresh the "
             "package installs (OpenRC: rc-update add cronie default), or by a crontab line such as "
             "'17 4 * * * gkeys -q refresh-key'")
FETCH_WRAPPER = 'FETCH_WRAPPER="{gkeys_fetch} --uri \\"\\${{URI}}\\" --file \\"\\${{DISTDIR}}/\\${{FILE}}\\" --"\n'


@dataclass(frozen=True)
class PlannedFile:
    """A file setup-portage wants under EROOT: relative path, exact content, mode and why.

    With ``link``, a symlink to that target instead (``content`` is then the target, for the diff).
    """

    path: Path
    content: bytes
    mode: int
    why: str
    link: str | None = None
    category: str | None = None  # a webrsync keyring: the gkeys category whose repository keys it holds

    @property
    def recorded(self) -> str:
        """What the record keeps of it: the SHA-256 of a file, ``symlink:TARGET`` of a link."""
        return LINK + self.link if self.link is not None else sha256(self.content)


@dataclass
class SetupResult:
    """What setup (or undo) did or, with ``dry_run``, would do; ``conflicts`` were left alone."""

    eroot: Path
    dry_run: bool
    created: list[Path] = field(default_factory=list)  # every file written (new ones and those brought up to date)
    updated: list[Path] = field(default_factory=list)  # of those, files setup wrote before (a re-run updates them)
    unchanged: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    conflicts: list[tuple[Path, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    diff: str = ""

    @property
    def ok(self) -> bool:
        """True when nothing was left alone."""
        return not self.conflicts


def hook_content(hook: str, interpreter: str | None = None) -> bytes:
    """A hook launcher with its ``#!`` line pointing at ``interpreter`` (default: ``sys.executable``)."""
    source = installfiles.hook_file(hook)
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise BadInputError(f"hook {source} is missing ({exc.strerror}): reinstall gkeys-portage") from exc
    first, sep, rest = data.partition(b"\n")
    if not first.startswith(b"#!") or not sep:
        raise BadInputError(f"hook {source} has no #! line: reinstall gkeys-portage")
    python = interpreter or sys.executable
    if not python or any(c in python for c in " \t\n"):
        raise BadInputError(f"cannot write a #! line for the interpreter {python!r}")
    return f"#!{python}".encode() + b"\n" + rest


HOOKS_ON_CHANGE = "sync-hooks-only-on-change"


def hooks_only_on_change(repo: RepoConfig) -> bool:
    """True when Portage runs this repository's ``repo.postsync.d`` hooks only after a sync it counts as a
    change (``sync-hooks-only-on-change``, read as Portage reads it): a merge that fails half-way leaves
    HEAD alone, so the gkeys hook never runs, nothing is rolled back and no marker is written."""
    return repo.get(HOOKS_ON_CHANGE, "false").lower() in ("true", "yes")


def _clone_notes(eroot: Path, repos: Sequence[str]) -> list[str]:
    """What the user must do before the first gkeys sync (never done for them: it moves their data)."""
    known = read_repos(eroot, skip=eroot / REPOS_FRAGMENT)
    notes = []
    for name in repos:
        repo = known.get(name)
        if repo is not None and name == "gentoo" and repo.get("sync-type") in RSYNC_TYPES \
                and is_rsync_uri(repo.get("sync-uri")):
            notes.append(f"::gentoo keeps rsync ({repo.get('sync-uri')}), now verified by gkeys: the signed Manifest "
                         "tree, the pinned repository key, rollback protection; for the git mirror instead, set "
                         f"sync-type = git and sync-uri = {GENTOO_MIRROR} for [gentoo] and run setup-portage again")
            continue
        blocked = repo.blocks_first_clone() if repo is not None else None
        if blocked is not None:
            notes.append(f"do this before the next 'emerge --sync': mv {blocked} {blocked}.old (the first gkeys sync "
                         f"of {name} clones afresh and refuses to clone over a tree that is not a git repository)")
    for name, repo in sorted(known.items()):
        if name not in repos and repo.get("sync-type") == "git" and hooks_only_on_change(repo):
            notes.append(f"[{name}] sets {HOOKS_ON_CHANGE} = {repo.get(HOOKS_ON_CHANGE)} "
                         f"({repo.origin.get(HOOKS_ON_CHANGE)}): Portage then skips the gkeys hooks when a merge fails "
                         f"half-way; set it to false, or run setup-portage again with --repo {name}")
    return notes


def webrsync_repos(eroot: Path, repos: Sequence[str]) -> list[str]:
    """The named repositories that sync with ``sync-type = webrsync`` (repos.conf as Portage reads it)."""
    known = read_repos(eroot, skip=eroot / REPOS_FRAGMENT)
    return [name for name in dict.fromkeys(repos) if known.get(name) and known[name].get("sync-type") == "webrsync"]


def webrsync_keyring_path(name: str) -> Path:
    """Where setup writes the keyring ``sync-openpgp-key-path`` of webrsync repository ``name`` names (below EROOT)."""
    return WEBRSYNC_KEYRINGS / f"{name}.asc"


def webrsync_key_setting(name: str) -> str:
    """The value of ``sync-openpgp-key-path``: the keyring's path as Portage sees it, ``${EPREFIX}/etc/portage/...``
    (Portage takes the value as it is; a Prefix install's keyring lies below its EPREFIX)."""
    return f"{eprefix()}/{webrsync_keyring_path(name).as_posix()}"


def repos_fragment(eroot: Path, repos: Sequence[str], *, category: str | None = None) -> bytes:
    """``repos.conf/zz-gkeys.conf``: each named repository switched to ``sync-type = gkeys``.

    Only keys that change are written; ``location`` and the rest stay where the user set them.  A
    repository that is not configured (other than ::gentoo, which Portage always knows) or that does
    not sync with git cannot be switched: that is an error, and nothing is written.  Nor can a
    repository other than ::gentoo without a category (``category``, or its own ``sync-gkeys-category``):
    its committers are not Gentoo developers, and the default category would refuse every sync.
    """
    if category is not None:
        category = parse_category(category)
    fragment = eroot / REPOS_FRAGMENT
    known = read_repos(eroot, skip=fragment)
    later = read_files(read_after(config_files(eroot, skip=fragment), fragment.parent, fragment.name), defaults=False)
    lines = ["# Written by 'gkeys setup-portage' (remove with 'gkeys setup-portage --undo').",
             "# Every sync of these repositories is verified by gkeys before the tree moves.", ""]
    for name in repos:
        if not REPO_NAME.fullmatch(name):
            raise BadInputError(f"invalid repository name {name!r} (letters, digits, _, + and -)")
        repo = known.get(name)
        sync_type = repo.get("sync-type") if repo else ""
        uri = repo.get("sync-uri") if repo else ""
        settings: list[tuple[str, str]] = [("sync-type", "gkeys")]
        if repo is not None and sync_type == "webrsync":
            # emerge-webrsync verifies the snapshot's .gpgsig itself (gemato, -K keyring); gkeys gives it a
            # keyring of exactly the repository keys.  (It ignores sync-openpgp-key-refresh: gemato refreshes.)
            settings = [("sync-webrsync-verify-signature", "yes"),
                        ("sync-openpgp-key-path", webrsync_key_setting(name))]
        elif repo is not None and hooks_only_on_change(repo):
            # Portage would skip the hooks of a sync that "changed nothing" (a merge that failed half-way)
            settings.append((HOOKS_ON_CHANGE, "false"))
        if sync_type == "webrsync":
            pass  # stays webrsync, verified by emerge-webrsync against gkeys' keyring (and gkeys verify-snapshot)
        elif name == "gentoo" and sync_type in RSYNC_TYPES and is_rsync_uri(uri):
            pass  # rsync stays rsync: the gkeys module verifies the Manifest tree (category gentoo, its default)
        elif name == "gentoo":
            if sync_type not in GIT_TYPES or not uri:
                settings.append(("sync-uri", GENTOO_MIRROR))
            settings += [item for item in GENTOO_SETTINGS if not (repo and repo.get(item[0]))]
        elif repo is None:
            raise BadInputError(f"repository {name!r} is not configured in {eroot / 'etc/portage/repos.conf'}: "
                                "add it (location, sync-type = git, sync-uri) and run setup-portage again")
        elif sync_type not in GIT_TYPES or not uri:
            raise BadInputError(f"repository {name!r} syncs with {sync_type or 'nothing'!r}: gkeys verifies git "
                                f"repositories; set sync-type = git and a git sync-uri in "
                                f"{repo.origin.get('sync-type') or eroot / 'etc/portage/repos.conf'} first")
        if name != "gentoo" and sync_type != "webrsync":
            if category is not None:
                settings.append(("sync-gkeys-category", category))
            elif not (repo and repo.get("sync-gkeys-category")):
                raise BadInputError(
                    f"repository {name!r} needs a category: its committers are not Gentoo developers, so the "
                    "default category (gentoo-devs) would refuse every sync; give --category CAT, the gkeys "
                    f"category whose seeds pin {name}'s committers (gkeys add-seed -C CAT ... adds them), or "
                    f"set sync-gkeys-category for [{name}] in its repos.conf file")
        overriding = [key for key, _ in settings if later.get(name) and key in later[name].options]
        if overriding:
            path = later[name].origin[overriding[0]]
            raise BadInputError(f"{path} sets {', '.join(overriding)} of [{name}] and is read after "
                                f"{fragment.name}, so it would win: move those lines out of it, then run again")
        lines.append(f"[{name}]")
        lines += [f"{key} = {value}" for key, value in settings]
        lines.append("")
    return "\n".join(lines).encode()


def gkeys_fetch_path() -> str:
    """The installed ``gkeys-fetch`` beside the running interpreter (or on PATH)."""
    beside = Path(sys.executable).parent / "gkeys-fetch"
    found = str(beside) if beside.is_file() else shutil.which("gkeys-fetch")
    if not found:
        raise BadInputError("gkeys-fetch is not installed beside this Python or on PATH: reinstall gkeys-portage")
    if not SAFE_PATH.fullmatch(found):
        raise BadInputError(f"cannot write FETCH_WRAPPER for {found!r}: Portage splits it into words; "
                            "install gkeys-portage under a path without spaces or quotes")
    return found


def timer_plan(root: ConfinedRoot) -> tuple[list[PlannedFile], list[str]]:
    """The ``timers.target.wants`` link enabling gkeys-refresh.timer, or the note saying how to refresh instead."""
    if root.kind(SYSTEMD_ETC) != "directory":
        return [], [CRON_NOTE]
    for unit_dir in UNIT_DIRS:
        if root.kind(unit_dir / REFRESH_TIMER) == "file":
            target = "/" + (unit_dir / REFRESH_TIMER).as_posix()
            return [PlannedFile(TIMER_LINK, target.encode() + b"\n", 0o777, "timer", link=target)], []
    return [], [f"{REFRESH_TIMER} is not installed under {root.eroot} ({', '.join(map(str, UNIT_DIRS))}): install "
                "gkeys-portage's systemd units, then run setup-portage again to enable it"]


def plan(eroot: Path, repos: Sequence[str], *, fetch_wrapper: bool = False, overlays: bool = False,
         category: str | None = None, root: ConfinedRoot | None = None,
         keyrings: KeyringSource | None = None) -> tuple[list[PlannedFile], list[str]]:
    """The files setup-portage wants, and notes for the user (steps it never takes itself).

    ``keyrings`` makes the keyring of each webrsync repository (required when one is named), from the repository
    keys of ``category`` (default ``gentoo``).

    ``root`` (default: ``eroot`` opened here) tells files from directories without following symlinks.
    """
    with contextlib.ExitStack() as stack:
        confined = root or stack.enter_context(ConfinedRoot(eroot))
        repos_conf = confined.kind(ETC / "repos.conf")
        make_conf = confined.kind(ETC / "make.conf")
    if repos_conf == "file":
        raise BadInputError(f"{eroot / ETC / 'repos.conf'} is a file: make it a directory "
                            "(mv repos.conf gentoo.conf; mkdir repos.conf; mv gentoo.conf repos.conf/) and run again")
    repos = list(dict.fromkeys(repos))  # --repo x --repo x: one section
    hooks = list(TREE_HOOKS) + ([OVERLAYS_HOOK] if overlays else [])
    files = [PlannedFile(ETC / hook, hook_content(hook), 0o755, "hook") for hook in hooks]
    files.append(PlannedFile(REPOS_FRAGMENT, repos_fragment(eroot, repos, category=category), 0o644, "repos.conf"))
    notes = _clone_notes(eroot, repos)
    for name in webrsync_repos(eroot, repos):
        if keyrings is None:
            raise BadInputError(f"repository {name!r} syncs with webrsync: its keyring cannot be made here")
        keys_of = category or "gentoo"
        files.append(PlannedFile(webrsync_keyring_path(name), keyrings(keys_of), 0o644, "webrsync keyring",
                                 category=keys_of))
        notes.append(f"emerge-webrsync now accepts only the repository keys gkeys pins for {name}; it does not know "
                     f"gkeys' high-water mark: 'gkeys verify-snapshot' also refuses an older snapshot")
    with contextlib.ExitStack() as stack:
        timer, timer_notes = timer_plan(root or stack.enter_context(ConfinedRoot(eroot)))
    files += timer
    notes += timer_notes
    if fetch_wrapper:
        line = FETCH_WRAPPER.format(gkeys_fetch=gkeys_fetch_path()).encode()
        if make_conf == "directory":
            files.append(PlannedFile(ETC / "make.conf" / "gkeys-fetch.conf", line, 0o644, "make.conf"))
        else:
            # the make.conf line that sources it: makeconfsteps.fetch_step, printed by the CLI and doctor
            files.append(PlannedFile(ETC / "gkeys-fetch.conf", line, 0o644, "make.conf fragment"))
    return files, notes


def _diff(path: Path, old: bytes | None, new: bytes) -> str:
    old_lines = old.decode(errors="replace").splitlines(keepends=True) if old is not None else []
    return "".join(difflib.unified_diff(old_lines, new.decode(errors="replace").splitlines(keepends=True),
                                        fromfile="/dev/null" if old is None else f"a/{path}", tofile=f"b/{path}"))


def record_path(state_dir: Path, eroot: Path) -> Path:
    """Where gkeys keeps the record of what setup-portage created under ``eroot`` (in its own state)."""
    digest = hashlib.sha256(os.fsencode(os.path.realpath(eroot))).hexdigest()[:24]
    return state_dir / RECORDS / f"{digest}.json"


def setup(eroot: Path, repos: Sequence[str], *, record: Path, fetch_wrapper: bool = False, overlays: bool = False,
          category: str | None = None, dry_run: bool = False, keyrings: KeyringSource | None = None) -> SetupResult:
    """Create the planned files that are missing, recording them in ``record`` (gkeys' own state).

    An existing file with other content (or a symlink, or a directory) in the place of a planned file
    stops the whole install: it is reported and nothing is written.
    """
    with ConfinedRoot(eroot) as root:
        files, notes = plan(eroot, repos, fetch_wrapper=fetch_wrapper, overlays=overlays, category=category,
                            root=root, keyrings=keyrings)
        result = SetupResult(eroot, dry_run, notes=notes)
        manifest = read_record(record, eroot)
        settled = settle(root, manifest, apply=not dry_run)  # what a killed run started (see setuprecord)
        recorded = manifest.files
        diffs = []
        upgraded = "settled" if settled else ""  # an older record gained a keyring's category, or was settled
        todo: list[PlannedFile] = []
        for item in files:
            kind = root.kind(item.path)
            if item.link is not None:
                if kind == "missing":
                    todo.append(item)
                    diffs.append(_diff(item.path, None, item.content))
                elif kind == "symlink" and root.readlink(item.path) == item.link:
                    result.unchanged.append(item.path)
                else:
                    result.conflicts.append((item.path, f"exists and is not the link to {item.link} (a {kind})"))
                continue
            current = root.read(item.path) if kind == "file" else None
            if kind not in ("file", "missing"):
                result.conflicts.append((item.path, f"exists and is not a regular file (a {kind})"))
            elif current == item.content:
                result.unchanged.append(item.path)
                name = item.path.as_posix()  # a keyring of a record older than the categories gains its category
                if item.category is not None and recorded.get(name) == item.recorded and name not in manifest.keyrings:
                    manifest.keyrings[name] = upgraded = item.category
            elif current is not None and recorded.get(item.path.as_posix()) == sha256(current):
                todo.append(item)  # written by setup and unchanged since: bring it up to date
                result.updated.append(item.path)
                diffs.append(_diff(item.path, current, item.content))
            elif current is not None:
                result.conflicts.append((item.path, "exists with other content"))
                diffs.append(_diff(item.path, current, item.content))
            else:
                todo.append(item)
                diffs.append(_diff(item.path, None, item.content))
        result.diff = "".join(diffs)
        if result.conflicts:
            result.notes.append("nothing was written: setup-portage installs all of its files or none")
            return result
        result.created = [item.path for item in todo]
        if dry_run:
            return result
        if not todo:
            if upgraded:
                write_record(record, eroot, manifest)
            return result
        _write_planned(root, todo, record, eroot, manifest)
    return result


def _write_planned(root: ConfinedRoot, todo: Sequence[PlannedFile], record: Path, eroot: Path,
                   manifest: SetupRecord) -> None:
    """Write ``todo``, intent first: the record names every directory, file and temporary name before any is
    made, so that a rerun or ``--undo`` after a kill finishes or reverses exactly this (setuprecord.settle)."""
    for item in todo:
        manifest.dirs += [d.as_posix() for d in root.missing(item.path.parent) if d.as_posix() not in manifest.dirs]
        manifest.pending[item.path.as_posix()] = Pending(item.recorded, "" if item.link else temp_name(item.path))
        if item.category is not None:
            manifest.keyrings[item.path.as_posix()] = item.category
    write_record(record, eroot, manifest)
    for item in todo:
        name = item.path.as_posix()
        if item.link is not None:
            root.symlink(item.path, item.link)
        else:
            root.write(item.path, item.content, item.mode, temp=manifest.pending[name].temp)
        checkpoint("setup-between-file-and-record")
        manifest.files[name] = manifest.pending.pop(name).recorded
        write_record(record, eroot, manifest)


def undo(eroot: Path, *, record: Path, dry_run: bool = False) -> SetupResult:
    """Remove what setup created: files only while unchanged, directories only while empty; never through a
    symlink (a changed path is left alone and reported)."""
    result = SetupResult(eroot, dry_run)
    with ConfinedRoot(eroot) as root:
        if not record.exists():
            result.notes.append(f"nothing to undo: setup-portage has no record of files it created in {eroot}")
            if root.kind(LEGACY_MANIFEST) != "missing":
                result.notes.append(f"{eroot / LEGACY_MANIFEST} was written by an older gkeys; it is not trusted "
                                    "(whoever can write that directory could have written it): remove the files it "
                                    "lists by hand, then remove it")
            return result
        manifest = read_record(record, eroot)
        settle(root, manifest, apply=not dry_run)  # a file a killed setup wrote is undone too, its temp file too
        recorded, dirs = manifest.files, manifest.dirs
        kept: dict[str, str] = {}
        for name, digest in recorded.items():
            if digest.startswith(LINK):
                target = root.readlink(Path(name))
                if target == digest[len(LINK):]:
                    result.removed.append(Path(name))
                    if not dry_run:
                        root.unlink(Path(name))
                elif target is not None or root.kind(Path(name)) != "missing":
                    kept[name] = digest
                    result.conflicts.append((Path(name), "changed since setup-portage made it: left alone"))
                continue
            try:
                data = root.read(Path(name))
            except BadInputError as exc:
                kept[name] = digest
                result.conflicts.append((Path(name), f"cannot be checked ({exc.message}): left alone"))
                continue
            if data is None:
                continue
            if sha256(data) == digest:
                result.removed.append(Path(name))
                if not dry_run:
                    root.unlink(Path(name))
            else:
                kept[name] = digest
                result.conflicts.append((Path(name), "changed since setup-portage wrote it: left alone"))
        if dry_run:
            return result
        if kept:
            write_record(record, eroot, SetupRecord(kept, dirs, manifest.keyrings))
            return result
        for name in reversed(dirs):
            try:
                emptied = root.rmdir(Path(name))
            except BadInputError:
                emptied = False
            if not emptied:
                result.notes.append(f"{eroot / name} is not empty: left in place")
        record.unlink()
    return result
