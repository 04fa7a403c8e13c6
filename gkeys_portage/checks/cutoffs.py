"""Crypto cut-offs: what Sequoia-based verifiers will refuse, and when (issue 25 item 5).

apt 3 verifies with ``sqv`` under a dated policy (design.md §9): SHA-1 in self-signatures and subkey
bindings and SHA-224 from 2026-02-01, brainpool curves from 2028-02-01, RSA under 3072 bits from
2030-02-01. A key that gkeys verifies today can stop verifying on such systems on a known date; these
findings (``cutoff:*``, apart from GLEP 63's) say so a year ahead: a warning within
:data:`WARN_AHEAD` of the date, an error from it on, each naming the key, what will be refused, when,
and the command that fixes it.

The table is configurable (``[checks] cutoffs = sha1:2026-02-01 sha224:2026-02-01 ...``, every name
in :data:`CUTOFFS`; a name left out keeps its default date).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from gkeys_portage.checks.glep63.findings import Issue, Level, key_issue, subkey_issue, uid_issue
from gkeys_portage.checks.glep63.keystate import newest_self_signature
from gkeys_portage.core.errors import ConfigError
from gkeys_portage.openpgp.colons import PublicKey, Signature, SubKey

#: How long before a cut-off its finding becomes a warning.
WARN_AHEAD = timedelta(days=365)
HASH_IDS = {"sha1": 2, "sha224": 11}
USER_ID_CLASSES = ("10", "11", "12", "13")
BINDING_CLASSES = ("18",)


@dataclass(frozen=True)
class Cutoff:
    """One dated rule of a Sequoia policy."""

    name: str  # the name in [checks] cutoffs
    refused: str  # what is refused, for people
    date: datetime

    def level(self, at: datetime) -> Level | None:
        """Error from the date on, warning within :data:`WARN_AHEAD` before it, else nothing."""
        if at >= self.date:
            return Level.ERROR
        return Level.WARNING if at >= self.date - WARN_AHEAD else None

    def when(self, at: datetime) -> str:
        """``refused since 2026-02-01`` / ``refused from 2030-02-01``."""
        return f"refused {'since' if at >= self.date else 'from'} {self.date:%Y-%m-%d}"


def _day(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)


#: The default table (apt's sqv policy, design.md §9).
CUTOFFS: dict[str, Cutoff] = {cutoff.name: cutoff for cutoff in (
    Cutoff("sha1", "SHA-1 in self-signatures, subkey bindings and back-signatures", _day("2026-02-01")),
    Cutoff("sha224", "SHA-224 in self-signatures, subkey bindings and back-signatures", _day("2026-02-01")),
    Cutoff("brainpool", "brainpool curves", _day("2028-02-01")),
    Cutoff("rsa3072", "RSA keys under 3072 bits", _day("2030-02-01")),
)}


def parse_cutoffs(text: str) -> dict[str, Cutoff]:
    """``[checks] cutoffs``: space-separated ``NAME:YYYY-MM-DD``; an unknown name or bad date is a
    :class:`ConfigError` (a typo must not drop a rule)."""
    table = dict(CUTOFFS)
    for word in text.split():
        name, _, day = word.partition(":")
        if name not in CUTOFFS:
            raise ConfigError(f"[checks] cutoffs: unknown cut-off {name!r} (known: {', '.join(CUTOFFS)})")
        try:
            table[name] = replace(CUTOFFS[name], date=_day(day))
        except ValueError:
            raise ConfigError(f"[checks] cutoffs: {word!r}: give NAME:YYYY-MM-DD (e.g. sha1:2026-02-01)") from None
    return table


def check_cutoffs(key: PublicKey, at: datetime | None = None,
                  table: Mapping[str, Cutoff] = CUTOFFS) -> list[Issue]:
    """The ``cutoff:*`` findings of ``key`` as of ``at`` (default now); needs a listing with signatures."""
    at = at or datetime.now(UTC)
    issues: list[Issue] = []
    primary = key.primary
    for name in ("sha1", "sha224"):
        cutoff = table[name]
        level = cutoff.level(at)
        if level is None:
            continue
        fix = (f"re-sign it with SHA-512: gpg --cert-digest-algo SHA512 --quick-set-expire {key.fingerprint} "
               "<expiry>")
        for uid in key.uids:
            if not uid.revoked and _hashed_with(newest_self_signature(uid.signatures, primary, USER_ID_CLASSES),
                                                name):
                issues.append(uid_issue(key, uid, f"cutoff:{name}", level,
                                        f"{cutoff.refused}: its self-signature uses {name.upper()}, "
                                        f"{cutoff.when(at)} by Sequoia-based verifiers (apt's sqv): {fix}"))
        for sub in key.subkeys:
            if not sub.revoked and _hashed_with(newest_self_signature(sub.signatures, primary, BINDING_CLASSES), name):
                issues.append(subkey_issue(key, sub, f"cutoff:{name}", level,
                                           f"{cutoff.refused}: its binding uses {name.upper()}, {cutoff.when(at)} "
                                           f"by Sequoia-based verifiers (apt's sqv): {fix} {sub.fingerprint}"))
            elif not sub.revoked and sub.back_signature_hash == HASH_IDS[name]:
                issues.append(subkey_issue(key, sub, f"cutoff:{name}", level,
                                           f"{cutoff.refused}: its back-signature (the subkey's own signature in "
                                           f"its binding) uses {name.upper()}, {cutoff.when(at)} by Sequoia-based "
                                           f"verifiers (apt's sqv): add a new signing subkey with SHA-512 (gpg "
                                           f"--quick-add-key {key.fingerprint} ed25519 sign 2y) and revoke this "
                                           "one (re-binding keeps the old back-signature)"))
    for component, is_primary in ((primary, True), *((sub, False) for sub in key.subkeys if not sub.revoked)):
        issues += _algorithm_issues(key, component, is_primary, at, table)
    return issues


def _hashed_with(signature: Signature | None, name: str) -> bool:
    return signature is not None and signature.hash_algorithm == HASH_IDS[name]


def _algorithm_issues(key: PublicKey, component: SubKey, is_primary: bool, at: datetime,
                      table: Mapping[str, Cutoff]) -> list[Issue]:
    checks = []
    if component.algorithm_name == "rsa" and component.length < 3072:
        checks.append((table["rsa3072"], f"RSA {component.length}"))
    if component.curve.lower().startswith("brainpool"):
        checks.append((table["brainpool"], component.curve))
    issues = []
    for cutoff, what in checks:
        level = cutoff.level(at)
        if level is None:
            continue
        fix = ("make a new key (gkeys-gen) and have its fingerprint pinned" if is_primary else
               f"add an ed25519 or RSA 4096 signing subkey: gpg --quick-add-key {key.fingerprint} ed25519 sign 2y")
        message = (f"{cutoff.refused}: this {'key' if is_primary else 'subkey'} is {what}, {cutoff.when(at)} by "
                   f"Sequoia-based verifiers (apt's sqv): {fix}")
        code = f"cutoff:{cutoff.name}"
        issues.append(key_issue(key, code, level, message) if is_primary else
                      subkey_issue(key, component, code, level, message))
    return issues
