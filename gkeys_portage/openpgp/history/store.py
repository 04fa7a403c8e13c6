"""A key's history as data: every self-signature, subkey binding and revocation gkeys has seen for a pinned key,
merged across sources and time, never minimised (issue 41; design.md §11 "Key history").

GnuPG's keybox cannot hold it: an import keeps only the newest binding of each subkey ("removed multiple subkey
binding", within one import; an older binding arriving after a newer one is not merged), and ``import-clean`` /
``export-clean`` keep only the newest self-signature of each user id.  So each keyring home carries, beside its
keybox, the file :data:`HISTORY_FILE`: one keyblock per key, the union of the packets of every copy of the key
gkeys was given (its own signatures only: third-party certifications stay out, as in the keybox).  Sequoia reads
it with the keybox (:func:`~gkeys_portage.openpgp.signatures.export_all`), and the time rule
(:mod:`~gkeys_portage.openpgp.history.timerule`) reads its dates, expiries and revocation reasons.

Nothing here checks a signature cryptographically: a forged packet in the history can make the time rule stricter
(never more lenient than GnuPG's own view) unless Sequoia, which checks every self-signature it uses, accepts the
data signature under the same history (:func:`~gkeys_portage.openpgp.verdict.decide`).

API: :func:`own_packets` (a keyblock without other keys' signatures), :func:`merge` (the union of copies of keys),
:func:`read_history` / :func:`parse_history` (the dated facts of one key).
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.core.errors import GpgError, NoSignatureError
from gkeys_portage.core.types import Fingerprint
from gkeys_portage.openpgp.keyblocks import (
    MAX_KEYBLOCK_BYTES,
    PUBLIC_KEY_TAG,
    PUBLIC_SUBKEY_TAG,
    SIGNATURE_TAG,
    USER_ATTRIBUTE_TAG,
    USER_ID_TAG,
    _packets,
    key_fingerprint,
    split_keyblocks,
)
from gkeys_portage.openpgp.packets import CREATION_TIME, ISSUER_FINGERPRINT, ISSUER_KEY_ID, signature_areas

#: The history file in a keyring home (binary keyblocks, one per key).
HISTORY_FILE = "gkeys-history.pgp"
KEY_EXPIRATION = 9  # signature subpacket: key expiration time, seconds after the key's creation
REASON = 29  # signature subpacket: reason for revocation (RFC 9580 5.2.3.31)
UID_CERTIFICATIONS = frozenset({0x10, 0x11, 0x12, 0x13})
DIRECT_KEY = 0x1F
SUBKEY_BINDING = 0x18
KEY_REVOCATION = 0x20
SUBKEY_REVOCATION = 0x28


@dataclass
class _Component:
    """One part of a keyblock: its packet (key, user id, subkey) and the signatures that follow it."""

    packet: bytes
    signatures: list[bytes] = field(default_factory=list)


def _components(block: bytes) -> list[_Component]:
    parts: list[_Component] = []
    for tag, start, _body, end in _packets(block):
        if tag == SIGNATURE_TAG:
            if parts:
                parts[-1].signatures.append(block[start:end])
        elif tag in (PUBLIC_KEY_TAG, PUBLIC_SUBKEY_TAG, USER_ID_TAG, USER_ATTRIBUTE_TAG):
            parts.append(_Component(block[start:end]))
    return parts


def _issuer(packet: bytes) -> tuple[str, str]:
    """A signature packet's issuer fingerprint ("" if none) and key id (upper-case hex)."""
    body = _body(packet)
    if body[:1] != b"\x04":
        return "", ""
    hashed, unhashed, _end = signature_areas(body)
    fingerprint = next((v[1:].hex().upper() for k, v in hashed + unhashed if k == ISSUER_FINGERPRINT and len(v) == 21),
                       "")
    key_id = next((v.hex().upper() for k, v in hashed + unhashed if k == ISSUER_KEY_ID), "")
    return fingerprint, key_id or fingerprint[-16:]


