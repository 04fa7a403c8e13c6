"""Parse OpenPGP armor and packet framing strictly, so gpg only ever sees bytes this module checked.

GnuPG decides from the packets, not from the armor label, what it was given, and its armor parser
differs from any other: a line that one parser takes as an armor header the other may skip.  So no
verifier hands gpg the file it received.  Each input is parsed here and gpg gets bytes built from
what was parsed:

* a **detached signature** becomes its binary Signature packets (tag 2, nothing else: a signed
  *message* armored as ``PGP SIGNATURE`` would make ``gpg --verify --multifile`` check the message's
  own text and never read the data file);
* a **clearsigned message** becomes a canonical cleartext block rebuilt from its parts (the
  ``Hash:`` headers, the dash-escaped text, the signature re-armored from its checked packets);
  text around it is cut off and reported;
* a **signed message** (``gpg --sign``) becomes its binary packets with compression undone here,
  within a size bound: one-pass signatures, one literal data packet, signatures.

Armor follows RFC 9580 §6.2 exactly: the BEGIN line at the start of a line, armor header lines
``Key: Value`` only, one blank line, base64 lines, an optional ``=CRC`` line, the END line.
Anything else is "not a signature" (:class:`NoSignatureError`).  Compressed packets are refused in
detached and clearsigned signatures, where none belong.
"""

from __future__ import annotations

import base64
import binascii
import bz2
import re
import textwrap
import zlib
from dataclasses import dataclass, field

from gkeys_portage.core.errors import NoSignatureError, TruncatedSignatureError
from gkeys_portage.openpgp.mpis import canonical_body, check_mpis

ARMOR_BEGIN = b"-----BEGIN PGP SIGNATURE-----"
ARMOR_END = b"-----END PGP SIGNATURE-----"
CLEARSIGN_BEGIN = b"-----BEGIN PGP SIGNED MESSAGE-----"
MESSAGE_BEGIN = b"-----BEGIN PGP MESSAGE-----"
SIGNATURE_TAG = 2
ONE_PASS_TAG = 4
COMPRESSED_TAG = 8
LITERAL_TAG = 11
#: Packets that may use partial body lengths (RFC 9580 §4.2.1.4).
PARTIAL_OK = frozenset({COMPRESSED_TAG, 9, LITERAL_TAG, 18, 20})
CRC24_INIT = 0xB704CE
CRC24_POLY = 0x1864CFB
#: A signed message expanding beyond this is refused (decompression bombs never reach gpg).
MAX_EXPANDED = 64 * 1024 * 1024
#: ``Hash:`` values a clearsigned header may name (RFC 9580 §9.5 hash algorithm names).
HASH_NAMES = frozenset({b"MD5", b"SHA1", b"RIPEMD160", b"SHA224", b"SHA256", b"SHA384", b"SHA512",
                        b"SHA3-256", b"SHA3-512"})

_HEADER_LINE = re.compile(rb"[A-Za-z0-9][A-Za-z0-9-]*: [\x20-\x7e]*")
_BASE64_LINE = re.compile(rb"[A-Za-z0-9+/]+={0,2}")
_CRC_LINE = re.compile(rb"=[A-Za-z0-9+/]{4}")


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


def armor(packets: bytes, kind: str = "SIGNATURE") -> bytes:
    """Armor ``packets`` canonically (no headers, 64-column base64, CRC line)."""
    body = "\n".join(textwrap.wrap(base64.b64encode(packets).decode("ascii"), 64))
    checksum = base64.b64encode(crc24(packets).to_bytes(3, "big")).decode("ascii")
    return f"-----BEGIN PGP {kind}-----\n\n{body}\n={checksum}\n-----END PGP {kind}-----\n".encode("ascii")


def _lines(data: bytes) -> list[bytes]:
    """Lines without their ending; trailing spaces, tabs and CR are dropped (as every parser does)."""
    return [line.rstrip(b" \t\r") for line in data.split(b"\n")]


