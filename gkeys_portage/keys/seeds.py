"""Seed files: the gentoo-keys JSON format (design.md §4, contract).

A seed file is a JSON object keyed by nick; each value is
``{"nick", "name", "keydir", "keys": [primary fingerprints], "fingerprint": [all accepted
fingerprints], "uid": [user ids]}``.  Files are written with sorted keys and 4-space indent.
Older formats (2013 pipe-delimited, 2014 JSON v1 without ``keys``/``uid``) are recognised and
refused with a pointer to ``gkeys convert-seed``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from gkeys_portage.core.errors import BadInputError, SeedFormatError
from gkeys_portage.core.state import Layout, atomic_write
from gkeys_portage.core.types import (
    Category,
    Fingerprint,
    Nick,
    parse_category,
    parse_fingerprint,
    parse_nick,
)
from gkeys_portage.core.windows import Window
from gkeys_portage.openpgp.verdict import Pin, PinSet

SEED_FIELDS = ("fingerprint", "keydir", "keys", "name", "nick", "uid")
#: Optional fields (absent from every seed file written before them, and from a seed without one).
OPTIONAL_FIELDS = ("windows",)
WINDOW_FIELDS = ("by", "closed", "from", "until")
MAX_SEED_FILE = 16 * 1024 * 1024
_EMAIL_RE = re.compile(r"<([^<>@\s]+@[^<>@\s]+)>")


@dataclass
class Seed:
    """One trusted person (or role) and the fingerprints trusted for them."""

    nick: Nick
    name: str
    keydir: str
    keys: list[Fingerprint]
    fingerprint: list[Fingerprint]
    uid: list[str] = field(default_factory=list)
    #: primary fingerprint -> the windows it is authorized to sign in (absent: whenever the key is valid)
    windows: dict[Fingerprint, list[Window]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The seed as a JSON object (field order is fixed by ``sort_keys`` when written); ``windows`` only
        when a key has one, so a seed without windows is written as before."""
        data: dict[str, Any] = {
            "fingerprint": list(self.fingerprint),
            "keydir": self.keydir,
            "keys": list(self.keys),
            "name": self.name,
            "nick": self.nick,
            "uid": list(self.uid),
        }
        kept = {fpr: spans for fpr, spans in sorted(self.windows.items()) if spans and fpr in self.accepted()}
        if kept:  # (only the seed's own keys: a key removed takes its windows with it)
            data["windows"] = {fpr: [window_to_json(w) for w in spans] for fpr, spans in kept.items()}
        return data

    def retired(self, now: float) -> dict[Fingerprint, Window]:
        """The keys whose every window has closed by ``now``, with their last window."""
        found: dict[Fingerprint, Window] = {}
        for fpr, spans in self.windows.items():
            if spans and all(w.closed_at(now) is not None for w in spans):
                found[fpr] = max(spans, key=lambda w: w.end or 0)
        return found

    def emails(self) -> list[str]:
        """The e-mail addresses of the seed's user ids (for WKD)."""
        found: list[str] = []
        for uid in self.uid:
            for address in _EMAIL_RE.findall(uid):
                if address.lower() not in found:
                    found.append(address.lower())
        return found

    def accepted(self) -> set[Fingerprint]:
        """Every fingerprint this seed accepts as a primary key (``keys`` and ``fingerprint``)."""
        return set(self.keys) | set(self.fingerprint)

    def pins(self, category: Category) -> list[Pin]:
        """Pins for every primary key of this seed, each with its windows."""
        return [Pin(category, self.nick, fpr, tuple(self.windows.get(fpr, ()))) for fpr in sorted(self.accepted())]

    def matches(self, text: str) -> bool:
        """True if ``text`` occurs (case-insensitively) in the nick, name, uids or fingerprints."""
        needle = text.lower()
        haystack = [self.nick, self.name, *self.uid, *self.fingerprint]
        return any(needle in item.lower() for item in haystack)


def _expect(value: Any, kind: type, where: str) -> Any:
    if not isinstance(value, kind):
        raise SeedFormatError(f"{where}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _string_list(value: Any, where: str) -> list[str]:
    items = _expect(value, list, where)
    for item in items:
        _expect(item, str, where)
    return list(items)


def _fingerprints(value: Any, where: str) -> list[Fingerprint]:
    result: list[Fingerprint] = []
    for item in _string_list(value, where):
        try:
            fpr = parse_fingerprint(item)
        except BadInputError as exc:
            raise SeedFormatError(f"{where}: {exc}") from exc
        if fpr not in result:
            result.append(fpr)
    return result


def _instant(value: Any, where: str) -> int | None:
    if value is None:
        return None
    text = _expect(value, str, where)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise SeedFormatError(f"{where}: {text!r} is not an ISO 8601 time (2024-05-01T00:00:00Z)") from exc
    if when.tzinfo is None:
        raise SeedFormatError(f"{where}: {text!r} names no time zone (write 2024-05-01T00:00:00Z)")
    return int(when.timestamp())


def window_to_json(window: Window) -> dict[str, Any]:
    """A window as a seed file holds it: ``from``/``until`` ISO 8601 UTC (null: unbounded), ``by`` (who
    certified), ``closed`` (why it ended)."""
    def iso(epoch: int | None) -> str | None:
        return None if epoch is None else datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"by": window.certifier, "closed": window.closed, "from": iso(window.start), "until": iso(window.end)}


