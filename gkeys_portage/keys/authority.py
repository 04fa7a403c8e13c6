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
from gkeys_portage.keys.prerequisites import kept_certifier_copies, pinned_material
from gkeys_portage.keys.refresh import (
    RefreshResult,
    read_location,
    record_refresh,
    refresh_due,
    tolerate_failed_refresh,
)
from gkeys_portage.keys.seedfetch import SeedChanges, diff_seeds
from gkeys_portage.keys.seeds import Seed
from gkeys_portage.keys.sources import candidate_locations
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
    WRONG_DOMAIN = "wrong-domain"
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
    """Revocations seen before (kept across updates, so an older keyring cannot undo them)."""

    certifications: dict[str, float] = field(default_factory=dict)  # "DEVFPR CERTFPR" -> newest revocation
    keys: set[str] = field(default_factory=set)  # revoked primary fingerprints

    @classmethod
    def from_json(cls, data: object) -> Seen:
        """Read the record (anything malformed counts as nothing seen)."""
        if not isinstance(data, dict):
            return cls()
        certs = data.get("certifications", {})
        keys = data.get("keys", [])
        return cls({k: float(v) for k, v in certs.items() if isinstance(v, int | float)}
                   if isinstance(certs, dict) else {},
                   {k for k in keys if isinstance(k, str)} if isinstance(keys, list) else set())

    def to_json(self) -> dict[str, object]:
        """The record's JSON form."""
        return {"certifications": dict(sorted(self.certifications.items())), "keys": sorted(self.keys)}

    def revoked_before(self, subject: Fingerprint, certifier: Fingerprint) -> float | None:
        """The newest revocation of ``certifier``'s certification of ``subject`` seen so far."""
        return self.certifications.get(f"{subject} {certifier}")

    def note_certification(self, subject: Fingerprint, certifier: Fingerprint, when: float) -> None:
        """Remember a (checked) revocation of a certification."""
        key = f"{subject} {certifier}"
        self.certifications[key] = max(when, self.certifications.get(key, 0.0))


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
    revocations = [s.created or 0 for s in made if s.sig_class.startswith("30")]
    for when in revocations:
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


def root_certifiers(keys: Mapping[Fingerprint, PublicKey], roots: Sequence[Fingerprint],
                    certifiers: Sequence[Fingerprint], now: float, skew: float) -> dict[Fingerprint, str]:
    """For each certifier: "" if a usable root certifies it (and it is usable itself), else why not."""
    usable_roots = [keys[r].primary for r in roots if r in keys and not _usable(keys[r].primary, now)]
    result: dict[Fingerprint, str] = {}
    for fpr in certifiers:
        key = keys.get(fpr)
        if key is None:
            result[fpr] = "not installed"
            continue
        problem = _usable(key.primary, now)
        if problem:
            result[fpr] = problem
            continue
        nothing = Seen()
        rooted = any(certification_state(uid, fpr, root, now, skew, nothing) is Verdict.CERTIFIED
                     for uid in key.uids if not uid.revoked for root in usable_roots)
        result[fpr] = "" if rooted else "no valid certification by a root key"
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


