"""High-water marks: the newest signed time stamp verified for each repository, kept in gkeys' state.

A mirror can serve yesterday's (or last month's) genuinely signed tree: a rollback to ebuilds with known
holes, or a freeze that hides every fix.  The tree itself cannot be trusted to remember what came before
(Portage's ``metadata/timestamp.chk`` is unsigned, emerge-webrsync's ``timestamp.x`` can be deleted), so the
mark lives in ``state/repository-marks.json``, keyed by repository, replaced atomically under the state lock.

:func:`check_fresh` refuses a time stamp older than the mark (rollback), an equal one over different content
(two trees with one time stamp), one older than the maximum age (a frozen mirror) and one in the future
beyond the clock skew (it would raise the mark and refuse every genuine tree after it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gkeys_portage.core.errors import FutureSignatureError, RollbackError, StaleError
from gkeys_portage.core.state import atomic_write_json, read_json_object
from gkeys_portage.keys.context import Gkeys

RECORD = "repository-marks"
#: Default maximum age of a signed tree or snapshot, in hours.
DEFAULT_MAX_AGE_HOURS = 24.0


@dataclass(frozen=True)
class Mark:
    """The newest verified time stamp of one repository, the digest of what carried it, and where from."""

    timestamp: datetime
    digest: str
    source: str
    verified: str  # when gkeys verified it (ISO 8601, UTC)

    def to_json(self) -> dict[str, str]:
        """The record as stored (and shown by ``gkeys status --json``)."""
        return {"timestamp": self.timestamp.isoformat(), "digest": self.digest, "source": self.source,
                "verified": self.verified}

    @classmethod
    def from_json(cls, value: Any) -> Mark | None:
        """A mark from its record; None for anything malformed (counts as no mark: the next write replaces it)."""
        if not isinstance(value, dict):
            return None
        try:
            stamp = datetime.fromisoformat(str(value["timestamp"]))
        except (KeyError, ValueError):
            return None
        stamp = stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
        return cls(stamp.astimezone(UTC), str(value.get("digest", "")), str(value.get("source", "")),
                   str(value.get("verified", "")))


def _stamp(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def all_marks(ctx: Gkeys) -> dict[str, Mark]:
    """Every recorded mark by repository key."""
    records = read_json_object(ctx.layout.record(RECORD))
    marks = {key: Mark.from_json(value) for key, value in records.items()}
    return {key: mark for key, mark in marks.items() if mark is not None}


def last_mark(ctx: Gkeys, key: str) -> Mark | None:
    """The mark recorded for repository ``key``, if any."""
    return all_marks(ctx).get(key)


@dataclass(frozen=True)
class Freshness:
    """What a new time stamp is checked against: the repository's mark, the maximum age and the clock."""

    key: str  # the repository, as the record names it
    source: str  # the mirror, named in every refusal
    max_age_hours: float = DEFAULT_MAX_AGE_HOURS  # 0: no maximum
    override: str = "the maximum age"  # how the user raises the maximum (named in a stale refusal)
    clock_skew: float = 600.0  # seconds a time stamp may lie in the future
    now: datetime | None = None

    def check(self, ctx: Gkeys, timestamp: datetime, digest: str) -> bool:
        """Refuse ``timestamp`` (and ``digest``) unless it is fresh; True when it is newer than the mark.

        Raises :class:`RollbackError` (older than the mark, or equal with other content),
        :class:`StaleError` (older than the maximum age) or :class:`FutureSignatureError`.
        """
        now = self.now or datetime.now(UTC)
        previous = last_mark(ctx, self.key)
        if (timestamp - now).total_seconds() > self.clock_skew:
            raise FutureSignatureError(
                f"{self.source}: signed TIMESTAMP {_stamp(timestamp)} lies in the future (now {_stamp(now)}); "
                f"refused: check this machine's clock, or try another mirror")
        if previous is not None and timestamp < previous.timestamp:
            raise RollbackError(
                f"{self.source} serves a tree signed at {_stamp(timestamp)}, older than {_stamp(previous.timestamp)} "
                f"already verified for {self.key} (a rollback or a lagging mirror); refused, nothing changed: "
                f"try another mirror")
        if previous is not None and timestamp == previous.timestamp and digest != previous.digest:
            raise RollbackError(
                f"{self.source} serves a Manifest signed at {_stamp(timestamp)}, the time stamp already verified "
                f"for {self.key}, but with other content (two trees with one time stamp); refused, nothing "
                f"changed: try another mirror")
        age = (now - timestamp).total_seconds() / 3600
        if self.max_age_hours and age > self.max_age_hours:
            raise StaleError(
                f"{self.source} serves a tree signed at {_stamp(timestamp)}, {age:.0f} h ago, more than the maximum "
                f"of {self.max_age_hours:g} h (a frozen or lagging mirror); refused, nothing changed: try another "
                f"mirror, or raise {self.override}")
        return previous is None or timestamp > previous.timestamp

    def record(self, ctx: Gkeys, timestamp: datetime, digest: str) -> None:
        """Raise the mark of this repository to ``timestamp`` (never lower it); atomic, under the state lock."""
        ctx.ensure_layout()
        with ctx.lock:
            path = ctx.layout.record(RECORD)
            records = read_json_object(path)
            previous = Mark.from_json(records.get(self.key))
            if previous is not None and previous.timestamp > timestamp:
                return
            verified = datetime.now(UTC).isoformat(timespec="seconds")
            records[self.key] = Mark(timestamp, digest, self.source, verified).to_json()
            atomic_write_json(path, records)
