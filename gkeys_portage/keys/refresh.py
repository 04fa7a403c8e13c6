"""Key operations on categories: install, import, refresh, list, remove, export.

All of them are fingerprint-checked against the seeds: a key that no seed pins never enters a
keyring.  Callers hold the state lock for anything that writes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.core.errors import BadInputError, GkeysError, NetworkError, StateError
from gkeys_portage.core.state import atomic_write, atomic_write_json, read_json_object, read_limited
from gkeys_portage.core.types import Category, Fingerprint, Nick, parse_category
from gkeys_portage.keys.bundle import BundleRefusedError, StaleBundleError, load_bundle
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.install import (
    KeyInstaller,
    KeyOutcome,
    KeyStatus,
    Preloaded,
    ProgressCallback,
    summarize_failure,
)
from gkeys_portage.keys.prerequisites import keep_certifier_copies
from gkeys_portage.keys.seeds import Seed
from gkeys_portage.openpgp.colons import PublicKey

REFRESH_RECORD = "refresh"
#: When each category's keys were first installed ({category: epoch}): a key source's silence counts from
#: then (or from its last answer), never from the epoch.
INSTALL_RECORD = "installed"
#: When each configured key source last answered a refresh, per category ({category: {source: epoch}}).
SOURCE_RECORD = "refresh-sources"
MAX_KEY_FILE = 16 * 1024 * 1024


def select_seeds(ctx: Gkeys, category: str, nick: str | None = None) -> list[Seed]:
    """The seeds of ``category`` (only ``nick`` if given; an unknown nick is an error)."""
    seeds = ctx.seeds.load(parse_category(category))
    if nick is None:
        return [seeds[n] for n in sorted(seeds)]
    if nick not in seeds:
        raise BadInputError(f"no seed {nick!r} in category {category!r}")
    return [seeds[Nick(nick)]]


def bundle_source(ctx: Gkeys, category: str, seeds: list[Seed], notes: list[str] | None,
                  reached: dict[str, str] | None = None) -> Preloaded | None:
    """The category's ``[keyrings]`` bundle as a first key source (None if none is configured or usable).

    Only keyblocks the seeds pin are kept; what was dropped or skipped is appended to ``notes``.  A bad
    signature or unreadable bundle raises before anything changes.  ``reached`` gets the bundle as a key source
    (``bundle URL``): "" when it answered, else why not (a refresh counts it as silent like a keyserver).
    """
    loaded = load_bundle(ctx, category, [fpr for seed in seeds for fpr in seed.keys])
    if loaded is None:
        return None
    if notes is not None:
        notes += loaded.notes
    if reached is not None:
        reached[f"bundle {loaded.source}"] = loaded.silent
    source = f"bundle {loaded.source}" + (f" (signed by {loaded.signed_by})" if loaded.signed_by else "")
    return (source, loaded.keyblocks) if loaded.keyblocks else None


def install_keys(ctx: Gkeys, category: str, nick: str | None = None,
                 progress: ProgressCallback | None = None, notes: list[str] | None = None) -> list[KeyOutcome]:
    """Fetch and install the pinned keys of a category's seeds (or one nick).

    A ``[keyrings]`` bundle of the category is the first source; ``notes`` collects what it dropped.  An
    install is no refresh: it stops at the first source that has each key, so it records none (only the
    every-source refresh of :func:`refresh_keys` may; else the next one would be skipped as recent).
    """
    ctx.ensure_layout()
    installer = KeyInstaller(ctx.keyring(category), ctx.http, ctx.config.sources, progress)
    seeds = select_seeds(ctx, category, nick)
    preloaded = bundle_source(ctx, category, seeds, notes)
    outcomes = installer.install(seeds, preloaded=preloaded)
    if preloaded is not None:  # the roots' certifications of certifiers, for an air-gapped authority update
        keep_certifier_copies(ctx, category, b"".join(preloaded[1].values()),
                              [o.fingerprint for o in outcomes if o.status.ok])
    if any(o.status.ok for o in outcomes):
        record_installed(ctx, parse_category(category))
    return outcomes


def read_location(ctx: Gkeys, location: str, limit: int = MAX_KEY_FILE, what: str = "key file") -> bytes:
    """Key data from a local file or an http(s):// / file:// URL (one download), at most ``limit`` bytes."""
    if "://" in location:
        return ctx.http.get(location, max_bytes=limit)
    return read_limited(Path(location), limit, what)