def _begin_kind(line: bytes) -> bytes | None:
    if line.startswith(b"-----BEGIN PGP ") and line.endswith(b"-----") and len(line) > 20:
        return line[len(b"-----BEGIN PGP ") : -5]
    return None


def parse_armor_block(lines: list[bytes], start: int, kind: bytes) -> tuple[bytes, int]:
    """Parse one armor block of ``kind`` whose BEGIN line is ``lines[start]``.

    Returns the binary packets and the index of the line after the END line.
    """
    if _begin_kind(lines[start]) != kind:
        raise NoSignatureError(f"not a PGP {kind.decode()} armor line")
    index = start + 1
    while index < len(lines) and lines[index] != b"":
        if not _HEADER_LINE.fullmatch(lines[index]):
            raise NoSignatureError("malformed armor header line (only 'Key: Value' lines, then one blank line)")
        index += 1
    index += 1  # the blank line
    body: list[bytes] = []
    checksum: bytes | None = None
    end = b"-----END PGP " + kind + b"-----"
    while True:
        if index >= len(lines):
            raise TruncatedSignatureError(f"armor block without its END PGP {kind.decode()} line")
        line = lines[index]
        index += 1
        if line == end:
            break
        if checksum is not None:
            raise NoSignatureError("armor data after the checksum line")
        if _CRC_LINE.fullmatch(line):
            checksum = line[1:]
        elif _BASE64_LINE.fullmatch(line) and not (body and body[-1].endswith(b"=")):
            body.append(line)
        else:
            raise NoSignatureError("malformed armor data line (base64 only)")
    try:
        packets = base64.b64decode(b"".join(body), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise NoSignatureError("the armor data is not valid base64") from exc
    if checksum is not None and int.from_bytes(base64.b64decode(checksum), "big") != crc24(packets):
        raise NoSignatureError("armor checksum mismatch")
    if not packets:
        raise NoSignatureError("empty armor block")
    return packets, index


def _only_blank(lines: list[bytes]) -> bool:
    return all(line == b"" for line in lines)


def _only_armor_block(data: bytes, begin: bytes, kind: bytes, what: str) -> bytes:
    """The binary packets of exactly one ``kind`` armor block starting with ``begin`` (blank lines around it
    only); ``what`` names it in the refusal."""
    lines = _lines(data)
    start = next((i for i, line in enumerate(lines) if line != b""), len(lines))
    if start == len(lines) or lines[start] != begin:
        raise NoSignatureError(f"not one {what} ({begin.strip(b'-').decode()} at a line start)")
    packets, after = parse_armor_block(lines, start, kind)
    if not _only_blank(lines[after:]):
        raise NoSignatureError(f"data after the {what}")
    return packets


def dearmor_signature(data: bytes) -> bytes:
    """The binary packets of exactly one ``PGP SIGNATURE`` armor block (blank lines around it only)."""
    return _only_armor_block(data, ARMOR_BEGIN, b"SIGNATURE", "armored detached signature")


@dataclass(frozen=True)
class Packet:
    """One OpenPGP packet: its tag and its body (partial bodies joined)."""

    tag: int
    body: bytes


def _new_length(data: bytes, pos: int) -> tuple[int, int, bool]:
    """(length, position after the length octets, partial?) of a new-format length at ``pos``."""
    if pos >= len(data):
        raise NoSignatureError("truncated packet header")
    first = data[pos]
    if first < 192:
        return first, pos + 1, False
    if first < 224:
        if pos + 1 >= len(data):
            raise NoSignatureError("truncated packet header")
        return ((first - 192) << 8) + data[pos + 1] + 192, pos + 2, False
    if first == 255:
        if pos + 5 > len(data):
            raise NoSignatureError("truncated packet header")
        return int.from_bytes(data[pos + 1 : pos + 5], "big"), pos + 5, False
    return 1 << (first & 0x1F), pos + 1, True


def parse_packets(data: bytes) -> list[Packet]:
    """Split binary OpenPGP data into packets; refuse truncation and lengths the tag may not use."""
    packets: list[Packet] = []
    pos = 0
    while pos < len(data):
        header = data[pos]
        if not header & 0x80:
            raise NoSignatureError("not an OpenPGP packet (bad header octet)")
        if header & 0x40:  # new format
            tag = header & 0x3F
            chunks: list[bytes] = []
            pos += 1
            while True:
                length, pos, partial = _new_length(data, pos)
                if partial and tag not in PARTIAL_OK:
                    raise NoSignatureError(f"a packet of type {tag} has a partial length")
                if pos + length > len(data):
                    raise NoSignatureError("truncated packet")
                chunks.append(data[pos : pos + length])
                pos += length
                if not partial:
                    break
            packets.append(Packet(tag, b"".join(chunks)))
            continue
        tag, kind = (header >> 2) & 0x0F, header & 0x03
        if kind == 3:
            if tag not in (COMPRESSED_TAG, LITERAL_TAG):
                raise NoSignatureError(f"a packet of type {tag} has an indeterminate length")
            packets.append(Packet(tag, data[pos + 1 :]))
            break
        size = 1 << kind
        if pos + 1 + size > len(data):
            raise NoSignatureError("truncated packet header")
        length = int.from_bytes(data[pos + 1 : pos + 1 + size], "big")
        pos += 1 + size
        if pos + length > len(data):
            raise NoSignatureError("truncated packet")
        packets.append(Packet(tag, data[pos : pos + length]))
        pos += length
    return packets


def _subpackets(area: bytes) -> list[tuple[int, bytes]]:
    """``(type without the critical bit, body)`` of each signature subpacket in ``area`` (RFC 9580 §5.2.3.7)."""
    out = []
    pos = 0
    while pos < len(area):
        first = area[pos]
        if first < 192:
            length, pos = first, pos + 1
        elif first < 255:
            if pos + 1 >= len(area):
                raise NoSignatureError("truncated signature subpacket")
            length, pos = ((first - 192) << 8) + area[pos + 1] + 192, pos + 2
        else:
            length, pos = int.from_bytes(area[pos + 1 : pos + 5], "big"), pos + 5
        if length < 1 or pos + length > len(area):
            raise NoSignatureError("truncated signature subpacket")
        out.append((area[pos] & 0x7F, area[pos + 1 : pos + length]))
        pos += length
    return out


CREATION_TIME = 2
ISSUER_KEY_ID = 16
ISSUER_FINGERPRINT = 33
NOTATION = 20


def signature_areas(body: bytes) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]], int]:
    """The hashed and unhashed subpackets of a v4 or v6 signature packet body, and where its areas end."""
    size = 2 if body[:1] == b"\x04" else 4
    pos = 4
    areas: list[list[tuple[int, bytes]]] = []
    for _area in range(2):  # hashed area, then unhashed area
        length = int.from_bytes(body[pos : pos + size], "big")
        if pos + size + length > len(body):
            raise NoSignatureError("truncated signature subpacket area")
        areas.append(_subpackets(body[pos + size : pos + size + length]))
        pos += size + length
    return areas[0], areas[1], pos


