"""Keyring bundles: reproducible, optionally signed keyrings of one category for others to consume.

``gkeys build-keyring -C CAT -o DIR`` writes

* ``DIR/<CAT>.gpg``: the binary keyblocks of the seeds' pinned primaries, sorted by primary fingerprint;
* ``DIR/<CAT>.asc``: the same bytes, ASCII-armored here (never by gpg, whose armor carries a version
  header and depends on gpg's build);
* ``DIR/<CAT>.json``: the manifest (category, nicks, fingerprints and expiry of each key, the SHA-512
  of the seed file and of both keyrings, the tool version and one timestamp);
* with ``--sign``: a detached armored signature ``<file>.asc`` of each of the three by the ``[sign]`` key.

Reproducible: the keyblocks come from one :meth:`GnuPG.export_exact` (filtered by primary
fingerprint, clean: self-signatures only, which is all a keyring stores anyway), sorted by
fingerprint, so neither the order in which keys were imported nor the clock changes a byte.  The
manifest's timestamp is ``$SOURCE_DATE_EPOCH`` when set, else the newest creation time found in the
keys themselves.  Signatures carry their own creation time and are not reproducible (by nature).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gkeys_portage import __version__
from gkeys_portage.core.colons import PublicKey
from gkeys_portage.core.context import Gkeys
from gkeys_portage.core.errors import BadInputError, StateError
from gkeys_portage.core.keyblocks import armor_public_keys
from gkeys_portage.core.seeds import Seed
from gkeys_portage.core.signing import sign_file
from gkeys_portage.core.state import atomic_write
from gkeys_portage.core.types import Category, Fingerprint, Nick, parse_category

MANIFEST_FORMAT = 1


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
        if not text.strip().isdigit():
            raise BadInputError(f"SOURCE_DATE_EPOCH={text!r}: expected a number of seconds since 1970")
        return int(text)
    times = [t for key in keys for t in ([p.created for p in key.all_keys()] + [u.created for u in key.uids])
             if t is not None]
    return max(times, default=0)


def _seeds(ctx: Gkeys, category: Category, nicks: Sequence[str]) -> list[Seed]:
    """The named seeds of ``category`` (all when none are named); an unknown nick is an error."""
    seeds = ctx.seeds.load(category)
    unknown = sorted(set(nicks) - set(seeds))
    if unknown:
        raise BadInputError(f"no seed {', '.join(unknown)} in category {category!r} "
                            f"(see 'gkeys list-seed -C {category}')")
    return [seeds[Nick(n)] for n in sorted(set(nicks) or seeds)]


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
    seeds = _seeds(ctx, cat, nicks)
    wanted = sorted({fpr for seed in seeds for fpr in seed.keys})
    keyring = ctx.keyring(cat)
    installed = keyring.installed()
    missing = [f"{seed.nick} ({fpr})" for seed in seeds for fpr in seed.keys if fpr not in installed]
    if missing:
        raise StateError(f"keys not installed in {cat}: {', '.join(missing[:5])}"
                         f"{' and more' if len(missing) > 5 else ''}; run 'gkeys install-key -C {cat}' first")
    selection = keyring.gpg().export_exact(wanted)
    if selection.primaries != set(wanted):
        raise StateError(f"the {cat} keyring did not export every pinned key; run 'gkeys refresh-key -C {cat}'")
    binary = b"".join(block.data for block in sorted(selection.kept, key=lambda block: block.primary))
    armored = armor_public_keys(binary)
    keys = {fpr: installed[fpr] for fpr in wanted}
    document = manifest(cat, seeds, keys, ctx.seeds.path(cat).read_bytes(), binary, armored,
                        source_date_epoch(list(keys.values())))
    files = [outdir / f"{cat}.gpg", outdir / f"{cat}.asc", outdir / f"{cat}.json"]
    for path, data in zip(files, (binary, armored, document), strict=True):
        atomic_write(path, data)
    built = BuiltBundle(cat, files, wanted)
    if sign:
        built.signatures = [sign_file(ctx, path) for path in files]
    return built