def import_key(ctx: Gkeys, category: str, nick: str, source: str) -> list[KeyOutcome]:
    """Import the keys of one seed from a file or URL; anything not pinned by it is dropped."""
    ctx.ensure_layout()
    seed = select_seeds(ctx, category, nick)[0]
    data = read_location(ctx, source)
    outcomes = KeyInstaller(ctx.keyring(category), ctx.http, ctx.config.sources).import_data(seed, data, source)
    keep_certifier_copies(ctx, category, data, [o.fingerprint for o in outcomes if o.status.ok], any_key=True)
    if any(o.status.ok for o in outcomes):
        record_installed(ctx, parse_category(category))
    return outcomes


@dataclass
class RefreshResult:
    """What refresh-key did for one category."""

    category: Category
    skipped: bool
    outcomes: list[KeyOutcome] = field(default_factory=list)
    warning: str = ""
    last_success: float | None = None
    notes: list[str] = field(default_factory=list)  # what a [keyrings] bundle dropped or why it was skipped

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {"category": self.category, "skipped": self.skipped, "warning": self.warning, "notes": self.notes,
                "last_success": self.last_success, "keys": [o.to_json() for o in self.outcomes]}


def record_refresh(ctx: Gkeys, category: Category, when: float | None = None) -> None:
    """Remember that ``category``'s keys were successfully fetched from every source at ``when`` (now)."""
    path = ctx.layout.record(REFRESH_RECORD)
    record = read_json_object(path)
    record[category] = time.time() if when is None else when
    atomic_write_json(path, record)


def record_installed(ctx: Gkeys, category: Category) -> None:
    """Remember when ``category``'s keys were first installed (kept if already recorded)."""
    path = ctx.layout.record(INSTALL_RECORD)
    record = read_json_object(path)
    if not isinstance(record.get(category), int | float):
        record[category] = time.time()
        atomic_write_json(path, record)


def installed_at(ctx: Gkeys, category: Category) -> float | None:
    """When ``category``'s keys were first installed (None: not recorded)."""
    value = read_json_object(ctx.layout.record(INSTALL_RECORD)).get(category)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def silent_since(ctx: Gkeys, category: Category, last_full: float | None) -> float:
    """Since when a key source that has not answered on its own counts as silent: the last full refresh,
    else when the category's keys were installed.  A keyring installed before that was recorded counts
    from its first refresh (recorded then), never from the epoch: one outage never fails at once."""
    if last_full is not None:
        return last_full
    installed = installed_at(ctx, category)
    if installed is None:
        record_installed(ctx, category)
        installed = time.time()
    return installed


def record_pieced_refresh(ctx: Gkeys, category: Category, asked: Iterable[str], last: float | None) -> None:
    """A refresh where some source failed is still complete as of the oldest last answer of the sources
    asked, once every one of them has answered on its own since ``last`` (sources that fail in turn):
    record that time, so ``refresh-interval`` and ``gkeys doctor`` see the keys as refreshed then."""
    answers = source_refreshes(ctx, category)
    asked = set(asked)
    if asked and asked <= set(answers):
        oldest = min(answers[source] for source in asked)
        if last is None or oldest > last:
            record_refresh(ctx, category, oldest)


def last_refresh(ctx: Gkeys, category: Category) -> float | None:
    """When ``category``'s keys were last fetched successfully."""
    value = read_json_object(ctx.layout.record(REFRESH_RECORD)).get(category)
    return float(value) if isinstance(value, int | float) else None


def record_sources(ctx: Gkeys, category: Category, sources: Iterable[str], when: float) -> None:
    """Remember that these configured key sources answered ``category``'s refresh at ``when``."""
    path = ctx.layout.record(SOURCE_RECORD)
    record = read_json_object(path)
    entry = record.get(category)
    entry = dict(entry) if isinstance(entry, dict) else {}
    entry.update({source: when for source in sources})
    record[category] = entry
    atomic_write_json(path, record)


def source_refreshes(ctx: Gkeys, category: Category) -> dict[str, float]:
    """When each key source last answered a refresh of ``category`` (sources never seen are absent)."""
    entry = read_json_object(ctx.layout.record(SOURCE_RECORD)).get(category)
    if not isinstance(entry, dict):
        return {}
    return {str(source): float(value) for source, value in entry.items()
            if isinstance(value, int | float) and not isinstance(value, bool)}


def _drop_source_hint(ctx: Gkeys, source: str) -> str:
    where = ctx.config.path or "gkeys.conf"
    if source.startswith("wkd "):
        return f"set '[sources] wkd = no' in {where}"
    if source.startswith("bundle "):
        return f"remove its line from '[keyrings]' in {where}"
    return f"remove {source} from '[sources] keyservers' in {where}"


