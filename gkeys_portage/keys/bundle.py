"""Keyring bundles: reproducible, optionally signed keyrings of one category for others to consume.

``gkeys build-keyring -C CAT -o DIR`` writes

* ``DIR/<CAT>.gpg``: the binary keyblocks of the seeds' pinned primaries, sorted by primary fingerprint;
* ``DIR/<CAT>.asc``: the same bytes, ASCII-armored here (never by gpg, whose armor carries a version
  header and depends on gpg's build);
* ``DIR/<CAT>.json``: the manifest (category, nicks, fingerprints and expiry of each key, the SHA-512
  of the seed file and of both keyrings, the tool version and one timestamp);
* with ``--sign``: a detached armored signature ``<file>.asc`` of each of the three by the ``[sign]`` key.

Consuming: ``[keyrings] CAT = URL`` (or a file) is the first key source of install-key and
refresh-key (:func:`load_bundle`).  A bundle needs no trust of its own: only keyblocks whose primary
fingerprint the category's seeds pin are handed on, into the usual quarantine; other keys, keys
carrying a pinned key as a subkey and duplicates are dropped and reported.  When ``[verify-seeds]``
names a signer for the category, ``URL.sig`` or ``URL.asc`` is required (a deleted signature is a
refusal, never "unsigned") and must be a good signature by that signer, bound to the category as seed
files are (the ``seed-category@gentoo.org`` notation of :mod:`gkeys_portage.keys.seedbinding`; unbound
only where ``[policy] unbound-seeds`` allows it), and not older than the signature of the bundle used
last (its time is recorded: an old genuine bundle would keep revocations out); else the whole bundle is
refused (nothing installed).  Without a signer a bundle may be unsigned, but a signature that is there
must still be good.  Unreadable or truncated bundles are refused too.

Reproducible: the keyblocks come from one :meth:`GnuPG.export_exact` (filtered by primary
fingerprint, every self-signature the keyring holds: the keys' history, and no third-party certification, which a
keyring never stores), sorted by
fingerprint, so neither the order in which keys were imported nor the clock changes a byte.  The
manifest's timestamp is ``$SOURCE_DATE_EPOCH`` when set, else the newest creation time found in the
keys themselves.  Signatures carry their own creation time and are not reproducible (by nature).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gkeys_portage import __version__
from gkeys_portage.core import journal
from gkeys_portage.core.errors import BadInputError, GpgError, NetworkError, NotVerifiedError, StateError
from gkeys_portage.core.http import NotFoundError
from gkeys_portage.core.state import atomic_write, atomic_write_json, read_json_object
from gkeys_portage.core.types import Category, Fingerprint, Nick, parse_category
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.seedbinding import check_binding
from gkeys_portage.keys.seeds import Seed
from gkeys_portage.keys.signing import sign_file
from gkeys_portage.openpgp.colons import PublicKey
from gkeys_portage.openpgp.keyblocks import (
    Keyblock,
    armor_public_keys,
    dearmor_public_keys,
    select_keyblocks,
    split_keyblocks,
)

MANIFEST_FORMAT = 1
MAX_BUNDLE_BYTES = 64 * 1024 * 1024
MAX_SIGNATURE_BYTES = 64 * 1024
SIGNATURE_SUFFIXES = (".sig", ".asc")
#: When the signature of the bundle used last was made, per category ({category: epoch}).
BUNDLE_RECORD = "bundles"


class BundleRefusedError(NotVerifiedError):
    """A keyring bundle that must not be used at all (bad signature, unreadable, truncated)."""


class StaleBundleError(BundleRefusedError):
    """A keyring bundle signed longer ago than ``[policy] max-bundle-age``: a mirror replaying the last genuine
    bundle would keep a revocation out for ever."""


@dataclass
class BuiltBundle:
    """What build-keyring wrote."""

    category: Category
    files: list[Path]
    fingerprints: list[Fingerprint]
    signatures: list[Path] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {"category": self.category, "files": [str(p) for p in self.files],
                "fingerprints": list(self.fingerprints), "signatures": [str(p) for p in self.signatures]}


def source_date_epoch(keys: Sequence[PublicKey]) -> int:
    """``$SOURCE_DATE_EPOCH`` if set (an integer, else an error), else the newest time in ``keys``."""
    text = os.environ.get("SOURCE_DATE_EPOCH")
    if text is not None:
        if not (text.strip().isascii() and text.strip().isdigit()):
            raise BadInputError(f"SOURCE_DATE_EPOCH={text!r}: expected a number of seconds since 1970")
        return int(text)
    times = [t for key in keys for t in ([p.created for p in key.all_keys()] + [u.created for u in key.uids])
             if t is not None]
    return max(times, default=0)


def pinned_keyblocks(ctx: Gkeys, category: Category,
                     nicks: Sequence[str] = ()) -> tuple[list[Seed], list[Keyblock]]:
    """The chosen seeds (all when no nick is named) and their pinned keyblocks, sorted by fingerprint.

    One export for all keys (:meth:`GnuPG.export_exact`: filtered by primary fingerprint, history kept).
    Every pinned primary must be installed, else a :class:`StateError` naming ``install-key``; an
    unknown nick is a :class:`BadInputError`.
    """
    seeds = ctx.seeds.load(category)
    unknown = sorted(set(nicks) - set(seeds))
    if unknown:
        raise BadInputError(f"no seed {', '.join(unknown)} in category {category!r} "
                            f"(see 'gkeys list-seed -C {category}')")
    chosen = [seeds[Nick(n)] for n in sorted(set(nicks) or seeds)]
    wanted = sorted({fpr for seed in chosen for fpr in seed.keys})
    keyring = ctx.keyring(category)
    installed = keyring.installed()
    missing = [f"{seed.nick} ({fpr})" for seed in chosen for fpr in seed.keys if fpr not in installed]
    if missing:
        raise StateError(f"keys not installed in {category}: {', '.join(missing[:5])}"
                         f"{' and more' if len(missing) > 5 else ''}; run 'gkeys install-key -C {category}' first")
    selection = keyring.gpg().export_exact(wanted)
    if selection.primaries != set(wanted):
        raise StateError(f"the {category} keyring did not export every pinned key; "
                         f"run 'gkeys refresh-key -C {category}'")
    return chosen, sorted(selection.kept, key=lambda block: block.primary)


def manifest(category: Category, seeds: Sequence[Seed], keys: dict[Fingerprint, PublicKey], seed_file: bytes,
             binary: bytes, armored: bytes, created: int) -> bytes:
    """The manifest JSON (sorted keys, 4-space indent, trailing newline): byte-stable for equal input."""
    entries: list[dict[str, Any]] = []
    for seed in seeds:
        for fpr in seed.keys:
            key = keys[fpr]
            entries.append({
                "nick": seed.nick, "fingerprint": fpr, "expires": key.primary.expires,
                "revoked": key.primary.revoked, "uids": sorted(u.text for u in key.uids),
                "subkeys": [{"fingerprint": s.fingerprint, "expires": s.expires, "revoked": s.revoked}
                            for s in sorted(key.subkeys, key=lambda s: s.fingerprint)],
            })
    document = {
        "format": MANIFEST_FORMAT, "category": category, "created": created,
        "nicks": sorted({seed.nick for seed in seeds}), "keys": entries,
        "seed-file-sha512": hashlib.sha512(seed_file).hexdigest(),
        f"{category}.gpg-sha512": hashlib.sha512(binary).hexdigest(),
        f"{category}.asc-sha512": hashlib.sha512(armored).hexdigest(),
        "tool": f"gkeys-portage {__version__}",
    }
    return (json.dumps(document, indent=4, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def build_keyring(ctx: Gkeys, category: str, nicks: Sequence[str], outdir: Path, *,
                  sign: bool = False) -> BuiltBundle:
    """Write ``<CAT>.gpg``, ``<CAT>.asc`` and ``<CAT>.json`` (and signatures with ``sign``) into ``outdir``.

    Every pinned primary of the chosen seeds must be installed (else a :class:`StateError` naming
    ``install-key``); the keyblocks are exported in one gpg call and written in fingerprint order.
    """
    cat = parse_category(category)
    seeds, blocks = pinned_keyblocks(ctx, cat, nicks)
    installed = ctx.keyring(cat).installed()
    keys = {block.primary: installed[block.primary] for block in blocks}
    binary = b"".join(block.data for block in blocks)
    armored = armor_public_keys(binary)
    document = manifest(cat, seeds, keys, ctx.seeds.path(cat).read_bytes(), binary, armored,
                        source_date_epoch(list(keys.values())))
    files = [outdir / f"{cat}.gpg", outdir / f"{cat}.asc", outdir / f"{cat}.json"]
    for path, data in zip(files, (binary, armored, document), strict=True):
        atomic_write(path, data)
    built = BuiltBundle(cat, files, sorted(keys))
    if sign:
        built.signatures = [sign_file(ctx, path, seed_category=cat) for path in files]  # bound, as seed files
    return built


@dataclass
class LoadedBundle:
    """A keyring bundle reduced to the pinned keyblocks, with what was dropped and why."""

    source: str
    keyblocks: dict[Fingerprint, bytes]
    signed_by: str = ""  # "category/nick" of the verified signer, "" when unsigned
    notes: list[str] = field(default_factory=list)  # dropped material and skipped sources, for the report
    silent: str = ""  # why the source did not answer (network error, 5xx, 404), "" when it answered


def _read(ctx: Gkeys, location: str, limit: int) -> bytes:
    """A bundle or signature from a URL or a local path (:class:`NotFoundError` if absent)."""
    if "://" in location:
        return ctx.http.get(location, max_bytes=limit)
    path = Path(location)
    if not path.exists():
        raise NotFoundError(f"{location}: no such file")
    if path.stat().st_size > limit:
        raise BadInputError(f"{location}: larger than {limit} bytes")
    return path.read_bytes()


def _signature(ctx: Gkeys, location: str) -> tuple[str, bytes] | None:
    """The detached signature beside the bundle (``.sig``, then ``.asc``), or None when there is none."""
    for suffix in SIGNATURE_SUFFIXES:
        try:
            return location + suffix, _read(ctx, location + suffix, MAX_SIGNATURE_BYTES)
        except NotFoundError:
            continue
    return None


def _check_signature(ctx: Gkeys, category: Category, location: str, data: bytes) -> tuple[str, int]:
    """Verify the bundle's signature against ``[verify-seeds]`` of ``category`` (required when a signer is
    configured), its category binding and its freshness; the signer and the signature's time, or ("", 0)
    for an unsigned bundle where no signer is configured."""
    found = _signature(ctx, location)
    signer = ctx.config.verify_seeds.get(category)
    if found is None:
        if signer is None:
            return "", 0
        raise BundleRefusedError(
            f"keyring bundle {location} refused, nothing installed: it has no signature "
            f"({' or '.join(location + s for s in SIGNATURE_SUFFIXES)}), and [verify-seeds] {category} requires "
            f"one by {signer[0]}/{signer[1]}; ask its publisher to sign it ('gkeys build-keyring -C {category} "
            f"--sign'), or remove [keyrings] {category}")
    sig_name, signature = found
    if signer is None:
        raise BundleRefusedError(
            f"keyring bundle {location} is signed ({sig_name}) but [verify-seeds] names no signer for "
            f"{category}; add '[verify-seeds] {category} = <category> <nick>' or remove [keyrings] {category}")
    try:
        result = ctx.verifier(signer[0], [signer[1]]).detached(signature, data)
        check_binding(result.good, category, location, allow_unbound=category in ctx.config.policy.unbound_seeds,
                      what="keyring bundle", resign=f"gkeys build-keyring -C {category} --sign")
    except NotVerifiedError as exc:
        raise BundleRefusedError(f"keyring bundle {location} refused, nothing installed: {exc} "
                                 f"(its signature {sig_name} must be by {signer[0]}/{signer[1]}, "
                                 f"[verify-seeds] {category})") from exc
    made = max(good.created for good in result.good)
    limit = ctx.config.policy.max_bundle_age
    if time.time() - made > limit:
        raise StaleBundleError(
            f"keyring bundle {location} refused, nothing installed: it is stale, signed {_utc(made)}, more than "
            f"[policy] max-bundle-age ({limit / 86400:g} days) ago; a mirror replaying an old bundle would keep "
            f"revocations out. Ask its publisher to re-sign it ('gkeys build-keyring -C {category} --sign', "
            "daily from a timer)")
    last = _last_signed(ctx, category)
    if last is not None and made < last:
        raise BundleRefusedError(
            f"keyring bundle {location} refused, nothing installed: it was signed "
            f"{_utc(made)}, before the bundle used last (signed {_utc(last)}); an older bundle would keep "
            f"revocations out. Check the source; if its publisher really went back, delete '{category}' from "
            f"{ctx.layout.record(BUNDLE_RECORD)}")
    return f"{result.good[0].pin.category}/{result.good[0].pin.nick}", made


def _utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _last_signed(ctx: Gkeys, category: Category) -> int | None:
    """When the signature of the bundle used last for ``category`` was made (None: none recorded)."""
    value = read_json_object(ctx.layout.record(BUNDLE_RECORD)).get(category)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise StateError(f"{ctx.layout.record(BUNDLE_RECORD)}: the entry for {category} is malformed; "
                         f"restore it, or delete it to accept the next signed bundle")
    return value


def _record_signed(ctx: Gkeys, category: Category, made: int) -> None:
    path = ctx.layout.record(BUNDLE_RECORD)
    record = read_json_object(path)
    if record.get(category) != made:
        record[category] = made
        atomic_write_json(path, record)


def parse_bundle(source: str, data: bytes, pinned: Sequence[Fingerprint]) -> LoadedBundle:
    """The keyblocks of ``data`` (binary or one armored block) whose primary is ``pinned``; the rest noted.

    Unreadable or truncated data refuses the whole bundle.
    """
    try:
        binary = dearmor_public_keys(data) if data.lstrip().startswith(b"-----") else data
        blocks = split_keyblocks(binary)
        selection = select_keyblocks(binary, pinned)
    except GpgError as exc:
        raise BundleRefusedError(f"keyring bundle {source} refused, nothing installed: {exc}") from exc
    if not blocks:
        raise BundleRefusedError(f"keyring bundle {source} refused, nothing installed: it holds no key")
    loaded = LoadedBundle(source, {block.primary: block.data for block in selection.kept})
    primaries = {block.primary for block in blocks}
    extra = sorted(primaries - set(pinned) - set(selection.aliasing))
    if extra:
        loaded.notes.append(f"dropped from {source}: {', '.join(extra)} (not pinned by the seeds: only pinned keys "
                            "are taken)")
    for other, carried in sorted(selection.aliasing.items()):
        loaded.notes.append(f"dropped from {source}: {other} (it carries pinned key {', '.join(carried)} "
                            "as a subkey)")
    if len(blocks) > len(primaries):
        loaded.notes.append(f"dropped from {source}: {len(blocks) - len(primaries)} repeated keyblock(s) "
                            "(the first copy is used)")
    return loaded


@journal.refusals("bundle-refused", lambda ctx, category, pinned: {"category": category,
                                                                   "location": ctx.config.keyrings.get(category)})
def load_bundle(ctx: Gkeys, category: str, pinned: Sequence[Fingerprint]) -> LoadedBundle | None:
    """The ``[keyrings]`` bundle of ``category`` reduced to ``pinned`` keys (None if none is configured).

    A bundle that cannot be fetched is skipped (noted, :attr:`LoadedBundle.silent`; the other sources are
    asked, and a refresh counts it as a silent source); a bad signature, one older than ``[policy]
    max-bundle-age`` (:class:`StaleBundleError`) or unreadable data raises :class:`BundleRefusedError` before
    anything is installed.
    """
    cat = parse_category(category)
    location = ctx.config.keyrings.get(cat)
    if location is None:
        return None
    try:
        data = _read(ctx, location, MAX_BUNDLE_BYTES)
        signed_by, made = _check_signature(ctx, cat, location, data)
        loaded = parse_bundle(location, data, pinned)
    except NetworkError as exc:
        return LoadedBundle(location, {}, notes=[f"keyring bundle {location} skipped: {exc}"], silent=str(exc))
    except BundleRefusedError as exc:
        raise type(exc)(f"{exc}; ask its publisher to fix it, or remove [keyrings] {cat} "
                        "to use the other key sources") from exc
    if made:
        _record_signed(ctx, cat, made)
    loaded.signed_by = signed_by
    journal.record(ctx, "bundle-accepted", {"category": cat, "location": location, "signed_by": signed_by,
                                            "made": made, "keys": sorted(loaded.keyblocks)})
    return loaded
