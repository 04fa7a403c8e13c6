"""Reading the trust journal: ``gkeys history`` (what changed in the trust) and ``gkeys audit --key``
(what a key signed that this machine accepted).

An audit matches an entry when the key's fingerprint appears in what the entry recorded of its signers:
a primary fingerprint stands for the key and every subkey the journal or a keyring knows of it; a subkey
fingerprint matches the entries that name that subkey, and the git and rsync tree entries (they record the
pinned primary only, so they count every subkey of that primary).  Each hit says what to do next: the
commit range to inspect and re-verify, the tree to sync again, the file to verify again.
:mod:`gkeys_portage.verify.recheck` re-verifies what is still on disk.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gkeys_portage.core.errors import UsageError
from gkeys_portage.core.journal import Entry, read_entries
from gkeys_portage.core.state import Layout

_FPR = re.compile(r"[0-9A-F]{40}|[0-9A-F]{64}")

#: Entries that record something accepted because a pinned key signed it, and what each artifact is called.
ACCEPTED = {"tree-accepted": "git tree", "rsync-accepted": "rsync tree", "snapshot-accepted": "webrsync snapshot",
            "media-accepted": "release file", "overlays-accepted": "overlay list", "seed-installed": "seed file",
            "file-accepted": "signed file", "file-reported": "signed file (reported by a build, unconfirmed)"}
#: The binary-package home: Portage verifies each package itself, so the journal holds the periods a key was
#: trusted there (``binpkg-home`` entries), not each package.
BINPKG = "binary package home"
#: Where gkeys verifies before it installs (quarantine, a fetch's scratch directory): never where a file stays.
#: Entries journaled there before the record came last are left out of an audit.
SCRATCH = re.compile(r"/quarantine/|/\.gkeys-fetch-[^/]*/|/\.[^/]*\.gkeys-[^/]*(/|$)")
#: Accepted kinds that record only the signer's primary fingerprint (a subkey audit counts them too).
PRIMARY_ONLY = frozenset({"tree-accepted", "rsync-accepted"})
#: Entries that are trust changes (``gkeys history``).
TRUST_KINDS = frozenset({"seed-installed", "seed-refused", "keys-changed", "keyring-removed", "authority-updated",
                         "authority-refused", "bundle-accepted", "bundle-refused", "config-changed", "binpkg-home"})


def parse_since(text: str | None) -> float:
    """``--since DATE`` (``YYYY-MM-DD`` or an ISO time, UTC) as epoch seconds; 0 without one."""
    if not text:
        return 0.0
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise UsageError(f"--since {text!r}: expected a date like 2026-12-01 (or 2026-12-01T06:00)") from exc
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def parse_key(text: str) -> str:
    """A fingerprint from the command line (spaces allowed, any case, an optional ``0x``)."""
    value = re.sub(r"\s+", "", text).upper().removeprefix("0X")
    if not _FPR.fullmatch(value):
        raise UsageError(f"--key {text!r}: give the full fingerprint (40 or 64 hex digits), not a key id or a name")
    return value


def fingerprints_in(value: Any) -> set[str]:
    """Every fingerprint an entry's data names (in values and in keys: a tree's signers are keyed by them)."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _FPR.fullmatch(item):
                found.add(item)
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


# -- history ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One trust change, one line: when, what, from where, why."""

    when: str
    what: str
    source: str
    why: str
    category: str
    entry: Entry

    def to_json(self) -> dict[str, Any]:
        """Machine-readable form: the line's parts, and the entry's kind, number and data."""
        return {"when": self.entry.when_zoned, "what": self.what, "from": self.source, "why": self.why,
                "category": self.category, "kind": self.entry.kind, "seq": self.entry.seq, "data": self.entry.data}


def _key_lines(entry: Entry) -> Iterator[tuple[str, str, str]]:
    cat = entry.data.get("category", "")
    for key in entry.data.get("keys", []):
        nick = f"{cat}/{key['nick']}" if key.get("nick") else cat
        change = key.get("change", "")
        what = f"key {key.get('fingerprint')} ({nick}) {change}"
        if change == "revoked":
            what += f": {', '.join(key.get('revoked') or [])} revoked"
        answered = ", ".join(key.get("sources") or [])
        why = "; ".join(key.get("errors") or []) or (f"sources that answered: {answered}" if answered else "")
        yield what, key.get("source") or answered, why


