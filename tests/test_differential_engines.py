"""Differential testing of the two implementations (issue 34, item 9): seeded, time-bounded.

Hypothesis mutates detached signatures (bytes of the packets, the MPI bit counts), the signed data, and the
framing of cleartext-signed messages (trailing blanks, form feeds, carriage returns, dash escapes, lines past
what GnuPG 2.2 hashes, the final newline, text outside the block); each mutant goes through gkeys' door and
``decide``.  Property: gkeys never says verified when GnuPG (``gpg --verify`` on the mutant as given) or Sequoia
(pysequoia on the mutant as given) refuses it, and what gkeys returns as the signed text is what both checked.
Budget: ``GKEYS_DIFF_EXAMPLES`` (default 200 per property; derandomized, so CI runs the same cases).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gkeys_portage.core.errors import GkeysError
from gkeys_portage.core.types import Category, Nick
from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.packets import dearmor_signature
from gkeys_portage.openpgp.verdict import Pin, PinSet, SignedData, VerifyResult, decide

EXAMPLES = int(os.environ.get("GKEYS_DIFF_EXAMPLES", "200"))
DIFF = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
DATA = b"stage3-amd64.tar.xz\n"
TEXT = b"# SHA512 HASH\n" + b"0" * 128 + b"  stage3-amd64.tar.xz\n- dashed\nlast line\n"


class World:
    """A verifying home holding alice's certificate, her signatures, and both implementations' own verdicts."""

    def __init__(self, keys: KeyFactory, root: Path) -> None:
        self.root = root
        self.gpg = GnuPG(root / "home")
        self.gpg.import_keys(keys.public("alice"))
        self.cert = keys.public("alice", armor=False)
        self.pins = PinSet.of([Pin(Category("gentoo"), Nick("alice"), keys.keys["alice"].fingerprint)])
        self.listing = {k.fingerprint: k for k in self.gpg.list_keys()}
        self.signature = dearmor_signature(keys.sign_bytes("alice", DATA, root))
        self.cleartext = keys.sign_bytes("alice", TEXT, root, clearsign=True)

    def gkeys(self, report: Any, signed: SignedData) -> VerifyResult | None:
        try:
            return decide(report, self.pins, self.listing, signed=signed)
        except GkeysError:
            return None

    def gnupg_alone(self, args: list[str], stdin: bytes) -> bool:
        out = subprocess.run(["gpg", "--homedir", str(self.root / "home"), "--status-fd", "1", "--batch",
                              *args], input=stdin, capture_output=True, check=False).stdout
        lines = out.decode("latin-1").splitlines()
        return any(" VALIDSIG " in line for line in lines) and not any(
            word in line for line in lines for word in (" BADSIG ", " ERRSIG ", " EXPKEYSIG ", " REVKEYSIG "))

    def sequoia_alone(self, data: bytes, signature: bytes | None = None) -> bytes | None:
        """The text Sequoia says was signed (b"" for a detached signature), or None when it refuses."""
        import pysequoia

        try:
            certs = pysequoia.Cert.split_bytes(self.cert)
            if signature is None:
                result = pysequoia.verify(bytes=data, store=lambda _: certs)
            else:
                result = pysequoia.verify(bytes=data, store=lambda _: certs,
                                          signature=pysequoia.Sig.from_bytes(signature))
        except Exception:  # noqa: BLE001 - any refusal
            return None
        return bytes(result.bytes or b"") if result.valid_sigs else None


@pytest.fixture(scope="module")
def world(keys: KeyFactory, tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(keys, tmp_path_factory.mktemp("differential"))


def _mutate(data: bytes, edits: list[tuple[int, int]]) -> bytes:
    out = bytearray(data)
    for position, value in edits:
        if out:
            out[position % len(out)] = value
    return bytes(out)


edits = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3)


@DIFF
@given(sig_edits=edits, data_edits=edits, tail=st.sampled_from([b"", b"\n", b"\r\n", b" ", b"\x0c"]))
def test_a_mutated_detached_signature_is_verified_only_when_both_engines_accept(
        world: World, sig_edits: list[tuple[int, int]], data_edits: list[tuple[int, int]], tail: bytes) -> None:
    signature = _mutate(world.signature, sig_edits)
    data = _mutate(DATA, data_edits) + tail
    verified = world.gkeys(world.gpg.verify_detached(signature, data), SignedData.BINARY)
    if verified is None:
        return
    sigfile = world.root / "mutant.sig"
    sigfile.write_bytes(signature)
    assert world.gnupg_alone(["--verify", str(sigfile), "-"], data), "verified, but GnuPG alone refuses"
    assert world.sequoia_alone(data, signature) is not None, "verified, but Sequoia alone refuses"


framing = st.sampled_from([
    lambda t: t, lambda t: t.replace(b"HASH\n", b"HASH  \n"), lambda t: t.replace(b"HASH\n", b"HASH\x0c\n"),
    lambda t: t.replace(b"\n", b"\r\n"), lambda t: t.replace(b"- dashed", b"dashed"),
    lambda t: t.replace(b"- dashed", b"- - dashed"), lambda t: t.replace(b"last line", b"last line" + b" " * 20_000 +
                                                                         b"appended"),
    lambda t: t.replace(b"last line\n", b"last line\nunsigned\n"), lambda t: b"before\n" + t,
    lambda t: t + b"after\n", lambda t: t.replace(b"\n-----BEGIN PGP SIGNATURE", b"\n\n-----BEGIN PGP SIGNATURE"),
    lambda t: t.replace(b"Hash: SHA512\n", b"Hash: SHA256\n"), lambda t: t.replace(b"\x0a", b"\x0d"),
])


@DIFF
@given(frame=framing, more=framing, text_edits=edits)
def test_a_mutated_cleartext_is_verified_only_when_both_engines_accept_the_text_gkeys_returns(
        world: World, frame: Any, more: Any, text_edits: list[tuple[int, int]]) -> None:
    start = world.cleartext.index(b"\n\n") + 2
    end = world.cleartext.index(b"-----BEGIN PGP SIGNATURE")
    body = _mutate(world.cleartext[start:end], text_edits)
    message = more(frame(world.cleartext[:start] + body + world.cleartext[end:]))
    report, plaintext = world.gpg.verify_clearsigned(message)
    verified = world.gkeys(report, SignedData.CLEARTEXT)
    if verified is None:
        return
    assert world.gnupg_alone(["--decrypt"], message), "verified, but GnuPG alone refuses"
    seen = world.sequoia_alone(message)
    assert seen is not None, "verified, but Sequoia alone refuses"
    assert plaintext in (seen + b"\n", seen + b"\r\n"), "gkeys returns another text than Sequoia checked"
