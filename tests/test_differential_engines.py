"""Differential testing of the two implementations (issue 34, item 9; issue 47): seeded, time-bounded.

Hypothesis builds mutants of alice's detached signature and cleartext-signed message from two kinds of change:

* changes that keep the signature valid, so that the engines' verdicts are compared on inputs gkeys accepts:
  subpackets added to the unhashed area, the packet's length header in another of its legal forms, armor (headers,
  CRLF lines, no checksum); for cleartext, CRLF line endings, trailing blanks (not signed), a needless dash
  escape, an armor header in the signature block;
* changes that may break it: the first MPI's bit count raised to the octets it holds (GnuPG keeps an EdDSA
  signature so changed, Sequoia refuses it: row 155 accepts that only for RSA), byte edits of the packets, the
  data and the signed text, and the framing's edge cases (form feeds, carriage returns alone, lines past what
  GnuPG 2.2 hashes, text outside the block).

Each mutant goes through gkeys' door and ``decide``.  Property: gkeys never says verified when GnuPG (``gpg`` on
the mutant as given) or Sequoia (pysequoia on the mutant as given) refuses it, and the text gkeys returns is
the text both checked.  The unmutated input must verify; each run must have gkeys accept at least
:data:`MIN_ACCEPTED` mutants (else the property compared nothing), counted with ``hypothesis.event``
(``--hypothesis-show-statistics``).  Budget: ``GKEYS_DIFF_EXAMPLES`` (default 200 per property; derandomized, so
CI runs the same cases) within ``GKEYS_DIFF_SECONDS`` (default 300): examples past it are skipped, counted.
"""

from __future__ import annotations

import base64
import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gkeys_portage.core.errors import GkeysError
from gkeys_portage.core.types import Category, Nick
from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.packets import armor, crc24, dearmor_signature
from gkeys_portage.openpgp.verdict import Pin, PinSet, SignedData, VerifyResult, decide

