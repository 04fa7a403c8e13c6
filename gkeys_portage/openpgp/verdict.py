"""Signature verification with signer pinning (design.md §3, trust rules 1, 3, 4, 5).

A signature counts only if GnuPG reports ``VALIDSIG`` and the signature's *primary*
key fingerprint is pinned by a seed.  The decision is made on parsed status records
(:mod:`gkeys_portage.openpgp.status`) plus the key listing, never on human text and
never on python-gnupg's ``valid`` flag.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gkeys_portage.core.errors import (
    BadInputError,
    BadSignatureError,
    ExpiredKeyError,
    FutureSignatureError,
    NoSignatureError,
    NotVerifiedError,
    RevokedKeyError,
    SignatureClassError,
    SignerNotPinnedError,
    TruncatedSignatureError,
    UnknownSignerError,
    WeakHashError,
)
from gkeys_portage.core.hashpolicy import WEAK_HASHES, weak_hash_refusal
from gkeys_portage.core.types import Category, Fingerprint, Nick
from gkeys_portage.core.windows import Window, outside, unproven, window_at
from gkeys_portage.openpgp.colons import PublicKey, SubKey
from gkeys_portage.openpgp.history.store import KeyHistory
from gkeys_portage.openpgp.history.timerule import judge
from gkeys_portage.openpgp.sequoia import Opinion, confirm
from gkeys_portage.openpgp.status import Notation, SignatureStatus, SigOutcome, StatusReport

DEFAULT_CLOCK_SKEW = 600.0

SIG_BINARY = 0x00  # signature of a binary document: the exact bytes
SIG_TEXT = 0x01  # signature of a canonical text document: line endings are normalised to CRLF first


class SignedData(enum.Enum):
    """What a signature covers, and so which signature classes (RFC 9580 §5.2.1) may sign it.

    * ``BINARY``: a detached signature over bytes (release media, statements with a detached signature,
      seed files, overlay lists, bundles, git commits).  Only class 0x00: a text-mode (0x01) signature
      also verifies the same data with LF turned into CRLF (and back), two byte strings under one
      signature, and gpg, git and Portage accept both.
    * ``CLEARTEXT``: a cleartext-signed message.  Only class 0x01, the class ``gpg --clearsign`` makes; a
      0x00 signature there is a binary signature of CRLF bytes moved into a cleartext frame.
    * ``MESSAGE``: an inline signed message (``gpg --sign``).  0x00 or 0x01: the message carries its own
      literal data and gpg returns the bytes it hashed, as the signer meant them.
    """

    BINARY = frozenset({SIG_BINARY})
    CLEARTEXT = frozenset({SIG_TEXT})
    MESSAGE = frozenset({SIG_BINARY, SIG_TEXT})


@dataclass(frozen=True)
class Pin:
    """A fingerprint that a seed trusts, with the seed it comes from, and when it may sign: ``windows`` (none:
    whenever the key is valid; :mod:`gkeys_portage.core.windows`)."""

    category: Category
    nick: Nick
    fingerprint: Fingerprint
    windows: tuple[Window, ...] = ()


@dataclass
class PinSet:
    """The fingerprints allowed to sign for one purpose, indexed by fingerprint."""

    pins: dict[Fingerprint, Pin] = field(default_factory=dict)

    @classmethod
    def of(cls, pins: Iterable[Pin]) -> PinSet:
        """Build a pin set from pins."""
        return cls({pin.fingerprint: pin for pin in pins})

    def get(self, fingerprint: Fingerprint | None) -> Pin | None:
        """The pin for this primary fingerprint, or None."""
        return None if fingerprint is None else self.pins.get(fingerprint)

    def __len__(self) -> int:
        return len(self.pins)

    def describe(self) -> str:
        """Short human description of who is pinned."""
        nicks = sorted({f"{p.category}/{p.nick}" for p in self.pins.values()})
        return ", ".join(nicks) if nicks else "nobody"


@dataclass(frozen=True)
class VerifyPolicy:
    """Time rules for accepting signatures."""

    clock_skew: float = DEFAULT_CLOCK_SKEW
    require_currently_valid: bool = False
    now: float | None = None
    #: Weak data hashes admitted for signatures made before a cut-off ({hash id: epoch}); see hashpolicy.
    weak_hashes: Mapping[int, float] = field(default_factory=dict)
    #: A signature dated inside an authorization window that has closed since is good only with evidence it
    #: was made before (its date is the signer's word): False refuses it here (``signer-retired``); True
    #: accepts it and names the closing time (:attr:`GoodSignature.closed_since`), for a caller that looks
    #: for that evidence itself (the git tree verifier: the record, or a later commit by a key authorized then).
    dated_by_evidence: bool = False

    def current_time(self) -> float:
        """The evaluation time (``now`` if frozen, else the wall clock)."""
        return time.time() if self.now is None else self.now


@dataclass(frozen=True)
class GoodSignature:
    """A signature that passed every rule, and who made it."""

    pin: Pin
    signing_fingerprint: Fingerprint
    created: int
    notations: tuple[Notation, ...] = ()  # the signature's hashed notations (e.g. a seed file's category)
    #: when the authorization window holding ``created`` closed (None: open); the signature's date is then
    #: the signer's word, and counts only with evidence (:attr:`VerifyPolicy.dated_by_evidence`)
    closed_since: int | None = None
    window: Window | None = None

    @property
    def created_at(self) -> datetime:
        """Signature creation time (UTC)."""
        return datetime.fromtimestamp(self.created, UTC)

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {
            "category": self.pin.category,
            "nick": self.pin.nick,
            "fingerprint": self.pin.fingerprint,
            "signing_key": self.signing_fingerprint,
            "created": self.created_at.isoformat(),
        }


@dataclass
class VerifyResult:
    """A successful verification: the good pinned signatures and what was ignored."""

    good: list[GoodSignature]
    ignored: list[str] = field(default_factory=list)
    plaintext: bytes | None = None

    @property
    def signer(self) -> GoodSignature:
        """The first good signature (there is always at least one)."""
        return self.good[0]

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {"verified": True, "signatures": [g.to_json() for g in self.good], "ignored": self.ignored}


def _fmt_time(epoch: float | None) -> str:
    if epoch is None:
        return "unknown time"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _signing_key(sig: SignatureStatus, keys: Mapping[Fingerprint, PublicKey]) -> tuple[PublicKey, SubKey]:
    primary = keys.get(sig.primary_fingerprint) if sig.primary_fingerprint else None
    sub = primary.find(sig.signing_fingerprint) if primary and sig.signing_fingerprint else None
    if primary is None or sub is None:
        raise NotVerifiedError(
            f"signing key {sig.signing_fingerprint or sig.key_id} is not in the keyring listing"
        )
    return primary, sub


def _history(sig: SignatureStatus, keys: Mapping[Fingerprint, PublicKey]) -> KeyHistory | None:
    """The dated history of the key that made ``sig``, when its keyring keeps one."""
    key = keys.get(sig.primary_fingerprint) if sig.primary_fingerprint else None
    return key.history() if key is not None and key.history is not None else None


def _at_its_time(sig: SignatureStatus, key: PublicKey, sub: SubKey, history: KeyHistory, pin: Pin,
                 policy: VerifyPolicy, *, sequoia_asked: bool) -> int:
    """The time rule (:mod:`~gkeys_portage.openpgp.history.timerule`) on a signature GnuPG found cryptographically good,
    whatever it said of the key's state now (``EXPKEYSIG``, ``REVKEYSIG``); return its creation time.

    What the rule accepts and GnuPG's view now refuses (a key revoked as superseded since, a key that lapsed
    since) rests on the history's self-signatures, which only Sequoia checks: it counts only when Sequoia is
    asked (and :func:`decide` then requires it to accept); with the second opinion off, GnuPG's view stands."""
    if sig.created is None:
        raise BadSignatureError("signature has no creation time")
    who = f"{pin.category}/{pin.nick} ({pin.fingerprint})"
    revoked: dict[str, bool] = {key.primary.fingerprint: key.primary.revoked, sub.fingerprint: sub.revoked}
    if sig.outcome is SigOutcome.REVOKED_KEY and not any(revoked.values()):
        revoked = dict.fromkeys(revoked, True)  # GnuPG says revoked: which part, the history must date
    judge(history, sub.fingerprint, sig.created, revoked=revoked, who=who,
          refresh=f"gkeys refresh-key -C {pin.category} --force")
    now_refuses = any(revoked.values()) or sig.outcome in (SigOutcome.REVOKED_KEY, SigOutcome.EXPIRED_KEY) or any(
        part.expires is not None and part.expires <= sig.created for part in (key.primary, sub))
    if now_refuses and not sequoia_asked:
        if any(revoked.values()) or sig.outcome is SigOutcome.REVOKED_KEY:
            raise RevokedKeyError(f"signature by {who}: key is revoked (a signature made before a soft revocation "
                                  "counts only when Sequoia, the second opinion, confirms it under the key's history)")
        return _check_times(sig, key, sub, policy)
    return _check_times(sig, key, sub, policy, dated=False)