def check_signature_fields(body: bytes) -> str:
    """The signature's issuer key id (16 upper-case hex digits, "" when it names none or is not v4/v6), after
    refusing a v4 or v6 signature that engines would read differently: issuer subpackets naming different
    keys, no creation time in the hashed area (RFC 9580 §5.2.3.11: it MUST be there; GnuPG then reports a
    bad signature, Sequoia none), or a non-canonical signature value (:func:`~gkeys_portage.openpgp.mpis.check_mpis`).

    Engines look the signer up by different fields: GnuPG 2.2 by the (unhashed) key id, GnuPG 2.4 by the
    (hashed) fingerprint.  A signature whose fingerprint was changed got "BAD signature" from one and
    "unknown signer" (ignored beside a good one) from the other; disagreeing issuers make it no signature
    on every engine.
    """
    version = body[0] if body else 0
    if version not in (4, 6):
        return ""
    hashed, unhashed, end = signature_areas(body)
    ids: set[bytes] = set()
    created = any(kind == CREATION_TIME for kind, _value in hashed)
    for kind, value in (*hashed, *unhashed):
        if kind == ISSUER_KEY_ID:
            ids.add(value)
        elif kind == ISSUER_FINGERPRINT and value[:1] == b"\x04" and len(value) == 21:
            ids.add(value[-8:])
        elif kind == ISSUER_FINGERPRINT and value[:1] in (b"\x05", b"\x06") and len(value) == 33:
            ids.add(value[1:9])
        elif kind == ISSUER_FINGERPRINT:
            ids.add(value)  # an issuer fingerprint of another shape names another key
        elif kind == NOTATION and _has_control(value[8 : 8 + int.from_bytes(value[4:6], "big")]):
            raise NoSignatureError("a signature notation name carries control characters (an engine that "
                                   "writes it unescaped would let it forge status lines)")
    if len(ids) > 1:
        raise NoSignatureError("a signature names two different issuers (key id and fingerprint disagree): "
                               "it was altered")
    if not created:
        raise NoSignatureError("a signature without a creation time in its signed part (it was altered)")
    if version == 4:
        check_mpis(body[2], body[end + 2 :])
    return next(iter(ids)).hex().upper() if ids else ""


