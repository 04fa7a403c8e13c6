"""Verify the overlay list (``repositories.xml``) that ``eselect repository`` and layman clone from.

Steps, on exactly the same bytes (no re-reading between checking and using):

1. read the list and its detached signature (``LIST.asc`` or ``-s``), from a path or a URL, bounded in size;
2. the signature must be good and made by a key pinned in the configured category
   (``[overlays] category``, default ``gentoo``) *for the overlay-list purpose*
   (:func:`~gkeys_portage.keys.purposes.named_pins`; default ``gentoo/snapshot``, the infrastructure key):
   a good signature by a key of another purpose (the git-mirror key, a release key) is refused naming both;
3. the signed bytes are parsed safely (:mod:`.overlay_xml`) and checked against the format and the
   source-URL rules (:mod:`.overlay_format`, :mod:`.overlay_urls`);
   A list signed longer ago than ``[overlays] max-age`` days is refused (a mirror frozen in the past);
4. only a list without errors, signed no earlier than the one installed before, may be installed,
   atomically (:func:`install_list`).

Configuration (all optional)::

    [overlays]
    category = gentoo
    url = https://api.gentoo.org/overlays/repositories.xml
    signature-url = https://api.gentoo.org/overlays/repositories.xml.asc
    output = /var/lib/gkeys/overlays/repositories.xml
    max-size = 16          ; MiB
    max-age = 0            ; days; refuse a list signed longer ago (a frozen mirror); 0 = off
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.core import journal
from gkeys_portage.core.config import Config
from gkeys_portage.core.errors import (
    BadInputError,
    ConfigError,
    NoSignatureError,
    NotVerifiedError,
    RollbackError,
    StaleError,
    UnknownSignerError,
)
from gkeys_portage.core.http import NotFoundError, TooLargeError
from gkeys_portage.core.state import atomic_write, atomic_write_json, read_json
from gkeys_portage.core.types import parse_category
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.purposes import Purpose, named_pins
from gkeys_portage.openpgp.verdict import VerifyResult
from gkeys_portage.verify.overlays.format import OverlayList, check_document
from gkeys_portage.verify.overlays.xmltree import OverlayXmlError, XmlLimits, is_blank, parse_document

SECTION = "overlays"
DEFAULT_CATEGORY = "gentoo"
DEFAULT_URL = "https://api.gentoo.org/overlays/repositories.xml"
MAX_SIGNATURE = 1024 * 1024
RECORD = "overlays"
LIST, SIGNATURE = "overlay list", "signature"


class OverlayListRefused(NotVerifiedError):
    """The list is validly signed but breaks the format or the source-URL rules (exit 1)."""


@dataclass(frozen=True)
class OverlaySettings:
    """The ``[overlays]`` section."""

    category: str
    url: str
    signature_url: str
    output: Path
    limits: XmlLimits = field(default_factory=XmlLimits)

    @classmethod
    def from_config(cls, config: Config) -> OverlaySettings:
        """Read ``[overlays]`` (defaults: category gentoo, the api.gentoo.org list, URL.asc,
        ``<gkeysdir>/overlays/repositories.xml``, 16 MiB)."""
        url = config.get(SECTION, "url", DEFAULT_URL)
        output = config.get(SECTION, "output", "") or str(config.gkeysdir / "overlays" / "repositories.xml")
        try:
            category = parse_category(config.get(SECTION, "category", DEFAULT_CATEGORY))
            max_mib = float(config.get(SECTION, "max-size", "16"))
        except (ValueError, BadInputError) as exc:
            raise ConfigError(f"[{SECTION}] {exc}") from exc
        if max_mib <= 0:
            raise ConfigError(f"[{SECTION}] max-size must be positive")
        return cls(category=category, url=url, signature_url=config.get(SECTION, "signature-url", "") or url + ".asc",
                   output=Path(output), limits=XmlLimits(max_bytes=int(max_mib * 1024 * 1024)))


@dataclass(frozen=True)
class SignedList:
    """The list's bytes and its detached signature, with the names they came from."""

    name: str
    data: bytes
    signature: bytes
    signature_name: str


