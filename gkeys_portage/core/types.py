"""Typed identities: fingerprints, nicks, categories.

A fingerprint is never confused with a key id or a nick: :func:`parse_fingerprint`
is the only way to make one, and it accepts only full v4 (40 hex) or v5/v6
(64 hex) fingerprints.
"""

from __future__ import annotations

import re
from typing import NewType

from gkeys_portage.core.errors import BadInputError

Fingerprint = NewType("Fingerprint", str)
Nick = NewType("Nick", str)
Category = NewType("Category", str)

_HEX_RE = re.compile(r"\A(?:[0-9A-F]{40}|[0-9A-F]{64})\Z")
_NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._+-]{0,63}\Z")


def parse_fingerprint(text: str) -> Fingerprint:
    """Return ``text`` as a normalised fingerprint (upper case, no spaces, no ``0x``).

    Raises :class:`BadInputError` for anything that is not a full 40 or 64 hex digit fingerprint,
    in particular for short and long key ids.
    """
    if not isinstance(text, str):
        raise BadInputError(f"fingerprint must be a string, not {type(text).__name__}")
    cleaned = text.replace(" ", "").upper()
    if cleaned.startswith("0X"):
        cleaned = cleaned[2:]
    if not _HEX_RE.match(cleaned):
        raise BadInputError(f"invalid fingerprint {text!r}: need 40 (v4) or 64 (v5/v6) hex digits")
    return Fingerprint(cleaned)


def is_fingerprint(text: str) -> bool:
    """True if ``text`` is a valid full fingerprint (see :func:`parse_fingerprint`)."""
    try:
        parse_fingerprint(text)
    except BadInputError:
        return False
    return True


def parse_name(text: str, what: str) -> str:
    """Validate a category or nick: letters, digits and ``._+-``, 1-64 characters."""
    if not isinstance(text, str) or not _NAME_RE.match(text):
        raise BadInputError(f"invalid {what} {text!r}: use letters, digits and ._+- (at most 64)")
    return text


def parse_nick(text: str) -> Nick:
    """Validate and return a seed nick."""
    return Nick(parse_name(text, "nick"))


def parse_category(text: str) -> Category:
    """Validate and return a category name."""
    return Category(parse_name(text, "category"))