def _has_control(data: bytes) -> bool:
    return any(byte < 0x20 or byte == 0x7F for byte in data)


def signature_issuers(packets: bytes) -> list[str]:
    """The issuer key id of each Signature packet in ``packets`` (already checked), in order: what the engine's
    verdicts must name, one each (:func:`gkeys_portage.openpgp.status.expect_signers`)."""
    return [check_signature_fields(packet.body) for packet in parse_packets(packets) if packet.tag == SIGNATURE_TAG]


def canonical_mpis(packets: bytes) -> bytes:
    """``packets`` with every v4 RSA signature's MPI bit count set to its value's length (and leading zero
    octets dropped), as Sequoia requires; the signed part is unchanged, so is the verdict.  Other packets and
    already canonical signatures are returned as they were."""
    parsed = parse_packets(packets)
    changed = False
    out: list[Packet] = []
    for packet in parsed:
        body = canonical_body(packet.body) if packet.tag == SIGNATURE_TAG else packet.body
        if body != packet.body:
            changed, packet = True, Packet(packet.tag, body)
        out.append(packet)
    return b"".join(_new_format(packet) for packet in out) if changed else packets


def _signature_packets_only(packets: bytes, what: str) -> list[str]:
    """Refuse ``packets`` unless they are checked Signature packets only; their :func:`signature_issuers`."""
    if not packets:
        raise NoSignatureError(f"empty {what}")
    issuers = []
    for packet in parse_packets(packets):
        if packet.tag == COMPRESSED_TAG:
            raise NoSignatureError(f"the {what} contains a compressed packet, where none belongs")
        if packet.tag != SIGNATURE_TAG:
            raise NoSignatureError(f"the {what} contains a packet of type {packet.tag}, not only signatures "
                                   "(a signed message or trailing data is not a detached signature)")
        issuers.append(check_signature_fields(packet.body))
    return issuers


def detached_signature_packets(data: bytes) -> bytes:
    """Validate a detached signature (armored or binary); return its binary packets.

    Raises :class:`NoSignatureError` unless it consists of one or more Signature packets only.
    Binary input starts with a packet header (high bit set); anything else must be strict armor.
    """
    return detached_signature(data)[0]


