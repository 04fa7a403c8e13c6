"""emerge-webrsync snapshots (``gentoo-YYYYMMDD.tar.xz`` + ``.gpgsig``): pinned signer, bound date, fresh.

* Every check reads the same bytes: a URL is downloaded into a file in a directory this run created
  (:func:`private_directory`: ``mkdtemp``, 0700, so nobody else can plant, swap or rewrite a name there),
  and a local FILE is first copied there through one open file descriptor (:func:`private_copy`).
  Signature, signed date and digest are all taken from that private file; the path the user gave is
  never read again (a writer of its directory could otherwise swap the file between the checks).
* Only a snapshot that passed leaves the private directory: :func:`fetch_and_verify` moves it (and its
  signature) into ``-d DIR`` with :func:`gkeys_portage.verify.media.fetch.install`, the one installer of
  verified downloads (renamed into place: a symlink planted in DIR is replaced, never followed, and a file
  already there is never appended to or opened).
* The detached signature must come from a pinned repository key (:func:`repository_pins`; the release-media
  or mirror keys of the same category do not count), decided by the one verdict (:func:`decide`).
* A file name is not signed, so an old snapshot renamed ``gentoo-<today>.tar.xz`` would pass a name check.
  The date is therefore read from *inside* the signed archive (``metadata/timestamp.x``, else
  ``metadata/timestamp.chk``) and must fall in emerge-webrsync's window for the day the name says
  (:func:`check_window`: day D's snapshot is made at about 00:45 UTC on D+1; D 00:00 to D+2 00:00 UTC).
* That signed time must not be older than the repository's high-water mark (shared record with
  :mod:`gkeys_portage.verify.manifest.marks`, key ``snapshot:<repo>``), nor older than the maximum age.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import os
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path

from gkeys_portage.core import journal
from gkeys_portage.core.errors import (
    BadInputError,
    NoSignatureError,
    NotVerifiedError,
    UsageError,
)
from gkeys_portage.core.fs.regular import open_regular
from gkeys_portage.core.http import NotFoundError, safe_url
from gkeys_portage.core.state import atomic_write, read_limited, staging_directory
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.openpgp.verdict import GoodSignature
from gkeys_portage.verify.manifest.marks import Freshness
from gkeys_portage.verify.manifest.purpose import repository_pins
from gkeys_portage.verify.media.download import Downloader
from gkeys_portage.verify.media.fetch import check_before_creating, install

#: emerge-webrsync's names (``portage-`` before 2019, ``gentoo-`` since).
SNAPSHOT_NAME = re.compile(r"\A(?:gentoo|portage)-(\d{4})(\d{2})(\d{2})\.tar\.(?:xz|bz2|gz|lzma)\Z")
SIGNATURE_SUFFIX = ".gpgsig"
MAX_SIGNATURE = 1 << 20
#: Default maximum age of a snapshot, in hours: they are made once a day, so yesterday's is normal.
DEFAULT_SNAPSHOT_MAX_AGE = 48.0
_STAMP_FILES = ("metadata/timestamp.x", "metadata/timestamp.chk")
#: emerge-webrsync's window for the snapshot of day D (Portage 3.0.83, ``bin/emerge-webrsync``,
#: ``is_snapshot_fresh``: ``snapshot_timestamp < unixtime || snapshot_timestamp > unixtime + 2 * 86400`` is
#: refused, ``unixtime`` being D 00:00 UTC); ``do_latest_snapshot`` explains: day D's snapshot is made at
#: 00:45 UTC on D+1.
SNAPSHOT_WINDOW = timedelta(days=2)
_CHUNK = 1 << 20


@dataclass(frozen=True)
class VerifiedSnapshot:
    """A snapshot that passed: who signed it, the signed time inside it, and its digest."""

    path: Path
    signer: GoodSignature
    timestamp: datetime
    digest: str
    newer: bool  # newer than the repository's high-water mark

    def to_json(self) -> dict[str, object]:
        """The facts, for ``--json``."""
        return {"file": str(self.path), "timestamp": self.timestamp.isoformat(), "sha256": self.digest,
                "newer": self.newer, "signer": self.signer.to_json()}


def snapshot_date(path: Path) -> date:
    """The date a snapshot's name claims; :class:`UsageError` for a name emerge-webrsync does not use."""
    match = SNAPSHOT_NAME.match(path.name)
    if not match:
        raise UsageError(f"{path.name}: not a dated emerge-webrsync snapshot name (gentoo-YYYYMMDD.tar.xz); give "
                         f"the dated file, not gentoo-latest")
    try:
        return date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError as exc:
        raise UsageError(f"{path.name}: the date in the name is not a date ({exc})") from exc