def tolerate_unanswered_sources(ctx: Gkeys, category: Category, unanswered: Mapping[str, str],
                                last_full: float | None) -> str:
    """The warning for key sources that did not answer this refresh (network error, 5xx: not a clean 404).

    Each source's age is counted from its last answer (from the last full refresh, or from when the
    category was installed, if it never answered alone: :func:`silent_since`).  While every one is
    younger than ``[policy] max-refresh-age`` the keys other sources brought
    are kept and this warns; after that it raises :class:`NetworkError`: a revocation published only on
    that source (the one an attacker on the network would block) would be missed.  The message names the
    source, the command to run when it answers again and the config line that drops it for good.
    """
    answered = source_refreshes(ctx, category)
    now = time.time()
    limit = ctx.config.policy.max_refresh_age
    fresh: list[str] = []
    stale: dict[str, str] = {}
    baseline = silent_since(ctx, category, last_full)
    for source, reason in sorted(unanswered.items()):
        last = answered.get(source, baseline)
        age = None if last is None else now - last
        since = ("last answered" if source in answered else "has not answered since the last full refresh,"
                 if last_full is not None and last == last_full else "has not answered since the keys were installed")
        if age is not None and age <= limit:
            fresh.append(f"{source} ({reason}; it {since} {age / 86400:.1f} days ago; an error after "
                         f"{(limit - age) / 86400:.1f} more days without an answer)")
        else:
            when = "has never answered" if age is None else f"{since} {age / 86400:.0f} days ago"
            stale[source] = f"{source} {when} ({reason})"
    if stale:
        raise NetworkError(
            f"refresh of {category}: {'; '.join(stale.values())}, beyond [policy] max-refresh-age "
            f"({limit / 86400:.0f} days): a revocation published only there would be missed; when it answers "
            f"again run 'gkeys refresh-key -C {category} --force', or if it is gone for good "
            f"{' and '.join(_drop_source_hint(ctx, source) for source in stale)}")
    return (f"refresh failed for {', '.join(fresh)}; the installed keys and what the other sources brought "
            f"stay in use, and it is asked again on the next refresh")


def _network_only(outcome: KeyOutcome) -> bool:
    """A key not delivered because a source failed on the network (judged per source, not per key)."""
    return outcome.status is KeyStatus.UNREACHABLE and bool(outcome.unanswered)


def sources_reached(outcomes: Sequence[KeyOutcome]) -> tuple[set[str], dict[str, str]]:
    """The configured sources that answered for *every* key they were asked about, and the others (a source
    that failed for one key may be exactly the one an attacker blocks for it), with a failure each."""
    unanswered: dict[str, str] = {}
    for outcome in outcomes:
        for source, reason in outcome.unanswered.items():
            unanswered.setdefault(source, reason)
    answered = {source for outcome in outcomes for source in outcome.answered} - set(unanswered)
    return answered, unanswered


def refresh_due(ctx: Gkeys, category: Category, *, force: bool = False) -> tuple[bool, float | None]:
    """Whether a refresh of ``category`` is due (at most once per ``[policy] refresh-interval``, unless
    ``force``), and the time of the last successful one.  The one refresh policy, shared by every key source
    (seeds' sources and authority keyrings)."""
    last = last_refresh(ctx, category)
    due = force or last is None or time.time() - last >= ctx.config.policy.refresh_interval
    return due, last


def tolerate_failed_refresh(ctx: Gkeys, category: Category, last: float | None, reason: str,
                            error: type[GkeysError] = NetworkError) -> str:
    """The warning for a failed refresh while the last success is younger than ``[policy] max-refresh-age``
    (the keys already installed stay in use); after that, raise ``error`` (a revocation may be missed).
    Never refreshed: the age counts from when the keys were installed (:func:`silent_since`)."""
    age = time.time() - silent_since(ctx, category, last)
    what = "refreshed" if last is not None else "installed"
    if age <= ctx.config.policy.max_refresh_age:
        return f"refresh failed ({reason}); keeping the keys {what} {age / 86400:.1f} days ago"
    raise error(f"refresh of {category} failed and the keys were last {what} {age / 86400:.0f} days ago "
                f"(beyond [policy] max-refresh-age): {reason}")


