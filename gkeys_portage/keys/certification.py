"""Which keys a GLEP 79 certification chain vouches for: the decision on a ``--check-sigs`` listing.

Pure: no gpg, no state.  GnuPG's verdicts (``!`` good) are the only cryptography; everything else is
decided here on the parsed listing (:func:`evaluate`).  A certifier counts only when its fingerprint is
pinned, it is neither revoked nor expired and a root certifies it; a developer key is kept when it is
neither revoked nor expired and a user id at the configured domain carries a certification by a counted
certifier that is valid now (exportable class 10-13, made after the certifier key was created, not in the
future beyond the allowed clock skew, not expired, not revoked by a later revocation).  Revocations at
every level (key, certification, user id, certifier, a root's certification of a certifier) are noted in
:class:`Seen`, which :mod:`gkeys_portage.keys.authority` keeps across updates.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gkeys_portage.core.errors import StateError
from gkeys_portage.core.types import Fingerprint, Nick, parse_nick
from gkeys_portage.core.windows import Window
from gkeys_portage.keys.seeds import Seed, window_to_json
from gkeys_portage.openpgp.colons import PublicKey, Signature, SubKey, UserId

MAX_SIGNATURES_PER_KEY = 2000  # a certification-flooded key is dropped, not checked further
CERT_CLASSES = ("10", "11", "12", "13")
_ADDRESS_RE = re.compile(r"<([^<>@\s]+)@([^<>@\s]+)>\s*$")


class Verdict(enum.Enum):
    """Why a key of the authority keyring was kept or dropped (stable machine codes)."""

    CERTIFIED = "certified"
    RETIRED = "retired"  # kept: certified once, every certification since revoked or expired (a closed window)
    NO_CERTIFICATION = "no-certification"
    CERTIFICATION_EXPIRED = "certification-expired"
    CERTIFICATION_REVOKED = "certification-revoked"
    CERTIFIER_NOT_ROOTED = "certifier-not-rooted"
    CERTIFIER_REVOKED = "certifier-revoked"  # certified only by a certifier revoked, or its root certification
    WRONG_DOMAIN = "wrong-domain"
    UID_REVOKED = "uid-revoked"  # every user id at the domain revoked by the key's owner
    KEY_REVOKED = "key-revoked"
    KEY_EXPIRED = "key-expired"
    TOO_MANY_SIGNATURES = "too-many-signatures"


@dataclass
class KeyVerdict:
    """The verdict on one key of the downloaded keyring."""

    fingerprint: Fingerprint
    verdict: Verdict
    uid: str = ""  # the certified (or best candidate) user id
    nick: str = ""
    certifier: str = ""  # category/nick of the certifier that counted
    windows: list[Window] = field(default_factory=list)  # when a counted certification was valid

    @property
    def kept(self) -> bool:
        """True if the key stays in the seeds: certified now, or once (retired; a lapsed key with its windows),
        so its signatures made inside a window are judged, not refused as an unknown signer's."""
        return self.verdict is Verdict.CERTIFIED or (bool(self.windows) and self.verdict in KEPT_WITH_WINDOWS)

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        data: dict[str, object] = {"fingerprint": self.fingerprint, "verdict": self.verdict.value, "uid": self.uid,
                                   "nick": self.nick, "certifier": self.certifier}
        if self.windows:
            data["windows"] = [window_to_json(w) for w in self.windows]
        return data


#: Verdicts of keys kept for their windows: retired (every certification revoked or expired since) and
#: lapsed (the key itself expired; its signatures before that stay good).
KEPT_WITH_WINDOWS = (Verdict.RETIRED, Verdict.KEY_EXPIRED)


