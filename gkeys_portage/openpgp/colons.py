"""Parse ``gpg --with-colons --fixed-list-mode`` key listings into typed records.

Takes any text stream or string, so it is tested on recorded listings as well as on live gpg.
See GnuPG's ``doc/DETAILS`` ("Format of the colon listings").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gkeys_portage.core.types import Fingerprint, is_fingerprint

if TYPE_CHECKING:
    from gkeys_portage.openpgp.history.store import KeyHistory

#: OpenPGP public-key algorithm numbers (RFC 4880 / RFC 9580).
ALGORITHM_NAMES = {
    1: "rsa", 2: "rsa-e", 3: "rsa-s", 16: "elgamal", 17: "dsa", 18: "ecdh", 19: "ecdsa",
    20: "elgamal-sign", 22: "eddsa", 25: "x25519", 27: "ed25519", 26: "x448", 28: "ed448",
}


@dataclass
class Signature:
    """A ``sig``/``rev`` record: a self-signature, binding signature or certification."""

    kind: str  # "sig" or "rev"
    key_id: str
    algorithm: int
    created: int | None
    expires: int | None
    sig_class: str  # e.g. "13x" (positive certification), "18x" (subkey binding), "20x" (key revocation)
    hash_algorithm: int | None
    issuer_fingerprint: str = ""
    check: str = ""  # --check-sigs only: "!" good, "-" bad, "?" no key to check, "%" error

    @property
    def good(self) -> bool:
        """True if GnuPG checked this signature and found it good (``--check-sigs`` listings)."""
        return self.check == "!"


@dataclass
class UserId:
    """A ``uid`` record."""

    text: str
    validity: str
    created: int | None
    revoked: bool
    signatures: list[Signature] = field(default_factory=list)


@dataclass
class SubKey:
    """A primary key (``pub``) or subkey (``sub``) record with its fingerprint."""

    fingerprint: Fingerprint
    key_id: str
    algorithm: int
    length: int
    curve: str
    created: int | None
    expires: int | None
    validity: str  # first field: r revoked, e expired, i invalid, ...
    capabilities: str  # lower case: this key's own; upper case on pub: the whole key's usable ones
    signatures: list[Signature] = field(default_factory=list)
    #: The hash of the back-signature in this subkey's newest binding (not in colon listings: set from the key's
    #: packets by whoever needs it, :func:`gkeys_portage.openpgp.keyblocks.back_signature_hashes`).
    back_signature_hash: int | None = None

    @property
    def revoked(self) -> bool:
        """True if GnuPG marks this key or subkey as revoked."""
        return self.validity == "r"

    @property
    def algorithm_name(self) -> str:
        """A short algorithm name: ``rsa``, ``dsa``, ``ed25519``, ``cv25519``, ..."""
        if self.curve:
            return self.curve.lower()
        return ALGORITHM_NAMES.get(self.algorithm, f"algo{self.algorithm}")

    def expired_at(self, when: float) -> bool:
        """True if the key has an expiry time at or before ``when`` (epoch seconds)."""
        return self.expires is not None and self.expires <= when

    def can(self, capability: str) -> bool:
        """True if the key itself has the capability letter (``s``, ``e``, ``c``, ``a``)."""
        return capability.lower() in self.capabilities


@dataclass
class PublicKey:
    """One transferable public key: primary, subkeys and user ids."""

    primary: SubKey
    subkeys: list[SubKey] = field(default_factory=list)
    uids: list[UserId] = field(default_factory=list)
    #: ``rvk`` records: the designated revokers a self-signature names (RFC 9580 §5.2.3.23), by fingerprint.
    revokers: list[Fingerprint] = field(default_factory=list)
    #: The key's dated history (:mod:`~gkeys_portage.openpgp.history.store`), read when asked: set by whoever listed
    #: the key from a home that keeps it (``keys/keyring.py``); None: only GnuPG's listing is known.
    history: Callable[[], KeyHistory | None] | None = field(default=None, repr=False, compare=False)

    @property
    def fingerprint(self) -> Fingerprint:
        """The primary key's fingerprint."""
        return self.primary.fingerprint

    def all_keys(self) -> list[SubKey]:
        """The primary key followed by its subkeys."""
        return [self.primary, *self.subkeys]

    def find(self, fingerprint: str) -> SubKey | None:
        """The primary key or subkey with this fingerprint, if any."""
        wanted = fingerprint.upper()
        for key in self.all_keys():
            if key.fingerprint == wanted:
                return key
        return None

    @property
    def created_at(self) -> datetime | None:
        """Creation time of the primary key (UTC)."""
        return None if self.primary.created is None else datetime.fromtimestamp(self.primary.created, UTC)