def _windows(value: Any, keys: Iterable[Fingerprint], where: str) -> dict[Fingerprint, list[Window]]:
    """The ``windows`` field: primary fingerprint -> list of ``{"from", "until", "by", "closed"}``."""
    result: dict[Fingerprint, list[Window]] = {}
    allowed = set(keys)
    for raw, spans in _expect(value, dict, where).items():
        try:
            fpr = parse_fingerprint(raw)
        except BadInputError as exc:
            raise SeedFormatError(f"{where}: {exc}") from exc
        if fpr not in allowed:
            raise SeedFormatError(f"{where}: {fpr} is not one of the seed's keys")
        parsed: list[Window] = []
        for span in _expect(spans, list, f"{where} {fpr}"):
            at = f"{where} {fpr}"
            _expect(span, dict, at)
            unknown = sorted(set(span) - set(WINDOW_FIELDS))
            if unknown:
                raise SeedFormatError(f"{at}: unknown field(s) {', '.join(unknown)}")
            start, end = _instant(span.get("from"), f"{at} from"), _instant(span.get("until"), f"{at} until")
            if start is not None and end is not None and end <= start:
                raise SeedFormatError(f"{at}: 'until' is not after 'from'")
            parsed.append(Window(start, end, _expect(span.get("by", ""), str, f"{at} by"),
                                 _expect(span.get("closed", ""), str, f"{at} closed")))
        if not parsed:
            raise SeedFormatError(f"{where} {fpr}: an empty list of windows authorizes nothing (remove the key)")
        result[fpr] = parsed
    return result


def seed_from_json(nick: str, obj: Any, where: str = "seed") -> Seed:
    """Validate one seed object (its key in the file is ``nick``)."""
    where = f"{where} {nick!r}"
    _expect(obj, dict, where)
    missing = [name for name in SEED_FIELDS if name not in obj]
    if missing:
        raise SeedFormatError(f"{where}: missing field(s) {', '.join(missing)}")
    unknown = sorted(set(obj) - set(SEED_FIELDS) - set(OPTIONAL_FIELDS))
    if unknown:
        raise SeedFormatError(f"{where}: unknown field(s) {', '.join(unknown)}")
    if _expect(obj["nick"], str, f"{where} nick") != nick:
        raise SeedFormatError(f"{where}: nick field {obj['nick']!r} does not match its key")
    try:
        parsed_nick = parse_nick(nick)
    except BadInputError as exc:
        raise SeedFormatError(f"{where}: {exc}") from exc
    keys = _fingerprints(obj["keys"], f"{where} keys")
    if not keys:
        raise SeedFormatError(f"{where}: 'keys' lists no fingerprint")
    fingerprint = _fingerprints(obj["fingerprint"], f"{where} fingerprint")
    return Seed(
        nick=parsed_nick,
        name=_expect(obj["name"], str, f"{where} name"),
        keydir=_expect(obj["keydir"], str, f"{where} keydir"),
        keys=keys,
        fingerprint=fingerprint,
        uid=_string_list(obj["uid"], f"{where} uid"),
        windows=_windows(obj["windows"], {*keys, *fingerprint}, f"{where} windows") if "windows" in obj else {},
    )


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise SeedFormatError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def _old_format(text: str) -> str | None:
    first = next((line for line in text.splitlines() if line.strip() and not line.startswith("#")), "")
    if "|" in first and not first.lstrip().startswith("{"):
        return "the 2013 pipe-delimited format"
    return None


