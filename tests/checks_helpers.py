"""Helpers for the key-check tests: colon listings built from parts, raw OpenPGP packets."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from gkeys_portage.openpgp.colons import PublicKey, parse_colons

PRIMARY_FPR = "A" * 24 + "0123456789ABCDEF"
T0 = 1_700_000_000  # creation time of the constructed keys
DAY = 86400


@dataclass
class Part:
    """One ``pub``/``sub`` record: algorithm, size, capabilities, expiry and (optionally) its signatures."""

    caps: str
    algo: int = 22
    bits: int = 255
    curve: str = "ed25519"
    expires: int | None = T0 + 365 * DAY
    validity: str = "-"
    fpr: str = ""
    sig_hash: int = 10  # SHA-512
    sigs: list[str] = field(default_factory=list)

    def records(self, kind: str, index: int) -> list[str]:
        fpr = self.fpr or (PRIMARY_FPR if kind == "pub" else f"{index:024X}" + f"{index:016X}")
        expires = "" if self.expires is None else str(self.expires)
        lines = [f"{kind}:{self.validity}:{self.bits}:{self.algo}:{fpr[-16:]}:{T0}:{expires}::-:::{self.caps}"
                 f":::::{self.curve}::",
                 f"fpr:::::::::{fpr}:"]
        if kind == "sub":
            lines.append(signature("18x", self.sig_hash))
        return lines + self.sigs


def signature(sig_class: str, hash_algo: int, created: int = T0, issuer: str = PRIMARY_FPR, kind: str = "sig") -> str:
    """A ``sig``/``rev`` record made by ``issuer``."""
    return f"{kind}:::22:{issuer[-16:]}:{created}::::x:{sig_class}::{issuer}:::{hash_algo}:"


def uid(text: str, validity: str = "-", sig_hash: int = 10, extra: tuple[str, ...] = ()) -> list[str]:
    """A ``uid`` record with its self-signature (and any extra signature records)."""
    return [f"uid:{validity}::::{T0}::HASH::{text}::::::::::0:", signature("13x", sig_hash), *extra]


def build_key(primary: Part, subkeys: list[Part], uids: list[list[str]]) -> PublicKey:
    """Parse a listing made of the given parts (exactly one key)."""
    lines = primary.records("pub", 0)
    for records in uids:
        lines += records
    for index, sub in enumerate(subkeys, start=1):
        lines += sub.records("sub", index)
    keys = parse_colons("\n".join(lines) + "\n")
    assert len(keys) == 1
    return keys[0]


def good_key(sub_expires: int | None = T0 + 365 * DAY, **primary: object) -> PublicKey:
    """A GLEP 63 v2.2 compliant key (certify-only ed25519, signing + encryption subkeys, 1 year)."""
    return build_key(Part(**{"caps": "cSC", **primary}),  # type: ignore[arg-type]
                     [Part("s", expires=sub_expires), Part("e", algo=18, curve="cv25519", expires=sub_expires)],
                     [uid("Larry <larry@gentoo.org>")])


def old_packet(tag: int, body: bytes) -> bytes:
    """An old-format OpenPGP packet with a two-byte length."""
    return bytes([0x80 | (tag << 2) | 1]) + struct.pack(">H", len(body)) + body


def mpi(value: int) -> bytes:
    """An OpenPGP multiprecision integer."""
    return struct.pack(">H", value.bit_length()) + value.to_bytes((value.bit_length() + 7) // 8, "big")


def v3_key_file() -> bytes:
    """A version 3 RSA public key with a user id (GnuPG 2.1+ refuses v3 keys)."""
    body = bytes([3]) + struct.pack(">IHB", T0, 0, 1) + mpi((1 << 1023) | 12345) + mpi(65537)
    return old_packet(6, body) + old_packet(13, b"Old <old@gentoo.org>")


def split_packets(data: bytes) -> list[tuple[int, bytes]]:
    """(tag, whole packet) of each packet of a binary OpenPGP stream (the header forms gpg writes)."""
    packets: list[tuple[int, bytes]] = []
    pos = 0
    while pos < len(data):
        ctb = data[pos]
        if ctb & 0x40:  # new format
            tag, length_byte = ctb & 0x3F, data[pos + 1]
            if length_byte < 192:
                header, length = 2, length_byte
            elif length_byte < 224:
                header, length = 3, ((length_byte - 192) << 8) + data[pos + 2] + 192
            else:
                header, length = 6, struct.unpack(">I", data[pos + 2: pos + 6])[0]
        else:
            tag, kind = (ctb >> 2) & 0x0F, ctb & 0x03
            size = {0: 1, 1: 2, 2: 4}[kind]
            header, length = 1 + size, int.from_bytes(data[pos + 1: pos + 1 + size], "big")
        packets.append((tag, data[pos: pos + header + length]))
        pos += header + length
    return packets
