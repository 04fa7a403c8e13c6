"""Property-based fuzzing of the core parsers: never a traceback, never "verified" without a pinned key.

The budget is small in CI (``GKEYS_FUZZ_EXAMPLES``, default 200 per property); run a longer campaign
with e.g. ``GKEYS_FUZZ_EXAMPLES=20000 python3 -m pytest -q tests/test_fuzz_core.py``.  Every input that
ever crashed a parser is kept in ``tests/fuzz_corpus/`` and replayed by ``test_corpus_replays``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gkeys_portage.core.config import load_config
from gkeys_portage.core.errors import GkeysError, NoSignatureError, NotVerifiedError
from gkeys_portage.core.types import Category, Fingerprint, Nick, parse_fingerprint
from gkeys_portage.keys.seeds import parse_seeds
from gkeys_portage.openpgp.colons import parse_colons
from gkeys_portage.openpgp.packets import detached_signature_packets, find_clearsigned, signed_message_packets
from gkeys_portage.openpgp.status import parse_status
from gkeys_portage.openpgp.verdict import Pin, PinSet, decide

EXAMPLES = int(os.environ.get("GKEYS_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CORPUS = Path(__file__).parent / "fuzz_corpus"

FPR_A = "155D7466912D97381EA7C24A6FD7280E2D0342FA"
FPR_B = "A02DA33B53E8CEC227618EDE72F04101AF2690F5"
KEYWORDS = ["NEWSIG", "GOODSIG", "BADSIG", "ERRSIG", "VALIDSIG", "EXPSIG", "EXPKEYSIG", "REVKEYSIG",
            "NO_PUBKEY", "PLAINTEXT", "NODATA", "BADARMOR", "FAILURE", "TRUST_UNDEFINED", "BEGIN_DECRYPTION",
            "KEY_CONSIDERED", "SIG_ID"]
field_text = st.one_of(st.sampled_from([FPR_A, FPR_B, "9", "4", "0", "1796287281", "2026-12-03", "",
                                        "72F04101AF2690F5", "20261203T000000"]),
                       st.text(max_size=12))
status_line = st.builds(lambda k, fields: f"[GNUPG:] {k} " + " ".join(fields),
                        st.sampled_from(KEYWORDS), st.lists(field_text, max_size=11))


@FUZZ
@given(st.lists(st.one_of(status_line, st.text(max_size=40)), max_size=30))
def test_status_parser_and_decision_never_crash_and_never_verify_unpinned(lines: list[str]) -> None:
    report = parse_status(lines)
    try:
        decide(report, PinSet(), {})
    except GkeysError:
        pass
    else:
        raise AssertionError("verified with an empty pin set")


@FUZZ
@given(st.lists(st.one_of(status_line, st.text(max_size=40)), max_size=30))
def test_decision_with_pins_but_no_key_listing_never_verifies(lines: list[str]) -> None:
    """Without the key in the keyring listing there is nothing to check times against: fail closed."""
    pins = PinSet.of([Pin(Category("c"), Nick("n"), Fingerprint(FPR_A))])
    with pytest.raises(GkeysError):
        decide(parse_status(lines), pins, {})


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20), st.just(FPR_A)),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.sampled_from(["nick", "name", "keydir", "keys", "fingerprint",
                                                                "uid", "alice", "x"]), children, max_size=6)),
    max_leaves=25,
)


@FUZZ
@given(st.one_of(json_values.map(json.dumps), st.text(max_size=200), st.binary(max_size=200)))
def test_seed_parser_only_raises_seed_errors(data: object) -> None:
    try:
        seeds = parse_seeds(data)  # type: ignore[arg-type]
    except GkeysError:
        return
    for seed in seeds.values():  # whatever is accepted is fully validated
        assert all(parse_fingerprint(f) == f for f in [*seed.keys, *seed.fingerprint])


@FUZZ
@given(st.lists(st.lists(st.one_of(st.sampled_from(["pub", "sub", "fpr", "uid", "sig", "rev", "tru", FPR_A,
                                                    "u", "r", "e", "22", "1796287281", "cSC", "ed25519"]),
                                   st.text(max_size=10)), max_size=20).map(":".join), max_size=20))
def test_colon_parser_never_crashes(lines: list[str]) -> None:
    for key in parse_colons("\n".join(lines)):
        assert len(key.fingerprint) in (40, 64)


@FUZZ
@given(st.text(max_size=300))
def test_config_parser_only_raises_config_errors(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    path = tmp_path_factory.mktemp("conf") / "gkeys.conf"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    with contextlib.suppress(GkeysError):
        load_config(path, None)


@FUZZ
@given(st.text(max_size=80))
def test_fingerprint_parser_accepts_only_full_hex(text: str) -> None:
    try:
        fpr = parse_fingerprint(text)
    except GkeysError:
        return
    assert len(fpr) in (40, 64) and all(c in "0123456789ABCDEF" for c in fpr)


def _refused(parse: Callable[[bytes], object]) -> Callable[[bytes], None]:
    def check(data: bytes) -> None:
        with pytest.raises(NoSignatureError):
            parse(data)
    return check


def test_corpus_replays() -> None:
    """Inputs that once crashed a parser (kept as files: <parser>-<name>)."""
    parsers = {"seeds": lambda b: parse_seeds(b), "status": lambda b: decide(
        parse_status(b.decode("latin-1").splitlines()), PinSet(), {}),
        "colons": lambda b: parse_colons(b.decode("latin-1")),
        # signature-parser entries are attacks or differentials: each must be refused
        "clearsigned": _refused(find_clearsigned), "detached": _refused(detached_signature_packets),
        "message": _refused(lambda b: signed_message_packets(b, limit=1 << 16))}
    files = sorted(CORPUS.glob("*"))
    assert files, "the corpus is empty"
    for path in files:
        parser = parsers[path.name.split("-", 1)[0]]
        try:
            parser(path.read_bytes())
        except NotVerifiedError:
            pass
        except GkeysError:
            pass


@FUZZ
@given(st.one_of(st.binary(max_size=300), st.builds(lambda b: b"-----BEGIN PGP SIGNATURE-----\n\n" + b
                                                    + b"\n-----END PGP SIGNATURE-----\n", st.binary(max_size=200))))
def test_detached_signature_check_accepts_only_signature_packets(data: bytes) -> None:
    try:
        packets = detached_signature_packets(data)
    except GkeysError:
        return
    assert packets and packets[0] & 0x80  # starts with a packet header...
    tag = packets[0] & 0x3F if packets[0] & 0x40 else (packets[0] >> 2) & 0x0F
    assert tag == 2  # ...of a Signature packet
