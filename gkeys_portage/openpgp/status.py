"""Parse GnuPG ``--status-fd`` output into typed records.

Only machine output is read here (never human text).  The parser takes any
iterable of ``(keyword, value)`` pairs or raw ``[GNUPG:] KEYWORD value`` lines,
so it can be tested on recorded output as well as on live gpg.

See GnuPG's ``doc/DETAILS`` ("Format of the --status-fd output").
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from urllib.parse import unquote_to_bytes

from gkeys_portage.core.errors import NoSignatureError, TruncatedSignatureError
from gkeys_portage.core.types import Fingerprint, is_fingerprint
from gkeys_portage.openpgp.sequoia import SecondOpinion

STATUS_PREFIX = "[GNUPG:] "

#: ERRSIG return code for "no public key" (GPG_ERR_NO_PUBKEY).
ERRSIG_NO_PUBKEY = "9"
#: The key id GnuPG 2.2 prints in a result line for a signature that names its issuer only by fingerprint.
UNKNOWN_KEY_ID = "0000000000000000"


class SigOutcome(enum.Enum):
    """What GnuPG said about one signature, before any pinning or policy."""

    GOOD = "good"  # GOODSIG: valid signature, key valid now
    EXPIRED_KEY = "expired-key"  # EXPKEYSIG: valid signature, key has expired (now)
    REVOKED_KEY = "revoked-key"  # REVKEYSIG: valid signature, key is revoked
    EXPIRED_SIG = "expired-signature"  # EXPSIG: the signature itself has expired
    BAD = "bad"  # BADSIG: does not match the data
    NO_PUBKEY = "no-pubkey"  # ERRSIG rc=9: signer not in the keyring
    ERROR = "error"  # ERRSIG with any other reason (unknown algorithm, time conflict, ...)


_OUTCOME_BY_KEYWORD = {
    "GOODSIG": SigOutcome.GOOD,
    "EXPKEYSIG": SigOutcome.EXPIRED_KEY,
    "REVKEYSIG": SigOutcome.REVOKED_KEY,
    "EXPSIG": SigOutcome.EXPIRED_SIG,
    "BADSIG": SigOutcome.BAD,
}


@dataclass(frozen=True)
class Notation:
    """One notation of a signature's *hashed* area (``NOTATION_NAME`` / ``_FLAGS`` / ``_DATA``).

    GnuPG reports only notations covered by the signature (never the unhashed area, which anyone
    can edit), and fails a signature with a critical notation it does not know.  ``data`` is the
    raw value: GnuPG percent-escapes it and may split it over several ``NOTATION_DATA`` lines.
    """

    name: str
    data: bytes = b""
    critical: bool = False
    human_readable: bool = False

    @property
    def value(self) -> str:
        """The value as text (undecodable bytes replaced, so they never match an expected value)."""
        return self.data.decode("utf-8", errors="replace")


@dataclass
class SignatureStatus:
    """Everything the status lines say about one signature."""

    outcome: SigOutcome
    key_id: str = ""
    user_id: str = ""
    signing_fingerprint: Fingerprint | None = None
    primary_fingerprint: Fingerprint | None = None
    created: int | None = None  # seconds since the epoch
    expires: int | None = None  # signature expiry, None if it never expires
    errsig_rc: str = ""
    valid: bool = False  # a VALIDSIG line was seen for this signature
    notations: list[Notation] = field(default_factory=list)
    pubkey_algo: int | None = None  # VALIDSIG field 7 (RFC 9580 §9.1 id)
    hash_algo: int | None = None  # VALIDSIG field 8 (RFC 9580 §9.5 id): the data digest
    #: VALIDSIG field 9, the signature type (RFC 9580 §5.2.1): 0x00 binary (the exact bytes), 0x01 canonical
    #: text (GnuPG hashes the data with its line endings turned into CRLF); None if gpg did not say.
    sig_class: int | None = None

    @property
    def created_at(self) -> datetime | None:
        """The signature creation time as an aware UTC datetime."""
        return None if self.created is None else datetime.fromtimestamp(self.created, UTC)


@dataclass
class StatusReport:
    """All signatures of one gpg run plus the run-level facts that matter for verification."""

    signatures: list[SignatureStatus] = field(default_factory=list)
    plaintexts: int = 0
    encrypted: bool = False
    no_data: bool = False
    bad_armor: bool = False
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    truncated: bool = False  # the signature's armor ends before its END line (cut short in transit)
    #: What makes the status stream untrustworthy (a forged line, a verdict for a signature gkeys did not hand
    #: over): any one refuses the whole input (:func:`gkeys_portage.openpgp.verdict.decide`).
    anomalies: list[str] = field(default_factory=list)
    second: SecondOpinion | None = None  # Sequoia's verdict on the same bytes (set by the GnuPG door only)

    @classmethod
    def unparsable(cls, exc: NoSignatureError) -> StatusReport:
        """The report for a signature gkeys' own parser refused before gpg saw it."""
        return cls(failures=[exc.message], truncated=isinstance(exc, TruncatedSignatureError))


