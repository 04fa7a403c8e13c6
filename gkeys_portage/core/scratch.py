"""Private scratch directories (and files) of gkeys runs, each carrying its owner, and the one remover of those
whose owner is gone.

A run killed by SIGKILL (or the OOM killer) removes nothing: its staging keyrings, quarantine homes, multifile
copies (in ``/dev/shm``: memory until the next reboot), probe and reader homes and signature files stay.  So
every scratch entry gkeys makes names its owner: the process id and that process's start time (``/proc/PID/stat``
field 22, so a reused pid does not count), either in its name (:func:`owned_prefix`: ``PREFIX<pid>-<start>-gk...``)
or, for a directory another program names (gemato's homes), in an owner file inside it.  The next run removes
every entry of its prefix whose owner is gone (:func:`remove_stale_dirs`), at once: no waiting a day.  An entry
that names no owner (made by an older gkeys) is removed once it is a day old, as before.  Nothing is followed
through a symlink; other users' entries and names that do not start with the prefix are never touched (the parent
is often world-writable).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

#: no gkeys run lasts a day (every gpg call has a timeout), so an older scratch entry without an owner is nobody's
STALE_SECONDS = 24 * 3600
#: the owner file in a directory another program named (gemato's homes)
OWNER_FILE = "gkeys-owner"
#: the owner in a name: ``<pid>-<start>-gk`` and tempfile's random tail (no ``-``), at the end of the name
_OWNED = re.compile(r"(?:^|-)(\d{1,10})-(\d{1,20}|x)-gk[A-Za-z0-9_]*$")
_SWEPT: set[tuple[str, str]] = set()
_SWEPT_LOCK = threading.Lock()


def process_started(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (``/proc/PID/stat`` field 22), or None
    when there is no such process, or only its zombie (killed, not yet reaped: it holds nothing any more)."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()  # after the command name, which may hold spaces and ')'
    if not fields or fields[0] in (b"Z", b"X"):
        return None
    return fields[19].decode("ascii", "replace") if len(fields) > 19 else None


def owner_tag() -> str:
    """This process as an owner: ``<pid>-<start time>`` (``x`` where /proc cannot tell the start time)."""
    return f"{os.getpid()}-{process_started(os.getpid()) or 'x'}"


def owned_prefix(prefix: str) -> str:
    """``PREFIX<pid>-<start>-gk``: the prefix to give :mod:`tempfile` for a scratch entry owned by this process
    (tempfile adds a random tail)."""
    return f"{prefix}{owner_tag()}-gk"


def owner_gone(pid: int, started: str) -> bool:
    """True when process ``pid`` is gone, or is another process now (its start time differs)."""
    now = process_started(pid)
    if now is None:
        return True
    return started != "x" and now != started


def _named_owner(name: str, prefix: str) -> tuple[int, str] | None:
    """The owner a scratch name carries after ``prefix`` (None if it names none: an older gkeys made it)."""
    match = _OWNED.search(name[len(prefix):])
    if match is None:
        return None
    return int(match.group(1)), match.group(2)


def claim(directory: str | Path) -> None:
    """Mark a directory another program named (gemato's home) as this process's, with an owner file in it."""
    fd = os.open(os.path.join(directory, OWNER_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as owner:
        owner.write(owner_tag().replace("-", " ") + "\n")


def claimed_owner_gone(directory: Path) -> bool:
    """True when ``directory`` carries an owner file (:func:`claim`) naming a process that is gone."""
    try:
        words = (directory / OWNER_FILE).read_text(encoding="ascii").split()
    except (OSError, UnicodeDecodeError):
        return False  # not claimed by gkeys, or not readable: left alone
    if len(words) != 2 or not words[0].isascii() or not words[0].isdigit():
        return False
    return owner_gone(int(words[0]), "x" if words[1] == "-" else words[1])


def make_dir(parent: str | Path | None, prefix: str, *, sweep: str | None = None) -> Path:
    """A new private directory ``PREFIX<owner>...`` under ``parent`` (default ``$TMPDIR``), owned by this process;
    the stale ones of ``sweep`` (default: the same prefix) are removed first (once per process and place)."""
    where = Path(parent if parent is not None else tempfile.gettempdir())
    sweep_once(where, sweep or prefix)
    return Path(tempfile.mkdtemp(prefix=owned_prefix(prefix), dir=where))


@contextlib.contextmanager
def private_dir(prefix: str) -> Iterator[Path]:
    """:func:`make_dir` under ``$TMPDIR`` for the length of a ``with`` block, then removed; a killed run's is
    removed by the next run that asks for the same prefix."""
    path = make_dir(None, prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def sweep_once(parent: str | Path, prefix: str) -> None:
    """:func:`remove_stale_dirs` of ``prefix`` under ``parent``, the first time this process asks for it."""
    key = (os.fspath(parent), prefix)
    with _SWEPT_LOCK:
        if key in _SWEPT:
            return
        _SWEPT.add(key)
    remove_stale_dirs(parent, prefix, files=True)


def remove_stale_dirs(parent: str | Path, prefix: str, *, now: float | None = None, max_age: float = STALE_SECONDS,
                      stale: Callable[[Path, os.stat_result], bool] | None = None, files: bool = False,
                      keep: frozenset[str] = frozenset()) -> int:
    """Remove this user's entries named ``prefix*`` directly under ``parent`` that are stale; returns how many.

    Stale means: the owner its name carries is gone; or ``stale(path, stat)`` says so (gemato's homes: their
    owner file names a process that is gone); or, naming no owner, last changed more than ``max_age`` seconds
    before ``now``.  Directories only (never followed), and with ``files`` also regular files and this user's
    symlinks (removed, not followed); names in ``keep`` never."""
    cutoff = (time.time() if now is None else now) - max_age
    removed = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            with contextlib.suppress(OSError):
                if not entry.name.startswith(prefix) or entry.name in keep:
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
                if not is_dir and not (files and (entry.is_file(follow_symlinks=False) or entry.is_symlink())):
                    continue
                info = entry.stat(follow_symlinks=False)
                if info.st_uid != os.geteuid():
                    continue
                owner = _named_owner(entry.name, prefix)
                if owner is not None:
                    gone = owner_gone(*owner)
                elif stale is not None:
                    gone = stale(Path(entry.path), info)
                else:
                    gone = info.st_mtime < cutoff
                if gone:
                    if is_dir:
                        _remove_tree(entry.path)
                    else:
                        os.unlink(entry.path)
                    removed += 1
    return removed


def _remove_tree(path: str, attempts: int = 5) -> None:
    """Remove the directory ``path``, again while it is still there: a killed run's gpg-agent writes into its home
    (its log, a socket) until it notices the home is gone, so one pass can end in "directory not empty" (gemato's
    own close loops the same way).  The last failure is raised."""
    for attempt in range(attempts):
        try:
            shutil.rmtree(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))

