"""Seeds from authority certifications (GLEP 79; design.md §8).

Gentoo publishes its developers' keys unsigned as one keyring bundle; what makes a key a
developer's key is a certification of its ``<nick>@gentoo.org`` user id by the L2-developers
authority key, which the L1 root key certifies in turn.  ``update-seed -C gentoo-devs`` turns such
a keyring into an ordinary seed file:

1. the keyring is downloaded once (size-capped) and imported, *with* its certifications, into a
   throwaway quarantine home together with the pinned root and certifier keys (installed copies,
   plus the certifiers as WKD / keyservers publish them, since installed keyrings keep no
   third-party certifications);
2. GnuPG checks every signature (``--check-sigs``): its verdicts (``!`` good) are the only
   cryptography; everything else is decided here, in Python, on the parsed listing
   (:func:`evaluate`);
3. a certifier counts only when its fingerprint is pinned, it is neither revoked nor expired and a
   root certifies it; a developer key is kept when it is neither revoked nor expired and a UID at
   the configured domain carries a certification by a counted certifier that is valid now
   (exportable class 10-13, made after the certifier key was created, not in the future beyond the
   allowed clock skew, not expired, not revoked by a later revocation);
4. a new seed set that is empty, or that drops more than ``[authority] max-shrink`` percent of the
   installed seeds, is refused unless ``--allow-shrink`` (a truncated or substituted download must
   not wipe the keyring);
5. the kept keys are installed from the same download (a second home imports it while the
   quarantine does, and becomes the keyring when it holds exactly the kept keys); seeds, keyring
   and the record of seen revocations are each replaced atomically.  A revocation once seen is kept: serving an older
   keyring that lacks it does not bring the key back.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from gkeys_portage.core.config import AuthoritySource, KeyRef
from gkeys_portage.core.errors import GkeysError, NetworkError, NotVerifiedError, StateError, UsageError
from gkeys_portage.core.state import atomic_write_json, read_json_object, staging_directory
from gkeys_portage.core.types import Category, Fingerprint, Nick, parse_category, parse_nick
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.refresh import (
    RefreshResult,
    read_location,
    record_installed,
    refresh_due,
    refresh_keys,
    tolerate_failed_refresh,
)
from gkeys_portage.keys.seedfetch import SeedChanges, diff_seeds
from gkeys_portage.keys.seeds import Seed
from gkeys_portage.keys.sources import KeyLocation, candidate_locations
from gkeys_portage.openpgp.colons import PublicKey, Signature, SubKey, UserId
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.keyblocks import Selection

MAX_KEYRING_BYTES = 64 * 1024 * 1024  # active-devs.gpg is ~10 MiB
MAX_CERTIFIER_BYTES = 4 * 1024 * 1024  # one certifier key as a key source publishes it
MAX_SIGNATURES_PER_KEY = 2000  # a certification-flooded key is dropped, not checked further
RECORD = "authority"
CERT_CLASSES = ("10", "11", "12", "13")
_ADDRESS_RE = re.compile(r"<([^<>@\s]+)@([^<>@\s]+)>\s*$")

Progress = Callable[[int, int], None]


class Verdict(enum.Enum):
    """Why a key of the authority keyring was kept or dropped (stable machine codes)."""

    CERTIFIED = "certified"
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


class ShrinkError(NotVerifiedError):
    """The new seed set is empty or smaller than ``[authority] max-shrink`` allows."""


class CollisionError(NotVerifiedError):
    """The keyring holds a key whose key id collides with a pinned root or certifier."""


@dataclass
class KeyVerdict:
    """The verdict on one key of the downloaded keyring."""

    fingerprint: Fingerprint
    verdict: Verdict
    uid: str = ""  # the certified (or best candidate) user id
    nick: str = ""
    certifier: str = ""  # category/nick of the certifier that counted

    def to_json(self) -> dict[str, str]:
        """Machine-readable form for ``--json``."""
        return {"fingerprint": self.fingerprint, "verdict": self.verdict.value, "uid": self.uid,
                "nick": self.nick, "certifier": self.certifier}


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
        """The certified keys."""
        return [v for v in self.verdicts if v.verdict is Verdict.CERTIFIED]

    def dropped(self) -> list[KeyVerdict]:
        """Every other key, with its reason."""
        return [v for v in self.verdicts if v.verdict is not Verdict.CERTIFIED]


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
    if key.primary.expired_at(now):
        return KeyVerdict(fpr, Verdict.KEY_EXPIRED)
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
    for uid in candidates:
        nick = str(domain_nick(uid.text, domain))
        for issuer in rooted:
            state = certification_state(uid, fpr, issuer, now, skew, seen)
            if state is not None:
                found.setdefault(state, KeyVerdict(fpr, state, uid.text, nick, names[issuer.fingerprint]))
        for issuers, verdict in ((revoked, Verdict.CERTIFIER_REVOKED), (unrooted, Verdict.CERTIFIER_NOT_ROOTED)):
            for issuer in issuers:
                if certification_state(uid, fpr, issuer, now, skew, seen) is Verdict.CERTIFIED:
                    found.setdefault(verdict, KeyVerdict(fpr, verdict, uid.text, nick, names[issuer.fingerprint]))
    for verdict in (Verdict.CERTIFIED, Verdict.CERTIFICATION_REVOKED, Verdict.CERTIFIER_REVOKED,
                    Verdict.CERTIFICATION_EXPIRED, Verdict.CERTIFIER_NOT_ROOTED):
        if verdict in found:
            return found[verdict]
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
    return seeds


@dataclass
class AuthorityUpdate:
    """What ``update-seed`` did for one authority category."""

    category: Category
    location: str
    evaluation: Evaluation
    changes: SeedChanges
    seeds: int
    removed_keys: list[Fingerprint] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {"category": self.category, "source": self.location, "seeds": self.seeds,
                "changes": self.changes.to_json(),
                "certifiers": {f: why or "rooted" for f, why in self.evaluation.certifiers.items()},
                "kept": [v.to_json() for v in self.evaluation.kept()],
                "dropped": [v.to_json() for v in self.evaluation.dropped()],
                "removed_keys": list(self.removed_keys)}


def _pinned(ctx: Gkeys, refs: Sequence[KeyRef], what: str) -> dict[Fingerprint, str]:
    result: dict[Fingerprint, str] = {}
    for ref in refs:
        seeds = ctx.seeds.load(ref.category)
        if ref.nick not in seeds:
            raise UsageError(f"{what} {ref} is not a seed (the packaged gentoo-auth seeds name l1, l2-dev, "
                             f"l2-srv, l2-infra; check [authority] and [authority-seeds])")
        for fpr in seeds[ref.nick].keys:
            result[fpr] = str(ref)
    return result


def _pinned_material(ctx: Gkeys, pinned: Mapping[Fingerprint, str]) -> bytes:
    """The installed root and certifier keys (with their certifications), exported from their keyrings."""
    chunks = []
    for category in sorted({name.split("/")[0] for name in pinned.values()}):
        keyring = ctx.keyring(category)
        wanted = [f for f, name in pinned.items() if name.split("/")[0] == category]
        have = [f for f in wanted if f in keyring.installed()]
        missing = [pinned[f] for f in wanted if f not in have]
        if missing:
            raise StateError(f"key(s) {', '.join(sorted(set(missing)))} not installed: "
                             f"run 'gkeys update-seed -C {category}' first")
        chunks.append(keyring.gpg().export_keys(have, armor=False))
    return b"".join(chunks)


def _published_certifiers(ctx: Gkeys, refs: Sequence[KeyRef]) -> list[bytes]:
    """The certifier keys as their key sources (WKD, keyservers) publish them, *with* third-party
    certifications: installed keyrings keep keys without them, and the root's certification of a
    certifier is what this check needs.  Every source is asked and every answer kept (they are merged
    in the quarantine), so a stale source cannot hide a root's revocation another one publishes;
    failures are skipped (the installed copy may still carry the certification)."""
    seeds = [ctx.seeds.load(ref.category)[ref.nick] for ref in refs]
    jobs = [location for seed in seeds for fpr in seed.keys
            for location in candidate_locations(fpr, seed.emails(), ctx.config.sources)]
    deadline = ctx.http.round_deadline()  # a source still answering then is skipped

    def fetch(location: KeyLocation) -> bytes:
        try:
            blob = ctx.http.get(location.url, max_bytes=MAX_CERTIFIER_BYTES, deadline=deadline)
        except GkeysError:
            return b""
        return blob if blob.strip() else b""

    with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), ctx.config.sources.workers))) as pool:
        return [blob for blob in pool.map(fetch, jobs) if blob]


def _check_collisions(listing: Sequence[PublicKey], pinned: Mapping[Fingerprint, str]) -> None:
    ids = {f[-16:]: name for f, name in pinned.items()}
    for key in listing:
        for part in key.all_keys():
            name = ids.get(part.fingerprint[-16:])
            if name and part.fingerprint not in pinned:
                raise CollisionError(f"the keyring holds key {part.fingerprint} whose key id collides with {name}; "
                                     f"refusing the whole keyring (a forged certifier?)")


def _update_keys_hint(refs: Iterable[KeyRef]) -> str:
    """The commands that update the pinned root and certifier keys (their categories, as configured)."""
    return " and ".join(f"'gkeys update-seed -C {cat}' or 'gkeys refresh-key -C {cat}'"
                        for cat in sorted({ref.category for ref in refs}))


#: Verdicts that rest on signed revocation evidence (no substitution of the download can forge them).
REVOKED_VERDICTS = (Verdict.CERTIFICATION_REVOKED, Verdict.KEY_REVOKED, Verdict.CERTIFIER_REVOKED,
                    Verdict.UID_REVOKED)


def revoked_keys(evaluation: Evaluation) -> set[Fingerprint]:
    """The keys the evaluation drops on revocation evidence (of the key, its certification or its certifier)."""
    return {v.fingerprint for v in evaluation.verdicts if v.verdict in REVOKED_VERDICTS}


def _check_shrink(category: Category, old: Mapping[Nick, Sequence[str]], new: Mapping[Nick, Seed],
                  revoked: set[str], max_shrink: float, allow_shrink: bool, location: str, hint: str,
                  window: str = "") -> None:
    """Refuse an empty result, or one that loses too many seeds of ``old`` (nick -> keys: the installed
    seeds, or the largest set seen within the shrink window, named by ``window``).  Seeds whose every key
    is ``revoked`` (key, certification or certifier: signed evidence no substitution can forge) do not
    count as lost, so a revocation applies at once whatever ``max-shrink`` says, even when it empties the
    seeds."""
    lost = len({nick for nick in set(old) - set(new) if not set(old[nick]) <= revoked})
    if not new and (not old or lost):
        raise ShrinkError(f"{category}: no key in {location} carries a valid certification; refusing to empty "
                          f"the seeds (check the source, and the authority keys: {hint})")
    if old and not allow_shrink and lost * 100.0 / len(old) > max_shrink:
        raise ShrinkError(f"{category}: the keyring from {location} would remove {lost} of {len(old)} seeds"
                          f"{window} ({lost * 100.0 / len(old):.0f}%, more than [authority] max-shrink = "
                          f"{max_shrink:g}%); a truncated or substituted download? Nothing else changed. Check the "
                          f"source, then apply it with: gkeys update-seed -C {category} --allow-shrink")


def _largest_recent(entry: object, now: float, window: float, where: str) -> tuple[float, dict[Nick, list[str]]]:
    """The largest seed set installed within ``window`` seconds before ``now`` (its time, nick -> keys), from
    the record; (0, {}) when none is that recent.  A malformed record is a :class:`StateError`."""
    largest = entry.get("largest") if isinstance(entry, dict) else None
    if largest is None:
        return 0.0, {}
    when = largest.get("time") if isinstance(largest, dict) else None
    seeds = largest.get("seeds") if isinstance(largest, dict) else None
    if not (isinstance(when, int | float) and isinstance(seeds, dict)
            and all(isinstance(v, list) and all(isinstance(f, str) for f in v) for v in seeds.values())):
        raise StateError(f"{where} is malformed (the largest seed set seen); restore it from a backup, or "
                         f"delete it and run 'gkeys update-seed' again")
    if now - when > window:
        return 0.0, {}
    return float(when), {Nick(str(k)): list(v) for k, v in seeds.items()}


def _refuse_unusable(category: Category, evaluation: Evaluation, certifiers: Mapping[Fingerprint, str],
                     hint: str, installed: bool) -> None:
    """Refuse when no certifier counts, unless one is out for a revocation and seeds are installed (then
    the keys it vouched for are dropped)."""
    reasons = evaluation.certifiers.values()
    if any(not why for why in reasons) or (installed and any(why in REVOCATION_REASONS for why in reasons)):
        return
    listed = "; ".join(f"{certifiers[f]}: {why}" for f, why in evaluation.certifiers.items())
    raise ShrinkError(f"{category}: no certifier is usable ({listed}); nothing changed (run {hint})")


def _apply_revocations(ctx: Gkeys, category: Category, old: Mapping[Nick, Seed],
                       revoked: set[Fingerprint]) -> list[Nick]:
    """When an update is refused, still drop the revoked keys from the installed seeds and keyring
    (atomically each); return the nicks that lost every key."""
    if not revoked & {f for seed in old.values() for f in seed.keys}:
        return []
    reduced: dict[Nick, Seed] = {}
    for nick, seed in old.items():
        keys = [f for f in seed.keys if f not in revoked]
        if keys:
            reduced[nick] = dataclasses.replace(seed, keys=keys,
                                                fingerprint=[f for f in seed.fingerprint if f not in revoked])
    ctx.seeds.save(category, reduced)
    ctx.keyring(category).remove_keys(revoked)
    return sorted(set(old) - set(reduced))


def _save_seen(ctx: Gkeys, record: dict[str, object], category: Category, seen: Seen, digest: str | None,
               largest: dict[str, object] | None = None) -> None:
    """Write the record of revocations seen (``digest``: of the download applied; None keeps the last one;
    ``largest``: the largest recent seed set, if it changed)."""
    entry = record.get(category)
    last = entry.get("sha256") if isinstance(entry, dict) else None
    record[category] = {**(entry if isinstance(entry, dict) else {}), **seen.to_json(),
                        **({"sha256": digest or last} if digest or last else {}),
                        **({"largest": largest} if largest is not None else {})}
    atomic_write_json(ctx.layout.record(RECORD), record)


def _install(ctx: Gkeys, category: Category, quarantine: GnuPG, staged: GnuPG | None,
             staged_keys: Sequence[Fingerprint], kept: Sequence[Fingerprint],
             staged_export: Future[Selection] | None = None) -> list[Fingerprint]:
    """Replace the category keyring, atomically, by exactly the kept keys; return the removed ones.

    ``staged`` imported the download while the quarantine did: when it holds exactly the kept keys
    it becomes the keyring (with ``staged_export``, its checked export, as the armored keyring when
    nothing else is merged into it); otherwise the kept keys are taken from the quarantine.  The installed
    copies of kept keys are merged in (a subkey revocation seen before survives an older
    download).  ``staged`` is None when the download is byte-for-byte the one applied last time:
    then nothing is written unless the kept set changed (a certification expired meanwhile).
    """
    keyring = ctx.keyring(category)
    installed = keyring.installed()
    if staged is None and set(kept) == set(installed):
        return []
    with staging_directory(ctx.layout.keyrings_dir, f".staging-{category}-") as rebuilt:
        fast = staged is not None and set(staged_keys) == set(kept)
        home = staged if fast and staged is not None else GnuPG(rebuilt, timeout=ctx.config.policy.gpg_timeout)
        # (export_keys of no fingerprint exports *every* key: never ask it for an empty kept set)
        data = b"" if fast or not kept else quarantine.export_keys(kept, armor=False)
        carried = sorted(set(kept) & set(installed))
        if carried:
            data += keyring.gpg().export_keys(carried, armor=False)
        if not data:
            home.list_keys()  # an empty keybox: every key was revoked (no keybox would keep the old one)
        else:
            home.import_keys(data)
            # (the fast path alone is checked by gpg's IMPORT_OK list: staged_keys == kept)
            missing = set(kept) - {k.fingerprint for k in home.list_keys()}
            if missing:
                raise StateError(f"keyring {category}: {len(missing)} certified key(s) did not import "
                                 f"(disk full or gpg failure?); the previous keyring is kept")
        keyring.adopt(home, staged_export.result() if fast and not data and staged_export is not None else None)
    return sorted(set(installed) - set(kept))


def _drop_if_no_certifier_left(ctx: Gkeys, category: Category, roots: Mapping[Fingerprint, str],
                               certifiers: Mapping[Fingerprint, str], material: bytes, published: Sequence[bytes],
                               seen: Seen, record: dict[str, object], now: float | None) -> int:
    """When the keyring cannot be read: if the certifier keys alone (installed and as published) show every
    certifier revoked, remove every seed and key of ``category`` (nothing it holds is vouched for any more)
    and record what was seen; return how many seeds went (0: nothing to do)."""
    old = ctx.seeds.load(category) if ctx.seeds.is_installed(category) else {}
    if not old:
        return 0
    with staging_directory(ctx.layout.keyrings_dir, ".authority-") as home:
        quarantine = GnuPG(home, timeout=ctx.config.policy.gpg_timeout)
        for blob in (material, *published):
            quarantine.import_with_certifications(blob)
        keys = {k.fingerprint: k for k in quarantine.check_sigs()}
        quarantine.close()
    status = root_certifiers(keys, list(roots), list(certifiers), time.time() if now is None else now,
                             ctx.config.policy.clock_skew, seen)
    if not all(why in REVOCATION_REASONS for why in status.values()):
        return 0
    _save_seen(ctx, record, category, seen, None)
    return len(_apply_revocations(ctx, category, old, {f for seed in old.values() for f in seed.keys}))


def authority_source(ctx: Gkeys, category: str) -> AuthoritySource | None:
    """The ``[authority-seeds]`` line of ``category``, if its seeds come from certifications."""
    return ctx.config.authority.sources.get(parse_category(category))


def update(ctx: Gkeys, category: str, *, allow_shrink: bool = False, progress: Progress | None = None,
           now: float | None = None) -> AuthorityUpdate:
    """Derive ``category``'s seeds from its authority keyring and install the kept keys (caller holds the lock)."""
    cat = parse_category(category)
    source = authority_source(ctx, cat)
    if source is None:
        raise UsageError(f"category {cat!r} has no [authority-seeds] line")
    config = ctx.config.authority
    ctx.ensure_layout()
    roots = _pinned(ctx, config.roots, "root")
    certifiers = _pinned(ctx, source.certifiers, "certifier")
    pinned = {**roots, **certifiers}
    hint = _update_keys_hint((*config.roots, *source.certifiers))
    material = _pinned_material(ctx, pinned)
    step = progress or (lambda _done, _total: None)
    step(0, 100)
    record = read_json_object(ctx.layout.record(RECORD))
    entry = record.get(cat)
    seen = Seen.from_json(entry, f"{ctx.layout.record(RECORD)} ({cat})")
    seen_before = seen.to_json()
    with ThreadPoolExecutor(max_workers=1) as pool:  # both downloads at once
        fetching = pool.submit(_published_certifiers, ctx, source.certifiers)
        try:
            data = read_location(ctx, source.location, MAX_KEYRING_BYTES, "authority keyring")
        except NetworkError as exc:
            # No keyring (blocked?): a revocation of every certifier still applies, from the certifiers alone.
            emptied = _drop_if_no_certifier_left(ctx, cat, roots, certifiers, material, fetching.result(), seen,
                                                 record, now)
            if emptied:
                raise NetworkError(f"{exc.message}; every certifier of {cat} is revoked, so its {emptied} seeds "
                                   f"were removed all the same") from exc
            raise
        published = fetching.result()
    step(25, 100)
    for key in ctx.keyring(cat).installed().values():
        seen.note(key, [])  # a revocation the key refresh brought (the keyring download may lack it)
    digest = hashlib.sha256(data).hexdigest()
    unchanged = isinstance(entry, dict) and entry.get("sha256") == digest and ctx.keyring(cat).exists()
    timeout = ctx.config.policy.gpg_timeout
    with staging_directory(ctx.layout.keyrings_dir, ".authority-") as home, \
            staging_directory(ctx.layout.keyrings_dir, f".staging-{cat}-") as staged_dir:
        quarantine = GnuPG(home, timeout=timeout)
        staged = None if unchanged else GnuPG(staged_dir, timeout=timeout)
        with ThreadPoolExecutor(max_workers=1) as pool:
            # The future keyring imports the download while the quarantine imports it with the
            # authority keys and certifications (on another core), unless it is the same download;
            # it is then exported (and the export checked) while the quarantine's signatures are.
            imported = pool.submit(staged.import_keys, data) if staged is not None else None
            exported = pool.submit(staged.export_exact) if staged is not None else None
            quarantine.import_with_certifications(material)
            for blob in published:
                quarantine.import_with_certifications(blob)
            downloaded = quarantine.import_with_certifications(data)  # IMPORT_OK: the keys of the download
            staged_keys = imported.result() if imported is not None else []
            step(50, 100)
            listing = quarantine.check_sigs()
            step(75, 100)
            _check_collisions(listing, pinned)
            evaluation = evaluate(listing, roots, certifiers, config.domain, now=now,
                                  skew=ctx.config.policy.clock_skew, seen=seen, candidates=set(downloaded))
            old = ctx.seeds.load(cat) if ctx.seeds.is_installed(cat) else {}
            revoked = revoked_keys(evaluation)
            # max-shrink counts from the largest set seen recently (a shrink a day must not add up), and
            # keys revoked at any time, in this download or seen before, are not lost.
            wall = time.time() if now is None else now
            _, largest = _largest_recent(entry, wall, config.shrink_window, f"{ctx.layout.record(RECORD)} ({cat})")
            reference = largest if len(largest) > len(old) else {n: list(s.keys) for n, s in old.items()}
            window = (f" (the largest set installed in the last {config.shrink_window / 86400:g} days)"
                      if reference is largest else "")
            ever = revoked | seen.keys | {k.split(" ", 1)[0] for k in seen.certifications}
            try:
                _refuse_unusable(cat, evaluation, certifiers, hint, bool(old))
                new = seeds_from(evaluation)
                _check_shrink(cat, reference, new, ever, config.max_shrink, allow_shrink, source.location, hint,
                              window)
            except ShrinkError as exc:
                # Refused, yet what was seen revoked stays recorded and is removed at once.
                if seen.to_json() != seen_before:
                    _save_seen(ctx, record, cat, seen, None)
                gone = _apply_revocations(ctx, cat, old, revoked)
                if gone:
                    raise ShrinkError(f"{exc.message}; revoked keys were removed all the same "
                                      f"(seeds {', '.join(gone)})") from exc
                raise
            kept = sorted({v.fingerprint for v in evaluation.kept()})
            removed = _install(ctx, cat, quarantine, staged, staged_keys, kept, exported)
    ctx.seeds.save(cat, new)
    grown = allow_shrink or len(new) >= len(largest)
    _save_seen(ctx, record, cat, seen, digest,
               {"time": wall, "seeds": {n: list(s.keys) for n, s in sorted(new.items())}} if grown else None)
    record_installed(ctx, cat)  # no refresh recorded: only refresh() asks every key source
    step(100, 100)
    return AuthorityUpdate(cat, source.location, evaluation, diff_seeds(old, new), len(new), removed)