@dataclass
class Seen:
    """Revocations seen before (kept across updates, so an older keyring cannot undo them).

    Every level of the chain is recorded alike: key revocations (developers and certifiers), revoked
    certifications (a certifier's of a developer, a root's of a certifier) and user ids their owner
    revoked, whatever else the key says (a revoked user id still carries its revoked certifications).
    """

    certifications: dict[str, float] = field(default_factory=dict)  # "SUBJECTFPR ISSUERFPR" -> newest revocation
    keys: set[str] = field(default_factory=set)  # revoked primary fingerprints
    uids: dict[str, float] = field(default_factory=dict)  # "FPR user id" -> newest revocation by its owner

    @classmethod
    def from_json(cls, data: object, where: str = "the authority record") -> Seen:
        """Read the record (absent: nothing seen); a malformed one is a :class:`StateError`, never
        "nothing seen" (that would bring revoked keys back)."""
        if data is None:
            return cls()
        certs = data.get("certifications", {}) if isinstance(data, dict) else None
        keys = data.get("keys", []) if isinstance(data, dict) else None
        uids = data.get("uids", {}) if isinstance(data, dict) else None
        if not (isinstance(certs, dict) and isinstance(keys, list) and isinstance(uids, dict)
                and all(isinstance(v, int | float) and not isinstance(v, bool)
                        for v in (*certs.values(), *uids.values()))
                and all(isinstance(k, str) for k in keys)):
            raise StateError(f"{where} is malformed (the revocations seen so far cannot be read); "
                             f"restore it from a backup, or delete it and run 'gkeys update-seed' again")
        return cls({str(k): float(v) for k, v in certs.items()}, set(keys),
                   {str(k): float(v) for k, v in uids.items()})

    def to_json(self) -> dict[str, object]:
        """The record's JSON form."""
        return {"certifications": dict(sorted(self.certifications.items())), "keys": sorted(self.keys),
                "uids": dict(sorted(self.uids.items()))}

    def revoked_before(self, subject: Fingerprint, certifier: Fingerprint) -> float | None:
        """The newest revocation of ``certifier``'s certification of ``subject`` seen so far."""
        return self.certifications.get(f"{subject} {certifier}")

    def note_certification(self, subject: Fingerprint, certifier: Fingerprint, when: float) -> None:
        """Remember a (checked) revocation of a certification."""
        key = f"{subject} {certifier}"
        self.certifications[key] = max(when, self.certifications.get(key, 0.0))

    def note_uid(self, subject: Fingerprint, uid: str, when: float) -> None:
        """Remember a (checked) revocation of a user id by its owner."""
        key = f"{subject} {uid}"
        self.uids[key] = max(when, self.uids.get(key, 0.0))

    def note(self, key: PublicKey, issuers: Iterable[SubKey]) -> None:
        """Note every checked revocation ``key`` carries: of itself, of its user ids by its owner, and of
        certifications by ``issuers`` (on every user id, revoked ones included)."""
        fpr = key.fingerprint
        if key.primary.revoked:
            self.keys.add(fpr)
        issuers = list(issuers)
        for uid in key.uids:
            for sig in uid.signatures:
                if not (sig.good and sig.sig_class.startswith("30") and sig.created is not None):
                    continue
                if _issued_by(sig, key.primary):
                    self.note_uid(fpr, uid.text, sig.created)
                for issuer in issuers:
                    if issuer.fingerprint != fpr and _issued_by(sig, issuer):
                        self.note_certification(fpr, issuer.fingerprint, sig.created)

    def uid_revoked(self, key: PublicKey, uid: UserId) -> bool:
        """True if ``uid`` is revoked now, or its owner's revocation seen before is not older than its
        newest self-certification."""
        if uid.revoked:
            return True
        when = self.uids.get(f"{key.fingerprint} {uid.text}")
        if when is None:
            return False
        selfsigs = [s.created or 0 for s in uid.signatures if s.good and s.kind == "sig"
                    and s.sig_class[:2] in CERT_CLASSES and _issued_by(s, key.primary)]
        return when >= max(selfsigs, default=0)


@dataclass
class Evaluation:
    """What :func:`evaluate` decided for one keyring listing."""

    certifiers: dict[Fingerprint, str]  # certifier fingerprint -> "" if rooted, else why not
    verdicts: list[KeyVerdict]
    seen: Seen

    def kept(self) -> list[KeyVerdict]:
        """The keys the seeds keep: certified, and retired or lapsed ones with their windows."""
        return [v for v in self.verdicts if v.kept]

    def dropped(self) -> list[KeyVerdict]:
        """Every other key, with its reason."""
        return [v for v in self.verdicts if not v.kept]


