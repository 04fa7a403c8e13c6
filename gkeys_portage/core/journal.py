"""The trust journal: an append-only, hash-chained record of what changed in the trust and what was accepted.

Layout (below the state directory, ``${EPREFIX}/var/lib/gkeys/state/journal/``, mode 0750, files 0640)::

    journal.jsonl            the current file: one JSON object a line
    journal-000001.jsonl     rotated files, oldest first (at most KEEP_FILES are kept)
    head                     the last entry's sequence number and hash (a copy kept beside the files)
    lock                     held for one append

Each entry is ``{"seq", "time", "kind", "prev", "data"}``: ``prev`` is the SHA-256 of the previous entry's
line (its exact bytes without the newline; 64 zeros for the first entry ever), so changing, removing or
re-ordering any entry breaks the next one's link.  An entry is appended with one ``write(2)`` of the
whole line to a file opened ``O_APPEND``, then fsynced, under the journal's lock (a short lock of its own:
a run holding the state lock and a hook running inside Portage never wait on each other for long).
When the current file passes MAX_FILE bytes it is renamed to the next ``journal-NNNNNN.jsonl`` and the new
file starts with a ``journal-rotated`` entry whose ``prev`` is the old file's last hash: the chain runs
on across files.

Writing the journal never blocks a user: :func:`record` catches every failure, prints one warning line
(once per process) and returns; ``gkeys doctor`` reports a journal it cannot write.  The limits of the
chain are in docs/journal.md: root can rewrite every file (the chain shows edits, removals and
re-ordering in the middle; a cut at the end shows only against ``head``, which root can rewrite too).
``GKEYS_JOURNAL=off`` turns recording off (for ``bench/``: the same run with and without).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ParamSpec, Protocol, TypeVar

from gkeys_portage.core.config import Config
from gkeys_portage.core.errors import NotVerifiedError, StateError
from gkeys_portage.core.state import Layout, StateLock, fsync_directory, read_json_object

MAX_FILE = 4 * 1024 * 1024  # bytes of one file before it is rotated
KEEP_FILES = 8  # rotated files kept besides the current one (bounds the journal to ~36 MiB)
LOCK_WAIT = 10.0  # seconds an append waits for another one
GENESIS = "0" * 64
_ROTATED = re.compile(r"journal-(\d{6})\.jsonl")

#: The config sections whose change is a trust change (pins, purposes, policies, engine), journaled by digest.
TRUST_SECTIONS = ("policy", "purposes", "tree", "snapshot", "media", "overlays", "fetch", "binpkg", "gpg",
                  "authority", "seedurls", "verify-seeds", "authority-seeds", "keyrings")

#: The clock the entries are stamped with (tests replace it to simulate days).
clock: Callable[[], float] = time.time
_warned: list[str] = []
_suspended: list[bool] = []
P = ParamSpec("P")
R = TypeVar("R")


class JournalError(StateError):
    """The journal cannot be read or written."""


class HasLayout(Protocol):
    """What :func:`record` needs of a context: the state layout, and the config when there is one."""

    layout: Layout


@dataclass(frozen=True)
class Entry:
    """One journal entry, with the file and line it was read from and the hash of its line."""

    seq: int
    time: float
    kind: str
    prev: str
    data: dict[str, Any]
    digest: str = ""
    file: str = ""
    line: int = 0

    @property
    def when(self) -> str:
        """The entry's time, ``YYYY-MM-DD HH:MM:SS`` UTC."""
        return datetime.fromtimestamp(self.time, UTC).strftime("%Y-%m-%d %H:%M:%S")

    @property
    def when_zoned(self) -> str:
        """The same time for ``--json``, with its zone: ``YYYY-MM-DDTHH:MM:SS+00:00``."""
        return datetime.fromtimestamp(self.time, UTC).isoformat(timespec="seconds")

    def to_json(self) -> dict[str, Any]:
        """Machine-readable form (the stored fields and the entry's own hash)."""
        return {"seq": self.seq, "time": datetime.fromtimestamp(self.time, UTC).isoformat(), "kind": self.kind,
                "data": self.data, "hash": self.digest}


