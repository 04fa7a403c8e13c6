"""Publishing pinned keys: a WKD tree for a web server (``export-wkd``) and HKP upload (``send-key``).

HKP upload: ``POST <keyserver>/pks/add`` with the form field ``keytext`` (one armored key per
request, so the answer is per key).  A keyserver may answer 200 with an error page, so the answer is
read: Hockeypuck's JSON must list the fingerprint (inserted, updated or ignored = unchanged); a text
or HTML answer that reads like an error is a refusal.

WKD (draft-koch-openpgp-webkey-service): a key is served at ``hu/<zbase32(sha1(local part))>``, the
local part lower-cased (ASCII letters only, as the draft maps it), one file per address holding the
binary keys that carry that address, each with only the user ids of that address.  Two layouts, both
servable as they are written:

* direct: ``DIR/.well-known/openpgpkey/hu/...`` and ``policy`` (DIR = document root of the domain);
* advanced: ``DIR/.well-known/openpgpkey/<domain>/hu/...`` and ``policy`` (DIR = document root of
  ``openpgpkey.<domain>``).

Addresses whose local part is not ASCII are skipped and reported: lower-casing them is not defined
the same way by every client, so a hash computed here could point elsewhere than the client's.  So are
addresses whose domain is not a DNS name (LDH labels, IDNA ``xn--`` punycode allowed: a user id
``M <m@../../../escaped>`` would otherwise name a directory outside ``-o``), and every target is
checked to resolve inside ``-o`` before anything is written.

A key is published only under the addresses its own seed names (the seed's ``uid``; for an authority
seed, the certified user id): a pinned key that adds a self-signed ``Mallory <alice@gentoo.org>`` is not
served from Alice's WKD file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from gkeys_portage.core.errors import BadInputError, NetworkError, UsageError
from gkeys_portage.core.state import atomic_write
from gkeys_portage.core.types import Category, Fingerprint, parse_category
from gkeys_portage.keys.bundle import pinned_keyblocks
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.seeds import Seed
from gkeys_portage.keys.sources import keyserver_base, wkd_hash
from gkeys_portage.openpgp.keyblocks import Keyblock, armor_public_keys, keep_user_ids, user_id_texts

METHODS = ("direct", "advanced", "both")
_ERROR_PAGE = re.compile(r"error|fail|invalid|denied|refused|reject|not allowed|forbidden|unauthori[sz]ed",
                         re.IGNORECASE)
_TAGS = re.compile(r"<[^>]*>")
_ADDRESS = re.compile(r"<([^<>\s]+@[^<>\s]+)>\s*$|^([^<>\s]+@[^<>\s]+)$")
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


def valid_domain(domain: str) -> bool:
    """True if ``domain`` is a DNS host name: dot-separated LDH labels of 1-63 characters, none starting or
    ending with a hyphen, 253 characters at most (IDNA punycode labels, ``xn--...``, are LDH); no trailing
    dot, no empty, ``.`` or ``..`` label, nothing a path could be made of."""
    labels = domain.lower().split(".")
    return 0 < len(domain) <= 253 and all(_LABEL.fullmatch(label) for label in labels)


def _inside(outdir: Path, target: Path) -> Path:
    """``target`` if it resolves (symlinks followed) inside ``outdir``, else a :class:`BadInputError`."""
    base = outdir.resolve()
    resolved = target.resolve()
    if not resolved.is_relative_to(base):
        raise BadInputError(f"{target} resolves to {resolved}, outside {outdir}: refusing to write there "
                            f"(choose an -o directory without symlinks leading out of it)")
    return target


def address_of(user_id: str) -> str | None:
    """The e-mail address of a user id (``Name <addr>`` or a bare ``addr``), or None."""
    match = _ADDRESS.search(user_id.strip())
    return (match.group(1) or match.group(2)) if match else None


def wkd_local(local: str) -> str:
    """The local part as WKD hashes it: ASCII letters lower-cased (non-ASCII is refused by the caller)."""
    return local.translate(str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz"))


def same_address(user_id: str, address: str) -> bool:
    """True if ``user_id`` carries ``address`` (domain and ASCII letters compared case-insensitively)."""
    found = address_of(user_id)
    if found is None:
        return False
    local, _, domain = found.rpartition("@")
    want_local, _, want_domain = address.rpartition("@")
    return wkd_local(local) == wkd_local(want_local) and domain.lower() == want_domain.lower()


@dataclass
class WkdExport:
    """What export-wkd wrote and what it skipped."""

    category: Category
    files: list[Path] = field(default_factory=list)
    addresses: dict[str, list[Fingerprint]] = field(default_factory=dict)  # address -> keys served there
    skipped: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {"category": self.category, "files": [str(p) for p in self.files],
                "addresses": {a: list(f) for a, f in self.addresses.items()}, "skipped": self.skipped}


def export_wkd(ctx: Gkeys, category: str, outdir: Path, *, domain: str | None = None,
               method: str = "advanced") -> WkdExport:
    """Write the WKD tree of ``category``'s pinned keys into ``outdir`` (see the module docstring)."""
    if method not in METHODS:
        raise UsageError(f"--method {method!r}: choose one of {', '.join(METHODS)}")
    if domain is not None and not valid_domain(domain):
        raise UsageError(f"--domain {domain!r} is not a DNS name (letters, digits and hyphens, dot-separated)")
    cat = parse_category(category)
    seeds, blocks = pinned_keyblocks(ctx, cat)
    named = _seed_addresses(seeds)
    result = WkdExport(cat)
    by_address: dict[str, list[Keyblock]] = {}
    for block in blocks:
        for user_id in user_id_texts(block.data):
            address = address_of(user_id)
            if address is None:
                continue
            local, _, addr_domain = address.rpartition("@")
            if domain is not None and addr_domain.lower() != domain.lower():
                continue
            if not local.isascii() or not addr_domain.isascii():
                result.skipped.append(f"{address} ({block.primary}): not an ASCII address; "
                                      "WKD clients do not agree how to lower-case it")
                continue
            if not valid_domain(addr_domain):
                result.skipped.append(f"{address} ({block.primary}): {addr_domain!r} is not a DNS name")
                continue
            if not any(same_address(uid, address) for uid in named.get(block.primary, ())):
                result.skipped.append(f"{address} ({block.primary}): not an address of the key's own seed (its "
                                      f"uid names {', '.join(_shown_addresses(named.get(block.primary, ())))}); "
                                      "a key is published only under the addresses its seed names")
                continue
            key = f"{wkd_local(local)}@{addr_domain.lower()}"
            if block not in by_address.setdefault(key, []):
                by_address[key].append(block)
    if not by_address:
        raise BadInputError(f"no key of {cat} has a user id address{f' at {domain}' if domain else ''} that its "
                            f"seed's uid names (see 'gkeys list-seed -C {cat}')"
                            + (f"; skipped: {'; '.join(result.skipped[:3])}" if result.skipped else ""))
    domains = sorted({address.rpartition("@")[2] for address in by_address})
    if method in ("direct", "both") and len(domains) > 1:
        raise UsageError(f"the keys' addresses are at {', '.join(domains)}: a direct WKD tree serves one "
                         "domain; give --domain DOMAIN (or --method advanced)")
    plan: list[tuple[Path, bytes]] = []
    for address, holders in sorted(by_address.items()):
        local, _, addr_domain = address.rpartition("@")
        data = b"".join(keep_user_ids(block.data, partial(same_address, address=address)) for block in holders)
        roots = []
        if method in ("direct", "both"):
            roots.append(outdir / ".well-known" / "openpgpkey")
        if method in ("advanced", "both"):
            roots.append(outdir / ".well-known" / "openpgpkey" / addr_domain)
        targets = [_inside(outdir, root / "hu" / wkd_hash(local)) for root in roots]
        plan.extend((target, data) for target in targets)
        result.addresses[address] = [block.primary for block in holders]
    plan.extend((_inside(outdir, root / "policy"), b"") for root in sorted({t.parent.parent for t, _ in plan}))
    for target, data in plan:  # every target was checked first: nothing is written if one would escape
        atomic_write(_inside(outdir, target), data)
        result.files.append(target)
    return result


