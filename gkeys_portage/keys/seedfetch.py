"""Fetch signed seed files: download, verify with signer pinning, refuse rollback, install atomically.

The signature is looked for at ``<url>.sig`` then ``<url>.asc``.  It must be a good signature by
the key named in ``[verify-seeds]`` for that category (``<category> <nick>``), checked against
that category's keyring, and it must be made for that category (:mod:`gkeys_portage.keys.seedbinding`:
a ``seed-category@gentoo.org`` notation; unbound old signatures only where ``[policy] unbound-seeds``
allows them, and only by a key that signs no other category's seeds, compared by fingerprint).  A
seed whose signature is older than the installed one's is refused (rollback to an old list of trusted keys).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

from gkeys_portage.core import journal
from gkeys_portage.core.config import DEFAULT_AUTHORITY_SEEDS, Config
from gkeys_portage.core.errors import NoSignatureError, RollbackError, StaleError, UnboundSeedError, UsageError
from gkeys_portage.core.http import NotFoundError
from gkeys_portage.core.state import atomic_write_json, read_json
from gkeys_portage.core.types import Category, Fingerprint, Nick, parse_category
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.seedbinding import Binding, check_binding, signed_categories
from gkeys_portage.keys.seeds import MAX_SEED_FILE, Seed, parse_seeds
from gkeys_portage.openpgp.verdict import GoodSignature

SIGNATURE_SUFFIXES = (".sig", ".asc")
MAX_SIGNATURE = 1024 * 1024
SEED_RECORD = "seeds"


@dataclass
class SeedChanges:
    """Added / Updated / Removed nicks between two versions of a category."""

    added: list[Nick] = field(default_factory=list)
    updated: list[Nick] = field(default_factory=list)
    removed: list[Nick] = field(default_factory=list)

    def to_json(self) -> dict[str, list[str]]:
        """Machine-readable form for ``--json``."""
        return {"added": list(self.added), "updated": list(self.updated), "removed": list(self.removed)}


def diff_seeds(old: dict[Nick, Seed], new: dict[Nick, Seed]) -> SeedChanges:
    """Compare two versions of a category's seeds."""
    return SeedChanges(
        added=sorted(set(new) - set(old)),
        updated=sorted(n for n in set(new) & set(old) if new[n].to_json() != old[n].to_json()),
        removed=sorted(set(old) - set(new)),
    )


@dataclass
class SeedFetchResult:
    """What fetch-seed did for one category."""

    category: Category
    url: str
    signature_url: str
    signer: GoodSignature
    changes: SeedChanges
    unchanged: bool
    binding: Binding

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {"category": self.category, "url": self.url, "signature_url": self.signature_url,
                "signer": self.signer.to_json(), "changes": self.changes.to_json(), "unchanged": self.unchanged,
                "bound": self.binding.bound}


def _download_signature(ctx: Gkeys, url: str) -> tuple[bytes, str]:
    for suffix in SIGNATURE_SUFFIXES:
        try:
            return ctx.http.get(url + suffix, max_bytes=MAX_SIGNATURE), url + suffix
        except NotFoundError:
            continue
    raise NoSignatureError(f"no signature for {url} (tried {', '.join(SIGNATURE_SUFFIXES)})")


def categories_signed_by(ctx: Gkeys, category: Category, fingerprints: set[Fingerprint]) -> list[Category]:
    """The categories other than ``category`` whose ``[verify-seeds]`` signer pins one of ``fingerprints``
    (by key, not by name: ``gentoo/mirror`` and ``gentoo-infra/mirror`` are one key under two names).  A
    signer with no seed (installed or packaged) pins nothing, so it cannot verify that category's seeds."""
    shared = []
    for other, (signer_category, signer_nick) in sorted(ctx.config.verify_seeds.items()):
        if other == category:
            continue
        seed = ctx.seeds.load(signer_category).get(signer_nick)
        if seed is not None and {pin.fingerprint for pin in seed.pins(signer_category)} & fingerprints:
            shared.append(other)
    return shared