@dataclass(frozen=True)
class JournalPaths:
    """Where the journal of one state directory lives."""

    root: Path

    @classmethod
    def of(cls, layout: Layout) -> JournalPaths:
        """The journal below ``layout``'s state directory."""
        return cls(layout.state_dir / "journal")

    @property
    def current(self) -> Path:
        """The file entries are appended to."""
        return self.root / "journal.jsonl"

    @property
    def head(self) -> Path:
        """The copy of the last entry's sequence number and hash."""
        return self.root / "head"

    def rotated(self) -> list[Path]:
        """The rotated files, oldest first."""
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if _ROTATED.fullmatch(p.name))

    def files(self) -> list[Path]:
        """Every file of the chain, oldest first."""
        return [*self.rotated(), *([self.current] if self.current.exists() else [])]


#: Set to 1 by readers that must never write the live state (``gkeys-verify.eclass`` and the bashrc hook run
#: ``gkeys verify -F`` so inside Portage's build sandbox, where a write there is an access violation that fails
#: the build); the same variable as :data:`gkeys_portage.keys.keyring.READ_ONLY_VARIABLE`.
READ_ONLY_VARIABLE = "GKEYS_READ_ONLY_KEYRINGS"


def enabled() -> bool:
    """Whether entries are written (``GKEYS_JOURNAL=off`` turns recording off; bench/ compares both; off
    inside :func:`suspended` and for a read-only reader, ``GKEYS_READ_ONLY_KEYRINGS=1``)."""
    return (not _suspended and os.environ.get(READ_ONLY_VARIABLE) != "1"
            and os.environ.get("GKEYS_JOURNAL", "").lower() not in ("off", "no", "0", "false"))


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """No entries from this process inside the block (``audit --recheck`` re-verifies without journaling
    each check as a new acceptance; it journals its own summary)."""
    _suspended.append(True)
    try:
        yield
    finally:
        _suspended.pop()


def line_hash(line: bytes) -> str:
    """The SHA-256 (hex) of one entry's line, without its newline."""
    return hashlib.sha256(line.rstrip(b"\n")).hexdigest()


def _encode(seq: int, stamp: float, kind: str, prev: str, data: Mapping[str, Any]) -> bytes:
    body = {"seq": seq, "time": round(stamp, 3), "kind": kind, "prev": prev, "data": data}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str).encode("ascii")


def parse_line(raw: bytes, file: str = "", line: int = 0) -> Entry:
    """An :class:`Entry` from one stored line; :class:`JournalError` naming the place if it is not one."""
    try:
        body = json.loads(raw)
        entry = Entry(int(body["seq"]), float(body["time"]), str(body["kind"]), str(body["prev"]),
                      dict(body["data"]), line_hash(raw), file, line)
    except (ValueError, KeyError, TypeError) as exc:
        raise JournalError(f"{file}:{line}: not a journal entry ({exc})") from exc
    return entry


def _last_line(path: Path) -> bytes | None:
    """The last line of ``path`` (read from the end), or None for an empty or missing file."""
    try:
        with open(path, "rb") as handle:
            end = handle.seek(0, os.SEEK_END)
            step = 8192
            while True:
                start = max(0, end - step)
                handle.seek(start)
                chunk = handle.read(end - start).rstrip(b"\n")
                cut = chunk.rfind(b"\n")
                if cut >= 0 or start == 0:
                    return chunk[cut + 1:] or None
                step *= 4
    except FileNotFoundError:
        return None


def _tail(paths: JournalPaths) -> Entry | None:
    """The last entry of the chain (the current file's, else the newest rotated file's)."""
    for path in reversed(paths.files()):
        raw = _last_line(path)
        if raw is not None:
            try:
                return parse_line(raw, path.name)
            except JournalError:  # a torn last line: chained to as it is (journal verify names it)
                return Entry(int(_read_head(paths).get("seq", 0) or 0), 0.0, "unreadable", "", {}, line_hash(raw))
    return None