def parse_stamp(name: str, text: str) -> datetime | None:
    """The time of ``metadata/timestamp.x`` (epoch seconds first) or ``timestamp.chk`` (an RFC 2822 date)."""
    text = text.strip()
    if name.endswith("timestamp.x"):
        first = text.split(" ", 1)[0]
        return datetime.fromtimestamp(int(first), UTC) if first.isdigit() else None
    try:
        return email.utils.parsedate_to_datetime(text).astimezone(UTC)
    except (TypeError, ValueError):
        return None


def signed_time(path: Path) -> datetime:
    """The time stamp recorded inside the (already verified) archive; :class:`NotVerifiedError` if none."""
    found: dict[str, datetime] = {}
    try:
        with tarfile.open(path, "r|*") as archive:
            for member in archive:
                rel = member.name.split("/", 1)[1] if "/" in member.name else member.name
                if rel in _STAMP_FILES and member.isfile() and member.size < 4096:
                    handle = archive.extractfile(member)
                    stamp = parse_stamp(rel, handle.read().decode("utf-8", "replace")) if handle else None
                    if stamp is not None:
                        found[rel] = stamp
                    if rel == _STAMP_FILES[0] and stamp is not None:
                        break
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BadInputError(f"{path.name}: the signed archive cannot be read ({exc})") from exc
    for name in _STAMP_FILES:
        if name in found:
            return found[name]
    raise NotVerifiedError(f"{path.name}: the signed archive holds no metadata/timestamp.x or timestamp.chk, so "
                           f"its date cannot be checked; refused")


def check_window(name: str, claimed: date, stamp: datetime) -> None:
    """Refuse a signed time outside emerge-webrsync's window for the day ``claimed`` (:data:`SNAPSHOT_WINDOW`)."""
    start = datetime.combine(claimed, time(0), UTC)
    if not start <= stamp <= start + SNAPSHOT_WINDOW:
        raise NotVerifiedError(f"{name}: named for {claimed:%Y-%m-%d} but signed as the tree of "
                               f"{stamp:%Y-%m-%d %H:%M:%S} UTC, outside {claimed:%Y-%m-%d} 00:00 to "
                               f"{start + SNAPSHOT_WINDOW:%Y-%m-%d} 00:00 UTC (emerge-webrsync's window: a "
                               f"renamed snapshot); refused")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def private_directory(ctx: Gkeys) -> Iterator[Path]:
    """A fresh directory only this run can write (``<state>/quarantine/snapshot/verify-*``, 0700), removed
    afterwards with whatever is left in it."""
    parent = ctx.ensure_layout().state_dir / "quarantine" / "snapshot"
    parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with staging_directory(parent, "verify-") as folder:
        yield folder


def private_copy(source: Path, folder: Path) -> Path:
    """Copy ``source`` through one open descriptor into a file created in ``folder`` (``O_EXCL``,
    ``O_NOFOLLOW``, 0600); every later check reads the copy, never ``source`` again."""
    target = folder / source.name
    try:
        with os.fdopen(open_regular(source), "rb") as data:  # a fifo swapped in never blocks the run
            out_fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(out_fd, "wb") as out:
                for chunk in iter(lambda: data.read(_CHUNK), b""):
                    out.write(chunk)
    except OSError as exc:
        raise BadInputError(f"cannot copy {source}: {exc.strerror or exc}") from exc
    return target


def _check(ctx: Gkeys, path: Path, signature: bytes, category: str, *, repo: str, max_age_hours: float,
           source: str, record: bool) -> VerifiedSnapshot:
    """Signature, signed date and digest of ``path``, a file in a private directory (see the module notes)."""
    claimed = snapshot_date(path)
    pins, scope = repository_pins(ctx, category)
    verifier = ctx.verifier(category, pins=pins)
    verifier.scope = scope  # a pinned key of another purpose is refused naming both
    try:
        result = verifier.detached(signature, path)
    except NotVerifiedError as exc:
        raise exc.reworded(f"snapshot {path.name}: {exc.message}; the snapshot is refused") from exc
    stamp = signed_time(path)
    check_window(path.name, claimed, stamp)
    digest = _sha256(path)
    freshness = Freshness(f"snapshot:{repo}", source, max_age_hours,
                          override="--max-age HOURS (or [snapshot] max-age in gkeys.conf)",
                          clock_skew=ctx.config.policy.clock_skew)
    newer = freshness.check(ctx, stamp, digest)
    if record:
        freshness.record(ctx, stamp, digest)
    return VerifiedSnapshot(path, result.signer, stamp, digest, newer)


