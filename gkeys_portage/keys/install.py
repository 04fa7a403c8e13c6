"""Install and refresh keys for seeds: fetch concurrently, keep only pinned fingerprints.

Whatever a source returns is imported into a throwaway *quarantine* GnuPG home first, with
self-signatures only (third-party certifications play no role when trust comes from pins).  Only
keyblocks whose *primary* fingerprint is pinned by the seed leave it: the export is filtered per
keyblock (GnuPG's selectors also match subkeys, and anyone can bind a copy of a pinned primary key
as a subkey of their own key), checked against what gpg itself sees, capped in size, and imported
into the category keyring's staging home, which is committed atomically.  Everything else a source
returned — other keys, keys with a colliding key id, keys carrying a pinned key as a subkey — is
dropped and reported.  An answer GnuPG did not import completely makes its key "refused".

install-key asks the sources in order until one answers with the key; refresh asks every source
(one bounded pool) and merges the answers, so a revocation published on any of them applies.

Batching keeps GnuPG work constant: one import into quarantine per round (plus a per-answer
retry only if the batch lost keys or gpg reported a problem), one listing, one export and one
import into the keyring, however many seeds there are.
"""

from __future__ import annotations

import enum
import queue
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, cast

from gkeys_portage.core.config import SourcesConfig
from gkeys_portage.core.errors import GkeysError, NetworkError
from gkeys_portage.core.http import HostNotFoundError, HttpClient, NotFoundError
from gkeys_portage.core.state import staging_directory
from gkeys_portage.core.types import Fingerprint, Nick
from gkeys_portage.keys.keyring import SCRATCH_PREFIXES, Keyring, journal_keys
from gkeys_portage.keys.seeds import Seed
from gkeys_portage.keys.sources import KeyLocation, candidate_locations
from gkeys_portage.openpgp.colons import PublicKey
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.keyblocks import Selection
from gkeys_portage.openpgp.keyio import EarlyExport, ImportReport

MAX_KEY_BYTES = 4 * 1024 * 1024
ProgressCallback = Callable[[int, int], None]
#: A source already at hand: its name and keyblocks by primary fingerprint (a keyring bundle).
Preloaded = tuple[str, Mapping[Fingerprint, bytes]]


class KeyStatus(enum.Enum):
    """What happened to one pinned fingerprint."""

    ADDED = "added"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    MISSING = "missing"  # no source had it (404 everywhere)
    MISMATCH = "mismatch"  # sources answered, but not with the pinned key
    UNREACHABLE = "unreachable"  # network failures on every source
    REFUSED = "refused"  # GnuPG did not import all of it, or its keyblock exceeds the caps

    @property
    def ok(self) -> bool:
        """True if the key is now in the keyring."""
        return self in (KeyStatus.ADDED, KeyStatus.UPDATED, KeyStatus.UNCHANGED)


@dataclass
class KeyOutcome:
    """The result for one (nick, fingerprint)."""

    nick: Nick
    fingerprint: Fingerprint
    status: KeyStatus
    source: str = ""
    dropped: list[str] = field(default_factory=list)  # other fingerprints the source returned
    errors: list[str] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)  # configured sources that answered (data or a clean 404)
    unanswered: dict[str, str] = field(default_factory=dict)  # configured source -> its network failure

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {"nick": self.nick, "fingerprint": self.fingerprint, "status": self.status.value,
                "source": self.source, "dropped": self.dropped, "errors": self.errors,
                "unanswered_sources": self.unanswered}


@dataclass(frozen=True)
class _Reached:
    """What one location of a configured source did: answered (``failure`` empty), failed on the
    network (``failure`` says how), or named a host that does not exist (``no_host``)."""

    source: str
    kind: str
    failure: str = ""
    no_host: bool = False


@dataclass
class _Wanted:
    seed: Seed
    fingerprint: Fingerprint
    locations: list[KeyLocation]
    next_index: int = 0
    answers: list[tuple[str, bytes]] = field(default_factory=list)  # (source, data) not yet imported
    source: str = ""
    errors: list[str] = field(default_factory=list)
    network_failed: bool = False  # a source failed at the network level
    #: one entry per location asked; appended from several threads (list.append is atomic), summed up per
    #: source when the outcome is made (:func:`_sources_reached`)
    reached: list[_Reached] = field(default_factory=list)
    returned: list[Fingerprint] = field(default_factory=list)  # other keys sources returned
    unusable: bool = False  # a source answered with something that held no OpenPGP key
    refused: bool = False  # an answer did not import completely, or the keyblock exceeds the caps
    aliasing: list[Fingerprint] = field(default_factory=list)  # keys carrying this one as a subkey


