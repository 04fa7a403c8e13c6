"""Install and refresh keys for seeds: fetch concurrently, keep only pinned fingerprints.

Whatever a source returns is imported into a throwaway *quarantine* GnuPG home first.  Only
keys whose primary fingerprint is pinned by the seed are exported from there (``export-clean``:
their own user ids, subkeys and usable signatures) and imported into the category keyring's
staging copy, which is committed atomically.  Everything else a source returned — other keys,
keys with a colliding short or long key id — is dropped and reported.

Batching keeps GnuPG work constant: one import into quarantine per round (plus a per-blob
retry only if the batch lost keys), one listing, one export and one import into the keyring,
however many seeds there are.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from gkeys_portage.core.colons import PublicKey
from gkeys_portage.core.config import SourcesConfig
from gkeys_portage.core.errors import GkeysError, NetworkError
from gkeys_portage.core.gpg import GnuPG
from gkeys_portage.core.http import HttpClient, NotFoundError
from gkeys_portage.core.keyring import Keyring
from gkeys_portage.core.keysources import KeyLocation, candidate_locations
from gkeys_portage.core.seeds import Seed
from gkeys_portage.core.state import staging_directory
from gkeys_portage.core.types import Fingerprint, Nick

MAX_KEY_BYTES = 4 * 1024 * 1024
ProgressCallback = Callable[[int, int], None]


class KeyStatus(enum.Enum):
    """What happened to one pinned fingerprint."""

    ADDED = "added"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    MISSING = "missing"  # no source had it (404 everywhere)
    MISMATCH = "mismatch"  # sources answered, but not with the pinned key
    UNREACHABLE = "unreachable"  # network failures on every source

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

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {"nick": self.nick, "fingerprint": self.fingerprint, "status": self.status.value,
                "source": self.source, "dropped": self.dropped, "errors": self.errors}


@dataclass
class _Wanted:
    seed: Seed
    fingerprint: Fingerprint
    locations: list[KeyLocation]
    next_index: int = 0
    blob: bytes = b""
    source: str = ""
    errors: list[str] = field(default_factory=list)
    network_failed: bool = False  # a source failed at the network level
    returned: list[Fingerprint] = field(default_factory=list)  # other keys sources returned
    unusable: bool = False  # a source answered with something that held no OpenPGP key


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

    def install(self, seeds: Sequence[Seed]) -> list[KeyOutcome]:
        """Fetch every primary key the seeds pin and install the matching ones (caller holds the lock)."""
        wanted = [
            _Wanted(seed, fpr, candidate_locations(fpr, seed.emails(), self.sources))
            for seed in seeds for fpr in seed.keys
        ]
        return self._run(wanted)

    def import_data(self, seed: Seed, data: bytes, source: str) -> list[KeyOutcome]:
        """Install keys of ``seed`` from data the user supplied (a file or URL), fingerprint-checked."""
        wanted = [_Wanted(seed, fpr, [], blob=data, source=source) for fpr in seed.keys]
        return self._run(wanted, fetch=False)

    # -- internals -------------------------------------------------------------------------------

    def _run(self, wanted: list[_Wanted], fetch: bool = True) -> list[KeyOutcome]:
        pinned = {w.fingerprint for w in wanted}
        with staging_directory(self.keyring.layout.keyrings_dir, ".quarantine-") as quarantine_dir:
            quarantine = GnuPG(quarantine_dir, timeout=self.keyring.timeout)
            present: dict[Fingerprint, PublicKey] = {}
            pending = list(wanted)
            while pending:
                if fetch:
                    pending = self._fetch_round(pending, len(wanted) - len(pending), len(wanted))
                present = self._quarantine(quarantine, [w for w in pending if w.blob])
                pending = [w for w in pending if w.fingerprint not in present
                           and fetch and w.next_index < len(w.locations)]
            # Only pinned fingerprints may leave quarantine, whatever else the sources sent.
            found = set(present) & pinned
            outcomes = self._commit(quarantine, present, wanted, found)
        if self.progress:
            self.progress(len(wanted), len(wanted))
        return outcomes

    def _fetch_round(self, pending: list[_Wanted], done: int, total: int) -> list[_Wanted]:
        """Fetch the next location of every pending item concurrently; keep items with data."""
        counter = [done]

        def fetch(item: _Wanted) -> _Wanted:
            while item.next_index < len(item.locations):
                location = item.locations[item.next_index]
                item.next_index += 1
                try:
                    item.blob = self.client.get(location.url, max_bytes=MAX_KEY_BYTES)
                except NotFoundError:
                    item.errors.append(f"{location.kind}: not found")
                    continue
                except NetworkError as exc:
                    item.errors.append(f"{location.kind}: {exc}")
                    item.network_failed = True
                    continue
                if item.blob.strip():
                    item.source = location.describe()
                    break
                item.errors.append(f"{location.kind}: empty answer")
            counter[0] += 1
            if self.progress:
                self.progress(min(counter[0], total), total)
            return item

        with ThreadPoolExecutor(max_workers=min(self.sources.workers, max(1, len(pending)))) as pool:
            return list(pool.map(fetch, pending))

    @staticmethod
    def _quarantine(quarantine: GnuPG, items: list[_Wanted]) -> dict[Fingerprint, PublicKey]:
        """Import all blobs into quarantine; return the keys now present there (by primary fingerprint).

        Items whose key did not turn up are imported once more on their own, which tells
        what their source really returned (other keys, or nothing usable at all).
        """
        armored = b"\n".join(i.blob for i in items if i.blob.lstrip().startswith(b"-----BEGIN"))
        binary = b"".join(i.blob for i in items if not i.blob.lstrip().startswith(b"-----BEGIN"))
        for batch in (armored, binary):
            if batch:
                quarantine.import_keys(batch)
        present = {k.fingerprint: k for k in quarantine.list_keys()}
        retried = False
        for item in items:
            if item.fingerprint not in present:
                returned = quarantine.import_keys(item.blob)
                retried = True
                if item.fingerprint in returned:
                    continue
                item.returned += [f for f in returned if f not in item.returned]
                item.unusable = item.unusable or not returned
                item.errors.append(
                    f"{item.source}: returned {len(returned)} other key(s), not {item.fingerprint}"
                    if returned else f"{item.source}: no OpenPGP key in the answer")
            item.blob = b""
        return {k.fingerprint: k for k in quarantine.list_keys()} if retried else present

    def _commit(self, quarantine: GnuPG, in_quarantine: dict[Fingerprint, PublicKey], wanted: list[_Wanted],
                found: set[Fingerprint]) -> list[KeyOutcome]:
        before = self.keyring.installed()
        outcomes: list[KeyOutcome] = []
        after = before
        if found:
            if not before and set(in_quarantine) == found:
                # A fresh keyring that would be an exact copy of quarantine: take its keybox as it is.
                self.keyring.adopt(quarantine)
                after = in_quarantine
            else:
                data = quarantine.export_keys(sorted(found), armor=False)
                with self.keyring.update() as staging:
                    staging.import_keys(data)
                    after = {k.fingerprint: k for k in staging.list_keys()}
        for item in wanted:
            if item.fingerprint in found and item.fingerprint in after:
                status = _classify(before.get(item.fingerprint), after[item.fingerprint])
                errors: list[str] = []
            else:
                status = (KeyStatus.MISMATCH if item.returned
                          else KeyStatus.UNREACHABLE if item.unusable or item.network_failed
                          else KeyStatus.MISSING)
                errors = list(item.errors)
            outcomes.append(KeyOutcome(item.seed.nick, item.fingerprint, status, item.source,
                                       dropped=sorted(set(item.returned)), errors=errors))
        return outcomes


def summarize_failure(outcomes: Sequence[KeyOutcome]) -> GkeysError | None:
    """The error to exit with if any key could not be installed (network failures: exit 3)."""
    failed = [o for o in outcomes if not o.status.ok]
    if not failed:
        return None
    names = ", ".join(f"{o.nick} ({o.status.value})" for o in failed[:5])
    more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
    if all(o.status is KeyStatus.UNREACHABLE for o in failed):
        return NetworkError(f"could not reach any key source for {names}{more}")
    from gkeys_portage.core.errors import KeyMismatchError

    return KeyMismatchError(f"keys not installed: {names}{more}")
