"""Parser differential (issue 11 item 1): the project's armor/packet parser and gpg must agree.

The same bytes go to :mod:`gkeys_portage.openpgp.packets` and to gpg (``--dearmor`` and ``--list-packets``
in a throwaway home).  Property: whatever the project accepts as a detached signature, gpg decodes to
exactly the same packets, all of them signatures; whatever it accepts as a cleartext-signed block, gpg
sees one literal text and the same signature packets.  (gpg is never handed these bytes by the
verifiers any more; the property shows the strict parser leaves no room for a second reading.)
Inputs are mutations of real armor: whitespace before or after lines, header lines, other BEGIN/END
lines, a signed message's lines, deleted and repeated lines, CRLF.
Budget: ``GKEYS_FUZZ_EXAMPLES`` (default 200 per property; each example runs gpg twice).
"""

from __future__ import annotations

import contextlib
import os
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gkeys_portage.core.errors import NoSignatureError
from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.packets import (
    detached_signature_packets,
    find_clearsigned,
    parse_packets,
    signed_message_packets,
)
from gkeys_portage.openpgp.signatures import cleartext_output

EXAMPLES = int(os.environ.get("GKEYS_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

_PACKET_LINE = re.compile(rb"# off=\d+ ctb=[0-9a-f]+ tag=(\d+) hlen=\d+ plen=(\d+)")


@pytest.fixture(scope="module")
def material(keys: KeyFactory, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """A detached signature, a clearsigned text and a signed message by alice (armored)."""
    work = tmp_path_factory.mktemp("armor-fuzz")
    doc = work / "doc"
    doc.write_bytes(b"first line\n- dashed\n\ntrailing  \n")
    signed = keys.gpg.run(["-z", "0", "--armor", "--local-user", keys.keys["alice"].fingerprint, "--sign",
                           "--output", "-", str(doc)])
    assert signed.returncode == 0, signed.stderr
    return {"detached": keys.sign("alice", doc), "clear": keys.sign("alice", doc, clearsign=True),
            "message": signed.stdout}


@pytest.fixture(scope="module")
def gpg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GnuPG]:
    """An empty throwaway home: parsing needs no keys."""
    yield GnuPG(tmp_path_factory.mktemp("armor-fuzz-home"), timeout=30)


PREFIXES = [b" ", b"\t", b"\x0c", b"\x0b", b"\r", b"  "]
SUFFIXES = [b" ", b"\t", b"\r", b" x"]
EXTRA_LINES = [b"", b"Version: GnuPG v2", b"Comment: x", b"Hash: SHA256", b"garbage", b"=AAAA",
               b"-----BEGIN PGP MESSAGE-----", b"-----END PGP MESSAGE-----", b"-----BEGIN PGP SIGNATURE-----",
               b"-----END PGP SIGNATURE-----", b"-----BEGIN PGP SIGNED MESSAGE-----",
               b"- -----BEGIN PGP SIGNATURE-----", b"Version:x", b": x", b"AAAA", b"====", b"\x00",
               b"a\x00b", b"\x0c", b"a\x0bb", b"\x1a", b"\xff\xfe", b"- ", b"-", b"--", b"\r"]

edit = st.one_of(
    st.tuples(st.just("prefix"), st.integers(0, 40), st.sampled_from(PREFIXES)),
    st.tuples(st.just("suffix"), st.integers(0, 40), st.sampled_from(SUFFIXES)),
    st.tuples(st.just("insert"), st.integers(0, 40), st.sampled_from(EXTRA_LINES)),
    st.tuples(st.just("message"), st.integers(0, 40), st.integers(0, 20)),
    st.tuples(st.just("delete"), st.integers(0, 40), st.just(b"")),
    st.tuples(st.just("repeat"), st.integers(0, 40), st.just(b"")),
    st.tuples(st.just("crlf"), st.just(0), st.just(b"")),
)


def _mutate(base: bytes, message: bytes, edits: list[tuple[str, int, bytes | int]]) -> bytes:
    lines = base.split(b"\n")
    extra = message.split(b"\n")
    crlf = False
    for kind, where, what in edits:
        at = where % max(1, len(lines))
        if kind == "prefix" and lines:
            lines[at] = bytes(what) + lines[at]
        elif kind == "suffix" and lines:
            lines[at] = lines[at] + bytes(what)
        elif kind == "insert":
            lines.insert(at, bytes(what))
        elif kind == "message":
            assert isinstance(what, int)
            lines.insert(at, extra[what % len(extra)])
        elif kind == "delete" and lines:
            del lines[at]
        elif kind == "repeat" and lines:
            lines.insert(at, lines[at])
        elif kind == "crlf":
            crlf = True
    return (b"\r\n" if crlf else b"\n").join(lines)


def _gpg_packets(gpg: GnuPG, data: bytes, work: Path) -> list[tuple[int, int]]:
    path = work / "input"
    path.write_bytes(data)
    listing = gpg.run(["--list-packets", str(path)])
    return [(int(tag), int(plen)) for tag, plen in _PACKET_LINE.findall(listing.stdout)]


def _ours(packets: bytes) -> list[tuple[int, int]]:
    return [(p.tag, len(p.body)) for p in parse_packets(packets)]


@FUZZ
@given(st.lists(edit, max_size=4))
def test_accepted_detached_signatures_mean_the_same_to_gpg(material: dict[str, bytes], gpg: GnuPG,
                                                           tmp_path: Path,
                                                           edits: list[tuple[str, int, bytes | int]]) -> None:
    data = _mutate(material["detached"], material["message"], edits)
    try:
        packets = detached_signature_packets(data)
    except NoSignatureError:
        event("refused")
        return
    event("accepted")
    dearmored = gpg.run(["--dearmor"], data)
    assert dearmored.returncode == 0 and dearmored.stdout == packets, data
    theirs = _gpg_packets(gpg, data, tmp_path)
    assert theirs == _ours(packets), data
    assert all(tag == 2 for tag, _ in theirs)


def _gpg_reading(gpg: GnuPG, data: bytes) -> tuple[bytes, list[tuple[int, int, int]]]:
    """What gpg prints as the signed text and, per signature, (class, public-key algo, hash algo)."""
    result = gpg.run(["--decrypt"], data)
    sigs = []
    for line in result.status.lines:
        keyword, *fields = line.split(" ")
        if keyword == "ERRSIG":
            sigs.append((int(fields[3], 16), int(fields[1]),
                         int(fields[2])))
    return result.stdout, sigs


def _our_signatures(packets: bytes) -> list[tuple[int, int, int]]:
    return [(p.body[1], p.body[2], p.body[3]) for p in parse_packets(packets)]


@FUZZ
@given(st.lists(edit, max_size=4))
def test_accepted_cleartext_blocks_mean_the_same_to_gpg(material: dict[str, bytes], gpg: GnuPG,
                                                        edits: list[tuple[str, int, bytes | int]]) -> None:
    data = _mutate(material["clear"], material["message"], edits)
    try:
        block = find_clearsigned(data)
    except NoSignatureError:
        event("refused")
        return
    event("accepted, text around it" if block.outside else "accepted")
    text, sigs = _gpg_reading(gpg, block.canonical)
    assert text == cleartext_output(block.escaped), data
    assert sigs == _our_signatures(block.signature), data
    if not block.outside:
        assert _gpg_reading(gpg, data) == (text, sigs), data


packet_bytes = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda tag, body: bytes([0xC0 | tag, len(body)]) + body, st.sampled_from([2, 4, 8, 11, 63]),
              st.binary(max_size=150)),
    st.builds(lambda algo, body: b"\xa3" + bytes([algo]) + body, st.integers(0, 4),
              st.one_of(st.binary(max_size=200), st.builds(zlib.compress, st.binary(max_size=200)))),
)


@FUZZ
@given(st.lists(packet_bytes, max_size=5))
def test_packet_parsers_refuse_with_their_own_error_only(parts: list[bytes]) -> None:
    """Random packets and compressed data: the parsers accept or raise NoSignatureError, nothing else."""
    data = b"".join(parts)
    for parse in (detached_signature_packets, signed_message_packets, find_clearsigned, parse_packets):
        with contextlib.suppress(NoSignatureError):
            parse(data)
    try:
        packets = signed_message_packets(data, limit=4096)
    except NoSignatureError:
        return
    tags = [p.tag for p in parse_packets(packets)]
    assert 11 in tags and tags.count(4) == tags.count(2) >= 1 and 8 not in tags
