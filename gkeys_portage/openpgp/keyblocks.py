"""Split binary OpenPGP key data into keyblocks and keep exactly the ones named by primary fingerprint.

GnuPG's key selectors match subkeys too: ``gpg --export P`` (even ``P!``) also exports every keyblock
that carries a *subkey* with P's fingerprint, and anyone can bind a byte copy of P's primary key as a
subkey of their own key.  So exported key data is filtered here by the fingerprint of each keyblock's
*primary* key packet, and keyblocks that carry a subkey whose fingerprint is one of the kept primaries
(the "aliasing" keyblocks) are dropped.  Callers then check with GnuPG itself that it sees the same
primaries in the bytes that are written (:meth:`gkeys_portage.openpgp.gnupg.GnuPG.export_exact`).

Only the packet framing and the key packets' fingerprints are parsed (RFC 4880 §4.2, §12.2; v5/v6
fingerprints per RFC 9580 §5.5.4); the input is GnuPG's own export, never a network answer.  Three readers go
further, each for one job: :func:`designated_revocations` (the revocations a ``self-sigs-only`` import drops
that gkeys keeps; it reads key data from the network too, and any malformed packet is a :class:`GpgError` or
skipped), :func:`back_signature_hashes` (the cut-off lint) and :func:`without_subkeys` (exports for verifiers
that take their engine's word on revocations).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

from gkeys_portage.core.errors import GpgError, NoSignatureError
from gkeys_portage.core.types import Fingerprint, parse_fingerprint
from gkeys_portage.openpgp.packets import ISSUER_FINGERPRINT, ISSUER_KEY_ID, crc24, signature_areas

PUBLIC_KEY_TAG = 6
PUBLIC_SUBKEY_TAG = 14
SIGNATURE_TAG = 2
USER_ID_TAG = 13
USER_ATTRIBUTE_TAG = 17
#: A keyblock larger than this, or with more signatures, is refused (after cleaning, a real key has a
#: few self-signatures per user id and subkey; GnuPG's keybox refuses blocks of 5 MiB).
MAX_KEYBLOCK_BYTES = 512 * 1024
MAX_KEYBLOCK_SIGNATURES = 2000

ARMOR_HEADER = b"-----BEGIN PGP PUBLIC KEY BLOCK-----"
ARMOR_FOOTER = b"-----END PGP PUBLIC KEY BLOCK-----"


@dataclass
class Keyblock:
    """One transferable public key: its primary fingerprint, subkey fingerprints and raw packets."""

    primary: Fingerprint
    subkeys: list[Fingerprint] = field(default_factory=list)
    signatures: int = 0
    data: bytes = b""

    def oversized(self) -> str:
        """Why this keyblock exceeds the caps ("" if it does not)."""
        if len(self.data) > MAX_KEYBLOCK_BYTES:
            return f"{len(self.data)} bytes (limit {MAX_KEYBLOCK_BYTES})"
        if self.signatures > MAX_KEYBLOCK_SIGNATURES:
            return f"{self.signatures} signatures (limit {MAX_KEYBLOCK_SIGNATURES})"
        return ""


def key_fingerprint(body: bytes) -> Fingerprint:
    """The fingerprint of a public (sub)key packet body (v4: SHA-1; v5, v6: SHA-256)."""
    if not body:
        raise GpgError("empty key packet in exported key data")
    version = body[0]
    if version == 4:
        digest = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest()
    elif version == 5:
        digest = hashlib.sha256(b"\x9a" + len(body).to_bytes(4, "big") + body).hexdigest()
    elif version == 6:
        digest = hashlib.sha256(b"\x9b" + len(body).to_bytes(4, "big") + body).hexdigest()
    else:
        raise GpgError(f"unsupported key packet version {version} in exported key data")
    return parse_fingerprint(digest)


def _packets(data: bytes) -> Iterable[tuple[int, int, int, int]]:
    """``(tag, packet_start, body_start, body_end)`` for each packet; partial lengths are refused."""
    pos = 0
    while pos < len(data):
        start, header = pos, data[pos]
        if not header & 0x80:
            raise GpgError("exported key data is not OpenPGP packets")
        if header & 0x40:  # new format
            tag = header & 0x3F
            first = data[pos + 1] if pos + 1 < len(data) else -1
            if 0 <= first < 192:
                length, pos = first, pos + 2
            elif 192 <= first < 224 and pos + 2 < len(data):
                length, pos = ((first - 192) << 8) + data[pos + 2] + 192, pos + 3
            elif first == 255 and pos + 5 < len(data):
                length, pos = int.from_bytes(data[pos + 2 : pos + 6], "big"), pos + 6
            else:
                raise GpgError("exported key data has a partial or truncated packet length")
        else:  # old format
            tag, kind = (header >> 2) & 0x0F, header & 0x03
            if kind == 3:
                raise GpgError("exported key data has an indeterminate packet length")
            size = 1 << kind
            length = int.from_bytes(data[pos + 1 : pos + 1 + size], "big")
            pos += 1 + size
        if pos + length > len(data):
            raise GpgError("exported key data is truncated")
        yield tag, start, pos, pos + length
        pos += length


def split_keyblocks(data: bytes) -> list[Keyblock]:
    """The keyblocks of binary key data, in order (each starts at a Public-Key packet)."""
    blocks: list[Keyblock] = []
    starts: list[int] = []
    for tag, start, body, end in _packets(data):
        if tag == PUBLIC_KEY_TAG:
            blocks.append(Keyblock(key_fingerprint(data[body:end])))
            starts.append(start)
        elif not blocks:
            raise GpgError("exported key data does not start with a public key")
        elif tag == PUBLIC_SUBKEY_TAG:
            blocks[-1].subkeys.append(key_fingerprint(data[body:end]))
        elif tag == SIGNATURE_TAG:
            blocks[-1].signatures += 1
    for index, block in enumerate(blocks):
        block.data = data[starts[index] : starts[index + 1] if index + 1 < len(starts) else len(data)]
    return blocks


@dataclass
class Selection:
    """Keyblocks kept by :func:`select_keyblocks` and what was left out."""

    kept: list[Keyblock]
    aliasing: dict[Fingerprint, list[Fingerprint]]  # dropped keyblock -> the named primaries it carries
    oversized: dict[Fingerprint, str]  # kept primaries whose keyblock exceeds the caps, with why

    @property
    def data(self) -> bytes:
        """The kept keyblocks, concatenated."""
        return b"".join(block.data for block in self.kept)

    def data_without(self, refused: set[Fingerprint]) -> bytes:
        """The kept keyblocks except those whose primary is in ``refused``."""
        return b"".join(block.data for block in self.kept if block.primary not in refused)

    @property
    def primaries(self) -> set[Fingerprint]:
        """Primary fingerprints of the kept keyblocks."""
        return {block.primary for block in self.kept}


def select_keyblocks(data: bytes, wanted: Sequence[Fingerprint] = ()) -> Selection:
    """Keep the keyblocks whose *primary* fingerprint is in ``wanted`` (all when empty), one per primary.

    A keyblock carrying a subkey whose fingerprint is a wanted (or another kept) primary is dropped
    and named in ``aliasing``, even if its own primary is wanted.
    """
    blocks = split_keyblocks(data)
    names = set(wanted) if wanted else {block.primary for block in blocks}
    seen: set[Fingerprint] = set()
    kept: list[Keyblock] = []
    aliasing: dict[Fingerprint, list[Fingerprint]] = {}
    for block in blocks:
        carried = sorted(names & set(block.subkeys))
        if carried:
            aliasing.setdefault(block.primary, carried)
            continue
        if block.primary not in names or block.primary in seen:
            continue
        seen.add(block.primary)
        kept.append(block)
    oversized = {block.primary: why for block in kept if (why := block.oversized())}
    return Selection(kept, aliasing, oversized)


def armor_public_keys(data: bytes, headers: Sequence[bytes] = ()) -> bytes:
    """ASCII-armor binary key data as a ``PGP PUBLIC KEY BLOCK`` (RFC 4880 §6.2), with armor ``headers``
    (``Comment: ...`` lines) if given."""
    encoded = base64.b64encode(data)
    lines = [encoded[i : i + 64] for i in range(0, len(encoded), 64)]
    checksum = base64.b64encode(crc24(data).to_bytes(3, "big"))
    return b"\n".join([ARMOR_HEADER, *headers, b"", *lines, b"=" + checksum, ARMOR_FOOTER, b""])


def dearmor_public_keys(data: bytes) -> bytes:
    """The binary packets of exactly one ``PGP PUBLIC KEY BLOCK`` (whitespace around it only).

    Armor headers are skipped; the checksum, when present, must match.  Anything else (two blocks,
    text around the block, bad base64) is a :class:`GpgError`: key data from others is read whole or
    not at all, so the bytes checked here are the bytes gpg is given.
    """
    lines = data.strip().splitlines()
    if not lines or lines[0].strip() != ARMOR_HEADER or lines[-1].strip() != ARMOR_FOOTER:
        raise GpgError("not one armored public key block (BEGIN/END PGP PUBLIC KEY BLOCK)")
    body = [line.strip() for line in lines[1:-1]]
    if any(line.startswith(b"-----") for line in body):
        raise GpgError("more than one armored block in the key data")
    if b"" in body:
        body = body[body.index(b"") + 1 :]  # armor headers (Version:, Comment:, ...)
    checksum = body.pop()[1:] if body and body[-1].startswith(b"=") else None
    try:
        packets = base64.b64decode(b"".join(body), validate=True)
        crc = None if checksum is None else int.from_bytes(base64.b64decode(checksum, validate=True), "big")
    except (binascii.Error, ValueError) as exc:
        raise GpgError("the armored key data is not valid base64") from exc
    if crc is not None and crc != crc24(packets):
        raise GpgError("armor checksum mismatch in the key data")
    return packets


def keep_user_ids(keyblock: bytes, keep: Callable[[str], bool]) -> bytes:
    """One keyblock with only the User ID packets for which ``keep(text)`` is true (and their signatures).

    User attribute packets (photos) and their signatures are dropped too; the primary key, its direct
    signatures and the subkeys with their bindings are kept as they are.  The text is the packet's
    UTF-8 (invalid bytes replaced, so they never match an address).
    """
    out: list[bytes] = []
    dropping = False
    for tag, start, body, end in _packets(keyblock):
        if tag in (USER_ID_TAG, USER_ATTRIBUTE_TAG):
            dropping = tag == USER_ATTRIBUTE_TAG or not keep(keyblock[body:end].decode("utf-8", "replace"))
        elif tag != SIGNATURE_TAG:
            dropping = False
        if not dropping:
            out.append(keyblock[start:end])
    return b"".join(out)


def user_id_texts(keyblock: bytes) -> list[str]:
    """The texts of a keyblock's User ID packets, in order (UTF-8, invalid bytes replaced)."""
    return [keyblock[body:end].decode("utf-8", "replace")
            for tag, _start, body, end in _packets(keyblock) if tag == USER_ID_TAG]


