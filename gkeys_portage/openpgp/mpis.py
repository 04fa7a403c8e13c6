"""The MPIs of an OpenPGP v4 signature value: read them as every engine will, or refuse (RFC 9580 §3.2).

GnuPG reads only the octets an MPI's bit count implies, Sequoia refuses a count that is not the value's length:
the same signature could then be good to one and no signature to the other.  The one non-canonical form real
signers make (an RSA count above the value's length, GitHub's web-flow key) is read alike by both and normalised
(:func:`canonical_body`) before the second opinion reads it.
"""

from __future__ import annotations

from gkeys_portage.core.errors import NoSignatureError

#: Public-key algorithms whose v4 signature is a list of MPIs, and how many (RFC 9580 §5.2.3).
SIGNATURE_MPIS = {1: 1, 3: 1, 17: 2, 19: 2, 22: 2}


#: RSA (sign or encrypt-and-sign): real signers (GitHub's web-flow key) declare the modulus size as the bit count.
RSA_ALGORITHMS = frozenset({1, 3})


def read_mpis(algorithm: int, data: bytes) -> list[tuple[int, bytes]]:
    """``(declared bit count, value octets)`` of each MPI of a v4 signature value; refuse one that engines read
    differently.

    The canonical form has bit count = the value's length.  Sequoia refuses a non-canonical MPI, GnuPG reads only
    the bytes the count implies: a count one lower made the same ed25519 signature good to one and no signature
    to the other (RFC 9580 §3.2).  One exception, for RSA only: a count *above* the value's length that still
    implies exactly the octets present (GitHub's web-flow signatures declare 4,096 bits for a 4,094-bit value).
    Every engine reads the same octets then; the count is not signed, and :func:`canonical_body` normalises it
    before the second opinion reads the signature.
    """
    pos = 0
    found: list[tuple[int, bytes]] = []
    for _ in range(SIGNATURE_MPIS.get(algorithm, 0)):
        if pos + 2 > len(data):
            raise NoSignatureError("truncated signature value")
        bits = int.from_bytes(data[pos : pos + 2], "big")
        size = (bits + 7) // 8
        value = data[pos + 2 : pos + 2 + size]
        actual = int.from_bytes(value, "big").bit_length()
        padded = algorithm in RSA_ALGORITHMS and actual < bits
        if len(value) != size or (actual != bits and not padded):
            raise NoSignatureError("a signature value is not in canonical form (its bit count is wrong): it was "
                                   "altered")
        found.append((bits, value))
        pos += 2 + size
    return found


def check_mpis(algorithm: int, data: bytes) -> None:
    """Refuse a signature whose MPIs engines would read differently (:func:`read_mpis`)."""
    read_mpis(algorithm, data)


def mpi_start(body: bytes) -> int | None:
    """Where a v4 signature's MPIs start (after both subpacket areas and the hash's left 16 bits)."""
    if not body or body[0] != 4 or len(body) < 6:
        return None
    pos = 4
    for _ in range(2):
        if pos + 2 > len(body):
            return None
        pos += 2 + int.from_bytes(body[pos : pos + 2], "big")
    return pos + 2


def canonical_body(body: bytes) -> bytes:
    """A v4 signature packet's ``body`` with every RSA MPI's bit count set to its value's length (leading zero
    octets dropped), as Sequoia requires; the signed part is unchanged.  Any other body is returned as it was."""
    start = mpi_start(body)
    if start is None or body[2] not in RSA_ALGORITHMS:
        return body
    return body[:start] + b"".join(
        (number := int.from_bytes(value, "big")).bit_length().to_bytes(2, "big")
        + number.to_bytes((number.bit_length() + 7) // 8, "big") for _, value in read_mpis(body[2], body[start:]))
