"""Does a detached ``.asc`` beside a listed file sign these bytes?  Its digest prefix, from the digest pass.

When a signed statement (``.DIGESTS``, ``.sha256``), verified by both engines, lists the file by name with a
matching strong digest, the ``.asc`` is not needed for the verdict (docs/media.md, "One read"): it is not
verified, and gkeys relies on nothing it says.  It must still not disagree with the file.  A v4 signature
packet carries the first two octets of the digest it signs (RFC 9580 §5.2.3, "left 16 bits"), and that
digest is the hash of the file followed by the signature's trailer: with the hash state of the file the
digest pass already computed (copied, never finished), the trailer costs microseconds.  GnuPG makes the same
comparison before any public-key operation and reports ``BAD signature`` when it fails; so does this module.

This is no signature check (16 bits say nothing about who signed); it catches an ``.asc`` that signs other
bytes (another build's, a tampered file's) with probability 1 - 2^-16.  Signatures it cannot compare (v3, v6
with its salt hashed before the data, a text-mode signature, a hash the pass did not compute) are said, not
refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gkeys_portage.core.errors import NoSignatureError
from gkeys_portage.openpgp.packets import SIGNATURE_TAG, parse_packets, signature_areas

#: RFC 9580 §9.5 hash algorithm ids -> hashlib names
HASHES = {8: "sha256", 9: "sha384", 10: "sha512", 11: "sha224", 2: "sha1"}
BINARY_SIGNATURE = 0x00


@dataclass(frozen=True)
class Prefix:
    """What one signature packet commits to: the hash it uses, its trailer and the digest's first two octets."""

    hash_name: str
    trailer: bytes
    left16: bytes


def prefixes(packets: bytes) -> tuple[list[Prefix], list[str]]:
    """The comparable prefixes of the signature ``packets`` (binary, already checked), and why any other
    packet cannot be compared."""
    found: list[Prefix] = []
    why: list[str] = []
    for packet in parse_packets(packets):
        body = packet.body
        if packet.tag != SIGNATURE_TAG:
            continue
        if body[:1] != b"\x04":
            why.append(f"a version {body[0] if body else 0} signature")
            continue
        if body[1] != BINARY_SIGNATURE:
            why.append(f"a signature of type {body[1]:#04x}, not over binary data")
            continue
        name = HASHES.get(body[3])
        if name is None:
            why.append(f"hash algorithm {body[3]}")
            continue
        hashed_end = 6 + int.from_bytes(body[4:6], "big")
        _hashed, _unhashed, end = signature_areas(body)
        hashed = body[:hashed_end]
        trailer = hashed + b"\x04\xff" + len(hashed).to_bytes(4, "big")
        found.append(Prefix(name, trailer, body[end : end + 2]))
    return found, why


def disagreeing(packets: bytes, states: dict[str, Any]) -> tuple[list[str], list[str]]:
    """``(hash names whose prefix does not match, why others were not compared)`` for the signature
    ``packets`` over the file whose hash ``states`` (hashlib name -> hashlib object, not finished) the
    digest pass computed.  Raises :class:`NoSignatureError` when no packet is a signature."""
    found, why = prefixes(packets)
    if not found and not why:
        raise NoSignatureError("no signature packet")
    bad: list[str] = []
    for prefix in found:
        state = states.get(prefix.hash_name)
        if state is None:
            why.append(f"{prefix.hash_name.upper()}, which the digest pass did not compute")
            continue
        digest = state.copy()
        digest.update(prefix.trailer)
        if digest.digest()[:2] != prefix.left16:
            bad.append(prefix.hash_name.upper())
    return bad, why