REVOCATION_KEY = 12  # signature subpacket: a designated revoker (RFC 9580 §5.2.3.23)
SELF_SIGNATURE_CLASSES = frozenset({0x10, 0x11, 0x12, 0x13, 0x1F})
KEY_REVOCATIONS = frozenset({0x20, 0x28})


def _issuer_and_revokers(body: bytes) -> tuple[str, str, list[str]]:
    """A v4 signature's issuer fingerprint ("" if it names none), issuer key id and the designated revokers its
    hashed area names (upper-case hex)."""
    hashed, unhashed, _end = signature_areas(body)
    fingerprint = next((value[1:].hex().upper() for kind, value in hashed
                        if kind == ISSUER_FINGERPRINT and len(value) == 21), "")
    key_id = next((value.hex().upper() for kind, value in (*hashed, *unhashed) if kind == ISSUER_KEY_ID), "")
    revokers = [value[2:].hex().upper() for kind, value in hashed if kind == REVOCATION_KEY and len(value) == 22]
    return fingerprint, key_id or fingerprint[-16:], revokers


def designated_revocations(data: bytes, present: Callable[[], Collection[Fingerprint]]) -> bytes:
    """The key and subkey revocations in binary key ``data`` made by a *designated revoker* of the key they
    revoke whose own key is in ``present()`` (asked only when there is one) or in ``data`` (a key of the
    same keyring, so pinned by the same category), as keyblocks holding only the revoked key, the subkeys
    concerned and those revocations.

    ``self-sigs-only`` imports drop every signature made by another key, these too; importing what this
    returns afterwards keeps them, and only them (the engine checks each signature as it imports it).
    """
    blocks = split_keyblocks(data)
    known: set[str] = set()
    out: list[bytes] = []
    for block in blocks:
        signatures: list[_Signature] = []
        component = b""  # the subkey packet a signature follows (b"" after the primary key)
        for tag, start, body, end in _packets(block.data):
            if tag in (PUBLIC_KEY_TAG, PUBLIC_SUBKEY_TAG):
                component = b"" if tag == PUBLIC_KEY_TAG else block.data[start:end]
            elif tag == SIGNATURE_TAG and block.data[body : body + 1] == b"\x04" and end - body > 2:
                with contextlib.suppress(NoSignatureError):
                    signatures.append(_Signature(block.data[body + 1], component, block.data[start:end],
                                                 *_issuer_and_revokers(block.data[body:end])))
        revokers = {fpr for sig in signatures if sig.kind in SELF_SIGNATURE_CLASSES and sig.by(block.primary)
                    for fpr in sig.revokers}
        candidates = [sig for sig in signatures if sig.kind in KEY_REVOCATIONS and not sig.by(block.primary)
                      and any(sig.by(fpr) for fpr in revokers)]
        if candidates and not known:
            known = set(present()) | {other.primary for other in blocks}
        chosen = [sig.component + sig.raw for sig in candidates if any(sig.by(fpr) for fpr in revokers & known)]
        if chosen:
            first = next(iter(_packets(block.data)))
            out.append(block.data[first[1] : first[3]] + b"".join(chosen))
    return b"".join(out)