def _check_times(sig: SignatureStatus, key: PublicKey, sub: SubKey, policy: VerifyPolicy, *,
                 dated: bool = True) -> int:
    """Apply trust rule 3 to a cryptographically good signature; return its creation time.  Without ``dated``
    the key's creation and expiry have been judged by the time rule already (only the clock, the policy's
    currently-valid keys and the signing capability are checked here)."""
    if sig.created is None:
        raise BadSignatureError("signature has no creation time")
    now = policy.current_time()
    who = f"{key.fingerprint}"
    if sig.created > now + policy.clock_skew:
        raise FutureSignatureError(
            f"signature by {who} is dated {_fmt_time(sig.created)}, in the future "
            f"(allowed clock skew {policy.clock_skew:.0f}s)"
        )
    for part in {key.primary.fingerprint: key.primary, sub.fingerprint: sub}.values() if dated else ():
        if part.created is not None and sig.created < part.created:
            raise BadSignatureError(
                f"signature dated {_fmt_time(sig.created)} predates its key {part.fingerprint} "
                f"(created {_fmt_time(part.created)})"
            )
        if part.expires is not None and part.expires <= sig.created:
            raise ExpiredKeyError(
                f"key {part.fingerprint} had expired on {_fmt_time(part.expires)}, "
                f"before the signature was made ({_fmt_time(sig.created)})"
            )
    for part in (key.primary, sub) if policy.require_currently_valid else ():
        if part.expired_at(now):
            raise ExpiredKeyError(f"key {part.fingerprint} expired on {_fmt_time(part.expires)}")
    if not sub.can("s"):
        raise BadSignatureError(f"key {sub.fingerprint} is not allowed to sign (usage {sub.capabilities!r})")
    return sig.created