def _seed_addresses(seeds: Sequence[Seed]) -> dict[Fingerprint, list[str]]:
    """Primary fingerprint -> the user ids its seed(s) name (for an authority seed, the certified one)."""
    named: dict[Fingerprint, list[str]] = {}
    for seed in seeds:
        for fingerprint in seed.keys:
            named.setdefault(fingerprint, []).extend(seed.uid)
    return named


def _shown_addresses(user_ids: Sequence[str]) -> list[str]:
    """The addresses of ``user_ids`` for a message (``none`` when there is none)."""
    return [a for a in (address_of(uid) for uid in user_ids) if a is not None] or ["none"]


@dataclass
class Upload:
    """What the keyserver answered for one key."""

    nick: str
    fingerprint: Fingerprint
    status: str  # "accepted", "refused" or "unreachable"
    answer: str

    def to_json(self) -> dict[str, str]:
        """Machine-readable form for ``--json``."""
        return {"nick": self.nick, "fingerprint": self.fingerprint, "status": self.status, "answer": self.answer}


def read_hkp_answer(status: int, body: bytes, fingerprint: Fingerprint) -> tuple[bool, str]:
    """``(accepted, one line)`` from a keyserver's answer to ``POST /pks/add`` for ``fingerprint``."""
    text = body.decode("utf-8", "replace")
    lines = [line.strip() for line in _TAGS.sub("\n", text).splitlines() if line.strip()]
    first = lines[0][:200] if lines else "(empty answer)"
    if status != 200:
        return False, f"HTTP {status}: {first}"
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if isinstance(document, dict):
        for verdict in ("inserted", "updated", "ignored"):
            listed = document.get(verdict) or []
            if isinstance(listed, list) and any(fingerprint in str(item).upper().replace(" ", "")
                                                for item in listed):
                return True, "unchanged" if verdict == "ignored" else verdict
        return False, f"the keyserver's answer does not list the key: {first}"
    if _ERROR_PAGE.search(" ".join(lines)):
        return False, f"HTTP 200 with an error page: {first}"
    return True, first


def send_keys(ctx: Gkeys, category: str, nicks: Sequence[str] = (), keyserver: str | None = None) -> list[Upload]:
    """Upload each pinned key of ``category`` (or of ``nicks``), armored and clean, to an HKP keyserver.

    The keyserver is ``keyserver`` or the first of ``[sources] keyservers``.
    """
    cat = parse_category(category)
    server = keyserver or next(iter(ctx.config.sources.keyservers), None)
    if server is None:
        raise UsageError("no keyserver: give --keyserver URL or set [sources] keyservers")
    url = keyserver_base(server) + "/pks/add"
    seeds, blocks = pinned_keyblocks(ctx, cat, nicks)
    owner = {fpr: seed.nick for seed in seeds for fpr in seed.keys}
    uploads: list[Upload] = []
    for block in blocks:
        keytext = armor_public_keys(block.data).decode("ascii")
        try:
            status, body = ctx.http.post_form(url, {"keytext": keytext})
        except NetworkError as exc:
            uploads.append(Upload(owner[block.primary], block.primary, "unreachable", str(exc)))
            continue
        accepted, answer = read_hkp_answer(status, body, block.primary)
        uploads.append(Upload(owner[block.primary], block.primary, "accepted" if accepted else "refused", answer))
    return uploads
