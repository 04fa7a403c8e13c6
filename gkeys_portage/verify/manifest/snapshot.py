"""emerge-webrsync snapshots (``gentoo-YYYYMMDD.tar.xz`` + ``.gpgsig``): pinned signer, bound date, fresh.

* The detached signature must come from a pinned repository key (:func:`repository_pins`; the release-media
  or mirror keys of the same category do not count), decided by the one verdict (:func:`decide`).
* A file name is not signed, so an old snapshot renamed ``gentoo-<today>.tar.xz`` would pass a name check.
  The date is therefore read from *inside* the signed archive (``metadata/timestamp.x``, else
  ``metadata/timestamp.chk``) and must fall on the day the name says.
* That signed time must not be older than the repository's high-water mark (shared record with
  :mod:`gkeys_portage.verify.manifest.marks`, key ``snapshot:<repo>``), nor older than the maximum age.
"""

from __future__ import annotations

import email.utils
import hashlib
import re
import tarfile
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

from gkeys_portage.core import journal
from gkeys_portage.core.errors import (
    BadInputError,
    NoSignatureError,
    NotVerifiedError,
    UsageError,
)
from gkeys_portage.core.http import NotFoundError, safe_url
from gkeys_portage.core.state import atomic_write, read_limited
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.openpgp.verdict import GoodSignature
from gkeys_portage.verify.manifest.marks import Freshness
from gkeys_portage.verify.manifest.purpose import repository_pins
from gkeys_portage.verify.media.download import Downloader

#: emerge-webrsync's names (``portage-`` before 2019, ``gentoo-`` since).
SNAPSHOT_NAME = re.compile(r"\A(?:gentoo|portage)-(\d{4})(\d{2})(\d{2})\.tar\.(?:xz|bz2|gz|lzma)\Z")
SIGNATURE_SUFFIX = ".gpgsig"
MAX_SIGNATURE = 1 << 20
#: Default maximum age of a snapshot, in hours: they are made once a day, so yesterday's is normal.
DEFAULT_SNAPSHOT_MAX_AGE = 48.0
_STAMP_FILES = ("metadata/timestamp.x", "metadata/timestamp.chk")


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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@journal.refusals("snapshot-refused", lambda ctx, path, category, **kw: {"file": str(path), "category": category,
                                                                         "source": kw.get("source")})
def verify_snapshot(ctx: Gkeys, path: Path, category: str, *, signature: Path | None = None, repo: str = "gentoo",
                    max_age_hours: float = DEFAULT_SNAPSHOT_MAX_AGE, source: str | None = None,
                    record: bool = True) -> VerifiedSnapshot:
    """Verify the webrsync snapshot ``path`` (signature ``path.gpgsig`` unless ``signature``).

    Raises a :class:`NotVerifiedError` subclass when the signer is not a pinned repository key, the signed
    time is not on the named day, older than the mark of ``repo`` or older than ``max_age_hours``.
    When it passes (and ``record``), the mark of ``repo`` is raised to its signed time.
    """
    claimed = snapshot_date(path)
    sig_path = signature or path.with_name(path.name + SIGNATURE_SUFFIX)
    if not path.is_file():
        raise BadInputError(f"{path}: no such file")
    if not sig_path.is_file():
        raise NoSignatureError(f"{path.name}: no signature {sig_path.name} beside it (emerge-webrsync fetches both); "
                               f"refused")
    pins, scope = repository_pins(ctx, category)
    verifier = ctx.verifier(category, pins=pins)
    verifier.scope = scope  # a pinned key of another purpose is refused naming both
    try:
        result = verifier.detached(read_limited(sig_path, MAX_SIGNATURE, "signature"), path)
    except NotVerifiedError as exc:
        raise exc.reworded(f"snapshot {path.name}: {exc.message}; the snapshot is refused") from exc
    stamp = signed_time(path)
    if stamp.date() != claimed:
        raise NotVerifiedError(f"{path.name}: named for {claimed:%Y-%m-%d} but signed as the tree of "
                               f"{stamp:%Y-%m-%d %H:%M:%S} UTC (a renamed snapshot); refused")
    digest = _sha256(path)
    freshness = Freshness(f"snapshot:{repo}", source or path.name, max_age_hours,
                          override="--max-age HOURS (or [snapshot] max-age in gkeys.conf)",
                          clock_skew=ctx.config.policy.clock_skew)
    newer = freshness.check(ctx, stamp, digest)
    if record:
        freshness.record(ctx, stamp, digest)
    verified = VerifiedSnapshot(path, result.signer, stamp, digest, newer)
    journal.record(ctx, "snapshot-accepted", {**verified.to_json(), "repo": repo, "source": source})
    return verified


def fetch_snapshot(ctx: Gkeys, url: str, folder: Path) -> Path:
    """Download the snapshot at ``url`` and its ``.gpgsig`` into ``folder``; return the local snapshot path.

    Only the name is checked here; :func:`verify_snapshot` decides, and the caller removes what fails.
    """
    name = url.rstrip("/").rsplit("/", 1)[-1]
    local = folder / name
    snapshot_date(local)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        signature = ctx.http.get(url + SIGNATURE_SUFFIX, max_bytes=MAX_SIGNATURE)
    except NotFoundError as exc:
        raise NoSignatureError(f"{safe_url(url)}: the mirror has no {name}{SIGNATURE_SUFFIX}; refused") from exc
    atomic_write(local.with_name(name + SIGNATURE_SUFFIX), signature)
    Downloader(ctx.http).fetch(url, local)
    return local


def discard(path: Path) -> None:
    """Remove a snapshot that failed, and its signature (emerge-webrsync must never find it)."""
    for item in (path, path.with_name(path.name + SIGNATURE_SUFFIX)):
        item.unlink(missing_ok=True)