def _int_or_none(text: str) -> int | None:
    if not text:
        return None
    if text.isascii() and text.isdigit():
        value = int(text)
        return value or None
    try:
        return int(datetime.strptime(text, "%Y%m%dT%H%M%S").replace(tzinfo=UTC).timestamp())
    except ValueError:
        return None


def _field(fields: list[str], index: int) -> str:
    return fields[index] if len(fields) > index else ""


def _make_subkey(fields: list[str]) -> SubKey:
    return SubKey(
        fingerprint=Fingerprint(""),
        key_id=_field(fields, 4),
        algorithm=_int_or_none(_field(fields, 3)) or 0,
        length=_int_or_none(_field(fields, 2)) or 0,
        curve=_field(fields, 16),
        created=_int_or_none(_field(fields, 5)),
        expires=_int_or_none(_field(fields, 6)),
        validity=_field(fields, 1),
        capabilities=_field(fields, 11),
    )


def _make_signature(fields: list[str]) -> Signature:
    return Signature(
        kind=fields[0],
        key_id=_field(fields, 4),
        algorithm=_int_or_none(_field(fields, 3)) or 0,
        created=_int_or_none(_field(fields, 5)),
        expires=_int_or_none(_field(fields, 6)),
        sig_class=_field(fields, 10),
        hash_algorithm=_int_or_none(_field(fields, 15)),
        issuer_fingerprint=_field(fields, 12).upper(),
        check=_field(fields, 1),
    )


def parse_colons(text: str | Iterable[str]) -> list[PublicKey]:
    """Parse a colon listing (``pub``/``sub``/``fpr``/``uid``/``sig``/``rev`` records) into keys.

    Records of other kinds (``tru``, ``grp``, ``cfg``, ``sec``-only details) are skipped.
    Keys whose primary fingerprint is missing or malformed are dropped.
    """
    # LF only, as gpg writes records: str.splitlines would also split a user id at U+0085 (gpg leaves
    # non-ASCII bytes of a uid as they are); ':' is escaped there, so no forged record, but no torn one either
    lines = text.split("\n") if isinstance(text, str) else text
    keys: list[PublicKey] = []
    current_key: PublicKey | None = None
    current_sub: SubKey | None = None
    current_uid: UserId | None = None
    for raw in lines:
        fields = raw.rstrip("\r\n").split(":")
        kind = fields[0]
        if kind in ("pub", "sec"):
            current_sub = _make_subkey(fields)
            current_key = PublicKey(primary=current_sub)
            current_uid = None
            keys.append(current_key)
        elif kind in ("sub", "ssb") and current_key is not None:
            current_sub = _make_subkey(fields)
            current_key.subkeys.append(current_sub)
            current_uid = None
        elif kind == "fpr" and current_sub is not None and not current_sub.fingerprint:
            fpr = _field(fields, 9).upper()
            if is_fingerprint(fpr):
                current_sub.fingerprint = Fingerprint(fpr)
        elif kind == "rvk" and current_key is not None and is_fingerprint(_field(fields, 9)):
            current_key.revokers.append(Fingerprint(_field(fields, 9).upper()))
        elif kind in ("uid", "uat") and current_key is not None:
            current_uid = UserId(
                text=_unescape(_field(fields, 9)),
                validity=_field(fields, 1),
                created=_int_or_none(_field(fields, 5)),
                revoked=_field(fields, 1) == "r",
            )
            current_key.uids.append(current_uid)
            current_sub = None
        elif kind in ("sig", "rev") and current_key is not None:
            sig = _make_signature(fields)
            if current_uid is not None:
                current_uid.signatures.append(sig)
            elif current_sub is not None:
                current_sub.signatures.append(sig)
    return [key for key in keys if key.primary.fingerprint and all(s.fingerprint for s in key.subkeys)]


def _unescape(text: str) -> str:
    r"""Undo GnuPG's ``\xHH`` escaping and decode UTF-8 (the listing is read as latin-1)."""
    out = bytearray()
    i = 0
    raw = text.encode("latin-1", "replace")
    while i < len(raw):
        if raw[i : i + 2] == b"\\x" and i + 4 <= len(raw):
            try:
                out.append(int(raw[i + 2 : i + 4], 16))
                i += 4
                continue
            except ValueError:
                pass
        out.append(raw[i])
        i += 1
    return out.decode("utf-8", "replace")