def _issued_by(sig: Signature, issuer: SubKey) -> bool:
    if sig.issuer_fingerprint:
        return sig.issuer_fingerprint == issuer.fingerprint
    return sig.key_id.upper() == issuer.fingerprint[-16:]


def certification_state(uid: UserId, subject: Fingerprint, issuer: SubKey, now: float, skew: float,
                        seen: Seen) -> Verdict | None:
    """The state of ``issuer``'s certification of ``uid``: CERTIFIED, CERTIFICATION_EXPIRED,
    CERTIFICATION_REVOKED, or None when there is no good one (GnuPG's ``!`` verdict only)."""
    if issuer.fingerprint == subject:
        return None  # a self-signature certifies nothing
    made = [s for s in uid.signatures if s.good and _issued_by(s, issuer) and s.created is not None]
    certs = [s for s in made if s.kind == "sig" and s.sig_class[:2] in CERT_CLASSES and s.sig_class.endswith("x")
             and s.created is not None and s.created >= (issuer.created or 0) and s.created <= now + skew]
    if not certs:
        return None
    latest = max(certs, key=lambda s: s.created or 0)
    created = latest.created or 0
    for when in (s.created or 0 for s in made if s.sig_class.startswith("30")):
        seen.note_certification(subject, issuer.fingerprint, when)
    before = seen.revoked_before(subject, issuer.fingerprint)
    if before is not None and before >= created:
        return Verdict.CERTIFICATION_REVOKED
    if latest.expires is not None and latest.expires <= now:
        return Verdict.CERTIFICATION_EXPIRED
    return Verdict.CERTIFIED


def certification_windows(uid: UserId, subject: Fingerprint, issuer: SubKey, now: float, skew: float, seen: Seen,
                          name: str) -> list[Window]:
    """When ``issuer``'s certifications of ``uid`` were valid: each good certification from its creation until
    the first revocation by the same issuer made at or after it (RFC 9580: a certification revocation revokes
    the certifications before it), or its expiry once passed (one still ahead is open); overlapping spans
    merged.  ``name`` is the issuer's ``category/nick``."""
    if issuer.fingerprint == subject:
        return []
    made = [s for s in uid.signatures if s.good and _issued_by(s, issuer) and s.created is not None]
    certs = [s for s in made if s.kind == "sig" and s.sig_class[:2] in CERT_CLASSES and s.sig_class.endswith("x")
             and (s.created or 0) >= (issuer.created or 0) and (s.created or 0) <= now + skew]
    revocations = sorted({s.created or 0 for s in made if s.sig_class.startswith("30")}
                         | {int(w) for w in [seen.revoked_before(subject, issuer.fingerprint)] if w is not None})
    spans: list[Window] = []
    for cert in certs:
        start = cert.created or 0
        ends = [(r, "certification revoked") for r in revocations if r >= start][:1]
        if cert.expires is not None:
            ends.append((cert.expires, "certification expired"))
        end, closed = min(ends) if ends else (None, "")
        if end is not None and end > now:
            # an expiry still ahead stays open here: the next update closes it if no new certification came
            # (a user who has not run update-seed since is never frozen by a renewal they have not fetched)
            end, closed = None, ""
        if end is None or end > start:
            spans.append(Window(start, end, name, closed))
    return merge_windows(spans)


def merge_windows(spans: Iterable[Window]) -> list[Window]:
    """Overlapping or touching windows joined (an open one absorbs every later one), oldest first."""
    merged: list[Window] = []
    for span in sorted(spans, key=lambda w: w.start or 0):
        last = merged[-1] if merged else None
        if last is not None and (last.end is None or (span.start or 0) <= last.end):
            if last.end is not None and (span.end is None or span.end > last.end):
                merged[-1] = Window(last.start, span.end, span.certifier, span.closed)
            continue
        merged.append(span)
    return merged


def _usable(key: SubKey, now: float) -> str:
    if key.revoked:
        return "revoked"
    if key.expired_at(now):
        return "expired"
    return ""