def _lines(entry: Entry, previous: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(what, from where, why) of one trust entry (``previous``: each category's last certifiers, kept up to
    date here: a certifier change shows even when no seed changed)."""
    data = entry.data
    cat = data.get("category", "")
    kind = entry.kind
    if kind == "keys-changed":
        yield from _key_lines(entry)
    elif kind == "seed-installed":
        signer = data.get("signer", {})
        yield (f"seed file {cat} installed (sha256 {str(data.get('sha256', ''))[:16]}…)", str(data.get("url", "")),
               f"signed by {signer.get('category')}/{signer.get('nick')} ({signer.get('fingerprint')}) at "
               f"{signer.get('created')}")
    elif kind.endswith("-refused"):
        yield (f"{kind.removesuffix('-refused')} {cat} refused ({data.get('code')})", str(data.get("url") or
               data.get("location") or ""), str(data.get("why", "")))
    elif kind == "keyring-removed":
        yield f"keyring {cat} removed", "", "gkeys remove-key"
    elif kind == "authority-updated":
        changes = data.get("changes", {})
        counts = ", ".join(f"{len(v)} {k}" for k, v in changes.items() if v) or "no seed changed"
        before, now = previous.get(cat), data.get("certifiers", {})
        moved = [f"{f} {before.get(f, 'new') if before else 'new'} -> {why}" for f, why in sorted(now.items())
                 if before is None or before.get(f) != why]
        moved += [f"{f} gone" for f in sorted(before or {}) if f not in now]
        previous[cat] = now
        if counts != "no seed changed" or data.get("removed_keys") or moved:
            yield (f"seeds of {cat} from certifications: {counts}; {len(data.get('removed_keys', []))} key(s) "
                   "removed", str(data.get("source", "")),
                   "certifiers: " + ", ".join(moved or [f"{f} {why}" for f, why in sorted(now.items())]))
        seen = previous.setdefault(f"{cat} retired", set())
        for who, window in sorted(data.get("retired", {}).items()):  # authorization windows (issue 41)
            if who not in seen:
                seen.add(who)
                yield (f"key {who} of {cat} retired: its authorization window closed (kept for its past "
                       "signatures)", str(data.get("source", "")),
                       f"window {window.get('from')} to {window.get('until')} ({window.get('closed')}, "
                       f"by {window.get('by')})")
    elif kind == "bundle-accepted":
        yield (f"keyring bundle for {cat} accepted ({len(data.get('keys', []))} key(s))",
               str(data.get("location", "")), f"signed by {data.get('signed_by') or 'nobody (unsigned)'}")
    elif kind == "config-changed":
        what = "config first recorded" if data.get("first") else f"config changed: {', '.join(data['sections'])}"
        yield what, str(data.get("config", "")), f"engine {data.get('engine')}"
    elif kind == "binpkg-home":
        yield (f"binary package home rebuilt: trusting {', '.join(data.get('keys', []))}", str(data.get("home", "")),
               "the [binpkg] pins or their keys changed")


def history(layout: Layout, *, category: str | None = None, since: float = 0.0,
            skipped: list[str] | None = None) -> list[Change]:
    """The trust changes, oldest first (only ``category``'s, only from ``since``); unreadable lines are named
    in ``skipped`` and passed over (:func:`~gkeys_portage.core.journal.read_entries`)."""
    changes = []
    certifiers: dict[str, Any] = {}
    for entry in read_entries(layout, skipped):
        if entry.kind not in TRUST_KINDS:
            continue
        cat = str(entry.data.get("category", ""))
        lines = list(_lines(entry, certifiers))  # before the filters: the certifiers seen earlier count
        if entry.time < since or (category and cat != category):
            continue
        for what, source, why in lines:
            changes.append(Change(entry.when, what, source, why, cat, entry))
    return changes


# -- audit --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """One accepted artifact the key signed: what, how much of it, and what to do now."""

    entry: Entry
    artifact: str
    subject: str
    detail: str
    next_step: str

    def to_json(self) -> dict[str, Any]:
        """Machine-readable form."""
        return {"artifact": self.artifact, "subject": self.subject, "when": self.entry.when_zoned,
                "detail": self.detail, "next_step": self.next_step, "entry": self.entry.to_json()}


@dataclass
class Audit:
    """Everything accepted that a key signed, grouped by artifact (kind and subject)."""

    key: str
    related: list[str] = field(default_factory=list)  # the subkeys (or primary) counted with it
    hits: list[Hit] = field(default_factory=list)

    def groups(self) -> dict[tuple[str, str], list[Hit]]:
        """Hits by (artifact, subject), in the order first seen."""
        grouped: dict[tuple[str, str], list[Hit]] = {}
        for hit in self.hits:
            grouped.setdefault((hit.artifact, hit.subject), []).append(hit)
        return grouped

    def to_json(self) -> dict[str, Any]:
        """Machine-readable form."""
        return {"key": self.key, "related": self.related, "artifacts": [
            {"artifact": kind, "subject": subject, "accepted": [h.to_json() for h in hits]}
            for (kind, subject), hits in self.groups().items()]}


def key_family(entries: Iterable[Entry], installed: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """Primary fingerprint -> its subkeys, from the keys the journal saw and the ``installed`` keyrings."""
    family: dict[str, set[str]] = {primary: set(subs) for primary, subs in installed.items()}
    for entry in entries:
        if entry.kind == "keys-changed":
            for key in entry.data.get("keys", []):
                family.setdefault(key.get("fingerprint", ""), set()).update(key.get("subkeys") or [])
    return family


def _tree_hit(entry: Entry, counted: int) -> tuple[str, str, str]:
    data = entry.data
    base, tip = data.get("base"), str(data.get("tip", ""))
    span = f"{base}..{tip}" if base and base != tip else tip
    rng = f"{base or ''}..{tip}"
    return (str(data.get("repo", "")),
            f"{counted} of {data.get('checked')} commit(s) in {span}",
            f"inspect: git -C {data.get('repo')} log --format='%H %GF %an %s' {rng if base else tip}; re-verify: "
            f"gkeys verify-tree {data.get('repo')} --range {rng} --policy all --no-record")


def _file_hit(entry: Entry) -> tuple[str, str, str]:
    """A file ``gkeys verify -F`` accepted: as root, or in a build (``reported_by``: confirmed by root, or
    ``file-reported``: a claim root could not confirm)."""
    data = entry.data
    subject = str(data.get("file", ""))
    by = data.get("reported_by") if isinstance(data.get("reported_by"), Mapping) else None
    detail = f"{data.get('size')} bytes, sha256 {str(data.get('sha256'))[:16]}… (gkeys verify -F"
    if by is not None:
        detail += f" in a build: reported by a build as {by.get('user')} for {by.get('atom') or 'an unnamed package'}"
        detail += (", verified again by root)" if entry.kind == "file-accepted"
                   else f"; NOT confirmed: {data.get('why')})")
    else:
        detail += ")"
    signature = data.get("signature")
    step = (f"verify it again: gkeys verify -F {subject}" + (f" -s {signature}" if signature not in (None, "", "inline")
                                                             else "")
            + " (a distfile: delete it and fetch it again; rebuild what was built from it"
            + (f": emerge -1 ={str(by.get('atom')).split('::')[0]}" if by and by.get("atom") else "") + ")")
    return subject, detail, step


def _hit(entry: Entry, wanted: set[str]) -> Hit:
    data = entry.data
    artifact = ACCEPTED[entry.kind]
    if entry.kind == "tree-accepted":
        counted = sum(n for f, n in data.get("signers", {}).items() if f in wanted)
        subject, detail, step = _tree_hit(entry, counted)
    elif entry.kind == "rsync-accepted":
        subject = str(data.get("location", ""))
        detail = f"top Manifest TIMESTAMP {data.get('timestamp')}, sha256 {str(data.get('manifest_sha256'))[:16]}…"
        step = f"sync it again (emerge --sync), or recheck it: gkeys audit --key KEY --recheck ({data.get('uri')})"
    elif entry.kind == "snapshot-accepted":
        subject = str(data.get("file", ""))
        detail = f"signed time {data.get('timestamp')}, sha256 {str(data.get('sha256'))[:16]}…"
        step = f"sync {data.get('repo')} again (emerge-webrsync), or recheck it"
    elif entry.kind == "media-accepted":
        subject = str(data.get("file", ""))
        sums = data.get("digests", {})
        detail = f"{data.get('size')} bytes, sha512 {str(sums.get('sha512', 'not computed'))[:16]}…"
        step = f"verify it again: gkeys verify-media {subject} (or delete it and fetch it again)"
    elif entry.kind == "overlays-accepted":
        subject = str(data.get("output", ""))
        detail = f"sha256 {str(data.get('sha256'))[:16]}… from {data.get('source')}"
        step = "fetch and verify the list again: gkeys verify-overlays"
    elif entry.kind in ("file-accepted", "file-reported"):
        subject, detail, step = _file_hit(entry)
    else:  # seed-installed
        subject = f"{data.get('category')} ({data.get('url')})"
        detail = f"sha256 {str(data.get('sha256'))[:16]}…"
        step = f"review the seeds it brought (gkeys history -C {data.get('category')}) and fetch it again"
    return Hit(entry, artifact, subject, detail, step)


def audit(layout: Layout, key: str, *, installed: Mapping[str, Iterable[str]] | None = None,
          since: float = 0.0, skipped: list[str] | None = None) -> Audit:
    """Every accepted artifact whose recorded signers include ``key`` (see the module docstring); unreadable
    lines are named in ``skipped`` and passed over."""
    entries = list(read_entries(layout, skipped))
    family = key_family(entries, installed or {})
    primary = next((p for p, subs in family.items() if key == p or key in subs), key)
    subkeys = family.get(primary, set())
    exact = {key} | (subkeys if key == primary else set())
    trees = {primary}  # tree entries record the primary: they count for any of its subkeys
    report = Audit(key, sorted((subkeys | {primary}) - {key}))
    for entry in entries:
        if entry.kind not in ACCEPTED or entry.time < since or _scratch(entry) or \
                (entry.kind == "file-reported" and entry.data.get("verdict") != "accepted"):
            continue
        found = fingerprints_in(entry.data)
        if found & exact or (entry.kind in PRIMARY_ONLY and found & trees):
            report.hits.append(_hit(entry, exact | trees))
    report.hits += binpkg_periods(entries, primary, since=since)
    return report


def _scratch(entry: Entry) -> bool:
    """An entry that names a scratch path (a quarantine, a fetch's scratch directory, a staging tree): what it
    names was removed right after; the acceptance is journaled again where the file stays."""
    data = entry.data
    place = str(data.get("file") or data.get("repo") or data.get("location") or "")
    return bool(SCRATCH.search(place))


def binpkg_periods(entries: Iterable[Entry], primary: str, *, since: float = 0.0) -> list[Hit]:
    """The periods ``primary`` was trusted in a binary-package home (from the ``binpkg-home`` entries: a period
    starts with a rebuild that trusts it and ends with the next rebuild of that home that does not); only those
    that had not ended before ``since``."""
    started: dict[str, Entry] = {}
    hits: list[Hit] = []

    def close(home: str, until: str, ended: float) -> None:
        entry = started.pop(home)
        if ended < since:
            return
        hits.append(Hit(entry, BINPKG, home, f"trusted from {entry.when} {until}",
                        "the binary packages Portage installed in that period may carry its signature: list them "
                        "(qlop -mv, or emerge.log) and rebuild them from source (emerge -1 --usepkg=n PKG)"))

    for entry in entries:
        if entry.kind != "binpkg-home":
            continue
        home = str(entry.data.get("home", ""))
        trusted = primary in (entry.data.get("keys") or []) and primary not in (entry.data.get("unusable") or [])
        if trusted and home not in started:
            started[home] = entry
        elif not trusted and home in started:
            close(home, f"to {entry.when}", entry.time)
    for home in list(started):
        close(home, "until now", float("inf"))
    return hits