def _parse_time(text: str) -> int | None:
    """GnuPG timestamps are epoch seconds or ISO 8601 ``YYYYMMDDTHHMMSS``; ``0`` means none."""
    if not text or text == "0":
        return None
    if text.isascii() and text.isdigit():  # str.isdigit() also takes "²" (latin-1 0xB2)
        return int(text)
    try:
        return int(datetime.strptime(text, "%Y%m%dT%H%M%S").replace(tzinfo=UTC).timestamp())
    except ValueError:
        return None


def _int_or_none(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 3 else None


def _sig_class_or_none(text: str) -> int | None:
    """VALIDSIG's signature class: exactly two hex digits (``00``, ``01``), else unknown."""
    return int(text, 16) if len(text) == 2 and all(c in "0123456789abcdefABCDEF" for c in text) else None


def _fingerprint_or_none(text: str) -> Fingerprint | None:
    return Fingerprint(text.upper()) if is_fingerprint(text) else None


def _split_pairs(items: Iterable[str | tuple[str, str]]) -> Iterable[tuple[str, str]]:
    for item in items:
        if isinstance(item, tuple):
            yield item
            continue
        line = item.rstrip("\r\n")
        if not line.startswith(STATUS_PREFIX):
            continue
        keyword, _, value = line[len(STATUS_PREFIX) :].partition(" ")
        yield keyword, value


def _add_notation(sig: SignatureStatus | None, keyword: str, value: str) -> None:
    """Attach a NOTATION_* line to the signature it follows (GnuPG prints them after GOODSIG).

    A notation line with no signature, or a FLAGS/DATA line with no NAME before it, is dropped:
    a notation that cannot be tied to one signature binds nothing.
    """
    if sig is None:
        return
    if keyword == "NOTATION_NAME":
        sig.notations.append(Notation(name=value))
    elif not sig.notations:
        return
    elif keyword == "NOTATION_FLAGS":
        flags = value.split(" ")
        sig.notations[-1] = replace(sig.notations[-1], critical=flags[0] == "1",
                                    human_readable=len(flags) > 1 and flags[1] == "1")
    elif keyword == "NOTATION_DATA":
        last = sig.notations[-1]
        sig.notations[-1] = replace(last, data=last.data + unquote_to_bytes(value))


def _names_key(key_id: str, fingerprint: Fingerprint | None) -> bool:
    """Whether a result line's key id (or fingerprint) names the key of ``fingerprint`` (v4: its low 64 bits,
    v6: its high 64 bits)."""
    wanted = key_id.upper()
    if fingerprint is None or not wanted:
        return False
    if wanted == UNKNOWN_KEY_ID:
        return True  # GnuPG 2.2 for a signature without an issuer key id subpacket (only its fingerprint)
    return wanted == fingerprint or wanted == (fingerprint[:16] if len(fingerprint) == 64 else fingerprint[-16:])


def _anomaly(sig: SignatureStatus | None, keyword: str, value: str, previous: str) -> str | None:
    """What makes one status line untrustworthy in its place, or None (see :func:`parse_status`)."""
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        return f"a {keyword} line carries control characters"
    if previous == "NOTATION_NAME" and keyword != "NOTATION_FLAGS":
        return f"a {keyword} line where the engine writes NOTATION_FLAGS (a notation name broke its line)"
    if keyword == "VALIDSIG" and (sig is None or sig.valid or sig.outcome in (SigOutcome.ERROR, SigOutcome.NO_PUBKEY)):
        return "a VALIDSIG line that belongs to no checked signature"
    return None


def parse_status(items: Iterable[str | tuple[str, str]]) -> StatusReport:
    """Build a :class:`StatusReport` from status lines or ``(keyword, value)`` pairs.

    Every result keyword (``GOODSIG``, ``BADSIG``, ``ERRSIG``, ...) starts a new
    signature; ``VALIDSIG`` adds details to the signature it follows.  A stream is not taken blindly (an
    engine that writes a notation name or a user id unescaped lets a signature write status lines): a line
    with control characters, a line breaking into a notation, a second ``VALIDSIG`` for one signature (or one
    after ``ERRSIG``), and a ``VALIDSIG`` whose key is not the one its result line names are
    :attr:`StatusReport.anomalies`.
    """
    report = StatusReport()
    current: SignatureStatus | None = None
    previous = ""

    def start(outcome: SigOutcome) -> SignatureStatus:
        nonlocal current
        current = SignatureStatus(outcome=outcome)
        report.signatures.append(current)
        return current

    for keyword, value in _split_pairs(items):
        report.lines.append(f"{keyword} {value}".rstrip())
        anomaly = _anomaly(current, keyword, value, previous)
        if anomaly is not None:
            report.anomalies.append(anomaly)
        previous = keyword
        fields = value.split(" ")
        if keyword == "NEWSIG":
            current = None
        elif keyword in _OUTCOME_BY_KEYWORD:
            sig = start(_OUTCOME_BY_KEYWORD[keyword])
            sig.key_id = fields[0]
            sig.user_id = value[len(fields[0]) + 1 :] if len(fields) > 1 else ""
        elif keyword == "ERRSIG":
            sig = start(SigOutcome.ERROR)
            sig.key_id = fields[0]
            if len(fields) >= 6:
                sig.created = _parse_time(fields[4])
                sig.errsig_rc = fields[5]
                if fields[5] == ERRSIG_NO_PUBKEY:
                    sig.outcome = SigOutcome.NO_PUBKEY
            if len(fields) >= 7:
                sig.signing_fingerprint = _fingerprint_or_none(fields[6])
        elif keyword == "VALIDSIG":
            # VALIDSIG without a result line is an error, never good.
            sig = current if current is not None else start(SigOutcome.ERROR)
            sig.valid = True
            sig.signing_fingerprint = _fingerprint_or_none(fields[0])
            if len(fields) >= 4:
                sig.created = _parse_time(fields[2])
                sig.expires = _parse_time(fields[3])
            if len(fields) >= 8:
                sig.pubkey_algo = _int_or_none(fields[6])
                sig.hash_algo = _int_or_none(fields[7])
            if len(fields) >= 9:
                sig.sig_class = _sig_class_or_none(fields[8])
            if len(fields) >= 10:
                sig.primary_fingerprint = _fingerprint_or_none(fields[9])
            if sig.outcome is not SigOutcome.ERROR and not _names_key(sig.key_id, sig.signing_fingerprint):
                report.anomalies.append(f"VALIDSIG names key {fields[0]}, its result line key {sig.key_id}")
        elif keyword.startswith("NOTATION_"):
            _add_notation(current, keyword, value)
        elif keyword == "PLAINTEXT":
            report.plaintexts += 1
        elif keyword in ("BEGIN_DECRYPTION", "DECRYPTION_INFO", "ENC_TO", "DECRYPTION_FAILED"):
            report.encrypted = True
        elif keyword == "NODATA":
            report.no_data = True
        elif keyword == "BADARMOR":
            report.bad_armor = True
        elif keyword == "FAILURE":
            report.failures.append(value)
        elif keyword == "ERROR":
            report.errors.append(value)
    return report


def expect_signers(report: StatusReport, issuers: Sequence[str]) -> StatusReport:
    """``report`` with an anomaly unless its verdicts match, in number and order, the signature packets gkeys
    handed the engine (``issuers``: each packet's issuer key id, "" when it names none;
    :func:`gkeys_portage.openpgp.packets.signature_issuers`).  A report without verdicts is left as it is
    (it verifies nothing), and so are the packets after a bad signature, where GnuPG stops."""
    if not report.signatures:
        return report
    stopped = len(report.signatures) < len(issuers) and report.signatures[-1].outcome is SigOutcome.BAD
    if stopped:  # GnuPG stops at a bad signature: the verdicts up to it must still fit (and BAD refuses)
        issuers = issuers[: len(report.signatures)]
    if len(report.signatures) != len(issuers):
        report.anomalies.append(f"the engine reported {len(report.signatures)} signature(s) where gkeys handed it "
                                f"{len(issuers)}")
        return report
    for sig, issuer in zip(report.signatures, issuers, strict=True):
        if issuer and sig.key_id.upper()[-16:] not in (issuer, UNKNOWN_KEY_ID) \
                and not _names_key(issuer, sig.signing_fingerprint):
            report.anomalies.append(f"the engine's verdict names key {sig.key_id or 'none'} where the signature "
                                    f"packet names {issuer}")
    return report
