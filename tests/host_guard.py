"""What the test run must leave alone on the host: gkeys' system state and config, Portage's config, and what
gpg, git or gkeys would write in the real home.  A cheap listing (name, type, size, modification time) of each
is taken before the session and compared after it (tests/conftest.py ``_host_untouched``).

Scoped to what gkeys, gpg, git and Portage write: never the whole of ``~`` (pip's cache, shell history and
editors change it on their own).

The real ``~/.gnupg`` is also written by whatever else runs gpg on the machine meanwhile (an agent's socket, its
``random_seed``, another program's imports).  :func:`split_changes` tells the suite's own writes there (a file
that holds a key this run made: :data:`SUITE_MARKS`) from another process's, which are reported, not failed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

#: below the real home (before the session points HOME at a temporary directory)
HOME_PATHS = (".gnupg", ".gitconfig", ".config/gkeys", ".local/share/gkeys")
#: absolute paths of the host
SYSTEM_PATHS = ("/var/lib/gkeys", "/etc/portage", "/etc/gkeys", "/etc/gitconfig")
LIMIT = 20_000  # entries per tree: a huge /etc/portage is listed only this far (the guard must stay cheap)

Entry = tuple[str, int, int]  # (kind, size, mtime_ns)
READ_LIMIT = 64 * 1024 * 1024  # bytes of one changed file searched for the suite's marks

#: What only this run's writes carry: the fingerprints of the keys it made (binary and hex), added by
#: tests/conftest.py's ``keys`` fixture.
SUITE_MARKS: set[bytes] = set()


def mark_keys(fingerprints: Iterable[str]) -> None:
    """Add the keys ``fingerprints`` to :data:`SUITE_MARKS` (a keyring holding one was written by this run)."""
    for fingerprint in fingerprints:
        SUITE_MARKS.update({fingerprint.upper().encode(), bytes.fromhex(fingerprint)})


def _carries_marks(path: Path, marks: Iterable[bytes]) -> bool:
    try:
        with path.open("rb") as handle:
            data = handle.read(READ_LIMIT)
    except OSError:
        return False
    return any(mark in data for mark in marks)


def split_changes(changed: Iterable[str], home: str | None,
                  marks: Iterable[bytes] = SUITE_MARKS) -> tuple[list[str], list[str]]:
    """``changed`` (:func:`changes`' lines) as (the suite's, another process's): below the real ``~/.gnupg`` a
    change is the suite's only when the file holds one of ``marks`` now; everything else the guard watches is
    the suite's (nothing else on a test machine writes gkeys' or Portage's state)."""
    gnupg = str(Path(home) / ".gnupg") if home else None
    marks = list(marks)
    ours, foreign = [], []
    for line in changed:
        kind, _, path = line.partition(" ")
        if gnupg and (path == gnupg or path.startswith(gnupg + os.sep)):
            suite = kind != "removed" and os.path.isfile(path) and _carries_marks(Path(path), marks)
            (ours if suite else foreign).append(line)
        else:
            ours.append(line)
    return ours, foreign


def guarded_paths(home: str | None) -> list[Path]:
    """The paths the guard watches, for the real home ``home`` (None: no home paths)."""
    paths = [Path(p) for p in SYSTEM_PATHS]
    if home:
        paths += [Path(home) / p for p in HOME_PATHS]
    return paths


def _entry(info: os.stat_result) -> Entry:
    kind = "d" if stat.S_ISDIR(info.st_mode) else "l" if stat.S_ISLNK(info.st_mode) else "f"
    return (kind, 0 if kind == "d" else info.st_size, info.st_mtime_ns)


def listing(paths: Iterable[Path]) -> dict[str, Entry]:
    """Every path below ``paths`` (symlinks not followed) with its kind, size and modification time."""
    found: dict[str, Entry] = {}
    for top in paths:
        try:
            found[str(top)] = _entry(os.lstat(top))
        except OSError:
            continue
        if not top.is_dir() or top.is_symlink():
            continue
        for count, (folder, dirs, files) in enumerate(os.walk(top)):
            if count > LIMIT:
                break
            for name in dirs + files:
                path = os.path.join(folder, name)
                try:
                    found[path] = _entry(os.lstat(path))
                except OSError:
                    continue
    return found


def changes(before: dict[str, Entry], after: dict[str, Entry]) -> list[str]:
    """``created PATH`` / ``removed PATH`` / ``changed PATH`` between two listings, sorted."""
    lines = [f"created {p}" for p in after.keys() - before.keys()]
    lines += [f"removed {p}" for p in before.keys() - after.keys()]
    lines += [f"changed {p}" for p in before.keys() & after.keys() if before[p] != after[p]]
    return sorted(lines)