def _key_signature(key: PublicKey) -> tuple[object, ...]:
    """What counts as "changed" between two versions of a key."""
    parts = key.all_keys()
    return (tuple((p.fingerprint, p.expires, p.validity) for p in parts),
            tuple((u.text, u.validity) for u in key.uids))


def _classify(old: PublicKey | None, new: PublicKey) -> KeyStatus:
    if old is None:
        return KeyStatus.ADDED
    return KeyStatus.UNCHANGED if _key_signature(old) == _key_signature(new) else KeyStatus.UPDATED


class KeyInstaller:
    """Fetch, filter and install the keys of some seeds into one keyring."""

    def __init__(self, keyring: Keyring, client: HttpClient, sources: SourcesConfig,
                 progress: ProgressCallback | None = None) -> None:
        self.keyring = keyring
        self.client = client
        self.sources = sources
        self.progress = progress

    # -- public ----------------------------------------------------------------------------------

    def install(self, seeds: Sequence[Seed], *, every_source: bool = False,
                preloaded: Preloaded | None = None) -> list[KeyOutcome]:
        """Fetch every primary key the seeds pin and install the matching ones (caller holds the lock).

        By default sources are tried in order until one answers with the pinned key (install-key).
        With ``every_source`` (refresh) every configured source is asked, concurrently and bounded by
        ``[sources] workers``, and all answers are merged: a revocation published on any source
        applies, and a stale or hostile first source cannot hide it.

        ``preloaded`` is a first source already at hand (a keyring bundle: its name and keyblocks by
        primary fingerprint): it goes through the same quarantine before any other source is asked,
        and install-key asks the other sources only for the keys it lacks.
        """
        wanted = [
            _Wanted(seed, fpr, candidate_locations(fpr, seed.emails(), self.sources))
            for seed in seeds for fpr in seed.keys
        ]
        return self._run(wanted, every_source=every_source, preloaded=preloaded)

    def import_data(self, seed: Seed, data: bytes, source: str) -> list[KeyOutcome]:
        """Install keys of ``seed`` from data the user supplied (a file or URL), fingerprint-checked."""
        wanted = [_Wanted(seed, fpr, [], answers=[(source, data)], source=source) for fpr in seed.keys]
        return self._run(wanted, fetch=False)

    # -- internals -------------------------------------------------------------------------------

    def _run(self, wanted: list[_Wanted], fetch: bool = True, every_source: bool = False,
             preloaded: Preloaded | None = None) -> list[KeyOutcome]:
        pinned = {w.fingerprint for w in wanted}
        early = EarlyExport(pinned)
        with staging_directory(self.keyring.layout.keyrings_dir, ".quarantine-", SCRATCH_PREFIXES) as quarantine_dir:
            quarantine = GnuPG(quarantine_dir, timeout=self.keyring.timeout)
            present: dict[Fingerprint, PublicKey] = {}
            pending = list(wanted)
            if preloaded is not None:
                source, blocks = preloaded
                for item in wanted:
                    if item.fingerprint in blocks:
                        item.answers, item.source = [(source, blocks[item.fingerprint])], source
                    else:
                        item.errors.append(f"{source}: not in it")
                present = self._quarantine(quarantine, [w for w in wanted if w.answers], pinned=self._pinned(pinned),
                                           note=self.keyring.note_history, early=early)
                for item in wanted:
                    # A copy gpg would not import (e.g. its user ids stripped) was reached but unusable:
                    # the key is "not found" unless another source has it, never "unreachable".
                    item.unusable = False
                if not every_source:
                    pending = [w for w in wanted if w.fingerprint not in present]
            while pending:
                early.clear()  # what follows imports again
                if fetch and every_source:
                    pending = self._fetch_everywhere(pending)
                streamed: ImportReport | None = None
                if fetch and not every_source:
                    # The answers are imported while the others are still being fetched (one gpg import
                    # fed as they arrive); anything but a clean run of it is imported again below.
                    with _StreamedImport(quarantine) as feed:
                        pending = self._fetch_round(pending, len(wanted) - len(pending), len(wanted), feed.put)
                    streamed = feed.report
                present = self._quarantine(quarantine, [w for w in pending if w.answers], streamed,
                                           pinned=self._pinned(pinned), note=self.keyring.note_history,
                                           early=early.known(present))
                pending = [w for w in pending if w.fingerprint not in present
                           and fetch and w.next_index < len(w.locations)]
            # Only pinned fingerprints may leave quarantine, whatever else the sources sent.
            found = set(present) & pinned
            outcomes = self._commit(quarantine, present, wanted, found, early.take(found))
        if self.progress:
            self.progress(len(wanted), len(wanted))
        return outcomes

    def _fetch_round(self, pending: list[_Wanted], done: int, total: int,
                     arrived: Callable[[bytes], None] | None = None) -> list[_Wanted]:
        """Fetch the next location of every pending item concurrently; keep items with data.

        Each armored answer is also handed to ``arrived`` as it comes in.
        """
        counter = [done]
        deadline = self.client.round_deadline()

        def fetch(item: _Wanted) -> _Wanted:
            while item.next_index < len(item.locations):
                location = item.locations[item.next_index]
                item.next_index += 1
                if self._ask(item, location, deadline):
                    if arrived is not None and _armored(item.answers[-1][1]):
                        arrived(item.answers[-1][1])
                    break
            counter[0] += 1
            if self.progress:
                self.progress(min(counter[0], total), total)
            return item

        with ThreadPoolExecutor(max_workers=min(self.sources.workers, max(1, len(pending)))) as pool:
            return list(pool.map(fetch, pending))

    def _ask(self, item: _Wanted, location: KeyLocation, deadline: float | None = None) -> bool:
        """Fetch one location for ``item`` by ``deadline`` (monotonic; a late source is unanswered); True if
        it answered with some data (kept in ``answers``)."""
        try:
            data = self.client.get(location.url, max_bytes=MAX_KEY_BYTES, deadline=deadline)
        except NotFoundError:
            item.errors.append(f"{location.kind}: not found")
            item.reached.append(_Reached(location.source, location.kind))  # a clean "no such key" is an answer
            return False
        except NetworkError as exc:
            item.errors.append(f"{location.kind}: {exc}")
            item.network_failed = True
            reason = str(exc) or type(exc).__name__
            item.reached.append(_Reached(location.source, location.kind,  # without the URL: the source names it
                                         reason.split(": ", 1)[1] if reason.startswith(("http://", "https://"))
                                         and ": " in reason else reason, isinstance(exc, HostNotFoundError)))
            return False
        item.reached.append(_Reached(location.source, location.kind))
        if not data.strip():
            item.errors.append(f"{location.kind}: empty answer")
            return False
        item.answers.append((location.describe(), data))
        item.source = location.describe()
        return True

    def _fetch_everywhere(self, pending: list[_Wanted]) -> list[_Wanted]:
        """Ask every location of every pending item (one bounded pool for all requests, one deadline for
        the round: a source still answering then counts as unanswered)."""
        jobs = [(item, location) for item in pending for location in item.locations[item.next_index:]]
        for item in pending:
            item.next_index = len(item.locations)
        if jobs:
            deadline = self.client.round_deadline()
            with ThreadPoolExecutor(max_workers=min(self.sources.workers, len(jobs))) as pool:
                list(pool.map(lambda job: self._ask(job[0], job[1], deadline), jobs))
        for item in pending:
            # Answers in the order of the locations, so reports name the first source that answered.
            order = {location.describe(): index for index, location in enumerate(item.locations)}
            item.answers.sort(key=lambda answer: order.get(answer[0], len(order)))
            item.source = item.answers[0][0] if item.answers else ""
        if self.progress:
            self.progress(len(pending), len(pending))
        return pending

    def _pinned(self, wanted: set[Fingerprint]) -> set[Fingerprint]:
        """The keys pinned by this keyring's category: those being installed and those it holds."""
        return wanted | set(self.keyring.installed())

    @staticmethod
    def _quarantine(quarantine: GnuPG, items: list[_Wanted], streamed: ImportReport | None = None, *,
                    pinned: Collection[Fingerprint] = (), note: Callable[[bytes], None] | None = None,
                    early: EarlyExport | None = None) -> dict[Fingerprint, PublicKey]:
        """Import all answers into quarantine; return the keys now present there (by primary fingerprint).

        ``streamed`` is the report of an import already fed every armored answer as it arrived
        (:class:`_StreamedImport`); without it the armored answers are imported here, in one batch.

        Imports use the clean path (self-signatures only).  Items whose key did not turn up, and every
        item when GnuPG reported a problem with the batch, are imported once more answer by answer,
        which tells what each source really returned (other keys, nothing usable, or data GnuPG would
        not import: then the item is refused, never silently "unchanged").  Revocations by a key's designated
        revoker that ``pinned`` names are kept (``KeyIO.import_designated_revocations``).  Each answer is also
        handed to ``note`` as it came (the keys' history: GnuPG's import keeps only a subkey's newest binding).
        Each listing also exports, beside it, the keys of ``early`` that gpg imported (:class:`EarlyExport`).
        """
        answers = [data for item in items for _source, data in item.answers]
        armored = b"\n".join(a for a in answers if _armored(a)) if streamed is None else b""
        binary = b"".join(a for a in answers if not _armored(a))
        troubled = bool(streamed.problem) if streamed is not None else False
        imported = set(streamed.imported) if streamed is not None else set()
        for batch in (armored, binary):
            if batch:
                report = quarantine.import_report(batch)
                troubled, imported = bool(report.problem) or troubled, imported | set(report.imported)
        for answer in answers:
            quarantine.import_designated_revocations(answer, pinned, strict=False)
            if note is not None:
                note(answer)
        present = EarlyExport.listing(early, quarantine, imported)
        retried = False
        for item in items:
            if troubled or item.fingerprint not in present:
                retried = True
                returned: list[Fingerprint] = []
                for source, data in item.answers:
                    report = quarantine.import_report(data)
                    returned += [f for f in report.imported if f not in returned]
                    imported |= set(report.imported)
                    if report.problem and item.fingerprint in report.imported:
                        # gpg processed the pinned key and complained: what it merged is unknown.
                        item.refused = True
                        item.errors.append(f"{source}: gpg did not import all of it ({report.problem})")
                if item.fingerprint not in returned:
                    item.returned += [f for f in returned if f not in item.returned]
                    item.unusable = item.unusable or not returned
                    item.errors.append(
                        f"{item.source}: returned {len(returned)} other key(s), not {item.fingerprint}"
                        if returned else f"{item.source}: no OpenPGP key in the answer")
            item.answers = []
        return EarlyExport.listing(early, quarantine, imported) if retried else present

    def _commit(self, quarantine: GnuPG, in_quarantine: dict[Fingerprint, PublicKey], wanted: list[_Wanted],
                found: set[Fingerprint], exported: Selection | None = None) -> list[KeyOutcome]:
        before = self.keyring.installed()
        outcomes: list[KeyOutcome] = []
        after = before
        if found:
            # Exactly the pinned primaries leave quarantine (design.md §3 rule 2): gpg's selectors also
            # match subkeys, so export_exact filters by primary and drops keyblocks aliasing a pinned key.
            selection = exported if exported is not None else quarantine.export_exact(sorted(found))
            self._note_refusals(wanted, selection.aliasing, selection.oversized)
            oversized = set(selection.oversized)
            keep = selection.primaries - oversized
            for item in wanted:
                if item.fingerprint in found - keep - oversized:
                    item.refused = True
                    item.errors.append("its keyblock carries another pinned key as a subkey; not installed")
            if not before and set(in_quarantine) == keep and not selection.aliasing and not oversized:
                # A fresh keyring that would be an exact copy of quarantine: take its keybox as it is.
                self.keyring.adopt(quarantine, selection)  # the selection is all of quarantine
                after = in_quarantine
            elif keep:
                # What did import is installed even when another answer for the key did not (a
                # revocation from one source applies); such keys are still reported as refused.
                data = selection.data_without(oversized)
                with self.keyring.update() as staging:
                    staging.import_keys(data)
                    after = {k.fingerprint: k for k in staging.list_keys()}
        refused = {w.fingerprint for w in wanted if w.refused}
        for item in wanted:
            if item.fingerprint in found and item.fingerprint in after and item.fingerprint not in refused:
                status = _classify(before.get(item.fingerprint), after[item.fingerprint])
                errors: list[str] = []
            else:
                status = (KeyStatus.REFUSED if item.fingerprint in refused
                          else KeyStatus.MISMATCH if item.returned
                          else KeyStatus.UNREACHABLE if item.unusable or item.network_failed
                          else KeyStatus.MISSING)
                errors = list(item.errors)
            dropped = set(item.returned) | set(item.aliasing)
            answered, unanswered = _sources_reached(item.reached)
            outcomes.append(KeyOutcome(item.seed.nick, item.fingerprint, status, item.source,
                                       dropped=sorted(dropped), errors=errors, answered=answered,
                                       unanswered=unanswered))
        journal_keys(self.keyring, before, after, outcomes)
        return outcomes

    @staticmethod
    def _note_refusals(wanted: list[_Wanted], aliasing: dict[Fingerprint, list[Fingerprint]],
                       oversized: dict[Fingerprint, str]) -> None:
        """Record keys that carried a pinned primary as a subkey, and keyblocks over the caps."""
        for item in wanted:
            for other, carried in aliasing.items():
                if item.fingerprint in carried and other not in item.aliasing:
                    item.aliasing.append(other)
                    item.errors.append(f"dropped {other}: it carries {item.fingerprint} as a subkey")
            if item.fingerprint in oversized:
                item.refused = True
                item.errors.append(f"keyblock refused: {oversized[item.fingerprint]}")


