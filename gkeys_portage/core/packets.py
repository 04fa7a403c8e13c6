"""Check that a "detached signature" is exactly that: OpenPGP signature packets and nothing else.

GnuPG decides from the packets, not from the armor label, what it was given.  A signed *message*
(one-pass signature, literal data, signature) armored as "PGP SIGNATURE" and handed to
``gpg --verify --multifile`` is verified against the text inside it, and the data file is never read:
any old message a pinned key once signed would then "sign" anything.  Trailing packets or junk after a
signature make gpg report a good signature and then fail.  So every detached signature is parsed here
first: one armor block (or binary), a valid CRC if present, only Signature packets (tag 2), nothing after.
"""

from __future__ import annotations

import base64
import binascii

from gkeys_portage.core.errors import NoSignatureError

ARMOR_BEGIN = b"-----BEGIN PGP SIGNATURE-----"
ARMOR_END = b"-----END PGP SIGNATURE-----"
SIGNATURE_TAG = 2
CRC24_INIT = 0xB704CE
CRC24_POLY = 0x1864CFB


def _crc24_table() -> list[int]:
    table = []
    for index in range(256):
        crc = index << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= CRC24_POLY
        table.append(crc & 0xFFFFFF)
    return table


_CRC24_TABLE = _crc24_table()


def crc24(data: bytes) -> int:
    """The OpenPGP armor checksum (RFC 4880 §6.1), table-driven (it runs once per commit signature)."""
    crc = CRC24_INIT
    table = _CRC24_TABLE
    for byte in data:
        crc = ((crc << 8) & 0xFFFFFF) ^ table[(crc >> 16) ^ byte]
    return crc


def dearmor_signature(data: bytes) -> bytes:
    """The binary packets of exactly one ``PGP SIGNATURE`` armor block (whitespace around it only)."""
    lines = data.strip().splitlines()
    if not lines or lines[0].strip() != ARMOR_BEGIN or lines[-1].strip() != ARMOR_END:
        raise NoSignatureError("not one armored detached signature (BEGIN/END PGP SIGNATURE)")
    body = [line.strip() for line in lines[1:-1]]
    if any(ARMOR_BEGIN in line or ARMOR_END in line for line in body):
        raise NoSignatureError("more than one armored block in a detached signature")
    if b"" in body:
        body = body[body.index(b"") + 1 :]  # skip armor headers (Version:, Comment:, ...)
    checksum = None
    if body and body[-1].startswith(b"="):
        checksum, body = body[-1][1:], body[:-1]
    try:
        packets = base64.b64decode(b"".join(body), validate=True)
        if checksum is not None and int.from_bytes(base64.b64decode(checksum, validate=True), "big") != crc24(
                packets):
            raise NoSignatureError("armor checksum mismatch in the detached signature")
    except (binascii.Error, ValueError) as exc:
        raise NoSignatureError("the detached signature is not valid base64") from exc
    return packets


def _signature_packet_end(data: bytes, pos: int) -> int:
    """End of the Signature packet whose header starts at ``pos``; refuses any other packet type and
    partial or indeterminate lengths."""
    header = data[pos]
    if not header & 0x80:
        raise NoSignatureError("the detached signature holds no OpenPGP packet")
    tag = header & 0x3F if header & 0x40 else (header >> 2) & 0x0F
    if tag != SIGNATURE_TAG:
        raise NoSignatureError(f"the detached signature contains a packet of type {tag}, not only signatures "
                               "(a signed message or trailing data is not a detached signature)")
    if header & 0x40:  # new format
        pos += 1
        first = data[pos] if pos < len(data) else -1
        if 0 <= first < 192:
            length, pos = first, pos + 1
        elif 192 <= first < 224 and pos + 1 < len(data):
            length, pos = ((first - 192) << 8) + data[pos + 1] + 192, pos + 2
        elif first == 255 and pos + 4 < len(data):
            length, pos = int.from_bytes(data[pos + 1 : pos + 5], "big"), pos + 5
        else:
            raise NoSignatureError("a packet of the detached signature has an unsupported length")
    else:  # old format
        kind = header & 0x03
        if kind == 3:
            raise NoSignatureError("a packet of the detached signature has an indeterminate length")
        size = 1 << kind
        length, pos = int.from_bytes(data[pos + 1 : pos + 1 + size], "big"), pos + 1 + size
    return pos + length


def detached_signature_packets(data: bytes) -> bytes:
    """Validate a detached signature (armored or binary); return its binary packets.

    Raises :class:`NoSignatureError` unless it consists of one or more Signature packets only.
    """
    packets = dearmor_signature(data) if data.lstrip().startswith(b"-----") else data
    if not packets:
        raise NoSignatureError("empty detached signature")
    pos = 0
    while pos < len(packets):
        end = _signature_packet_end(packets, pos)
        if end > len(packets):
            raise NoSignatureError("the detached signature is truncated")
        pos = end
    return packets