def _authorized(pin: Pin, created: int, policy: VerifyPolicy) -> tuple[Window, int | None]:
    """The window of ``pin`` that holds ``created``, and when it closed (None: open); refuses a signature dated
    outside every window, and one inside a closed window unless the policy looks for evidence itself."""
    who = f"{pin.category}/{pin.nick} ({pin.fingerprint})"
    window = window_at(pin.windows, created)
    if window is None:
        raise outside(pin.windows, created, who)
    closed = window.closed_at(policy.current_time())
    if closed is not None and not policy.dated_by_evidence:
        raise unproven(window, created, who, category=pin.category)
    return window, closed


def _revoked_since(history: KeyHistory, key: PublicKey, sub: SubKey, window: Window,
                   closed: int | None) -> tuple[Window, int | None]:
    """A signature the time rule accepted although its key or signing subkey is revoked now (softly: superseded,
    retired) was made before the revocation by its own date, which whoever holds the key can write: its window is
    taken as closed at the revocation, so the caller looks for evidence it was made before (item 4)."""
    dates = [r.created for part in (key.primary, sub) if part.revoked
             for found in [history.part(part.fingerprint)] if found is not None for r in found.revocations]
    if not dates or (closed is not None and closed <= min(dates)):
        return window, closed
    end = min(dates)
    return Window(window.start, end, window.certifier, "key revoked (superseded or retired)"), end


def _class_refusal(sig: SignatureStatus, signed: SignedData, who: str) -> SignatureClassError | None:
    """The error for a pinned signature whose class does not fit ``signed`` (None when it fits)."""
    if sig.sig_class in signed.value:
        return None
    if sig.sig_class == SIG_TEXT:
        return SignatureClassError(
            f"signature by {who} is signed in text mode (class 01); a binary signature is required for "
            f"this data (a text-mode signature also verifies a copy with other line endings): ask the signer "
            f"to sign with gpg --detach-sign without --textmode")
    if sig.sig_class == SIG_BINARY and signed is SignedData.CLEARTEXT:
        return SignatureClassError(
            f"signature by {who} in a cleartext-signed message is a binary signature (class 00), not a "
            f"cleartext one (class 01): ask the signer to sign with gpg --clearsign")
    shown = "unknown" if sig.sig_class is None else f"{sig.sig_class:02x}"
    return SignatureClassError(f"signature by {who} has signature class {shown}, which does not sign data")


#: What the rc field of gpg's ERRSIG status line means, for the codes a signature check meets
#: (GnuPG doc/DETAILS; the rest are libgpg-error codes, printed as numbers).
ERRSIG_MEANINGS = {
    "4": "gpg error code 4: an algorithm this GnuPG does not support",
    "5": "gpg error code 5: the engine's own policy refuses the signature's algorithm (gpg-sq refuses SHA-1 "
         "and other weak hashes)",
    "39": "gpg error code 39, time conflict: the signature is dated before the key that made it was "
          "created (backdated, or the signer's clock was wrong); ask the signer to sign again",
}