#: Why a certifier does not count, when the reason is signed revocation evidence: the keys it vouched
#: for are dropped at once (no shrink guard, no tolerated refresh), never kept until an update succeeds.
CERTIFIER_REVOKED = "revoked"
ROOT_CERTIFICATION_REVOKED = "its certification by the root key was revoked"
REVOCATION_REASONS = (CERTIFIER_REVOKED, ROOT_CERTIFICATION_REVOKED)


def root_certifiers(keys: Mapping[Fingerprint, PublicKey], roots: Sequence[Fingerprint],
                    certifiers: Sequence[Fingerprint], now: float, skew: float,
                    seen: Seen | None = None) -> dict[Fingerprint, str]:
    """For each certifier: "" if a usable root certifies it (and it is usable itself), else why not
    (one of :data:`REVOCATION_REASONS` when a revocation, now or ``seen`` before, is the reason).
    Revocations found are noted in ``seen``."""
    seen = seen if seen is not None else Seen()
    usable_roots = [keys[r].primary for r in roots if r in keys and not _usable(keys[r].primary, now)]
    result: dict[Fingerprint, str] = {}
    for fpr in certifiers:
        key = keys.get(fpr)
        if key is None:
            result[fpr] = CERTIFIER_REVOKED if fpr in seen.keys else "not installed"
            continue
        seen.note(key, [keys[r].primary for r in roots if r in keys])
        problem = CERTIFIER_REVOKED if fpr in seen.keys else _usable(key.primary, now)
        if problem:
            result[fpr] = problem
            continue
        states = {certification_state(uid, fpr, root, now, skew, seen)
                  for uid in key.uids if not seen.uid_revoked(key, uid) for root in usable_roots}
        result[fpr] = ("" if Verdict.CERTIFIED in states
                       else ROOT_CERTIFICATION_REVOKED if Verdict.CERTIFICATION_REVOKED in states
                       else "no valid certification by a root key")
    return result


def domain_nick(uid: str, domain: str) -> Nick | None:
    """The nick of a ``Name <nick@domain>`` user id (None for another domain or an invalid nick)."""
    match = _ADDRESS_RE.search(uid)
    if not match or match.group(2).lower() != domain:
        return None
    try:
        return parse_nick(match.group(1).lower())
    except Exception:
        return None


def _judge(key: PublicKey, rooted: Sequence[SubKey], unrooted: Sequence[SubKey], revoked: Sequence[SubKey],
           names: Mapping[Fingerprint, str], domain: str, now: float, skew: float, seen: Seen) -> KeyVerdict:
    fpr = key.fingerprint
    seen.note(key, [*rooted, *unrooted, *revoked])
    if fpr in seen.keys:
        return KeyVerdict(fpr, Verdict.KEY_REVOKED)
    if sum(len(u.signatures) for u in key.uids) > MAX_SIGNATURES_PER_KEY:
        return KeyVerdict(fpr, Verdict.TOO_MANY_SIGNATURES)
    at_domain = [u for u in key.uids if domain_nick(u.text, domain)]
    candidates = [u for u in at_domain if not seen.uid_revoked(key, u)]
    if not candidates:
        if at_domain:  # its owner revoked them (now, or as seen before)
            uid = at_domain[0]
            return KeyVerdict(fpr, Verdict.UID_REVOKED, uid.text, str(domain_nick(uid.text, domain)))
        return KeyVerdict(fpr, Verdict.WRONG_DOMAIN)
    found: dict[Verdict, KeyVerdict] = {}
    windows: list[Window] = []
    for uid in candidates:
        nick = str(domain_nick(uid.text, domain))
        for issuer in rooted:
            state = certification_state(uid, fpr, issuer, now, skew, seen)
            if state is not None:
                found.setdefault(state, KeyVerdict(fpr, state, uid.text, nick, names[issuer.fingerprint]))
                windows += certification_windows(uid, fpr, issuer, now, skew, seen, names[issuer.fingerprint])
        for issuers, verdict in ((revoked, Verdict.CERTIFIER_REVOKED), (unrooted, Verdict.CERTIFIER_NOT_ROOTED)):
            for issuer in issuers:
                if certification_state(uid, fpr, issuer, now, skew, seen) is Verdict.CERTIFIED:
                    found.setdefault(verdict, KeyVerdict(fpr, verdict, uid.text, nick, names[issuer.fingerprint]))
    windows = merge_windows(windows)
    best = next((found[v] for v in (Verdict.CERTIFIED, Verdict.CERTIFICATION_REVOKED, Verdict.CERTIFIER_REVOKED,
                                    Verdict.CERTIFICATION_EXPIRED, Verdict.CERTIFIER_NOT_ROOTED) if v in found), None)
    if best is not None and windows and best.verdict in (Verdict.CERTIFIED, Verdict.CERTIFICATION_REVOKED,
                                                         Verdict.CERTIFICATION_EXPIRED):
        # certified now or once: kept with its windows (a retired key judges its old signatures)
        state = (Verdict.KEY_EXPIRED if key.primary.expired_at(now)
                 else best.verdict if best.verdict is Verdict.CERTIFIED else Verdict.RETIRED)
        return dataclasses.replace(best, verdict=state, windows=windows)
    if key.primary.expired_at(now):
        return KeyVerdict(fpr, Verdict.KEY_EXPIRED)
    if best is not None:
        return best
    return KeyVerdict(fpr, Verdict.NO_CERTIFICATION, candidates[0].text, str(domain_nick(candidates[0].text, domain)))