EXAMPLES = int(os.environ.get("GKEYS_DIFF_EXAMPLES", "200"))
SECONDS = float(os.environ.get("GKEYS_DIFF_SECONDS", "300"))
#: gkeys must accept at least this share of a run's mutants (about half keep the signature valid)
MIN_ACCEPTED = max(5, EXAMPLES // 10)
DIFF = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
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

    def detached(self, signature: bytes, data: bytes) -> tuple[VerifyResult | None, bool, bool]:
        """(gkeys' verdict, GnuPG alone accepts, Sequoia alone accepts) on a detached signature as given."""
        verified = self.gkeys(self.gpg.verify_detached(signature, data), SignedData.BINARY)
        sigfile = self.root / "mutant.sig"
        sigfile.write_bytes(signature)
        return verified, self.gnupg_alone(["--verify", str(sigfile), "-"], data), \
            self.sequoia_alone(data, signature) is not None


@pytest.fixture(scope="module")
def world(keys: KeyFactory, tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(keys, tmp_path_factory.mktemp("differential"))


class Budget:
    """A run's tally (accepted, refused, skipped past the time budget) and its deadline."""

    def __init__(self) -> None:
        self.tally: Counter[str] = Counter()
        self.deadline = time.monotonic() + SECONDS

    def spent(self) -> bool:
        if time.monotonic() > self.deadline:
            self.tally["skipped past the time budget"] += 1
            event("skipped past the time budget")
            return True
        return False

    def count(self, verified: object, kinds: list[str]) -> None:
        outcome = "gkeys accepts" if verified is not None else "gkeys refuses"
        self.tally[outcome] += 1
        event(outcome)
        for kind in kinds:
            event(f"{outcome}: {kind}")
            self.tally[f"{outcome}: {kind}"] += 1

    def check(self) -> None:
        print(", ".join(f"{name} {count}" for name, count in sorted(self.tally.items())))
        assert self.tally["gkeys accepts"] >= MIN_ACCEPTED, (
            f"gkeys accepted {self.tally['gkeys accepts']} mutants (at least {MIN_ACCEPTED} wanted): the engines' "
            f"verdicts were hardly compared ({dict(self.tally)})")


# -- detached: changes that keep the signature valid -------------------------------------------------------


def _packet_body(packet: bytes) -> bytes:
    """The body of one binary signature packet (old or new format, any length form)."""
    first = packet[0]
    if first & 0x40:  # new format
        octet = packet[1]
        if octet < 192:
            return packet[2:2 + octet]
        if octet < 224:
            return packet[3:3 + ((octet - 192) << 8) + packet[2] + 192]
        assert octet == 255, packet[:6].hex()
        return packet[6:6 + int.from_bytes(packet[2:6], "big")]
    size = {0: 1, 1: 2, 2: 4}[first & 0x03]
    return packet[1 + size:1 + size + int.from_bytes(packet[1:1 + size], "big")]


def _header(body: bytes, form: str) -> bytes:
    """A signature packet header (tag 2) in one of its legal forms for ``body``."""
    size = len(body)
    return {"old-1": bytes([0x88, size]) if size < 256 else b"", "old-2": b"\x89" + size.to_bytes(2, "big"),
            "old-4": b"\x8a" + size.to_bytes(4, "big"), "new-1": bytes([0xC2, size]) if size < 192 else b"",
            "new-5": b"\xc2\xff" + size.to_bytes(4, "big")}[form] or b"\xc2\xff" + size.to_bytes(4, "big")


def _add_unhashed(body: bytes, kind: int, value: bytes) -> bytes:
    """``body`` (a v4 signature) with a non-critical subpacket of ``kind`` added to its unhashed area."""
    hashed = int.from_bytes(body[4:6], "big")
    start = 6 + hashed
    length = int.from_bytes(body[start:start + 2], "big")
    area = body[start + 2:start + 2 + length] + bytes([len(value) + 1, kind]) + value
    return body[:start] + len(area).to_bytes(2, "big") + area + body[start + 2 + length:]


def _pad_first_mpi(body: bytes) -> bytes:
    """``body`` with its first MPI's bit count raised to the octets it holds (the same octets: row 155)."""
    hashed = int.from_bytes(body[4:6], "big")
    start = 6 + hashed
    at = start + 2 + int.from_bytes(body[start:start + 2], "big") + 2  # past the unhashed area and hash prefix
    bits = int.from_bytes(body[at:at + 2], "big")
    return body[:at] + (((bits + 7) // 8) * 8).to_bytes(2, "big") + body[at + 2:]


def _armor(packets: bytes, style: str) -> bytes:
    text = armor(packets)
    if style == "comment":
        return text.replace(b"-----\n\n", b"-----\nComment: made by a mirror\n\n", 1)
    if style == "crlf":
        return text.replace(b"\n", b"\r\n")
    if style == "no-checksum":
        crc = b"=" + base64.b64encode(crc24(packets).to_bytes(3, "big")) + b"\n"
        return text.replace(crc, b"")
    return text


keeping = st.fixed_dictionaries({
    "unhashed": st.lists(st.tuples(st.integers(100, 110), st.binary(max_size=24)), max_size=3),
    "form": st.sampled_from(["old-1", "old-2", "old-4", "new-1", "new-5"]),
    "pad": st.booleans(),
    "armor": st.sampled_from(["binary", "plain", "comment", "crlf", "no-checksum"]),
})
edits = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3)


def _keep_valid(world: World, change: dict[str, Any]) -> tuple[bytes, list[str]]:
    """The signature with the changes that keep it valid, and their names (for the events)."""
    body = _packet_body(world.signature)
    kinds = []
    for kind, value in change["unhashed"]:
        body = _add_unhashed(body, kind, value)
        kinds.append("unhashed subpacket")
    if change["pad"] and _pad_first_mpi(body) != body:
        body = _pad_first_mpi(body)
        kinds.append("MPI padded")
    packet = _header(body, change["form"])
    kinds.append(f"header {change['form']}")
    packet += body
    if change["armor"] != "binary":
        kinds.append(f"armor {change['armor']}")
        return _armor(packet, change["armor"]), kinds
    return packet, kinds


def _mutate(data: bytes, edits: list[tuple[int, int]]) -> bytes:
    out = bytearray(data)
    for position, value in edits:
        if out:
            out[position % len(out)] = value
    return bytes(out)


def test_the_unmutated_inputs_and_each_valid_change_verify_on_all_three(world: World) -> None:
    """The property compares verdicts only if gkeys accepts what it is given: the original signature and
    message, and each change meant to keep a signature valid, verify with gkeys, GnuPG and Sequoia."""
    assert all(world.detached(world.signature, DATA))
    report, plaintext = world.gpg.verify_clearsigned(world.cleartext)
    assert world.gkeys(report, SignedData.CLEARTEXT) is not None and plaintext == TEXT
    for change in ({"unhashed": [(101, b"x")], "form": "old-1", "pad": False, "armor": "binary"},
                   {"unhashed": [], "form": "new-5", "pad": False, "armor": "comment"},
                   {"unhashed": [], "form": "old-2", "pad": False, "armor": "crlf"},
                   {"unhashed": [], "form": "old-1", "pad": False, "armor": "no-checksum"}):
        signature, kinds = _keep_valid(world, change)
        verified, gnupg, sequoia = world.detached(signature, DATA)
        assert gnupg and sequoia, (kinds, gnupg, sequoia)
        assert verified is not None, kinds


def test_a_mutated_detached_signature_is_verified_only_when_both_engines_accept(world: World) -> None:
    budget = Budget()

    @DIFF
    @given(change=keeping, sig_edits=edits, data_edits=edits, tail=st.sampled_from([b"", b"\n", b"\r\n", b" "]),
           breaking=st.booleans())
    def run(change: dict[str, Any], sig_edits: list[tuple[int, int]], data_edits: list[tuple[int, int]],
            tail: bytes, breaking: bool) -> None:
        if budget.spent():
            return
        signature, kinds = _keep_valid(world, change)
        data = DATA
        if breaking:
            signature, data = _mutate(signature, sig_edits), _mutate(DATA, data_edits) + tail
            kinds.append("edited")
        verified, gnupg, sequoia = world.detached(signature, data)
        budget.count(verified, kinds)
        if verified is not None:
            assert gnupg, f"verified, but GnuPG alone refuses ({kinds})"
            assert sequoia, f"verified, but Sequoia alone refuses ({kinds})"

    run()
    budget.check()


# -- cleartext ----------------------------------------------------------------------------------------------

Change = Callable[[bytes], bytes]
#: changes that keep a cleartext signature valid (by name, for the events)
CLEAR_KEEPING: dict[str, Change] = {
    "as signed": lambda t: t,
    "CRLF line endings": lambda t: t.replace(b"\n", b"\r\n"),
    "trailing blanks": lambda t: t.replace(b"HASH\n", b"HASH  \n").replace(b"last line\n", b"last line \t\n"),
    "needless dash escape": lambda t: t.replace(b"\nlast line\n", b"\n- last line\n"),
    "armor header": lambda t: t.replace(b"-----BEGIN PGP SIGNATURE-----\n",
                                        b"-----BEGIN PGP SIGNATURE-----\nComment: mirror\n"),
}
#: changes that may break it
CLEAR_BREAKING: dict[str, Change] = {
    "form feed": lambda t: t.replace(b"HASH\n", b"HASH\x0c\n"),
    "dash escape dropped": lambda t: t.replace(b"- dashed", b"dashed"),
    "dash escaped twice": lambda t: t.replace(b"- dashed", b"- - dashed"),
    "long line": lambda t: t.replace(b"last line", b"last line" + b" " * 20_000 + b"appended"),
    "unsigned line": lambda t: t.replace(b"last line\n", b"last line\nunsigned\n"),
    "text before": lambda t: b"before\n" + t, "text after": lambda t: t + b"after\n",
    "blank before signature": lambda t: t.replace(b"\n-----BEGIN PGP SIGNATURE", b"\n\n-----BEGIN PGP SIGNATURE"),
    "other Hash header": lambda t: t.replace(b"Hash: SHA512\n", b"Hash: SHA256\n"),
    "CR only": lambda t: t.replace(b"\x0a", b"\x0d"),
}


def test_a_mutated_cleartext_is_verified_only_when_both_engines_accept_the_text_gkeys_returns(
        world: World) -> None:
    budget = Budget()
    keep, breaking = sorted(CLEAR_KEEPING), sorted(CLEAR_BREAKING)

    @DIFF
    @given(first=st.sampled_from(keep), second=st.sampled_from(keep),
           broken=st.one_of(st.none(), st.sampled_from(breaking)), text_edits=edits)
    def run(first: str, second: str, broken: str | None, text_edits: list[tuple[int, int]]) -> None:
        if budget.spent():
            return
        start = world.cleartext.index(b"\n\n") + 2
        end = world.cleartext.index(b"-----BEGIN PGP SIGNATURE")
        body = world.cleartext[start:end]
        kinds = [first, second]
        if broken is not None:
            body = _mutate(body, text_edits)
            kinds += [broken, "edited"] if text_edits else [broken]
        message = world.cleartext[:start] + body + world.cleartext[end:]
        for name in kinds[:2]:
            message = CLEAR_KEEPING[name](message)
        if broken is not None:
            message = CLEAR_BREAKING[broken](message)
        report, plaintext = world.gpg.verify_clearsigned(message)
        verified = world.gkeys(report, SignedData.CLEARTEXT)
        budget.count(verified, kinds)
        if verified is None:
            return
        assert world.gnupg_alone(["--decrypt"], message), f"verified, but GnuPG alone refuses ({kinds})"
        seen = world.sequoia_alone(message)
        assert seen is not None, f"verified, but Sequoia alone refuses ({kinds})"
        assert plaintext in (seen + b"\n", seen + b"\r\n"), f"gkeys returns another text than Sequoia checked ({kinds})"

    run()
    budget.check()