@dataclass
class OverlayVerification:
    """Outcome of a verification: who signed, what the list holds, every finding, how long each step took."""

    source: SignedList
    category: str
    signature: VerifyResult
    overlays: OverlayList
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True if the list may be used (good pinned signature, no error findings)."""
        return self.overlays.ok

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {"list": self.source.name, "signature": self.source.signature_name, "category": self.category,
                **self.signature.to_json(), **self.overlays.to_json(), "ok": self.ok,
                "seconds": {k: round(v, 4) for k, v in self.seconds.items()}}


def _unacceptable(what: str) -> type[NotVerifiedError] | type[OverlayXmlError]:
    """The error for a list or signature that is too large or blank: a signature that cannot be one
    leaves the list unverified (exit 1); a list that cannot be an XML document is bad input (exit 2)."""
    return NoSignatureError if what == SIGNATURE else OverlayXmlError


def _check_bytes(data: bytes, name: str, limit: int, what: str) -> bytes:
    """The one place the size limit and the blank check apply, to the list and its signature alike."""
    if len(data) > limit:
        raise _unacceptable(what)(f"{what} {name}: larger than {limit} bytes")
    if is_blank(data):
        raise _unacceptable(what)(f"{what} {name}: empty file" + ("" if what == SIGNATURE else " (no XML document)"))
    return data


def _fetch(ctx: Gkeys, location: str, limit: int, what: str) -> bytes:
    """Bytes of a URL or a local file: at most ``limit`` of them, not blank (:func:`_check_bytes`)."""
    if "://" not in location:
        path = Path(location)
        if not path.is_file():
            if what == SIGNATURE:
                raise NoSignatureError(f"no signature at {location}: no such file (give -s SIG)")
            raise BadInputError(f"{what} {location}: no such file")
        try:
            with open(path, "rb") as handle:
                return _check_bytes(handle.read(limit + 1), location, limit, what)
        except OSError as exc:
            raise BadInputError(f"cannot read {what} {location}: {exc.strerror or exc}") from exc
    try:
        data = ctx.http.get(location, max_bytes=limit)
    except TooLargeError as exc:
        raise _unacceptable(what)(f"{what} {location}: larger than {limit} bytes") from exc
    except NotFoundError as exc:
        if what == SIGNATURE:
            raise NoSignatureError(f"no signature at {location} (give -s SIG)") from exc
        raise
    return _check_bytes(data, location, limit, what)


def load_list(ctx: Gkeys, location: str, signature: str | None, limits: XmlLimits | None = None) -> SignedList:
    """Read the list (path or URL) and its detached signature (``signature``, else ``LOCATION.asc``)."""
    limits = limits or XmlLimits()
    data = _fetch(ctx, location, limits.max_bytes, LIST)
    signature_name = signature or location + ".asc"
    return SignedList(location, data, _fetch(ctx, signature_name, MAX_SIGNATURE, SIGNATURE), signature_name)


def _check_age(ctx: Gkeys, signed: SignedList, result: VerifyResult) -> None:
    """Refuse a list signed longer ago than ``[overlays] max-age`` days (a mirror frozen in the past)."""
    days = ctx.config.number(SECTION, "max-age", 0.0)
    signer = result.signer
    if days and time.time() - signer.created > days * 86400:
        raise StaleError(f"{signed.name}: signed {signer.created_at:%Y-%m-%d %H:%M:%S} UTC, more than {days:g} days "
                         f"ago ([{SECTION}] max-age): the mirror may be frozen; refused")


@journal.refusals("overlays-refused", lambda ctx, signed, category, **_: {"file": signed.name, "category": category})
def verify_overlay_list(ctx: Gkeys, signed: SignedList, category: str, *, nick: str | None = None,
                        limits: XmlLimits | None = None) -> OverlayVerification:
    """Check the signature (a seed of ``category`` for the overlay-list purpose), then parse and check the
    signed bytes.

    Raises a :class:`NotVerifiedError` subclass if the signature is not good (:class:`StaleError` if it
    was made longer ago than ``[overlays] max-age`` days), or
    :class:`OverlayXmlError` if the signed bytes are not an acceptable XML document.  Format and
    URL problems are returned as findings; the caller decides to refuse (see :func:`install_list`).
    """
    limits = limits or XmlLimits()
    _check_bytes(signed.data, signed.name, limits.max_bytes, LIST)  # also for a SignedList not read by load_list
    _check_bytes(signed.signature, signed.signature_name, MAX_SIGNATURE, SIGNATURE)
    cat = parse_category(category)
    if not ctx.keyring(cat).exists() or not ctx.seeds.load(cat):
        raise UnknownSignerError(f"no pinned keys in category {cat}: add the infrastructure key first "
                                 f"(gkeys add-seed -C {cat} ...; gkeys install-key -C {cat})")
    started = time.perf_counter()
    try:
        pins, scope = named_pins(ctx.config, ctx.seeds.pins(cat, [nick] if nick else []), Purpose.OVERLAY_LIST, cat,
                                 "the overlay list")
        verifier = ctx.verifier(cat, pins=pins)
        verifier.scope = scope  # a pinned key of another purpose (the git-mirror key) is refused naming both
        result = verifier.detached(signed.signature, signed.data)
    except NotVerifiedError as exc:
        raise exc.reworded(f"{signed.name}: {exc.message}") from exc
    _check_age(ctx, signed, result)
    signed_at = time.perf_counter()
    root = parse_document(signed.data, signed.name, limits)
    parsed_at = time.perf_counter()
    overlays = check_document(root)
    done = time.perf_counter()
    return OverlayVerification(signed, cat, result, overlays, {
        "signature": signed_at - started, "parse": parsed_at - signed_at, "checks": done - parsed_at,
        "total": done - started})


@journal.refusals("overlays-refused", lambda ctx, verification, output: {"file": verification.source.name,
                                                                        "output": str(output)})
def install_list(ctx: Gkeys, verification: OverlayVerification, output: Path) -> bool:
    """Write the verified list to ``output`` atomically; False if it already held these bytes.

    Refuses (:class:`OverlayListRefused`) a list with error findings, so nothing unverified is written,
    and (:class:`RollbackError`) a list signed before the one last installed at ``output``: a replayed
    old list could bring back a repository that was removed for a reason.  The signature time and
    digest of each installed list are kept in ``state/overlays.json``, keyed by the resolved path of
    ``output`` (so a symlink or ``..`` does not dodge the floor); the record is written, or its time
    raised, also when ``output`` already held these bytes (copied there by hand, or recorded under
    another name before), so a floor always exists after a successful install.
    """
    if not verification.ok:
        raise OverlayListRefused(f"{verification.source.name}: refused ({len(verification.overlays.errors)} "
                                 f"errors); {output} left unchanged")
    ctx.ensure_layout()
    signer = verification.signature.signer
    # every name the record may know this file by: its resolved path, that of the entry the write replaces
    # (if ``output`` is a symlink), and the absolute, unresolved path older versions keyed it by
    names = {str(output.resolve()), str(output.parent.resolve() / output.name), str(output.absolute())}
    with ctx.lock:
        record = read_json(ctx.layout.record(RECORD), {})
        floor = max(float(record.get(k, {}).get("signed", 0)) for k in names)
        if signer.created < floor:
            raise RollbackError(
                f"{verification.source.name}: signed {signer.created_at:%Y-%m-%d %H:%M:%S} UTC, before the list "
                f"installed at {output} was; refusing to roll back")
        try:
            unchanged = output.read_bytes() == verification.source.data
        except OSError:
            unchanged = False
        if not unchanged:
            try:
                atomic_write(output, verification.source.data, 0o644)
            except OSError as exc:
                raise BadInputError(f"cannot write {output}: {exc.strerror or exc}") from exc
        key = str(output.resolve())  # again: the write replaced a symlink at ``output`` by the file itself
        entry = {"signed": signer.created, "sha256": hashlib.sha256(verification.source.data).hexdigest(),
                 "source": verification.source.name, "signer": signer.pin.fingerprint}
        if not unchanged or float(record.get(key, {}).get("signed", 0)) < signer.created:
            record[key] = entry  # also for unchanged bytes: a missing floor is created, an older one raised
            atomic_write_json(ctx.layout.record(RECORD), record)
        journal.record(ctx, "overlays-accepted", {**entry, "output": key, "signer": signer.to_json()})
    return not unchanged
