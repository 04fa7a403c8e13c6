"""Seeds from authority certifications (GLEP 79; design.md §8).

Gentoo publishes its developers' keys unsigned as one keyring bundle; what makes a key a
developer's key is a certification of its ``<nick>@gentoo.org`` user id by the L2-developers
authority key, which the L1 root key certifies in turn.  ``update-seed -C gentoo-devs`` turns such
a keyring into an ordinary seed file:

1. the keyring is downloaded once (size-capped) and imported, *with* its certifications, into a
   throwaway quarantine home together with the pinned root and certifier keys (installed copies,
   plus the certifiers as WKD / keyservers publish them, since installed keyrings keep no
   third-party certifications);
2. GnuPG checks every signature (``--check-sigs``); :mod:`gkeys_portage.keys.certification` decides on
   the parsed listing which keys the chain vouches for, and which revocations it carries;
3. a certifier out for a revocation (its own, or the root's of its certification) is no refusal: every
   key it vouched for is dropped at once;
4. a new seed set that is empty, or that drops more than ``[authority] max-shrink`` percent of the
   largest seed set installed within ``[authority] shrink-window`` days, is refused unless
   ``--allow-shrink`` (a truncated or substituted download must not wipe the keyring); keys revoked (now
   or before) never count as lost, and a refused update still records and removes them;
5. the kept keys are installed from the same download (a second home imports it while the
   quarantine does, and becomes the keyring when it holds exactly the kept keys); seeds, keyring
   and the record of seen revocations are each replaced atomically.  A revocation once seen is kept:
   serving an older keyring that lacks it does not bring the key back.

``refresh-key`` re-reads the keyring and then refreshes the kept keys from every key source.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from gkeys_portage.core import journal
from gkeys_portage.core.config import AuthoritySource, KeyRef
from gkeys_portage.core.errors import GkeysError, NetworkError, NotVerifiedError, StateError, UsageError
from gkeys_portage.core.state import atomic_write_json, read_json_object, staging_directory
from gkeys_portage.core.types import Category, Fingerprint, Nick, parse_category
from gkeys_portage.core.windows import Window
from gkeys_portage.keys.certification import (
    REVOCATION_REASONS,
    Evaluation,
    Seen,
    Verdict,
    evaluate,
    revoked_keys,
    root_certifiers,
    seeds_from,
)
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.keyring import SCRATCH_PREFIXES
from gkeys_portage.keys.prerequisites import kept_certifier_copies, pinned_material
from gkeys_portage.keys.refresh import (
    RefreshResult,
    read_location,
    record_installed,
    refresh_due,
    refresh_keys,
    tolerate_failed_refresh,
)
from gkeys_portage.keys.seedfetch import SeedChanges, diff_seeds
from gkeys_portage.keys.seeds import Seed, window_to_json
from gkeys_portage.keys.sources import KeyLocation, candidate_locations
from gkeys_portage.openpgp.colons import PublicKey
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.keyblocks import Selection

MAX_KEYRING_BYTES = 64 * 1024 * 1024  # active-devs.gpg is ~10 MiB
MAX_CERTIFIER_BYTES = 4 * 1024 * 1024  # one certifier key as a key source publishes it
RECORD = "authority"

Progress = Callable[[int, int], None]


class ShrinkError(NotVerifiedError):
    """The new seed set is empty or smaller than ``[authority] max-shrink`` allows."""


class CollisionError(NotVerifiedError):
    """The keyring holds a key whose key id collides with a pinned root or certifier."""


@dataclass
class AuthorityUpdate:
    """What ``update-seed`` did for one authority category."""

    category: Category
    location: str
    evaluation: Evaluation
    changes: SeedChanges
    seeds: int
    removed_keys: list[Fingerprint] = field(default_factory=list)
    #: keys gone from the download, kept retired (their windows closed now): nick, key, last window
    left: list[tuple[Nick, Fingerprint, Window]] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {"category": self.category, "source": self.location, "seeds": self.seeds,
                "changes": self.changes.to_json(),
                "certifiers": {f: why or "rooted" for f, why in self.evaluation.certifiers.items()},
                "kept": [v.to_json() for v in self.evaluation.kept()],
                "dropped": [v.to_json() for v in self.evaluation.dropped()],
                "removed_keys": list(self.removed_keys),
                "left": [{"nick": nick, "fingerprint": fpr, "window": window_to_json(window)}
                         for nick, fpr, window in self.left]}


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
                       revoked: set[Fingerprint],
                       retired: Mapping[Fingerprint, list[Window]] | None = None) -> list[Nick]:
    """When an update is refused, still drop the revoked keys from the installed seeds and keyring
    (atomically each), and close the windows of the keys ``retired`` names (a retirement applies at once too);
    return the nicks that lost every key."""
    installed = {f for seed in old.values() for f in seed.keys}
    closing = {f: w for f, w in (retired or {}).items() if f in installed}
    if not revoked & installed and not closing:
        return []
    reduced: dict[Nick, Seed] = {}
    for nick, seed in old.items():
        keys = [f for f in seed.keys if f not in revoked]
        if keys:
            windows = {f: closing.get(f, w) for f, w in seed.windows.items() if f not in revoked}
            windows.update((f, w) for f, w in closing.items() if f in keys)
            reduced[nick] = dataclasses.replace(seed, keys=keys, windows=windows,
                                                fingerprint=[f for f in seed.fingerprint if f not in revoked])
    ctx.seeds.save(category, reduced)
    if revoked & installed:
        ctx.keyring(category).remove_keys(revoked)
    return sorted(set(old) - set(reduced))


#: why a window closed when its key left the authority's keyring (Gentoo's active-devs.gpg drops a retired developer)
ABSENT = "no longer in the authority keyring"


def _retain_absent(old: Mapping[Nick, Seed], new: dict[Nick, Seed], present: set[Fingerprint],
                   revoked: set[Fingerprint], when: float) -> list[tuple[Nick, Fingerprint, Window, bool]]:
    """Keep in ``new`` the keys of the installed seeds that carry windows (derived from certifications) but are
    not in this download: a retired developer's key leaves the keyring, and its past signatures must still be
    judged.  An open window closes at ``when`` (the first update that no longer finds the key); revoked keys
    go.  Returns (nick, key, its last window, closed now) for each key kept so."""
    kept: list[tuple[Nick, Fingerprint, Window, bool]] = []
    for nick, seed in old.items():
        for fpr in seed.keys:
            spans = seed.windows.get(fpr)
            if not spans or fpr in present or fpr in revoked:
                continue
            closed = [w if w.closed_at(when) is not None else Window(w.start, int(when), w.certifier, ABSENT)
                      for w in spans]
            target = new.setdefault(nick, Seed(nick, seed.name, seed.keydir, [], [], list(seed.uid)))
            if fpr not in target.keys:
                target.keys.append(fpr)
                target.fingerprint.append(fpr)
            target.windows[fpr] = closed
            kept.append((nick, fpr, closed[-1], closed != spans))
    return kept


def _active(seeds: Mapping[Nick, Seed], when: float) -> dict[Nick, Seed]:
    """The seeds with a key still authorized at ``when`` (a retired one, kept for its past, is not lost again)."""
    return {nick: seed for nick, seed in seeds.items() if set(seed.keys) - set(seed.retired(when))}


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
    with staging_directory(ctx.layout.keyrings_dir, f".staging-{category}-", SCRATCH_PREFIXES) as rebuilt:
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
    with staging_directory(ctx.layout.keyrings_dir, ".authority-", SCRATCH_PREFIXES) as home:
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


#: the progress of an update counts its stages (download, import, check, install), never a percentage
STAGES = 4


@journal.refusals("authority-refused", lambda ctx, category, **_: {"category": category})
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
    step(0, STAGES)
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
            emptied = _drop_if_no_certifier_left(ctx, cat, roots, certifiers, material,
                                                 fetching.result() + kept_certifier_copies(ctx, certifiers), seen,
                                                 record, now)
            if emptied:
                raise NetworkError(f"{exc.message}; every certifier of {cat} is revoked, so its {emptied} seeds "
                                   f"were removed all the same") from exc
            raise
        published = fetching.result() + kept_certifier_copies(ctx, certifiers)
    step(1, STAGES)  # downloaded
    for key in ctx.keyring(cat).installed().values():
        seen.note(key, [])  # a revocation the key refresh brought (the keyring download may lack it)
    digest = hashlib.sha256(data).hexdigest()
    unchanged = isinstance(entry, dict) and entry.get("sha256") == digest and ctx.keyring(cat).exists()
    timeout = ctx.config.policy.gpg_timeout
    with staging_directory(ctx.layout.keyrings_dir, ".authority-", SCRATCH_PREFIXES) as home, \
            staging_directory(ctx.layout.keyrings_dir, f".staging-{cat}-", SCRATCH_PREFIXES) as staged_dir:
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
            step(2, STAGES)  # imported
            listing = quarantine.check_sigs()
            step(3, STAGES)  # certifications checked
            _check_collisions(listing, pinned)
            evaluation = evaluate(listing, roots, certifiers, config.domain, now=now,
                                  skew=ctx.config.policy.clock_skew, seen=seen, candidates=set(downloaded))
            old = ctx.seeds.load(cat) if ctx.seeds.is_installed(cat) else {}
            revoked = revoked_keys(evaluation)
            # max-shrink counts from the largest set seen recently (a shrink a day must not add up), and
            # keys revoked at any time, in this download or seen before, are not lost.
            wall = time.time() if now is None else now
            _, largest = _largest_recent(entry, wall, config.shrink_window, f"{ctx.layout.record(RECORD)} ({cat})")
            active = _active(old, wall)
            reference = largest if len(largest) > len(active) else {n: list(s.keys) for n, s in active.items()}
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
                gone = _apply_revocations(ctx, cat, old, revoked, {v.fingerprint: v.windows for v in evaluation.kept()
                                                                   if v.verdict is Verdict.RETIRED})
                if gone:
                    raise ShrinkError(f"{exc.message}; revoked keys were removed all the same "
                                      f"(seeds {', '.join(gone)})") from exc
                raise
            recent = {n: list(s.keys) for n, s in sorted(new.items())}  # the largest-set record: active seeds only
            absent = _retain_absent(old, new, set(downloaded), revoked | {Fingerprint(f) for f in seen.keys}, wall)
            kept = sorted({v.fingerprint for v in evaluation.kept()} | {fpr for _, fpr, _, _ in absent})
            # the download as it came is the kept keys' history (GnuPG's import keeps a subkey's newest binding only)
            ctx.keyring(cat).note_history(data)
            removed = _install(ctx, cat, quarantine, staged, staged_keys, kept, exported)
    ctx.seeds.save(cat, new)
    grown = allow_shrink or len(recent) >= len(largest)
    _save_seen(ctx, record, cat, seen, digest, {"time": wall, "seeds": recent} if grown else None)
    record_installed(ctx, cat)  # no refresh recorded: only refresh() asks every key source
    step(STAGES, STAGES)  # evaluated and installed
    done = AuthorityUpdate(cat, source.location, evaluation, diff_seeds(old, new), len(new), removed,
                           [(nick, fpr, window) for nick, fpr, window, now_closed in absent if now_closed])
    retired = {f"{v.nick} {v.fingerprint}": window_to_json(v.windows[-1]) for v in done.evaluation.kept()
               if v.verdict is not Verdict.CERTIFIED and v.windows}
    retired.update((f"{nick} {fpr}", window_to_json(window)) for nick, fpr, window in done.left)
    journal.record(ctx, "authority-updated", {**done.to_json(), "kept": len(done.evaluation.kept()), "dropped": [
        v.to_json() for v in done.evaluation.dropped()][:50], "retired": retired})  # history compares the certifiers
    return done


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