def _sources_reached(reached: Sequence[_Reached]) -> tuple[list[str], dict[str, str]]:
    """The configured sources that answered, and those that did not (with their first failure).

    A keyserver answered when any of its lookups did.  A WKD source answered when its advanced method
    did; the direct method counts only where the advanced host does not exist (DNS: no such name), as
    the WKD rule says: an advanced host that exists but did not answer leaves the source unanswered,
    whatever the direct method said (a blocked host must not turn into "no key")."""
    by_source: dict[str, list[_Reached]] = {}
    for entry in reached:
        if entry.source:
            by_source.setdefault(entry.source, []).append(entry)
    answered: list[str] = []
    unanswered: dict[str, str] = {}
    for source, entries in sorted(by_source.items()):
        advanced = [e for e in entries if e.kind == "wkd-advanced"]
        if advanced and not any(not e.failure for e in advanced):
            blocked = [e for e in advanced if not e.no_host]
            if blocked:
                unanswered[source] = f"{blocked[0].failure} (WKD advanced method)"
                continue
            entries = [e for e in entries if e.kind != "wkd-advanced"]  # no such host: the direct method counts
        if any(not e.failure for e in entries):
            answered.append(source)
        elif entries:
            unanswered[source] = entries[0].failure
        else:
            unanswered[source] = advanced[0].failure
    return answered, unanswered


