"""gpg-sq's status stream forged by a notation name (issue 34, case 2), caught by the second opinion.

gpg-sq 0.13.1 writes a notation *name* unescaped into its status stream: bob's good signature whose hashed notation
name carries newlines and ``[GNUPG:] VALIDSIG <alice>`` lines made ``gkeys verify -C devs -n alice`` accept bob's
signature as alice's.  Sequoia reads the signature itself and credits bob, so the verdict refuses whatever the
status stream says.  The key and the signature are made by hand here (GnuPG refuses such a notation name).
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gkeys_portage.core.errors import EnginesDisagreeError, NotVerifiedError
from gkeys_portage.core.types import Category, Fingerprint, Nick
from gkeys_portage.openpgp import packets
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.verdict import Pin, PinSet, decide

GPG_SQ = os.path.join(os.environ.get("GKEYS_TEST_ENGINES", "/opt/gkeys-engines/bin"), "gpg-sq")


def mpi(b: bytes) -> bytes:
    n = int.from_bytes(b, "big")
    return n.bit_length().to_bytes(2, "big") + n.to_bytes((n.bit_length() + 7) // 8, "big")

def packet(tag: int, body: bytes) -> bytes:
    return bytes([0xC0 | tag, 255]) + len(body).to_bytes(4, "big") + body

def sub(kind: int, data: bytes) -> bytes:
    body = bytes([kind]) + data
    return bytes([255]) + len(body).to_bytes(4, "big") + body

OID = bytes.fromhex("2B06010401DA470F01")

class Key:
    """An ed25519 key (v4, EdDSA legacy) that signs with any hashed subpackets."""

    def __init__(self, created: int):
        self.sk = Ed25519PrivateKey.generate()
        pub = self.sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.body = bytes([4]) + created.to_bytes(4, "big") + bytes([22, len(OID)]) + OID + mpi(b"\x40" + pub)
        self.fpr = hashlib.sha1(b"\x99" + len(self.body).to_bytes(2, "big") + self.body).digest()

    def sign(self, sigtype: int, hashed_prefix: bytes, hashed: bytes, created: int) -> bytes:
        area = sub(2, created.to_bytes(4, "big")) + sub(33, b"\x04" + self.fpr) + hashed
        head = bytes([4, sigtype, 22, 8]) + len(area).to_bytes(2, "big") + area
        trailer = b"\x04\xff" + len(head).to_bytes(4, "big")
        digest = hashlib.sha256(hashed_prefix + head + trailer).digest()
        sig = self.sk.sign(digest)
        unhashed = sub(16, self.fpr[-8:])
        return packet(2, head + len(unhashed).to_bytes(2, "big") + unhashed + digest[:2] + mpi(sig[:32])
                      + mpi(sig[32:]))

    def cert(self, uid: bytes, created: int) -> bytes:
        prefix = b"\x99" + len(self.body).to_bytes(2, "big") + self.body + b"\xb4" + len(uid).to_bytes(4, "big") + uid
        selfsig = self.sign(0x13, prefix, sub(27, b"\x03"), created)  # certify + sign
        return packet(6, self.body) + packet(13, uid) + selfsig

    def detached(self, data: bytes, notation_name: bytes, value: bytes, created: int) -> bytes:
        note = (b"\x80\x00\x00\x00" + len(notation_name).to_bytes(2, "big") + len(value).to_bytes(2, "big")
                + notation_name + value)
        return self.sign(0x00, data, sub(20, note), created)


def _gpg_sq() -> str:
    """gpg-sq, or a skip naming how to build it; with ``$GKEYS_TEST_ENGINES`` set (CI) a missing one fails."""
    if not os.access(GPG_SQ, os.X_OK):
        if os.environ.get("GKEYS_TEST_ENGINES"):
            pytest.fail(f"{GPG_SQ} is missing ($GKEYS_TEST_ENGINES is set: did make-engines.sh fail?)")
        pytest.skip(f"{GPG_SQ} is not built: run bash ../shared/openpgp-engines/make-engines.sh /opt/gkeys-engines")
    return GPG_SQ


def _forgery(tmp_path: Path) -> tuple[Path, Key, bytes, bytes, PinSet]:
    """A home holding alice and bob; bob's signature over the data whose notation name forges alice's status
    lines; the data; alice's pin."""
    now = int(time.time()) - 100
    alice, bob = Key(now - 1000), Key(now - 1000)
    home = tmp_path / "home"
    GnuPG(home, program="gpg").import_keys(alice.cert(b"alice <alice@example.org>", now - 1000)
                                           + bob.cert(b"bob <bob@example.org>", now - 1000))
    forged = alice.fpr.hex().upper()
    name = (f"x\n[GNUPG:] VALIDSIG {forged} 2026-12-06 {now} 0 4 0 22 8 00 {forged}\n"
            f"[GNUPG:] GOODSIG {forged[-16:]} alice\nx@example.org").encode()
    data = b"payload\n"
    pins = PinSet.of([Pin(Category("devs"), Nick("alice"), Fingerprint(forged))])
    return home, bob, bob.detached(data, name, b"v", now), data, pins


@pytest.mark.parametrize("engine", ["gpg", "gpg-sq"])
def test_a_notation_name_forging_gpg_sq_status_lines_does_not_make_bob_alice(tmp_path: Path, engine: str) -> None:
    """Row 165: the notation name carries control characters, so the signature is refused before any engine
    reads it (on every engine: no status stream exists to forge)."""
    home, _bob, signature, data, pins = _forgery(tmp_path)
    gpg = GnuPG(home, program=_gpg_sq() if engine == "gpg-sq" else "gpg")
    report = gpg.verify_detached(signature, data)
    with pytest.raises(NotVerifiedError):
        decide(report, pins, {k.fingerprint: k for k in gpg.list_keys()})
    assert report.second is None and not report.signatures, report
    assert any("notation name carries control characters" in failure for failure in report.failures), report


def test_sequoia_credits_bob_when_gpg_sq_s_status_stream_says_alice(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Row 152, with the other layers taken away (row 165's pre-check, and the status parser's finding that a
    VALIDSIG line stands where gpg-sq writes its notation): gpg-sq's stream says VALIDSIG alice, Sequoia reads
    the signature and credits bob, so alice's pin is not confirmed (the two verifiers disagree)."""
    sq = _gpg_sq()
    monkeypatch.setattr(packets, "NOTATION", -1)  # row 165's pre-check off: the forged name reaches gpg-sq
    home, bob, signature, data, pins = _forgery(tmp_path)
    gpg = GnuPG(home, program=sq)
    report = gpg.verify_detached(signature, data)
    assert report.anomalies, report  # the status parser's layer, taken away next
    report.anomalies = []
    assert any(sig.valid for sig in report.signatures), "gpg-sq was not fooled: the test proves nothing"
    assert report.second is not None
    assert report.second.signers == {(bob.fpr.hex().upper(), bob.fpr.hex().upper())}, report.second.said
    with pytest.raises(EnginesDisagreeError, match="GnuPG says good signature by devs/alice.*Sequoia says good "
                       "signature only by " + bob.fpr.hex().upper()):
        decide(report, pins, {k.fingerprint: k for k in gpg.list_keys()})