def _keyring_key_with_id(key_id: str, keys: Mapping[Fingerprint, PublicKey]) -> Fingerprint | None:
    """The (sub)key of the keyring whose v4 key id is ``key_id``, if any.

    Engines look a signer up by different fields (GnuPG 2.2 by the issuer key id, GnuPG 2.4 and Sequoia by
    the issuer fingerprint): a signature whose fingerprint was altered is "BAD" to the one and "no public
    key" to the other.  Naming a keyring key's id and not being checkable against it is BAD on every engine.
    """
    wanted = key_id.upper()
    if len(wanted) != 16:
        return None
    for key in keys.values():
        for part in key.all_keys():
            if part.fingerprint.upper().endswith(wanted) and len(part.fingerprint) == 40:
                return part.fingerprint
    return None


def _bad_signer(key_id: str | None, keys: Mapping[Fingerprint, PublicKey], pins: PinSet) -> tuple[str, str | None]:
    """Who made a BAD signature, as far as the keyring knows: ``category/nick (FPR)`` when the key (or the subkey)
    is pinned, the primary fingerprint when it is only in the keyring, else gpg's key id; and the pin's name."""
    wanted = (key_id or "").upper()
    for fingerprint, key in keys.items() if wanted else ():
        if any(part.fingerprint.upper().endswith(wanted) for part in key.all_keys()):
            pin = pins.get(fingerprint)
            if pin is not None:
                return f"{pin.category}/{pin.nick} ({pin.fingerprint})", f"{pin.category}/{pin.nick}"
            return f"key {fingerprint} (not pinned for this)", None
    return f"key {key_id or 'unknown'} (not in the keyring)", None