def _body(packet: bytes) -> bytes:
    return next(packet[body:end] for _tag, _start, body, end in _packets(packet))


def _issued_by(packet: bytes, issuers: Collection[str]) -> bool:
    try:
        fingerprint, key_id = _issuer(packet)
    except (GpgError, NoSignatureError, StopIteration):
        return False
    if fingerprint:
        return fingerprint in issuers
    return bool(key_id) and any(issuer.endswith(key_id) for issuer in issuers)


def own_packets(block: bytes, certifiers: Collection[Fingerprint] = ()) -> bytes:
    """One keyblock with only the signatures its primary key issued (self-signatures, bindings, revocations), and
    those of ``certifiers`` (authority keys whose certifications and their revocations a caller keeps)."""
    parts = _components(block)
    primary = key_fingerprint(_body(parts[0].packet)) if parts else ""
    issuers = {primary, *certifiers}
    return b"".join(part.packet + b"".join(sig for sig in part.signatures if _issued_by(sig, issuers))
                    for part in parts)


def merge(copies: Iterable[bytes], keep: Collection[Fingerprint] | None = None, *, base: bytes = b"",
          certifiers: Collection[Fingerprint] = ()) -> bytes:
    """The union of every copy of every key in ``copies`` (binary key data, any number of keyblocks each), one
    keyblock per primary, each copy with only its own signatures, sorted by fingerprint.  With ``base`` (a
    keybox's export, read as it is, other keys' signatures included) only the keys of ``base`` are kept and its
    packets come first; else only those in ``keep`` (all when None).  A packet is kept once; nothing is ever dropped
    but other keys' signatures (``certifiers``' are kept: authority certifications), unless a key's union would pass
    :data:`~gkeys_portage.openpgp.keyblocks.MAX_KEYBLOCK_BYTES` (then what it had stays).  Unreadable ``copies``
    add nothing; an unreadable ``base`` is a :class:`~gkeys_portage.core.errors.GpgError`."""
    merged: dict[Fingerprint, list[_Component]] = {}
    if base:
        for block in split_keyblocks(base):
            merged.setdefault(block.primary, _components(block.data))
        keep = set(merged)
    for data in copies:
        try:
            blocks = split_keyblocks(data) if data else []
        except GpgError:
            continue
        for block in blocks:
            if keep is not None and block.primary not in keep:
                continue
            try:
                parts = _components(own_packets(block.data, certifiers))
            except GpgError:
                continue
            known = merged.get(block.primary)
            if known is None:
                merged[block.primary] = parts
                continue
            grown = [_Component(p.packet, list(p.signatures)) for p in known]
            for part in parts:
                twin = next((p for p in grown if p.packet == part.packet), None)
                if twin is None:
                    grown.append(part)
                else:
                    twin.signatures += [sig for sig in part.signatures if sig not in twin.signatures]
            if len(_joined(grown)) <= MAX_KEYBLOCK_BYTES:
                merged[block.primary] = grown
    return b"".join(_joined(merged[fpr]) for fpr in sorted(merged))


def _joined(parts: list[_Component]) -> bytes:
    """A keyblock in the order OpenPGP wants: primary, user ids and attributes, subkeys."""
    head, rest = parts[:1], parts[1:]
    ordered = head + [p for p in rest if p.packet[0] & 0x3F != PUBLIC_SUBKEY_TAG and not _old_subkey(p.packet)] + \
        [p for p in rest if p.packet[0] & 0x3F == PUBLIC_SUBKEY_TAG or _old_subkey(p.packet)]
    return b"".join(p.packet + b"".join(p.signatures) for p in ordered)


def _old_subkey(packet: bytes) -> bool:
    return not packet[0] & 0x40 and (packet[0] >> 2) & 0x0F == PUBLIC_SUBKEY_TAG


