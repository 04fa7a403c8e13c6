"""Where checked keys come from: category keyrings (by seed) or a key file.

A key file is imported into a throwaway GnuPG home, never into a category keyring or the
user's own.  When an evaluation time is given, GnuPG lists the keys with its clock frozen at
that time, so its validity letters agree with the timestamps the checks use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gkeys_portage.checks.glep63.findings import Issue, count_levels, failed, missing_key
from gkeys_portage.core.errors import BadInputError, UsageError
from gkeys_portage.core.scratch import private_dir
from gkeys_portage.core.state import read_limited
from gkeys_portage.core.types import Fingerprint
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.refresh import MAX_KEY_FILE, select_seeds
from gkeys_portage.openpgp.colons import PublicKey
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.keyblocks import back_signature_hashes

Checker = Callable[[PublicKey], list[Issue]]

#: ``--json`` lists at most this many user ids per key (``uid_count`` has the total)
MAX_UIDS_SHOWN = 20


@dataclass
class Subject:
    """A key to check: where it comes from, and the key itself (None if it is not installed)."""

    fingerprint: Fingerprint
    key: PublicKey | None
    category: str = ""
    nick: str = ""

    @property
    def label(self) -> str:
        """``category/nick`` for seeded keys, the fingerprint for keys from a file."""
        return f"{self.category}/{self.nick}" if self.nick else self.fingerprint


@dataclass
class KeyResult:
    """The findings about one subject."""

    subject: Subject
    issues: list[Issue] = field(default_factory=list)

    def ok(self, *, warnings_fail: bool = False) -> bool:
        """True if nothing failed."""
        return not failed(self.issues, warnings_fail=warnings_fail)

    def to_json(self, *, warnings_fail: bool = False) -> dict[str, Any]:
        """Machine-readable form for ``--json``."""
        key = self.subject.key
        return {
            "category": self.subject.category or None,
            "nick": self.subject.nick or None,
            "fingerprint": self.subject.fingerprint,
            "installed": key is not None,
            "algorithm": key.primary.algorithm_name if key else None,
            "created": key.primary.created if key else None,
            "expires": key.primary.expires if key else None,
            "uids": [u.text for u in key.uids[:MAX_UIDS_SHOWN]] if key else [],
            "uid_count": len(key.uids) if key else 0,
            "ok": self.ok(warnings_fail=warnings_fail),
            "counts": count_levels(self.issues),
            "issues": [i.to_json() for i in self.issues],
        }


def run_checks(subjects: Sequence[Subject], checker: Checker) -> list[KeyResult]:
    """Apply ``checker`` to every installed subject; a missing key is a ``key:missing`` error."""
    return [KeyResult(s, checker(s.key) if s.key is not None else [missing_key(s.fingerprint)]) for s in subjects]


def category_subjects(ctx: Gkeys, category: str | None, nick: str | None = None, *,
                      at: datetime | None = None, sigs: bool = False) -> list[Subject]:
    """The pinned keys of ``category`` (or of every category with a keyring): one per fingerprint in a
    seed's ``keys`` (installed or not), and one per other accepted fingerprint that is installed as a
    primary key."""
    if nick and not category:
        raise UsageError("-n/--nick needs -C/--category")
    if category:
        categories = [category]
    else:
        categories = [c for c in ctx.seeds.categories() if ctx.keyring(c).exists()]
        if not categories:
            raise BadInputError("no category has a keyring yet (run install-key or update-seed first)")
    subjects: list[Subject] = []
    for cat in categories:
        seeds = select_seeds(ctx, cat, nick)
        if not seeds and category:
            raise BadInputError(f"category {cat!r} has no seeds (add-seed or fetch-seed first)")
        # verification accepts every fingerprint of seed.accepted() (keys and fingerprint) as a primary
        # key, so each one installed as a primary key is checked too; a fingerprint listed only under
        # "fingerprint" may be a subkey's, so it is checked only when it is an installed primary key
        wanted = sorted({fpr for seed in seeds for fpr in seed.accepted()})
        keyring = ctx.keyring(cat)
        listed: dict[Fingerprint, PublicKey] = {}
        if wanted and keyring.exists():
            listed = {k.fingerprint: k for k in keyring.gpg(faked_time=at).list_keys(wanted, sigs=sigs)}
            if sigs:
                note_back_signatures(keyring.gpg(), listed.values())
        for seed in seeds:
            extra = [fpr for fpr in sorted(seed.accepted() - set(seed.keys)) if fpr in listed]
            subjects += [Subject(fpr, listed.get(fpr), cat, seed.nick) for fpr in [*seed.keys, *extra]]
    return subjects


def file_subjects(path: Path, *, at: datetime | None = None, timeout: float = 300.0) -> list[Subject]:
    """Every key in an OpenPGP key file, imported into a throwaway GnuPG home and listed with signatures."""
    data = read_limited(path, MAX_KEY_FILE, "key file")
    with private_dir("gkeys-check-") as scratch:  # owned: a killed check's is removed by the next
        home = scratch / "gnupg"
        importer = GnuPG(home, timeout=timeout)
        try:
            imported = importer.import_report(data, options=()).imported  # as given, certifications too
            keys = GnuPG(home, faked_time=at, timeout=timeout).list_keys(sigs=True) if imported else []
            note_back_signatures(importer, keys)
        finally:
            importer.close()  # a file with secret keys makes gpg start an agent for this home
    if not keys:
        raise BadInputError(f"{path}: no usable OpenPGP public key (GnuPG refuses v3 keys, keys without a "
                            "user id and unknown formats)")
    return [Subject(key.fingerprint, key) for key in keys]


def note_back_signatures(gpg: GnuPG, keys: Iterable[PublicKey]) -> None:
    """Set each subkey's :attr:`~gkeys_portage.openpgp.colons.SubKey.back_signature_hash` from the keys' own
    packets (the cut-off lint judges back-signatures too)."""
    keys = list(keys)
    if not keys:
        return
    hashes = back_signature_hashes(gpg.export_exact([key.fingerprint for key in keys]).data)
    for key in keys:
        for sub in key.subkeys:
            sub.back_signature_hash = hashes.get(sub.fingerprint)


def load_subjects(ctx: Gkeys, *, category: str | None = None, nick: str | None = None,
                  keyring: Path | None = None, at: datetime | None = None, sigs: bool = False) -> list[Subject]:
    """The keys a check runs on: every key of a key file, or the pinned keys of category keyrings."""
    if keyring is not None:
        if category or nick:
            raise UsageError("--keyring cannot be combined with -C/--category or -n/--nick")
        return file_subjects(keyring, at=at)
    return category_subjects(ctx, category, nick, at=at, sigs=sigs)


def parse_at(text: str) -> datetime:
    """An evaluation time: ISO 8601 (``2018-08-03T00:01:00Z``, ``2018-08-03``; UTC unless an offset is
    given) or ``@EPOCH`` seconds."""
    value = text.strip()
    try:
        if value.startswith("@"):
            return datetime.fromtimestamp(float(value[1:]), UTC)
        when = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value)
    except (ValueError, OverflowError, OSError):
        raise UsageError(f"--at {text!r}: expected a time like 2018-08-03T00:01:00Z, 2018-08-03 or @1533254460") \
            from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
