"""Findings of key checks: small typed records with stable machine codes.

Every check (``check-key`` health checks and ``spec-check`` GLEP 63 specs) returns a list of
:class:`Issue`.  The command line only renders them; ``--json`` is their serialisation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gkeys_portage.core.errors import EXIT_NOT_VERIFIED, EXIT_OK
from gkeys_portage.openpgp.colons import PublicKey, SubKey, UserId

#: At most this many findings of one code and level are kept per key; the rest are folded into one.
MAX_PER_CODE = 10


class Level(StrEnum):
    """How serious a finding is: errors fail a check, warnings fail it with ``--warnings-fail``,
    notes (recommendations) never do."""

    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


class Target(StrEnum):
    """What part of a key a finding concerns."""

    KEY = "key"
    SUBKEY = "subkey"
    UID = "uid"


@dataclass(frozen=True)
class Issue:
    """One finding about one key (or one of its subkeys or user ids)."""

    code: str  # stable machine code, e.g. "expire:long"
    level: Level
    on: Target
    message: str  # human explanation
    key: str  # primary fingerprint
    subkey: str = ""  # subkey fingerprint (on == subkey)
    subkey_id: str = ""  # subkey long key id (on == subkey)
    uid: str = ""  # user id text (on == uid)

    @property
    def concerns(self) -> str:
        """A short human label of what the finding is about: ``key``, ``subkey <ID>``, ``uid <text>``."""
        if self.on is Target.SUBKEY:
            return f"subkey {self.subkey_id or self.subkey}"
        if self.on is Target.UID:
            return f"uid {self.uid}"
        return "key"

    def to_json(self) -> dict[str, str]:
        """Machine-readable form (only the fields that apply)."""
        data = {"code": self.code, "level": str(self.level), "on": str(self.on), "message": self.message,
                "key": self.key}
        if self.on is Target.SUBKEY:
            data["subkey"] = self.subkey_id
            data["subkey_fingerprint"] = self.subkey
        if self.on is Target.UID:
            data["uid"] = self.uid
        return data


def key_issue(key: PublicKey, code: str, level: Level, message: str) -> Issue:
    """A finding about the whole key (or its primary key)."""
    return Issue(code, level, Target.KEY, message, key.fingerprint)


def subkey_issue(key: PublicKey, subkey: SubKey, code: str, level: Level, message: str) -> Issue:
    """A finding about one subkey."""
    return Issue(code, level, Target.SUBKEY, message, key.fingerprint, subkey.fingerprint, subkey.key_id)


def uid_issue(key: PublicKey, uid: UserId, code: str, level: Level, message: str) -> Issue:
    """A finding about one user id."""
    return Issue(code, level, Target.UID, message, key.fingerprint, uid=uid.text)


def missing_key(fingerprint: str) -> Issue:
    """The finding for a pinned key that is not installed (``key:missing``, an error)."""
    return Issue("key:missing", Level.ERROR, Target.KEY, "the key is not installed (run install-key)", fingerprint)


def cap_issues(issues: Sequence[Issue], limit: int = MAX_PER_CODE) -> list[Issue]:
    """Keep at most ``limit`` findings per (code, level); fold the rest into one summary finding.

    A key with thousands of user ids or subkeys must not produce thousands of lines.
    """
    seen: Counter[tuple[str, Level]] = Counter()
    kept: list[Issue] = []
    for issue in issues:
        seen[(issue.code, issue.level)] += 1
        if seen[(issue.code, issue.level)] <= limit:
            kept.append(issue)
    for (code, level), count in seen.items():
        if count > limit:
            kept.append(Issue(code, level, Target.KEY, f"... and {count - limit} more {code} findings",
                              kept[0].key))
    return kept


def count_levels(issues: Iterable[Issue]) -> dict[str, int]:
    """``{"error": n, "warning": n, "note": n}``."""
    counts = Counter(issue.level for issue in issues)
    return {str(level): counts.get(level, 0) for level in Level}


def failed(issues: Iterable[Issue], *, warnings_fail: bool = False) -> bool:
    """True if any finding is an error (or a warning, with ``warnings_fail``)."""
    failing = {Level.ERROR, Level.WARNING} if warnings_fail else {Level.ERROR}
    return any(issue.level in failing for issue in issues)


def exit_status(issues: Iterable[Issue], *, warnings_fail: bool = False) -> int:
    """0 when nothing failed, 1 otherwise."""
    return EXIT_NOT_VERIFIED if failed(issues, warnings_fail=warnings_fail) else EXIT_OK