@dataclass(frozen=True)
class Binding:
    """A self-signature that binds a key (user id certification, direct-key signature) or a subkey, as dated
    facts: when it was made and when the key it binds expires under it (None: never)."""

    created: int
    expires: int | None


@dataclass(frozen=True)
class Revocation:
    """A revocation by the key itself: when, and its reason code (None: no reason given, a hard revocation)."""

    created: int
    reason: int | None


@dataclass
class PartHistory:
    """The history of the primary key or of one subkey."""

    fingerprint: Fingerprint
    created: int
    bindings: list[Binding] = field(default_factory=list)
    revocations: list[Revocation] = field(default_factory=list)


@dataclass
class KeyHistory:
    """A key's dated facts: its primary's and each subkey's :class:`PartHistory`."""

    primary: PartHistory
    subkeys: dict[Fingerprint, PartHistory] = field(default_factory=dict)

    def part(self, fingerprint: str) -> PartHistory | None:
        """The primary's or a subkey's history (None if the history does not hold it)."""
        wanted = fingerprint.upper()
        return self.primary if self.primary.fingerprint == wanted else self.subkeys.get(Fingerprint(wanted))


def _signature_facts(packet: bytes, key_created: int) -> tuple[int, int, int | None, int | None] | None:
    """(class, created, key expiry, reason) of a v4 signature packet, from its hashed area (None if unreadable)."""
    with contextlib.suppress(GpgError, NoSignatureError, StopIteration, IndexError):
        body = _body(packet)
        if body[:1] != b"\x04" or len(body) < 4:
            return None
        hashed, _unhashed, _end = signature_areas(body)
        created = next((int.from_bytes(v[:4], "big") for k, v in hashed if k == CREATION_TIME and len(v) >= 4), None)
        if created is None:
            return None
        period = next((int.from_bytes(v[:4], "big") for k, v in hashed if k == KEY_EXPIRATION and len(v) >= 4), 0)
        reason = next((v[0] for k, v in hashed if k == REASON and v), None)
        return body[1], created, key_created + period if period else None, reason
    return None


def _key_created(packet: bytes) -> int:
    body = _body(packet)
    return int.from_bytes(body[1:5], "big") if body[:1] in (b"\x04", b"\x05", b"\x06") else 0


def parse_history(block: bytes) -> KeyHistory:
    """The dated facts of one keyblock (its own signatures only)."""
    parts = _components(own_packets(block))
    primary_packet = parts[0].packet
    primary = PartHistory(key_fingerprint(_body(primary_packet)), _key_created(primary_packet))
    history = KeyHistory(primary)
    for part in parts:
        tag = part.packet[0] & 0x3F if part.packet[0] & 0x40 else (part.packet[0] >> 2) & 0x0F
        if tag == PUBLIC_SUBKEY_TAG:
            target = PartHistory(key_fingerprint(_body(part.packet)), _key_created(part.packet))
            history.subkeys[target.fingerprint] = target
        else:
            target = primary
        for sig in part.signatures:
            facts = _signature_facts(sig, target.created)
            if facts is None:
                continue
            kind, created, expires, reason = facts
            if tag == PUBLIC_SUBKEY_TAG and kind == SUBKEY_BINDING or tag == PUBLIC_KEY_TAG and kind == DIRECT_KEY \
                    or tag == USER_ID_TAG and kind in UID_CERTIFICATIONS:
                target.bindings.append(Binding(created, expires))
            elif kind == (SUBKEY_REVOCATION if tag == PUBLIC_SUBKEY_TAG else KEY_REVOCATION):
                target.revocations.append(Revocation(created, reason))
    return history


def read_history(homedir: Path, primary: Fingerprint) -> KeyHistory | None:
    """The history of ``primary`` kept in ``homedir`` (None if the home keeps none for it)."""
    try:
        data = (homedir / HISTORY_FILE).read_bytes()
    except OSError:
        return None
    with contextlib.suppress(GpgError):
        for block in split_keyblocks(data):
            if block.primary == primary:
                return parse_history(block.data)
    return None