def _refuse_shared_unbound(ctx: Gkeys, category: Category, url: str, signatures: list[GoodSignature]) -> None:
    """Where ``[policy] unbound-seeds`` allows an unbound signature over ``category``'s seeds, refuse one by
    a key that also signs another category's seeds under any name (:class:`UnboundSeedError`): it cannot
    tell the two categories' seed files apart."""
    for signature in signatures:
        if signed_categories(signature):
            continue
        shared = categories_signed_by(ctx, category, {signature.pin.fingerprint})
        if shared:
            pin = signature.pin
            raise UnboundSeedError(
                f"seed file {url} has an unbound signature by {pin.category}/{pin.nick} ({pin.fingerprint}), and "
                f"that key also signs the {', '.join(shared)} seeds ([verify-seeds], under another name), so it "
                f"could be their seed file; ask its maintainer to re-sign it with 'gkeys sign --seed-category "
                f"{category}', or give {category} a signer of its own key, then keep it in [policy] unbound-seeds")


def no_seed_source(config: Config, category: Category) -> str:
    """Why ``category`` has no seed source, naming the config section that would give it one."""
    where = f"config {config.path}" if config.path else "the config"
    builtin = DEFAULT_AUTHORITY_SEEDS.get(category)
    if builtin:  # a config's [authority-seeds] section replaced the built-in line
        return (f"no seed source for category {category!r}: its seeds come from [authority-seeds], whose section in "
                f"{where} replaces the built-in lines; add '{category} = {builtin}' to it, or remove the section")
    return (f"no seed URL configured for category {category!r}: add '{category} = URL' to [seedurls] (a signed seed "
            f"file) or '{category} = KEYRING-URL-OR-FILE CERTIFIER' to [authority-seeds] in {where}")


@journal.refusals("seed-refused", lambda ctx, cat: {"category": cat, "url": ctx.config.seedurls.get(cat)})
def fetch_seed(ctx: Gkeys, category: str) -> SeedFetchResult:
    """Download, verify and install the seed file of ``category``.  The caller holds the lock."""
    cat = parse_category(category)
    url = ctx.config.seedurls.get(cat)
    if not url:
        raise UsageError(no_seed_source(ctx.config, cat))
    signer_category, signer_nick = ctx.config.verify_seeds.get(cat, (None, None))
    if signer_category is None or signer_nick is None:
        raise UsageError(f"no signing key configured for category {cat!r} ([verify-seeds] in the config)")

    data = ctx.http.get(url, max_bytes=MAX_SEED_FILE)
    signature, signature_url = _download_signature(ctx, url)
    verifier = ctx.verifier(signer_category, [signer_nick])
    result = verifier.detached(signature, data)
    allow_unbound = cat in ctx.config.policy.unbound_seeds
    if allow_unbound:
        _refuse_shared_unbound(ctx, cat, url, result.good)
    binding = check_binding(result.good, cat, url, allow_unbound=allow_unbound)
    new_seeds = parse_seeds(data, url)  # only parsed once its signature is good

    record = read_json(ctx.layout.record(SEED_RECORD), {})
    previous = record.get(cat, {})
    digest = hashlib.sha256(data).hexdigest()
    signed = result.signer.created
    max_age = ctx.config.policy.max_seed_age
    if max_age and time.time() - signed > max_age:
        raise StaleError(
            f"seed file {url} was signed {result.signer.created_at:%Y-%m-%d}, more than "
            f"{max_age / 86400:.0f} days ago ([policy] max-seed-age): a mirror may be freezing it"
        )
    if previous and signed < previous.get("signed", 0):
        raise RollbackError(
            f"seed file {url} is signed {result.signer.created_at:%Y-%m-%d %H:%M:%S}, older than the installed "
            f"one; refusing to roll back"
        )
    old_seeds = ctx.seeds.load(cat) if ctx.seeds.is_installed(cat) else {}
    unchanged = previous.get("sha256") == digest and ctx.seeds.is_installed(cat)
    if not unchanged:
        ctx.seeds.install_raw(cat, data, signature)
        record[cat] = {"signed": signed, "sha256": digest, "url": url, "signer": result.signer.pin.fingerprint}
        atomic_write_json(ctx.layout.record(SEED_RECORD), record)
        journal.record(ctx, "seed-installed", {**record[cat], "category": cat, "signer": result.signer.to_json()})
    return SeedFetchResult(cat, url, signature_url, result.signer, diff_seeds(old_seeds, new_seeds), unchanged,
                           binding)
