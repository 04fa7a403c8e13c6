"""The state of a key, subkey or user id *as of a given time*, from colon-listing timestamps.

GnuPG's validity letter describes the moment of the listing.  To evaluate "as of" another time,
expiry is recomputed from the expiry timestamp, and a revocation counts only if a revocation
signature (``rev`` record, when the listing has signatures) was made at or before that time.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from gkeys_portage.openpgp.colons import Signature, SubKey, UserId

#: OpenPGP public-key algorithm families.
RSA_ALGORITHMS = {1, 2, 3}
RSA_SINGLE_PURPOSE = {2, 3}
DSA_ALGORITHMS = {16, 17, 20}  # ElGamal is checked like DSA, as glep63-check does
ECC_ALGORITHMS = {18, 19, 22, 25, 26, 27, 28}
#: curve names GnuPG prints for Curve 25519 (and the RFC 9580 algorithm ids 25/27)
CURVE25519_NAMES = {"ed25519", "cv25519", "curve25519", "x25519", "ec25519"}
CURVE_OF_ALGORITHM = {25: "x25519", 26: "x448", 27: "ed25519", 28: "ed448"}

#: hash algorithm ids (RFC 4880 §9.4) that GLEP 63 v2.2 does not accept on self-signatures
WEAK_HASHES = {1: "MD5", 2: "SHA-1", 3: "RIPEMD-160"}


class State(StrEnum):
    """What a key or subkey is as of a moment."""

    VALID = "valid"
    INVALID = "invalid"
    REVOKED = "revoked"
    EXPIRED = "expired"
    NOT_YET = "notyet"


def revoked_at(validity: str, signatures: Sequence[Signature], at: float) -> bool:
    """True if GnuPG marks the object revoked and (when revocation dates are known) it was by ``at``."""
    if validity != "r":
        return False
    dates = [s.created for s in signatures if s.kind == "rev" and s.created is not None]
    return not dates or min(dates) <= at


def component_state(component: SubKey, at: float) -> State:
    """The state of a primary key or subkey as of ``at`` (epoch seconds)."""
    if component.created is not None and component.created > at:
        return State.NOT_YET
    if component.validity == "i":
        return State.INVALID
    if revoked_at(component.validity, component.signatures, at):
        return State.REVOKED
    if component.expires is not None:
        return State.EXPIRED if component.expires <= at else State.VALID
    return State.EXPIRED if component.validity == "e" else State.VALID


def uid_state(uid: UserId, at: float) -> State:
    """The state of a user id as of ``at``."""
    if uid.validity == "i":
        return State.INVALID
    if revoked_at(uid.validity, uid.signatures, at):
        return State.REVOKED
    return State.EXPIRED if uid.validity == "e" else State.VALID


def own_capabilities(component: SubKey) -> str:
    """The capabilities of the key itself (the lower-case letters of field 12), e.g. ``"sc"``."""
    return "".join(sorted({c for c in component.capabilities if c in "scea"}, key="scea".index))


def curve_name(component: SubKey) -> str:
    """The curve of an ECC key, lower-case (``ed25519``, ``cv25519``, ``nistp256``...)."""
    return (component.curve or CURVE_OF_ALGORITHM.get(component.algorithm, "")).lower()


def newest_self_signature(signatures: Sequence[Signature], primary: SubKey,
                          classes: tuple[str, ...]) -> Signature | None:
    """The newest signature made by ``primary`` whose class starts with one of ``classes``."""
    newest: Signature | None = None
    for sig in signatures:
        if sig.kind != "sig" or not sig.sig_class.startswith(classes):
            continue
        if sig.issuer_fingerprint.upper() != primary.fingerprint and sig.key_id.upper() != primary.key_id.upper():
            continue
        if newest is None or (sig.created or 0) >= (newest.created or 0):
            newest = sig
    return newest
