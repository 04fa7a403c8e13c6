"""Which data-signature hash algorithms are accepted (issue 11 item 10).

Signatures over MD5, SHA-1 or RIPEMD-160 digests are refused by default, as Sequoia's ``sqv``
standard policy does: a chosen-prefix collision lets whoever controls the signed data make one
signature cover two documents.  ``[policy] weak-hashes`` may re-admit SHA-1 or RIPEMD-160 for
signatures made *before* a cut-off date (old release media, old commits)::

    [policy]
    weak-hashes = sha1<2019-01-19 ripemd160<2013-01-01

MD5 is never accepted.  Unknown names, dates or syntax are configuration errors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime

from gkeys_portage.core.errors import ConfigError

#: OpenPGP hash algorithm ids (RFC 9580 §9.5) and their names.
HASH_NAMES: Mapping[int, str] = {
    1: "MD5", 2: "SHA1", 3: "RIPEMD160", 8: "SHA256", 9: "SHA384", 10: "SHA512", 11: "SHA224",
    12: "SHA3-256", 14: "SHA3-512",
}
#: Hashes refused for data signatures unless ``weak-hashes`` allows them.
WEAK_HASHES = frozenset({1, 2, 3})
#: Weak hashes that ``weak-hashes`` may re-admit (with a cut-off date), by config name.
ADMISSIBLE = {"sha1": 2, "ripemd160": 3}

_ITEM = re.compile(r"([a-z0-9]+)<(\d{4}-\d{2}-\d{2})")


def hash_name(algorithm: int | None) -> str:
    """A hash algorithm's name (``algorithm N`` if unknown)."""
    if algorithm is None:
        return "unknown hash"
    return HASH_NAMES.get(algorithm, f"hash algorithm {algorithm}")


def parse_weak_hashes(text: str) -> dict[int, float]:
    """``sha1<2019-01-19 ...`` as {hash id: cut-off epoch seconds}; ``""`` or ``none`` is no exception."""
    allowed: dict[int, float] = {}
    for item in text.split():
        if item == "none":
            continue
        match = _ITEM.fullmatch(item)
        if not match or match.group(1) not in ADMISSIBLE:
            raise ConfigError(f"[policy] weak-hashes: {item!r} is not NAME<YYYY-MM-DD with NAME one of "
                              f"{', '.join(sorted(ADMISSIBLE))} (MD5 is never accepted)")
        try:
            cutoff = datetime.strptime(match.group(2), "%Y-%m-%d").replace(tzinfo=UTC).timestamp()
        except ValueError as exc:
            raise ConfigError(f"[policy] weak-hashes: {item!r}: not a date") from exc
        allowed[ADMISSIBLE[match.group(1)]] = cutoff
    return allowed


def weak_hash_refusal(algorithm: int | None, created: int | None, allowed: Mapping[int, float]) -> str | None:
    """Why a data signature with this hash, made at ``created``, is refused; None if it is accepted."""
    if algorithm is None:
        return "gpg reported no hash algorithm for the signature"
    if algorithm not in WEAK_HASHES:
        return None
    cutoff = allowed.get(algorithm)
    if cutoff is not None and created is not None and created < cutoff:
        return None
    when = "" if cutoff is None else f" made on or after {datetime.fromtimestamp(cutoff, UTC):%Y-%m-%d}"
    return (f"signature over a {hash_name(algorithm)} digest{when}: a weak hash, refused "
            "(old signatures can be admitted with [policy] weak-hashes = sha1<YYYY-MM-DD)")