def detached_signature(data: bytes) -> tuple[bytes, list[str]]:
    """:func:`detached_signature_packets` and their :func:`signature_issuers`, each packet parsed and checked once
    (verify-tree's batches ask for both, per commit)."""
    packets = data if data[:1] and data[0] & 0x80 else dearmor_signature(data)
    return packets, _signature_packets_only(packets, "detached signature")


@dataclass
class Clearsigned:
    """A parsed cleartext signature: what gpg gets is :attr:`canonical`, rebuilt from the checked parts."""

    hashes: list[bytes]
    text: bytes  # the signed text, dash-escaping undone, without the line break before the signature
    signature: bytes  # binary Signature packets
    canonical: bytes
    outside: bool = False  # bytes other than blank lines before or after the block
    escaped: list[bytes] = field(default_factory=list)
    received: bytes = b""  # the block as received: its BEGIN line to its END line's line break, found at line starts
    armor_at: int = 0  # where the signature's armor (its BEGIN PGP SIGNATURE line) starts in ``received``


def find_clearsigned(data: bytes) -> Clearsigned:
    """Parse the one cleartext-signed block in ``data`` (RFC 9580 §7).

    Text before and after the block is allowed but flagged (:attr:`Clearsigned.outside`); a second
    BEGIN line of any kind anywhere is refused.
    """
    lines = _lines(data)
    starts = [i for i, line in enumerate(lines) if line == CLEARSIGN_BEGIN]
    if len(starts) != 1:
        raise NoSignatureError("not one cleartext-signed block (BEGIN PGP SIGNED MESSAGE at a line start)"
                               if not starts else "more than one signed message in one file")
    start = starts[0]
    index = start + 1
    hashes: list[bytes] = []
    while index < len(lines) and lines[index] != b"":
        line = lines[index]
        if not line.startswith(b"Hash: "):
            raise NoSignatureError("malformed cleartext header (only 'Hash:' lines, then one blank line)")
        names = [name.strip() for name in line[6:].split(b",")]
        if not names or any(name not in HASH_NAMES for name in names):
            raise NoSignatureError("unknown hash name in a cleartext 'Hash:' header")
        hashes += names
        index += 1
    index += 1
    text_start = index
    while index < len(lines) and lines[index] != ARMOR_BEGIN:
        if lines[index].startswith(b"-") and not lines[index].startswith(b"- "):
            raise NoSignatureError("an undashed '-' line inside the signed text")
        index += 1
    if index >= len(lines):
        raise NoSignatureError("cleartext block without its signature")
    raw = data.split(b"\n")
    escaped = raw[text_start:index]
    if not escaped:  # the signature line right after the header: engines read it as no text or as one empty line
        raise NoSignatureError("a cleartext block with no signed text")
    if any(b"\x00" in line for line in escaped):
        raise NoSignatureError("a NUL byte inside the signed text (gpg would read that line differently)")
    text = b"\n".join(line[2:] if line.startswith(b"- ") else line for line in escaped)
    signature, after = parse_armor_block(lines, index, b"SIGNATURE")
    _signature_packets_only(signature, "cleartext signature")
    rest = lines[:start] + lines[after:]
    if any(_begin_kind(line) is not None or line.startswith(b"-----END PGP ") for line in rest):
        raise NoSignatureError("more than one armored block in one file")
    header = b"".join(b"Hash: " + name + b"\n" for name in hashes)
    canonical = CLEARSIGN_BEGIN + b"\n" + header + b"\n" + b"\n".join(escaped) + b"\n" + armor(signature)
    # the block as received, cut at the lines the parse found (a decoy marker inside a line is text, not a cut)
    received = b"\n".join(raw[start:after]) + (b"\n" if after < len(raw) else b"")
    armor_at = sum(len(line) + 1 for line in raw[start:index])
    return Clearsigned(hashes, text, signature, canonical, outside=not _only_blank(rest), escaped=escaped,
                       received=received, armor_at=armor_at)


