"""``gkeys setup-portage``: wire Portage to gkeys with new files only, and take them away again.

What it writes under ``EROOT`` (nothing else, and never a file that already exists with other content):

* ``etc/portage/repo.postsync.d/gkeys-verify`` and ``etc/portage/postsync.d/gkeys-verify`` (and with
  ``overlays`` ``postsync.d/gkeys-overlays``): the hooks, with their ``#!`` line rewritten to the
  interpreter gkeys runs under (``sys.executable``), so they import this installation of gkeys_portage;
* ``etc/portage/repos.conf/zz-gkeys.conf`` (read last): the named repositories switched to ``sync-type = gkeys``
  (::gentoo with the settings of the Gentoo mirror: developer commits, mirror key on top);
* with ``fetch_wrapper``: a make.conf fragment with ``FETCH_WRAPPER`` (``make.conf/gkeys-fetch.conf``
  when make.conf is a directory; otherwise ``etc/portage/gkeys-fetch.conf`` to ``source`` from it).

What it created (files with their SHA-256, directories) is recorded in ``etc/portage/.gkeys-setup-portage.json``;
:func:`undo` removes exactly those files (only while unchanged) and directories (only while empty), so
setup followed by undo leaves ``EROOT`` as it was.  Running setup twice changes nothing the second time.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage import installfiles
from gkeys_portage.core.errors import BadInputError
from gkeys_portage.core.state import atomic_write, atomic_write_json, read_json
from gkeys_portage.portage.reposconf import RepoConfig, config_files, read_files, read_repos

ETC = Path("etc/portage")
MANIFEST = ETC / ".gkeys-setup-portage.json"
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
REPO_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_+-]*")  # Portage's repository names
SAFE_PATH = re.compile(r"[A-Za-z0-9_./+-]+")  # a path Portage can take as one word of FETCH_WRAPPER
FETCH_WRAPPER = 'FETCH_WRAPPER="{gkeys_fetch} --uri \\"\\${{URI}}\\" --file \\"\\${{DISTDIR}}/\\${{FILE}}\\" --"\n'


@dataclass(frozen=True)
class PlannedFile:
    """A file setup-portage wants under EROOT: relative path, exact content, mode and why."""

    path: Path
    content: bytes
    mode: int
    why: str


@dataclass
class SetupResult:
    """What setup (or undo) did or, with ``dry_run``, would do; ``conflicts`` were left alone."""

    eroot: Path
    dry_run: bool
    created: list[Path] = field(default_factory=list)
    unchanged: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    conflicts: list[tuple[Path, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    diff: str = ""

    @property
    def ok(self) -> bool:
        """True when nothing was left alone."""
        return not self.conflicts


def sha256(data: bytes) -> str:
    """Hex SHA-256 (how the manifest recognises an unchanged file)."""
    return hashlib.sha256(data).hexdigest()


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
        blocked = known[name].blocks_first_clone() if name in known else None
        if blocked is not None:
            notes.append(f"do this before the next 'emerge --sync': mv {blocked} {blocked}.old (the first gkeys sync "
                         f"of {name} clones afresh and refuses to clone over a tree that is not a git repository)")
    for name, repo in sorted(known.items()):
        if name not in repos and repo.get("sync-type") == "git" and hooks_only_on_change(repo):
            notes.append(f"[{name}] sets {HOOKS_ON_CHANGE} = {repo.get(HOOKS_ON_CHANGE)} "
                         f"({repo.origin.get(HOOKS_ON_CHANGE)}): Portage then skips the gkeys hooks when a merge fails "
                         f"half-way; set it to false, or run setup-portage again with --repo {name}")
    return notes


def repos_fragment(eroot: Path, repos: Sequence[str]) -> bytes:
    """``repos.conf/zz-gkeys.conf``: each named repository switched to ``sync-type = gkeys``.

    Only keys that change are written; ``location`` and the rest stay where the user set them.  A
    repository that is not configured (other than ::gentoo, which Portage always knows) or that does
    not sync with git cannot be switched: that is an error, and nothing is written.
    """
    fragment = eroot / REPOS_FRAGMENT
    known = read_repos(eroot, skip=fragment)
    later = read_files([path for path in config_files(eroot, skip=fragment)
                        if path.parent == fragment.parent and path.name > fragment.name], defaults=False)
    lines = ["# Written by 'gkeys setup-portage' (remove with 'gkeys setup-portage --undo').",
             "# Every new commit of these repositories is verified by gkeys before the tree moves.", ""]
    for name in repos:
        if not REPO_NAME.fullmatch(name):
            raise BadInputError(f"invalid repository name {name!r} (letters, digits, _, + and -)")
        repo = known.get(name)
        sync_type = repo.get("sync-type") if repo else ""
        uri = repo.get("sync-uri") if repo else ""
        settings: list[tuple[str, str]] = [("sync-type", "gkeys")]
        if repo is not None and hooks_only_on_change(repo):
            # Portage would skip the hooks of a sync that "changed nothing" (a merge that failed half-way)
            settings.append((HOOKS_ON_CHANGE, "false"))
        if name == "gentoo":
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


def plan(eroot: Path, repos: Sequence[str], *, fetch_wrapper: bool = False, overlays: bool = False) -> tuple[
        list[PlannedFile], list[str]]:
    """The files setup-portage wants, and notes for the user (steps it never takes itself)."""
    if not eroot.is_dir():
        raise BadInputError(f"{eroot} is not a directory: give --eroot the root that holds etc/portage")
    if (eroot / ETC / "repos.conf").is_file():
        raise BadInputError(f"{eroot / ETC / 'repos.conf'} is a file: make it a directory "
                            "(mv repos.conf gentoo.conf; mkdir repos.conf; mv gentoo.conf repos.conf/) and run again")
    repos = list(dict.fromkeys(repos))  # --repo x --repo x: one section
    hooks = list(TREE_HOOKS) + ([OVERLAYS_HOOK] if overlays else [])
    files = [PlannedFile(ETC / hook, hook_content(hook), 0o755, "hook") for hook in hooks]
    files.append(PlannedFile(REPOS_FRAGMENT, repos_fragment(eroot, repos), 0o644, "repos.conf"))
    notes = _clone_notes(eroot, repos)
    if fetch_wrapper:
        line = FETCH_WRAPPER.format(gkeys_fetch=gkeys_fetch_path()).encode()
        if (eroot / ETC / "make.conf").is_dir():
            files.append(PlannedFile(ETC / "make.conf" / "gkeys-fetch.conf", line, 0o644, "make.conf"))
        else:
            fragment = ETC / "gkeys-fetch.conf"
            files.append(PlannedFile(fragment, line, 0o644, "make.conf fragment"))
            notes.append(f"add this line to {eroot / ETC / 'make.conf'} (setup-portage never edits it): "
                         f"source {eroot / fragment}")
    return files, notes


def _missing_dirs(eroot: Path, path: Path) -> list[Path]:
    """Directories between ``eroot`` and ``path`` that do not exist yet, outermost first."""
    missing = []
    for parent in reversed(path.parents):
        if parent == Path("."):
            continue
        if not (eroot / parent).exists():
            missing.append(parent)
    return missing


def _diff(path: Path, old: bytes | None, new: bytes) -> str:
    old_lines = old.decode(errors="replace").splitlines(keepends=True) if old is not None else []
    return "".join(difflib.unified_diff(old_lines, new.decode(errors="replace").splitlines(keepends=True),
                                        fromfile="/dev/null" if old is None else f"a/{path}", tofile=f"b/{path}"))


def _read_manifest(eroot: Path) -> dict[str, object]:
    """The record of what setup created; only relative paths below ``etc/portage`` are accepted."""
    data = read_json(eroot / MANIFEST, {})
    files = data.get("files", {}) if isinstance(data, dict) else None
    dirs = data.get("dirs", []) if isinstance(data, dict) else None
    damaged = BadInputError(f"{eroot / MANIFEST} is damaged: remove the files it lists by hand, then remove it")
    if not isinstance(files, dict) or not isinstance(dirs, list):
        raise damaged
    if not all(isinstance(n, str) and _own_path(n) for n in files) \
            or not all(isinstance(n, str) and _own_path(n, directory=True) for n in dirs) \
            or not all(isinstance(d, str) for d in files.values()):
        raise damaged
    return {"files": dict(files), "dirs": list(dirs)}


def _own_path(name: str, *, directory: bool = False) -> bool:
    """A path setup may have created: below ``etc/portage`` (or, for a directory, ``etc`` and ``etc/portage``)."""
    path = Path(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        return False
    inside = path.parts[:len(ETC.parts)] == ETC.parts and len(path.parts) > len(ETC.parts)
    return inside or (directory and path.parts == ETC.parts[:len(path.parts)])


def setup(eroot: Path, repos: Sequence[str], *, fetch_wrapper: bool = False, overlays: bool = False,
          dry_run: bool = False) -> SetupResult:
    """Create the planned files that are missing; leave existing different ones alone (reported)."""
    files, notes = plan(eroot, repos, fetch_wrapper=fetch_wrapper, overlays=overlays)
    result = SetupResult(eroot, dry_run, notes=notes)
    manifest = _read_manifest(eroot)
    recorded: dict[str, str] = manifest["files"]  # type: ignore[assignment]
    dirs: list[str] = manifest["dirs"]  # type: ignore[assignment]
    diffs = []
    todo: list[PlannedFile] = []
    for item in files:
        target = eroot / item.path
        current = target.read_bytes() if target.is_file() and not target.is_symlink() else None
        if target.is_symlink() or (target.exists() and not target.is_file()):
            result.conflicts.append((item.path, "exists and is not a regular file (a symlink or directory)"))
        elif current == item.content:
            result.unchanged.append(item.path)
        elif current is not None:
            result.conflicts.append((item.path, "exists with other content"))
            diffs.append(_diff(item.path, current, item.content))
        else:
            todo.append(item)
            diffs.append(_diff(item.path, None, item.content))
    result.diff = "".join(diffs)
    result.created = [item.path for item in todo]
    if dry_run or not todo:
        return result
    new_dirs: list[Path] = []
    for item in [*todo, PlannedFile(MANIFEST, b"", 0o644, "manifest")]:
        for missing in _missing_dirs(eroot, item.path):
            if missing not in new_dirs:
                new_dirs.append(missing)
    for directory in new_dirs:
        (eroot / directory).mkdir(mode=0o755)
        dirs.append(directory.as_posix())
    atomic_write_json(eroot / MANIFEST, {"files": recorded, "dirs": dirs})  # directories first: undo can clean up
    for item in todo:
        atomic_write(eroot / item.path, item.content, item.mode)
        recorded[item.path.as_posix()] = sha256(item.content)
        atomic_write_json(eroot / MANIFEST, {"files": recorded, "dirs": dirs})
    return result


def undo(eroot: Path, *, dry_run: bool = False) -> SetupResult:
    """Remove what setup created: files only while unchanged, directories only while empty."""
    result = SetupResult(eroot, dry_run)
    if not eroot.is_dir():
        raise BadInputError(f"{eroot} is not a directory: give --eroot the root that holds etc/portage")
    if not (eroot / MANIFEST).exists():
        result.notes.append(f"nothing to undo: {eroot / MANIFEST} does not exist")
        return result
    manifest = _read_manifest(eroot)
    recorded: dict[str, str] = manifest["files"]  # type: ignore[assignment]
    dirs: list[str] = manifest["dirs"]  # type: ignore[assignment]
    kept: dict[str, str] = {}
    for name, digest in recorded.items():
        path = eroot / name
        if not path.exists():
            continue
        if path.is_file() and not path.is_symlink() and sha256(path.read_bytes()) == digest:
            result.removed.append(Path(name))
            if not dry_run:
                path.unlink()
        else:
            kept[name] = digest
            result.conflicts.append((Path(name), "changed since setup-portage wrote it: left alone"))
    if dry_run:
        return result
    if kept:
        atomic_write_json(eroot / MANIFEST, {"files": kept, "dirs": dirs})
        return result
    (eroot / MANIFEST).unlink()
    for name in reversed(dirs):
        directory = eroot / name
        try:
            directory.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            result.notes.append(f"{directory} is not empty: left in place")
    return result