def _armored(data: bytes) -> bool:
    return data.lstrip().startswith(b"-----BEGIN")


class _StreamedImport:
    """One ``gpg --import`` into quarantine, fed key data while it is being fetched.

    ``put`` may be called from any thread.  On leaving the block the feed is closed and the import
    waited for; ``report`` is its :class:`ImportReport`, or None when the import did not run to its
    end (gpg failed or timed out while the fetch went on): then the answers are imported again in one
    batch, as without streaming.
    """

    def __init__(self, quarantine: GnuPG) -> None:
        self.quarantine = quarantine
        self.report: ImportReport | None = None
        self._chunks: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._rest = b""
        self._closed = False
        self._fed = False
        self._thread = threading.Thread(target=self._import, daemon=True)

    def __enter__(self) -> _StreamedImport:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._chunks.put(None)
        self._thread.join()
        if exc[0] is not None:
            self.report = None
        elif not self._fed:
            self.report = ImportReport([], "")  # nothing armored arrived: gpg's "no valid data" is no problem

    def put(self, data: bytes) -> None:
        """Feed one armored answer (blocks are separated by a newline, as in a batch import)."""
        self._fed = True
        self._chunks.put(data + b"\n")

    def read(self, size: int = -1) -> bytes:
        """The next bytes for gpg's stdin (blocks until some arrive; ``b""`` once the feed is closed)."""
        while not self._rest and not self._closed:
            chunk = self._chunks.get()
            if chunk is None:
                self._closed = True
            else:
                self._rest = chunk
        size = len(self._rest) if size < 0 else size
        data, self._rest = self._rest[:size], self._rest[size:]
        return data

    def _import(self) -> None:
        try:
            self.report = self.quarantine.import_report(cast(IO[bytes], self))
        except GkeysError:
            self.report = None
        finally:
            while not self._closed:  # drain, so put() never waits on a reader that is gone
                self._closed = self._chunks.get() is None


def summarize_failure(outcomes: Sequence[KeyOutcome]) -> GkeysError | None:
    """The error to exit with if any key could not be installed (network failures: exit 3)."""
    failed = [o for o in outcomes if not o.status.ok]
    if not failed:
        return None
    names = ", ".join(f"{o.nick} ({o.status.value})" for o in failed[:5])
    more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
    if all(o.status is KeyStatus.UNREACHABLE for o in failed):
        causes = unreachable_sources(failed)
        why = f": {'; '.join(f'{source}: {cause}' for source, cause in causes.items())}" if causes else ""
        return NetworkError(f"could not reach any key source for {names}{more}{why}")
    from gkeys_portage.core.errors import KeyMismatchError

    return KeyMismatchError(f"keys not installed: {names}{more}")


def unreachable_sources(outcomes: Sequence[KeyOutcome]) -> dict[str, str]:
    """Each configured source that failed for any of ``outcomes``, once, with its first failure (the real cause:
    DNS, refused, timeout; without the URL and the attempt count)."""
    causes: dict[str, str] = {}
    for outcome in outcomes:
        for source, failure in outcome.unanswered.items():
            causes.setdefault(source, failure.split(" (after ", 1)[0].split(" (as before", 1)[0])
    return causes
