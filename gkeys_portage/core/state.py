"""State directory layout, atomic writes and the run lock (design.md §3 rule 6).

Everything gkeys keeps lives below one root (``gkeysdir``, or ``--root``)::

    seeds/<category>.seeds      installed seed files (+ .sig of the verified signature)
    keyrings/<category>/        one GnuPG home per category
    keyrings/<category>.asc     exported armored keyring for Portage and eclasses
    state/                      JSON records (seed signature times, refresh times, tree revisions), lock

Files are replaced atomically (write a temporary file in the same directory, fsync, rename,
fsync the directory); concurrent runs are serialized with ``fcntl.flock`` on ``state/lock``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gkeys_portage.core.errors import BadInputError, StateError
from gkeys_portage.core.scratch import owned_prefix, remove_stale_dirs, sweep_once

LOCK_TIMEOUT = 600.0


def fsync_directory(path: Path) -> None:
    """fsync a directory so a rename inside it is durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: the temp files of :func:`atomic_write`: ``.gkeys-tmp-NAME-<pid>-<start>-gk...`` (:mod:`gkeys_portage.core.scratch`)
TEMP_PREFIX = ".gkeys-tmp-"


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically: temp file, fsync, rename, fsync directory.

    A crash at any point leaves either the old or the new file, never a mix; the temp file of a run killed
    before its rename names its owner (:data:`TEMP_PREFIX`), and the next write beside it removes it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_once(path.parent, TEMP_PREFIX)  # the temp files of runs killed before their rename
    fd, tmp = tempfile.mkstemp(prefix=owned_prefix(f"{TEMP_PREFIX}{path.name}-"), dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_directory(path.parent)


def atomic_write_json(path: Path, value: Any) -> None:
    """Write ``value`` as sorted, indented JSON atomically."""
    atomic_write(path, (json.dumps(value, indent=4, sort_keys=True) + "\n").encode("utf-8"))


def read_json(path: Path, default: Any) -> Any:
    """Read a JSON state file; ``default`` if it does not exist."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default
    except (OSError, ValueError) as exc:
        raise StateError(f"state file {path} is unreadable: {exc}") from exc



def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON state record holding an object; missing, or another kind of JSON (edited by hand), it
    counts as empty (callers treat an empty record as "never done": fail closed), and the next write
    replaces it, so such a file never fails every run.  Unparseable JSON is still a :class:`StateError`."""
    value = read_json(path, {})
    return value if isinstance(value, dict) else {}

def check_safe_directory(path: Path) -> None:
    """Refuse a state directory that is a symlink or writable by others."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise StateError(f"refusing to use {path}: it is a symbolic link")
    if not stat.S_ISDIR(info.st_mode):
        raise StateError(f"refusing to use {path}: not a directory")
    if info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
        raise StateError(f"refusing to use {path}: it is world-writable")


@dataclass(frozen=True)
class Layout:
    """Paths of the state directory."""

    root: Path

    @property
    def seeds_dir(self) -> Path:
        """Where installed seed files live."""
        return self.root / "seeds"

    @property
    def keyrings_dir(self) -> Path:
        """Where the per-category GnuPG homes and exported keyrings live."""
        return self.root / "keyrings"

    @property
    def state_dir(self) -> Path:
        """Where JSON records and the lock live."""
        return self.root / "state"

    def ensure(self) -> Layout:
        """Create the directories (0755, keyrings 0700 inside) after checking they are safe."""
        for directory in (self.root, self.seeds_dir, self.keyrings_dir, self.state_dir):
            check_safe_directory(directory)
            try:
                directory.mkdir(mode=0o755, parents=True, exist_ok=True)
            except OSError as exc:
                raise StateError(f"cannot create {directory}: {exc.strerror}") from exc
        return self

    def record(self, name: str) -> Path:
        """Path of a JSON record in the state directory."""
        return self.state_dir / f"{name}.json"


class StateLock:
    """An exclusive lock on the state directory (``state/lock``, or another lock file ``path`` in the
    state directory), waited for up to ``timeout``."""

    def __init__(self, layout: Layout, timeout: float = LOCK_TIMEOUT, path: Path | None = None) -> None:
        self.path = path or layout.state_dir / "lock"
        self.timeout = timeout
        self._fd: int | None = None
        self._depth = 0

    def __enter__(self) -> StateLock:
        if self._depth:
            self._depth += 1
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                    os.close(fd)
                    raise StateError(f"another gkeys run holds {self.path}; gave up waiting") from exc
                time.sleep(0.05)
        self._fd = fd
        self._depth = 1
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


@contextlib.contextmanager
def staging_directory(parent: Path, prefix: str, sweep: Sequence[str] = ()) -> Iterator[Path]:
    """A private temporary directory inside ``parent`` (same filesystem, so renames are atomic), named with its
    owner (:mod:`gkeys_portage.core.scratch`); the ones of ``prefix`` (and of the ``sweep`` prefixes) that a
    killed run left in ``parent`` are removed first."""
    parent.mkdir(parents=True, exist_ok=True)
    for stale in dict.fromkeys((*sweep, prefix)):
        remove_stale_dirs(parent, stale)
    path = Path(tempfile.mkdtemp(prefix=owned_prefix(prefix), dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def read_limited(path: Path, limit: int, what: str) -> bytes:
    """Read a local file of at most ``limit`` bytes, with a clear error otherwise."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise BadInputError(f"cannot read {what} {path}: {exc.strerror}") from exc
    if len(data) > limit:
        raise BadInputError(f"{what} {path} is larger than {limit} bytes")
    return data