def refresh(ctx: Gkeys, category: str, *, force: bool = False,
            progress: Progress | None = None) -> tuple[RefreshResult, AuthorityUpdate | None]:
    """``refresh-key`` for an authority category, under the refresh policy of
    :func:`gkeys_portage.keys.refresh.refresh_keys` (at most once per ``refresh-interval``): re-read the
    keyring (one download), then refresh the kept keys from every key source, as for any category (a
    developer's own revocation is published on keyservers and WKD, not in the keyring download).  A
    failure (network, a refused shrink, an unusable certifier) only warns while the last success is
    younger than ``max-refresh-age``, and the keys already installed stay in use; the refresh counts as
    done (recorded) only when both parts succeeded."""
    cat = parse_category(category)
    ctx.ensure_layout()
    due, last = refresh_due(ctx, cat, force=force)
    if not due:
        return RefreshResult(cat, skipped=True, last_success=last), None
    warning = ""
    late: GkeysError | None = None
    update_result: AuthorityUpdate | None = None
    try:
        update_result = update(ctx, cat, progress=progress)
    except (NetworkError, NotVerifiedError) as exc:
        error = NetworkError if isinstance(exc, NetworkError) else ShrinkError
        try:
            warning = tolerate_failed_refresh(ctx, cat, last, exc.message, error)
        except GkeysError as beyond:
            late = beyond  # raised once the keys were refreshed from their sources all the same
    if not ctx.seeds.is_installed(cat):
        if late is not None:
            raise late
        return RefreshResult(cat, skipped=False, last_success=last, warning=warning), update_result
    keys = refresh_keys(ctx, cat, force=True, progress=progress, record=update_result is not None,
                        missing_ok=True)
    if late is not None:
        raise late
    warnings = [w for w in (warning, keys.warning) if w]
    return RefreshResult(cat, skipped=False, outcomes=keys.outcomes, notes=keys.notes, warning="; ".join(warnings),
                         last_success=last if warnings else keys.last_success), update_result