def refresh_keys(ctx: Gkeys, category: str, nick: str | None = None, *, force: bool = False,
                 progress: ProgressCallback | None = None, record: bool = True,
                 missing_ok: bool = False) -> RefreshResult:
    """Refresh installed keys (new subkeys, expiry, revocations) at most once per interval.

    A failed refresh is a warning while the last successful one is younger than
    ``[policy] max-refresh-age``, and an error (exit 3) after that.  A refresh counts as successful (and
    is recorded, so the next one waits for ``refresh-interval``) only when every configured source asked
    answered; each source's last answer is recorded on its own, and one that keeps failing while others
    deliver warns, then fails once it is older than ``max-refresh-age``
    (:func:`tolerate_unanswered_sources`).  A refresh of one ``nick`` records nothing: it is no refresh of
    the category.  With ``record`` false nothing is recorded as a refresh of the whole category (an
    authority category whose keyring could not be re-read), though each source's answer still is.  With
    ``missing_ok`` a key that no source has (a clean 404 everywhere) is no failure: an authority category's
    keys come from its keyring download, and the sources are asked only for news about them.
    """
    cat = parse_category(category)
    ctx.ensure_layout()
    due, last = refresh_due(ctx, cat, force=force)
    if not due:
        return RefreshResult(cat, skipped=True, last_success=last)
    installed = ctx.keyring(cat).installed()
    seeds = [s for s in select_seeds(ctx, cat, nick) if s.accepted() & set(installed)]
    # Every source is asked and the answers merged: a revocation published on any of them applies.
    notes: list[str] = []
    refused: BundleRefusedError | None = None
    bundle: dict[str, str] = {}
    try:
        preloaded = bundle_source(ctx, cat, seeds, notes, bundle)
    except BundleRefusedError as exc:
        # A refused bundle is a failed refresh (the other sources still bring revocations): it warns
        # until max-refresh-age, like a dead keyserver, and the refresh time is not recorded.
        refused, preloaded = exc, None
        notes.append(str(exc))
    outcomes = KeyInstaller(ctx.keyring(cat), ctx.http, ctx.config.sources, progress).install(
        seeds, every_source=True, preloaded=preloaded)
    # One nick's refresh asked about one key: it is no refresh of the category, and no source's answer for
    # every key (recording it would make the next full refresh "refreshed recently" and skip the others).
    answered, unanswered = sources_reached(outcomes)
    answered |= {source for source, silent in bundle.items() if not silent}
    unanswered.update({source: silent for source, silent in bundle.items() if silent})
    if answered and nick is None:
        record_sources(ctx, cat, answered, time.time())
    if isinstance(refused, StaleBundleError):
        raise refused  # the other sources were asked (their revocations apply); the stale source is an error
    whole = nick is None and record
    failure = summarize_failure([o for o in outcomes if not _network_only(o)
                                 and not (missing_ok and o.status is KeyStatus.MISSING)]) or refused
    warnings = [tolerate_failed_refresh(ctx, cat, last, str(failure))] if failure is not None else []
    if unanswered:
        warnings.append(tolerate_unanswered_sources(ctx, cat, unanswered, last))
        if failure is None and whole:
            record_pieced_refresh(ctx, cat, answered | set(unanswered), last)
    if not warnings:
        if whole:
            record_refresh(ctx, cat)
        return RefreshResult(cat, skipped=False, outcomes=outcomes, last_success=time.time(), notes=notes)
    return RefreshResult(cat, skipped=False, outcomes=outcomes, last_success=last, notes=notes,
                         warning="; ".join(warnings))


def list_keys(ctx: Gkeys, category: str, nick: str | None = None) -> list[tuple[Seed, PublicKey | None]]:
    """Each seed's primary keys paired with the installed key (None if not installed)."""
    keys = ctx.keyring(category).installed()
    return [(seed, keys.get(fpr)) for seed in select_seeds(ctx, category, nick) for fpr in seed.keys]


def remove_keys(ctx: Gkeys, category: str, nick: str) -> list[Fingerprint]:
    """Remove one seed's keys from the category keyring; return the removed fingerprints."""
    seed = select_seeds(ctx, category, nick)[0]
    keyring = ctx.keyring(category)
    return keyring.remove_keys(seed.accepted())


def prune_unpinned(ctx: Gkeys, category: str) -> list[Fingerprint]:
    """Remove keys that no seed of the category pins any more (after a seed update)."""
    cat = parse_category(category)
    pinned = {f for seed in ctx.seeds.load(cat).values() for f in seed.accepted()}
    keyring = ctx.keyring(cat)
    return keyring.remove_keys({f for f in keyring.installed() if f not in pinned})


def export_keyring(ctx: Gkeys, category: str, output: Path, *, armor: bool = True) -> int:
    """Write the category keyring to ``output`` atomically; return the number of keys."""
    keyring = ctx.keyring(category)
    keys = keyring.installed()
    if not keys:
        raise StateError(f"keyring {category!r} is empty; run 'gkeys install-key -C {category}' first")
    atomic_write(output, keyring.gpg().export_keys(sorted(keys), armor=armor))
    return len(keys)