def _judge(key: PublicKey, rooted: Sequence[SubKey], unrooted: Sequence[SubKey], names: Mapping[Fingerprint, str],
           domain: str, now: float, skew: float, seen: Seen) -> KeyVerdict:
    fpr = key.fingerprint
    if key.primary.revoked:
        seen.keys.add(fpr)
    if fpr in seen.keys:
        return KeyVerdict(fpr, Verdict.KEY_REVOKED)
    if key.primary.expired_at(now):
        return KeyVerdict(fpr, Verdict.KEY_EXPIRED)
    if sum(len(u.signatures) for u in key.uids) > MAX_SIGNATURES_PER_KEY:
        return KeyVerdict(fpr, Verdict.TOO_MANY_SIGNATURES)
    candidates = [u for u in key.uids if not u.revoked and domain_nick(u.text, domain)]
    if not candidates:
        return KeyVerdict(fpr, Verdict.WRONG_DOMAIN)
    found: dict[Verdict, KeyVerdict] = {}
    for uid in candidates:
        nick = str(domain_nick(uid.text, domain))
        for issuer in rooted:
            state = certification_state(uid, fpr, issuer, now, skew, seen)
            if state is not None:
                found.setdefault(state, KeyVerdict(fpr, state, uid.text, nick, names[issuer.fingerprint]))
        for issuer in unrooted:
            if certification_state(uid, fpr, issuer, now, skew, seen) is Verdict.CERTIFIED:
                found.setdefault(Verdict.CERTIFIER_NOT_ROOTED, KeyVerdict(
                    fpr, Verdict.CERTIFIER_NOT_ROOTED, uid.text, nick, names[issuer.fingerprint]))
    for verdict in (Verdict.CERTIFIED, Verdict.CERTIFICATION_REVOKED, Verdict.CERTIFICATION_EXPIRED,
                    Verdict.CERTIFIER_NOT_ROOTED):
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
    status = root_certifiers(keys, list(roots), list(certifiers), now, skew)
    rooted = [keys[f].primary for f, why in status.items() if not why]
    unrooted = [keys[f].primary for f, why in status.items() if why and f in keys]
    verdicts = [_judge(key, rooted, unrooted, certifiers, domain.lower(), now, skew, seen)
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


def _published_certifiers(ctx: Gkeys, refs: Sequence[KeyRef]) -> list[bytes]:
    """The certifier keys as their key sources (WKD, keyservers) publish them, *with* third-party
    certifications: installed keyrings keep keys without them, and the root's certification of a
    certifier is what this check needs.  First source that answers, per key; failures are skipped
    (the installed copy may still carry the certification)."""
    seeds = [ctx.seeds.load(ref.category)[ref.nick] for ref in refs]
    wanted = [(fpr, seed) for seed in seeds for fpr in seed.keys]

    def fetch(item: tuple[Fingerprint, Seed]) -> bytes:
        fpr, seed = item
        for location in candidate_locations(fpr, seed.emails(), ctx.config.sources):
            try:
                blob = ctx.http.get(location.url, max_bytes=MAX_CERTIFIER_BYTES)
            except GkeysError:
                continue
            if blob.strip():
                return blob
        return b""

    with ThreadPoolExecutor(max_workers=max(1, min(len(wanted), ctx.config.sources.workers))) as pool:
        return [blob for blob in pool.map(fetch, wanted) if blob]


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


def _check_shrink(category: Category, old: Mapping[Nick, Seed], new: Mapping[Nick, Seed], evaluation: Evaluation,
                  max_shrink: float, allow_shrink: bool, location: str, hint: str) -> None:
    """Refuse an empty result, or one that loses too many seeds.  Seeds whose every key the keyring
    shows revoked (key or certification: signed evidence no substitution can forge) do not count as
    lost, so a revocation applies at once whatever ``max-shrink`` says."""
    if not new:
        raise ShrinkError(f"{category}: no key in {location} carries a valid certification; refusing to empty "
                          f"the seeds (check the source, and the authority keys: {hint})")
    revoked = {v.fingerprint for v in evaluation.verdicts
               if v.verdict in (Verdict.CERTIFICATION_REVOKED, Verdict.KEY_REVOKED)}
    lost = len({nick for nick in set(old) - set(new) if not set(old[nick].keys) <= revoked})
    if old and not allow_shrink and lost * 100.0 / len(old) > max_shrink:
        raise ShrinkError(f"{category}: the keyring from {location} would remove {lost} of {len(old)} seeds "
                          f"({lost * 100.0 / len(old):.0f}%, more than [authority] max-shrink = {max_shrink:g}%); "
                          f"a truncated or substituted download? Nothing changed. Check the source, then "
                          f"apply it with: gkeys update-seed -C {category} --allow-shrink")


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
        data = b"" if fast else quarantine.export_keys(kept, armor=False)
        carried = sorted(set(kept) & set(installed))
        if carried:
            data += keyring.gpg().export_keys(carried, armor=False)
        if data:
            home.import_keys(data)
            # (the fast path alone is checked by gpg's IMPORT_OK list: staged_keys == kept)
            missing = set(kept) - {k.fingerprint for k in home.list_keys()}
            if missing:
                raise StateError(f"keyring {category}: {len(missing)} certified key(s) did not import "
                                 f"(disk full or gpg failure?); the previous keyring is kept")
        keyring.adopt(home, staged_export.result() if fast and not data and staged_export is not None else None)
    return sorted(set(installed) - set(kept))


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
    material = pinned_material(ctx, pinned)
    step = progress or (lambda _done, _total: None)
    step(0, 100)
    with ThreadPoolExecutor(max_workers=1) as pool:  # both downloads at once
        fetching = pool.submit(_published_certifiers, ctx, source.certifiers)
        data = read_location(ctx, source.location, MAX_KEYRING_BYTES, "authority keyring")
        published = fetching.result() + kept_certifier_copies(ctx, certifiers)
    step(25, 100)
    record = read_json_object(ctx.layout.record(RECORD))
    entry = record.get(cat)
    seen = Seen.from_json(entry)
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
            if not any(not why for why in evaluation.certifiers.values()):
                reasons = "; ".join(f"{certifiers[f]}: {why}" for f, why in evaluation.certifiers.items())
                raise ShrinkError(f"{cat}: no certifier is usable ({reasons}); nothing changed "
                                  f"(run {hint})")
            new = seeds_from(evaluation)
            old = ctx.seeds.load(cat) if ctx.seeds.is_installed(cat) else {}
            _check_shrink(cat, old, new, evaluation, config.max_shrink, allow_shrink, source.location, hint)
            kept = sorted({v.fingerprint for v in evaluation.kept()})
            removed = _install(ctx, cat, quarantine, staged, staged_keys, kept, exported)
    ctx.seeds.save(cat, new)
    record[cat] = {**seen.to_json(), "sha256": digest}
    atomic_write_json(ctx.layout.record(RECORD), record)
    record_refresh(ctx, cat)
    step(100, 100)
    return AuthorityUpdate(cat, source.location, evaluation, diff_seeds(old, new), len(new), removed)


def refresh(ctx: Gkeys, category: str, *, force: bool = False,
            progress: Progress | None = None) -> tuple[RefreshResult, AuthorityUpdate | None]:
    """``refresh-key`` for an authority category: re-read the keyring (one download) under the refresh
    policy of :func:`gkeys_portage.keys.refresh.refresh_keys` — at most once per ``refresh-interval``;
    a failure (network, a refused shrink, an unusable certifier) only warns while the last success
    is younger than ``max-refresh-age``, and the keys already installed stay in use."""
    cat = parse_category(category)
    ctx.ensure_layout()
    due, last = refresh_due(ctx, cat, force=force)
    if not due:
        return RefreshResult(cat, skipped=True, last_success=last), None
    try:
        result = update(ctx, cat, progress=progress)
    except (NetworkError, NotVerifiedError) as exc:
        error = NetworkError if isinstance(exc, NetworkError) else ShrinkError
        warning = tolerate_failed_refresh(ctx, cat, last, exc.message, error)
        return RefreshResult(cat, skipped=False, last_success=last, warning=warning), None
    return RefreshResult(cat, skipped=False, last_success=time.time()), result