def parse_seeds(data: bytes | str, source: str = "seed file") -> dict[Nick, Seed]:
    """Parse and validate a seed file.  Raises :class:`SeedFormatError` with one clear line."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SeedFormatError(f"{source}: not UTF-8 text") from exc
    else:
        text = data
    old = _old_format(text)
    if old:
        raise SeedFormatError(
            f"{source}: unsupported seed format ({old}); convert it with 'gkeys convert-seed -F {source}'"
        )
    try:
        obj = json.loads(text, object_pairs_hook=_reject_duplicates)
    except SeedFormatError as exc:
        raise SeedFormatError(f"{source}: {exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise SeedFormatError(f"{source}: not valid JSON ({str(exc).splitlines()[0][:120]})") from exc
    if not isinstance(obj, dict):
        raise SeedFormatError(f"{source}: expected a JSON object keyed by nick")
    if obj and all(isinstance(v, dict) and "fingerprint" in v and "keys" not in v and "uid" not in v
                   for v in obj.values()):
        raise SeedFormatError(
            f"{source}: unsupported seed format (the 2014 JSON v1 format without 'keys' and 'uid'); "
            f"convert it with 'gkeys convert-seed -F {source}'"
        )
    return {Nick(nick): seed_from_json(nick, value, source) for nick, value in obj.items()}


def dump_seeds(seeds: dict[Nick, Seed]) -> bytes:
    """Serialise seeds: sorted keys, 4-space indent, ASCII escapes, trailing newline."""
    obj = {nick: seeds[nick].to_json() for nick in sorted(seeds)}
    return (json.dumps(obj, indent=4, sort_keys=True) + "\n").encode("ascii")


def convert_old_seeds(data: bytes) -> dict[Nick, Seed]:
    """Convert a 2013 pipe-delimited or 2014 JSON v1 seed file to the current format.

    Pipe lines are ``nick|name|keyids|keyring|keydir|fingerprints`` (lists ``:``-separated);
    a v1 entry's fingerprints all become primary ``keys``.  Review the result before use.
    """
    text = data.decode("utf-8", "replace")
    seeds: dict[Nick, Seed] = {}
    if _old_format(text):
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split("|")
            if len(parts) < 6:
                raise SeedFormatError(f"line {number}: expected 6 '|'-separated fields")
            fprs = _fingerprints([f for f in parts[5].split(":") if f], f"line {number}")
            nick = parse_nick(parts[0])
            seeds[nick] = Seed(nick, parts[1], parts[4] or nick, fprs, list(fprs), [])
        return seeds
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise SeedFormatError(f"not a known seed format: {exc}") from exc
    if not isinstance(obj, dict):
        raise SeedFormatError("not a known seed format")
    for nick, value in obj.items():
        _expect(value, dict, f"seed {nick!r}")
        fprs = _fingerprints(value.get("fingerprint", []), f"seed {nick!r} fingerprint")
        keys = _fingerprints(value["keys"], f"seed {nick!r} keys") if "keys" in value else list(fprs)
        parsed = parse_nick(nick)
        seeds[parsed] = Seed(parsed, str(value.get("name", "")), str(value.get("keydir", nick)), keys,
                             fprs or list(keys), _string_list(value.get("uid", []), f"seed {nick!r} uid"))
    return seeds


def packaged_seed(category: Category) -> bytes | None:
    """The seed file shipped with the package for ``category``, if any (see :func:`packaged_categories`)."""
    resource = resources.files("gkeys_portage").joinpath("data", f"{category}.seeds")
    return resource.read_bytes() if resource.is_file() else None


def packaged_categories() -> list[Category]:
    """Categories whose seeds ship with the package: ``gentoo`` (release keyring), ``gentoo-auth``
    (GLEP 79 authority keys), ``gentoo-infra`` (the repository mirror key)."""
    data = resources.files("gkeys_portage").joinpath("data")
    return sorted(Category(item.name[: -len(".seeds")]) for item in data.iterdir()
                  if item.name.endswith(".seeds") and item.is_file())


class SeedStore:
    """Installed seed files under ``<root>/seeds``; writes are atomic (callers hold the lock)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def path(self, category: Category) -> Path:
        """The installed seed file of ``category``."""
        return self.layout.seeds_dir / f"{category}.seeds"

    def categories(self) -> list[Category]:
        """Installed categories, plus the packaged ones (:func:`packaged_categories`)."""
        found = {Category(p.name[: -len(".seeds")]) for p in self.layout.seeds_dir.glob("*.seeds")}
        found.update(packaged_categories())
        return sorted(found)

    def is_installed(self, category: Category) -> bool:
        """True if a seed file for ``category`` is installed (not just packaged)."""
        return self.path(category).is_file()

    def load(self, category: Category) -> dict[Nick, Seed]:
        """The seeds of ``category`` (the packaged default if none is installed; empty if neither)."""
        parse_category(category)
        path = self.path(category)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            packaged = packaged_seed(category)
            return parse_seeds(packaged, f"packaged {category}.seeds") if packaged else {}
        except OSError as exc:
            raise SeedFormatError(f"cannot read {path}: {exc.strerror}") from exc
        return parse_seeds(data, str(path))

    def save(self, category: Category, seeds: dict[Nick, Seed]) -> Path:
        """Write the seeds of ``category`` atomically."""
        path = self.path(category)
        atomic_write(path, dump_seeds(seeds))
        return path

    def install_raw(self, category: Category, data: bytes, signature: bytes | None) -> Path:
        """Install a verified seed file byte-for-byte (and its signature) atomically."""
        path = self.path(category)
        if signature is not None:
            atomic_write(path.with_name(path.name + ".sig"), signature)
        atomic_write(path, data)
        return path

    def pins(self, category: Category, nicks: Iterable[str] = ()) -> PinSet:
        """Pins of ``category``, restricted to ``nicks`` if given (unknown nicks are an error)."""
        seeds = self.load(category)
        wanted = list(nicks)
        for nick in wanted:
            if nick not in seeds:
                raise BadInputError(f"no seed {nick!r} in category {category!r}")
        chosen = [seeds[Nick(n)] for n in wanted] if wanted else list(seeds.values())
        return PinSet.of(pin for seed in chosen for pin in seed.pins(category))

    def iter_all(self) -> Iterator[tuple[Category, Seed]]:
        """Every seed of every category."""
        for category in self.categories():
            for seed in self.load(category).values():
                yield category, seed