@dataclass(frozen=True)
class _Signature:
    """What :func:`designated_revocations` reads of one v4 signature packet."""

    kind: int  # the signature class
    component: bytes  # the subkey packet it follows (b"" after the primary key)
    raw: bytes  # the whole packet
    fingerprint: str  # its issuer fingerprint, "" if none
    key_id: str  # its issuer key id
    revokers: list[str]  # designated revokers its hashed area names

    def by(self, fingerprint: str) -> bool:
        """Whether the key of ``fingerprint`` issued this signature (by fingerprint, else by key id)."""
        return self.fingerprint == fingerprint if self.fingerprint else bool(self.key_id) and fingerprint.endswith(
            self.key_id)


SUBKEY_BINDING = 0x18
EMBEDDED_SIGNATURE = 32  # signature subpacket: the back-signature (0x19) inside a signing subkey's binding
CREATION_TIME = 2


def back_signature_hashes(data: bytes) -> dict[Fingerprint, int]:
    """For each subkey in binary key ``data`` whose newest binding by its primary carries an embedded primary key
    binding (the back-signature, class 0x19, RFC 9580 §5.2.1), that back-signature's hash algorithm id.
    Colon listings do not show it; Sequoia's policy judges it like the binding (a SHA-1 back-signature makes the
    subkey unusable there)."""
    found: dict[Fingerprint, int] = {}
    for block in split_keyblocks(data):
        subkey: Fingerprint | None = None
        newest = -1
        for tag, _start, body, end in _packets(block.data):
            if tag == PUBLIC_SUBKEY_TAG:
                subkey, newest = key_fingerprint(block.data[body:end]), -1
                continue
            sig = block.data[body:end]
            if tag != SIGNATURE_TAG or subkey is None or sig[:1] != b"\x04" or len(sig) < 4 or sig[1] != SUBKEY_BINDING:
                continue
            with contextlib.suppress(NoSignatureError):
                hashed, unhashed, _end = signature_areas(sig)
                created = next((int.from_bytes(v[:4], "big") for k, v in hashed if k == CREATION_TIME), 0)
                embedded = next((v for k, v in (*hashed, *unhashed) if k == EMBEDDED_SIGNATURE and len(v) > 3), None)
                if created >= newest:
                    newest = created
                    if embedded is not None:
                        found[subkey] = embedded[3]
                    else:
                        found.pop(subkey, None)
    return found


def without_subkeys(data: bytes, subkeys: Collection[Fingerprint]) -> bytes:
    """Binary key ``data`` without the named subkeys (their key packets and the signatures after them)."""
    if not subkeys:
        return data
    out: list[bytes] = []
    dropping = False
    for tag, start, body, end in _packets(data):
        if tag != SIGNATURE_TAG:
            dropping = tag == PUBLIC_SUBKEY_TAG and key_fingerprint(data[body:end]) in subkeys
        if not dropping:
            out.append(data[start:end])
    return b"".join(out)