def _rotate(paths: JournalPaths) -> str:
    """Rename the current file to the next rotated name and drop the oldest beyond KEEP_FILES."""
    rotated = paths.rotated()
    number = int(_ROTATED.fullmatch(rotated[-1].name).group(1)) + 1 if rotated else 1  # type: ignore[union-attr]
    name = f"journal-{number:06d}.jsonl"
    os.replace(paths.current, paths.root / name)
    for old in [*rotated, paths.root / name][:-KEEP_FILES]:
        old.unlink()
    fsync_directory(paths.root)
    return name


def _cut_torn_line(path: Path) -> int:
    """Truncate ``path`` after its last newline, under the journal's lock; return the bytes cut.

    Every line is written whole with its newline in one ``write(2)``, so a file that does not end in a newline
    ends in a torn line: a write cut short (a full disk, ``RLIMIT_FSIZE``, a crash) that :func:`record` already
    reported as not written, and ``head`` still names the entry before it.  Cutting it off before the next
    append keeps every line of the chain readable (a torn line left in place made ``history`` and ``audit``
    fail for good)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    try:
        size = end = os.fstat(fd).st_size
        if not size or os.pread(fd, 1, size - 1) == b"\n":
            return 0
        while True:
            start = max(0, end - 8192)
            cut = os.pread(fd, end - start, start).rfind(b"\n")
            if cut >= 0 or start == 0:
                keep = start + cut + 1  # 0 when the whole file is one torn line
                os.ftruncate(fd, keep)
                os.fsync(fd)
                return size - keep
            end = start
    finally:
        os.close(fd)


def _write_line(path: Path, line: bytes) -> None:
    """Append ``line`` with its newline in one ``write(2)`` and fsync it; a write cut short is cut off again at
    once (a crash in between leaves it to :func:`_cut_torn_line`)."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    try:
        size = os.fstat(fd).st_size
        try:
            if os.write(fd, line + b"\n") != len(line) + 1:
                raise OSError("short write")
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_head(paths: JournalPaths, head: Mapping[str, Any]) -> None:
    """Overwrite ``head`` in place, padded to whole 512-byte blocks (a rename or a truncation to zero makes
    ext4 flush the file: ~3 ms an append).  Not fsynced: a head older than the last line after a crash is
    still a link of the chain, which :func:`verify_chain` accepts; a torn head reads as none."""
    text = json.dumps(head, sort_keys=True) + "\n"
    data = text.encode().ljust(-(-len(text) // 512) * 512, b" ")
    fd = os.open(paths.head, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    try:
        os.pwrite(fd, data, 0)
        if os.fstat(fd).st_size != len(data):
            os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def _read_head(paths: JournalPaths) -> dict[str, Any]:
    """What ``head`` holds (an unreadable head counts as empty: the next append rewrites it)."""
    try:
        return read_json_object(paths.head)
    except StateError:
        return {}


def append(layout: Layout, kind: str, data: Mapping[str, Any], *, keep: Mapping[str, Any] | None = None) -> Entry:
    """Append one entry (rotating first if the current file is full); :class:`JournalError` on failure.
    ``keep``: further values for ``head`` (the config digests)."""
    paths = JournalPaths.of(layout)
    try:
        paths.root.mkdir(mode=0o750, parents=True, exist_ok=True)
        with StateLock(layout, timeout=LOCK_WAIT, path=paths.root / "lock"):
            _cut_torn_line(paths.current)
            last = _tail(paths)
            seq, prev = (last.seq + 1, last.digest) if last else (1, GENESIS)
            line = _encode(seq, clock(), kind, prev, data)
            if paths.current.exists() and paths.current.stat().st_size + len(line) > MAX_FILE:
                old = _rotate(paths)
                first = _encode(seq, clock(), "journal-rotated", prev, {"previous_file": old})
                _write_line(paths.current, first)
                seq, prev = seq + 1, line_hash(first)
                line = _encode(seq, clock(), kind, prev, data)
            _write_line(paths.current, line)
            head = {**_read_head(paths), **(keep or {}), "seq": seq, "hash": line_hash(line)}
            _write_head(paths, head)
    except OSError as exc:
        raise JournalError(f"cannot write the trust journal in {paths.root}: {exc.strerror or exc}") from exc
    return parse_line(line, paths.current.name)


def config_digests(config: Config) -> dict[str, str]:
    """A short digest of each trust-relevant config section that is set (and of the OpenPGP engine)."""
    parser = config.parser
    found = {}
    for section in TRUST_SECTIONS:
        if parser.has_section(section):
            items = sorted((key, parser.get(section, key, raw=True)) for key in parser.options(section))
            found[section] = hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]
    found["engine"] = os.environ.get("GKEYS_GPG") or config.gpg_program or "gpg"
    return found


def _config_change(layout: Layout, config: Config) -> dict[str, Any] | None:
    """What changed in the trust-relevant config since the digests ``head`` keeps, or None."""
    now = config_digests(config)
    kept = _read_head(JournalPaths.of(layout)).get("config")
    if kept == now:
        return None
    before = kept if isinstance(kept, dict) else {}
    changed = sorted(k for k in set(now) | set(before) if now.get(k) != before.get(k))
    return {"sections": changed, "engine": now["engine"], "config": str(config.path or ""), "digests": now,
            "first": not before}


def note_config(ctx: HasLayout) -> None:
    """Journal a change of the trust-relevant config (``config-changed``: which sections, the engine) since
    the digests ``head`` keeps; the first time, the config is recorded.  Silent for a user who cannot write
    the journal (reading commands as a plain user); any other failure is :func:`warn_once`."""
    config = getattr(ctx, "config", None)
    if not enabled() or not isinstance(config, Config):
        return
    paths = JournalPaths.of(ctx.layout)
    place = next((p for p in (paths.root, ctx.layout.state_dir, ctx.layout.root) if p.exists()), None)
    if place is None or not os.access(place, os.W_OK):
        return
    try:
        if (change := _config_change(ctx.layout, config)) is not None:
            append(ctx.layout, "config-changed", change, keep={"config": change["digests"]})
    except (StateError, OSError, ValueError, TypeError) as exc:
        warn_once(str(exc))


def record(ctx: HasLayout | Layout, kind: str, data: Mapping[str, Any]) -> Entry | None:
    """Append one entry and never fail: a journal that cannot be written is one warning line (once per
    process) and None.  Given a context with a config, a change of the trust-relevant config since the
    last entry is journaled first (:func:`note_config`)."""
    if not enabled():
        return None
    if not isinstance(ctx, Layout):
        note_config(ctx)
    layout = ctx if isinstance(ctx, Layout) else ctx.layout
    try:
        return append(layout, kind, data)
    except (StateError, OSError, ValueError, TypeError) as exc:
        warn_once(str(exc))
        return None


def refusals(kind: str, subject: Callable[..., Mapping[str, Any]],
             where: Callable[..., Any] = lambda *args, **kwargs: args[0]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a verifying function so that a refusal (:class:`NotVerifiedError`) is journaled as ``kind``
    with ``subject(*args)`` (what was refused), its reason code and message; the error still propagates.
    ``where`` finds the context (or layout) in the arguments: the first one by default."""
    def wrap(func: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(func)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return func(*args, **kwargs)
            except NotVerifiedError as exc:
                try:
                    facts = {**subject(*args, **kwargs), "code": exc.reason, "why": exc.message[:400]}
                    record(where(*args, **kwargs), kind, facts)
                except Exception as failure:  # noqa: BLE001 - describing a refusal never hides it
                    warn_once(f"cannot journal a refusal: {failure}")
                raise
        return run
    return wrap


def warn_once(text: str) -> None:
    """One Portage-style warning on stderr per process: the journal is a record, never a reason to stop."""
    if _warned:
        return
    _warned.append(text)
    warn(f"{text}; continuing without it (gkeys doctor)")


def warn(text: str) -> None:
    """One Portage-style warning line on stderr, control characters shown as ``\\xNN``."""
    clean = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f" * WARNING: {clean}\n")
        sys.stderr.flush()


def read_entries(layout: Layout, skipped: list[str] | None = None) -> Iterator[Entry]:
    """Every entry, oldest first, across the rotated files.  An unreadable line is :class:`JournalError`, or
    with ``skipped`` given, named there (file, line, why) and passed over: a reader goes on."""
    for path in JournalPaths.of(layout).files():
        try:
            with open(path, "rb") as handle:
                for number, raw in enumerate(handle, 1):
                    try:
                        yield parse_line(raw.rstrip(b"\n"), path.name, number)
                    except JournalError as exc:
                        if skipped is None:
                            raise
                        skipped.append(exc.message)
        except OSError as exc:
            raise JournalError(f"cannot read the trust journal {path}: {exc.strerror or exc} "
                               "(it is readable by root only)") from exc


@dataclass
class ChainReport:
    """The result of checking the chain end to end."""

    entries: int = 0
    files: list[str] = field(default_factory=list)
    broken: str = ""  # the first broken link, empty when the chain holds
    starts_at: int = 0  # the first kept entry's sequence number (older files may have been rotated away)
    head: str = ""

    @property
    def ok(self) -> bool:
        """True if every link holds and the last entry matches ``head``."""
        return not self.broken

    def to_json(self) -> dict[str, Any]:
        """Machine-readable form."""
        return {"ok": self.ok, "entries": self.entries, "files": self.files, "broken": self.broken or None,
                "starts_at": self.starts_at, "head": self.head or None}


def verify_chain(layout: Layout) -> ChainReport:
    """Check every link (each ``prev`` is the previous line's hash, ``seq`` counts up by one) and the last
    entry against ``head``; name the first broken link."""
    paths = JournalPaths.of(layout)
    report = ChainReport(files=[p.name for p in paths.files()])
    last: Entry | None = None
    seen: dict[int, str] = {}
    try:
        for entry in read_entries(layout):
            where = f"{entry.file} line {entry.line} (entry {entry.seq})"
            if last is None:  # the chain starts with the first entry ever, or a rotated file's first entry
                report.starts_at = entry.seq
                if (entry.seq == 1) != (entry.prev == GENESIS) or (entry.seq != 1 and entry.kind != "journal-rotated"):
                    report.broken = (f"{where}: the first entry does not start the chain: the entries before it "
                                     "were removed")
            elif entry.prev != last.digest:
                report.broken = (f"{where}: does not follow entry {last.seq} ({last.file} line {last.line}): "
                                 "an entry before it was changed or removed")
            elif entry.seq != last.seq + 1:
                report.broken = f"{where}: follows entry {last.seq}: entries were removed or re-ordered"
            if report.broken:
                return report
            report.entries += 1
            last = entry
            seen[entry.seq] = entry.digest
    except JournalError as exc:
        report.broken = exc.message
        return report
    head = _read_head(paths)
    report.head = str(head.get("hash", ""))
    named = seen.get(int(head.get("seq", 0) or 0)) if head else None
    if head and named != head.get("hash"):
        at = f"entry {last.seq}" if last else "no entry"
        report.broken = (f"the journal ends at {at} but head names entry {head.get('seq')} "
                         f"({str(head.get('hash'))[:16]}…): entries at the end were removed (or head was changed)")
    return report


def problems(layout: Layout) -> list[tuple[str, str, str]]:
    """``gkeys doctor``'s findings on the journal, as ``(code, message, fix)``: ``journal:unwritable`` (this
    user cannot append: acceptances go unrecorded, each run warns once) and ``journal:broken`` (a link of the
    chain does not hold)."""
    paths = JournalPaths.of(layout)
    found = []
    place = next((p for p in (paths.current, paths.root, layout.state_dir, layout.root) if p.exists()), None)
    if (paths.root.exists() and not paths.root.is_dir()) or (place is not None and not os.access(place, os.W_OK)):
        found.append(("journal:unwritable", f"{place} cannot be written: acceptances and trust changes go "
                      "unrecorded (each run warns once)", f"run gkeys as the owner of {layout.root}, or fix the "
                      f"owner and mode of {paths.root} (0750, files 0640)"))
    elif paths.root.is_dir():
        chain = verify_chain(layout)
        if not chain.ok:
            found.append(("journal:broken", f"the trust journal's chain is broken at {chain.broken}",
                          "keep the files for inspection (gkeys journal verify names the link); new entries "
                          "continue the chain from the last line"))
    return found