def _expand(packet: Packet, limit: int) -> bytes:
    """The packets inside a compressed packet, at most ``limit`` bytes."""
    if not packet.body:
        raise NoSignatureError("empty compressed packet")
    algorithm, payload = packet.body[0], packet.body[1:]
    if algorithm == 0:
        return payload
    if algorithm not in (1, 2, 3):
        raise NoSignatureError(f"unknown compression algorithm {algorithm} in the signed message")
    try:
        if _expanded_size(algorithm, payload, limit) > limit:  # counted in small pieces, none of them kept
            raise NoSignatureError(f"the signed message expands beyond {limit // (1024 * 1024)} MiB "
                                   "(a decompression bomb?)")
        if algorithm == 3:
            return bz2.BZ2Decompressor().decompress(payload, limit + 1)
        return zlib.decompressobj(-15 if algorithm == 1 else 15).decompress(payload, limit + 1)
    except (zlib.error, OSError, EOFError) as exc:
        raise NoSignatureError("corrupt compressed data in the signed message") from exc


_PIECE = 1 << 20


def _expanded_size(algorithm: int, payload: bytes, limit: int) -> int:
    """How many bytes ``payload`` expands to, counted a MiB at a time and stopping past ``limit``: a bomb is
    refused without its output ever being held."""
    total = 0
    if algorithm == 3:
        bunzip = bz2.BZ2Decompressor()
        total = len(bunzip.decompress(payload, _PIECE))
        while total <= limit and not bunzip.eof and not bunzip.needs_input:
            total += len(bunzip.decompress(b"", _PIECE))
        return total
    inflater = zlib.decompressobj(-15 if algorithm == 1 else 15)
    pending = payload
    while total <= limit:
        total += len(inflater.decompress(pending, _PIECE))
        pending = inflater.unconsumed_tail
        if not pending:
            return total + len(inflater.flush())
    return total


def signed_message_packets(data: bytes, limit: int = MAX_EXPANDED) -> bytes:
    """A signed message (``gpg --sign``, armored or binary) as uncompressed binary packets.

    Accepted shape: optionally one compressed packet holding the rest; then one-pass signatures,
    exactly one literal data packet, and signature packets.  Decompression stops at ``limit``.
    """
    if data[:1] and data[0] & 0x80:
        binary = data
    else:
        binary = _only_armor_block(data, MESSAGE_BEGIN, b"MESSAGE", "signed message")
    packets = parse_packets(binary)
    if len(packets) == 1 and packets[0].tag == COMPRESSED_TAG:
        binary = _expand(packets[0], limit)
        packets = parse_packets(binary)
    tags = [packet.tag for packet in packets]
    ops = 0
    while ops < len(tags) and tags[ops] == ONE_PASS_TAG:
        ops += 1
    rest = tags[ops:]
    if ops == 0 or not rest or rest[0] != LITERAL_TAG or rest[1:] != [SIGNATURE_TAG] * ops:
        raise NoSignatureError("not a signed message (one-pass signatures, one literal packet, signatures)")
    for packet in packets:
        if packet.tag == SIGNATURE_TAG:
            check_signature_fields(packet.body)
    return b"".join(_new_format(packet) for packet in packets)


def literal_data(packets: bytes) -> bytes:
    """The data of the one literal data packet in ``packets`` (from :func:`signed_message_packets`) exactly as it
    was signed: without its format, file name and date, and in text mode ('t', 'u') with its CRLF line endings,
    which GnuPG strips when it writes the message out (the signature covers them)."""
    body = next(packet.body for packet in parse_packets(packets) if packet.tag == LITERAL_TAG)
    if len(body) < 6 or len(body) < 6 + body[1]:
        raise NoSignatureError("truncated literal data packet")
    return body[6 + body[1] :]


def _new_format(packet: Packet) -> bytes:
    """Re-frame a packet with a new-format header and a five-octet length (no partial lengths)."""
    return bytes([0xC0 | packet.tag, 255]) + len(packet.body).to_bytes(4, "big") + packet.body