def evaluate(listing: Iterable[PublicKey], roots: Mapping[Fingerprint, str], certifiers: Mapping[Fingerprint, str],
             domain: str, *, now: float | None = None, skew: float = 600.0, seen: Seen | None = None,
             candidates: set[Fingerprint] | None = None) -> Evaluation:
    """Decide every key of a ``--check-sigs`` listing (roots and certifiers map fingerprint -> category/nick).

    Only ``candidates`` (the keys of the downloaded keyring; default: all) can become seeds.
    Pure: no gpg, no state; ``seen`` (revocations seen before) is updated with the ones found here.
    """
    now = time.time() if now is None else now
    seen = seen if seen is not None else Seen()
    keys = {k.fingerprint: k for k in listing}
    status = root_certifiers(keys, list(roots), list(certifiers), now, skew, seen)
    rooted = [keys[f].primary for f, why in status.items() if not why]
    revoked = [keys[f].primary for f, why in status.items() if why in REVOCATION_REASONS and f in keys]
    unrooted = [keys[f].primary for f, why in status.items() if why and why not in REVOCATION_REASONS and f in keys]
    verdicts = [_judge(key, rooted, unrooted, revoked, certifiers, domain.lower(), now, skew, seen)
                for fpr, key in keys.items() if fpr not in roots and fpr not in certifiers
                and (candidates is None or fpr in candidates)]
    return Evaluation(status, verdicts, seen)


def seeds_from(evaluation: Evaluation) -> dict[Nick, Seed]:
    """Seeds of the certified keys: nick and name from the UID, keys = primary fingerprints."""
    seeds: dict[Nick, Seed] = {}
    for verdict in sorted(evaluation.kept(), key=lambda v: (v.nick, v.fingerprint)):
        nick = Nick(verdict.nick)
        name = verdict.uid.rsplit("<", 1)[0].strip()
        if nick in seeds:
            seed = seeds[nick]
            seed.keys.append(verdict.fingerprint)
            seed.fingerprint.append(verdict.fingerprint)
            if verdict.uid not in seed.uid:
                seed.uid.append(verdict.uid)
        else:
            seeds[nick] = Seed(nick, name, nick, [verdict.fingerprint], [verdict.fingerprint], [verdict.uid])
        seeds[nick].windows[verdict.fingerprint] = list(verdict.windows)
    return seeds


#: Verdicts that rest on signed revocation evidence (no substitution of the download can forge them).
REVOKED_VERDICTS = (Verdict.CERTIFICATION_REVOKED, Verdict.KEY_REVOKED, Verdict.CERTIFIER_REVOKED,
                    Verdict.UID_REVOKED)


def revoked_keys(evaluation: Evaluation) -> set[Fingerprint]:
    """The keys the evaluation drops on revocation evidence (of the key, its certification or its certifier)."""
    return {v.fingerprint for v in evaluation.verdicts if v.verdict in REVOKED_VERDICTS}