def decide(report: StatusReport, pins: PinSet, keys: Mapping[Fingerprint, PublicKey],
           policy: VerifyPolicy | None = None, signed: SignedData = SignedData.BINARY) -> VerifyResult:
    """Decide whether ``report`` shows a good signature by a pinned key.

    Returns a :class:`VerifyResult` listing every good pinned signature, or raises the
    :class:`NotVerifiedError` subclass that says why not.  Rules:

    * a status stream with anomalies (:func:`~gkeys_portage.openpgp.status.parse_status`,
      :func:`~gkeys_portage.openpgp.status.expect_signers`) fails, whatever it says;
    * a bad, revoked-key or expired signature anywhere fails the whole check, and so does one that names
      the key id of a keyring key which gpg could not check it against (an altered issuer fingerprint);
    * signatures by keys not in the keyring are ignored (as apt's ``Signed-By``), as are good
      signatures by keys that are in the keyring but not pinned for this purpose;
    * a pinned signature over a weak digest (MD5, SHA-1, RIPEMD-160) fails unless ``[policy]
      weak-hashes`` admits it for its creation time (:mod:`gkeys_portage.core.hashpolicy`);
    * a pinned signature must have a signature class that fits ``signed`` (:class:`SignedData`: binary
      data only class 0x00, so a text-mode signature over media or a commit fails);
    * at least one good signature by a pinned key is required;
    * Sequoia, the second opinion on the same bytes (``report.second``, :mod:`gkeys_portage.openpgp.sequoia`),
      must find each good pinned signature good, by the same primary and signing key; else
      ``engines-disagree`` (a weak digest that ``weak-hashes`` admits is GnuPG's word alone: Sequoia refuses
      every SHA-1 data signature).
    """
    policy = policy or VerifyPolicy()
    if report.anomalies:
        raise BadInputError(f"the OpenPGP engine's status output does not fit the signature ({report.anomalies[0]}): "
                            "not verified (a notation or user id written unescaped can forge status lines; "
                            "GnuPG 2.2 or 2.4 as [gpg] program escapes them)")
    if report.encrypted:
        raise BadInputError("the message is encrypted, not (only) signed")
    if report.plaintexts > 1:
        raise BadInputError("more than one signed message in one file")
    if not report.signatures and report.truncated:
        raise TruncatedSignatureError(f"the signature is truncated ({report.failures[0]}): fetch it again "
                                      "(a download cut short, or a copy that lost its end)")
    if not report.signatures:
        hint = ("garbage or truncated data" if (report.no_data or report.bad_armor)
                else report.failures[0] if report.failures else "no signature packet")
        raise NoSignatureError(f"no OpenPGP signature found ({hint})")

    good: list[GoodSignature] = []
    confirmed: list[GoodSignature] = []  # the good signatures the second opinion must confirm
    unknown: list[str] = []
    unpinned: list[str] = []
    for sig in report.signatures:
        if sig.outcome is SigOutcome.BAD:
            who, signer = _bad_signer(sig.key_id, keys, pins)
            raise BadSignatureError(f"BAD signature by {who}: data or signature was modified", signer=signer)
        if sig.outcome is SigOutcome.NO_PUBKEY:
            claimed = _keyring_key_with_id(sig.key_id, keys)
            if claimed is not None:
                who, signer = _bad_signer(sig.key_id, keys, pins)
                raise BadSignatureError(
                    f"BAD signature by {who}: it names key id {sig.key_id} of the keyring ({claimed}) but gpg found "
                    f"no key for it (its issuer fingerprint {sig.signing_fingerprint or 'is missing'}): the "
                    "signature was altered", signer=signer)
            unknown.append(sig.signing_fingerprint or sig.key_id)
            continue
        if sig.outcome is SigOutcome.ERROR or not sig.valid:
            raise BadSignatureError(
                f"signature from key {sig.key_id or 'unknown'} cannot be checked "
                f"({ERRSIG_MEANINGS.get(sig.errsig_rc or '', 'gpg error code ' + (sig.errsig_rc or 'none'))})"
            )
        pin = pins.get(sig.primary_fingerprint)
        if pin is None:
            unpinned.append(sig.primary_fingerprint or sig.key_id)
            continue
        history = _history(sig, keys)
        if sig.outcome is SigOutcome.REVOKED_KEY and history is None:
            raise RevokedKeyError(f"signature by {pin.category}/{pin.nick} ({pin.fingerprint}): key is revoked")
        if sig.outcome is SigOutcome.EXPIRED_SIG:
            raise ExpiredKeyError(f"signature by {pin.category}/{pin.nick} has expired")
        weak = weak_hash_refusal(sig.hash_algo, sig.created, policy.weak_hashes)
        if weak is not None:
            raise WeakHashError(f"signature by {pin.category}/{pin.nick}: {weak}")
        wrong_class = _class_refusal(sig, signed, f"{pin.category}/{pin.nick}")
        if wrong_class is not None:
            raise wrong_class
        key, sub = _signing_key(sig, keys)
        if history is None:  # GnuPG's listing alone: the key's state now
            if sub.revoked or key.primary.revoked:
                raise RevokedKeyError(f"signature by {pin.category}/{pin.nick} ({pin.fingerprint}): key is revoked")
            created = _check_times(sig, key, sub, policy)
        else:
            created = _at_its_time(sig, key, sub, history, pin, policy,
                                   sequoia_asked=report.second is not None and report.second.opinion is not Opinion.OFF
                                   and sig.hash_algo not in WEAK_HASHES)
        window, closed = _authorized(pin, created, policy)
        if history is not None and policy.dated_by_evidence:
            window, closed = _revoked_since(history, key, sub, window, closed)
        assert sig.signing_fingerprint is not None  # set whenever VALIDSIG was seen
        found = GoodSignature(pin=pin, signing_fingerprint=sig.signing_fingerprint, created=created,
                              notations=tuple(sig.notations), closed_since=closed,
                              window=window if pin.windows or closed is not None else None)
        good.append(found)
        if sig.hash_algo not in WEAK_HASHES:  # a weak digest [policy] weak-hashes admits: Sequoia refuses all
            confirmed.append(found)

    if report.no_data:
        # gpg found data it could not parse next to the signature(s): nothing of that input counts.
        raise BadInputError("gpg found unparsable data next to the signature")
    if report.errors:
        # e.g. "ERROR proc_pkt.plaintext 89_BAD_DATA" after a second signed block or trailing packets:
        # whatever gpg verified before that point does not count.
        raise BadInputError(f"gpg could not process the whole input ({report.errors[0]}): more than one "
                            f"signed message or trailing data")
    ignored = [f"unknown signer {k}" for k in unknown] + [f"signer not pinned {k}" for k in unpinned]
    if good:
        # the second opinion (Sequoia) on each good signature, judged by its own digest (not by its key: a
        # strong signature beside an admitted weak one by the same key is confirmed too)
        confirm(report.second, [(g.pin.fingerprint, g.signing_fingerprint, f"{g.pin.category}/{g.pin.nick} "
                                 f"({g.pin.fingerprint})") for g in confirmed])
        return VerifyResult(good=good, ignored=ignored)
    if unpinned:
        raise SignerNotPinnedError(
            f"signed by {', '.join(unpinned)}, which is not pinned by the seeds ({pins.describe()})"
        )
    raise UnknownSignerError(f"signed by unknown key {', '.join(unknown)} (not in the keyring)")