def _accepted(ctx: Gkeys, verified: VerifiedSnapshot, *, repo: str, source: str) -> VerifiedSnapshot:
    """Journal a verified snapshot where it now lies (the file a re-check finds), and return it."""
    journal.record(ctx, "snapshot-accepted", {**verified.to_json(), "repo": repo, "source": source})
    return verified


def _signature_beside(path: Path, signature: Path | None) -> bytes:
    """The detached signature (``signature``, else ``path.gpgsig``), read once."""
    sig_path = signature or path.with_name(path.name + SIGNATURE_SUFFIX)
    if not sig_path.is_file():
        raise NoSignatureError(f"{path.name}: no signature {sig_path.name} beside it (emerge-webrsync fetches both); "
                               f"refused")
    return read_limited(sig_path, MAX_SIGNATURE, "signature")


@journal.refusals("snapshot-refused", lambda ctx, path, category, **_: {"file": str(path), "category": category,
                                                                        "source": path.name})
def verify_snapshot(ctx: Gkeys, path: Path, category: str, *, signature: Path | None = None, repo: str = "gentoo",
                    max_age_hours: float = DEFAULT_SNAPSHOT_MAX_AGE, record: bool = True) -> VerifiedSnapshot:
    """Verify the local webrsync snapshot ``path`` (signature ``path.gpgsig`` unless ``signature``).

    ``path`` is read once, into a private copy that every check reads (see the module notes).
    Raises a :class:`NotVerifiedError` subclass when the signer is not a pinned repository key, the signed
    time is outside emerge-webrsync's window for the named day, older than the mark of ``repo`` or older than
    ``max_age_hours``.  When it passes (and ``record``), the mark of ``repo`` is raised to its signed time.
    """
    snapshot_date(path)
    if not path.is_file():
        raise BadInputError(f"{path}: no such file")
    signed = _signature_beside(path, signature)
    with private_directory(ctx) as folder:
        copy = private_copy(path, folder)
        verified = _check(ctx, copy, signed, category, repo=repo, max_age_hours=max_age_hours, source=path.name,
                          record=record)
    return _accepted(ctx, VerifiedSnapshot(path, verified.signer, verified.timestamp, verified.digest,
                                           verified.newer), repo=repo, source=path.name)


def _download(ctx: Gkeys, url: str, folder: Path) -> Path:
    """Download the snapshot at ``url`` and its ``.gpgsig`` into the private ``folder``."""
    name = url.rstrip("/").rsplit("/", 1)[-1]
    local = folder / name
    snapshot_date(local)
    try:
        signature = ctx.http.get(url + SIGNATURE_SUFFIX, max_bytes=MAX_SIGNATURE)
    except NotFoundError as exc:
        raise NoSignatureError(f"{safe_url(url)}: the mirror has no {name}{SIGNATURE_SUFFIX}; refused") from exc
    atomic_write(local.with_name(name + SIGNATURE_SUFFIX), signature, 0o600)
    Downloader(ctx.http).fetch(url, local)
    return local


@journal.refusals("snapshot-refused", lambda ctx, url, dest, category, **_: {
    "file": url.rstrip("/").rsplit("/", 1)[-1], "category": category, "source": url})
def fetch_and_verify(ctx: Gkeys, url: str, dest: Path, category: str, *, signature: Path | None = None,
                     repo: str = "gentoo", max_age_hours: float = DEFAULT_SNAPSHOT_MAX_AGE,
                     record: bool = True) -> VerifiedSnapshot:
    """Download the snapshot at ``url`` (and its ``.gpgsig``) into a private directory, verify it there, and
    only then move both into ``dest`` (:func:`~gkeys_portage.verify.media.fetch.install`: renamed into place,
    a symlink there is replaced and never followed).  A refused snapshot never reaches ``dest``; a ``dest``
    other users could write is refused before anything is downloaded."""
    check_before_creating(dest)
    with private_directory(ctx) as folder:
        local = _download(ctx, url, folder)
        sig_file = local.with_name(local.name + SIGNATURE_SUFFIX)
        signed = read_limited(signature, MAX_SIGNATURE, "signature") if signature else sig_file.read_bytes()
        verified = _check(ctx, local, signed, category, repo=repo, max_age_hours=max_age_hours, source=url,
                          record=record)
        for item in (local, sig_file):
            os.chmod(item, 0o644)
        installed = install([sig_file, local], dest)[-1]
    return _accepted(ctx, VerifiedSnapshot(installed, verified.signer, verified.timestamp, verified.digest,
                                           verified.newer), repo=repo, source=url)
