"""Generic verification of a file or URL: find its signature, verify it against one or more
categories with signer pinning (``gkeys verify``; the eclass helpers use this too)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from gkeys_portage.core import journal
from gkeys_portage.core.errors import (
    BadInputError,
    BadSignatureError,
    ExpiredKeyError,
    FutureSignatureError,
    NoSignatureError,
    NotVerifiedError,
    RevokedKeyError,
    SignerNotPinnedError,
    TruncatedSignatureError,
    UnknownSignerError,
    UnsignedDataError,
)
from gkeys_portage.core.http import NotFoundError
from gkeys_portage.core.state import read_limited
from gkeys_portage.core.types import Category, parse_category
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.openpgp.packets import find_clearsigned
from gkeys_portage.openpgp.process import OpenFile
from gkeys_portage.openpgp.verdict import VerifyResult
from gkeys_portage.verify import spool

SIGNATURE_SUFFIXES = (".asc", ".sig", ".sign", ".gpg")
INLINE_MARKERS = (b"-----BEGIN PGP SIGNED MESSAGE-----", b"-----BEGIN PGP MESSAGE-----")
MAX_FILE = 8 * 1024 * 1024 * 1024
MAX_DOWNLOAD = 256 * 1024 * 1024
MAX_SIGNATURE = 1024 * 1024

#: When no category verifies, report the most telling reason.
_SEVERITY: list[type[NotVerifiedError]] = [
    BadSignatureError, RevokedKeyError, ExpiredKeyError, FutureSignatureError,
    SignerNotPinnedError, UnknownSignerError,
]


@dataclass
class SignedInput:
    """Data plus its detached signature (or None for an inline-signed message)."""

    name: str
    data: bytes | Path | OpenFile  # an OpenFile: root's descriptor of a file a build named (verify/ingest.py)
    signature: bytes | None
    signature_name: str = ""
    whole: bool = True  # an inline signature must cover all of ``data`` (False: only its text is used)


def _is_inline(data: bytes) -> bool:
    head = data.lstrip()[:64]
    return any(head.startswith(marker) for marker in INLINE_MARKERS)


def unsigned_bytes(data: bytes) -> bool:
    """Whether an inline-signed ``data`` holds anything but its one signed block (and blank lines).

    Unparsable input counts as covered: the verifier refuses it with the precise reason.
    """
    if not data.lstrip().startswith(INLINE_MARKERS[0]):
        return False
    try:
        return find_clearsigned(data).outside
    except NoSignatureError:
        return False


def _outside_error(name: str) -> UnsignedDataError:
    return UnsignedDataError(f"{name}: data outside the signed part is not verified (extract only the signed "
                             "text with -o OUT, or give its detached signature with -s SIG)")


def locate_local(target: Path, signature: Path | None) -> SignedInput:
    """Pair a local file with its signature: ``-s``; else FILE itself if it is inline-signed *as a
    whole*; else ``FILE.asc``/``.sig`` beside it; else FILE is the detached signature of its stem.

    An inline-signed FILE with bytes outside its signed block and no signature beside it is refused
    (:class:`UnsignedDataError`): those bytes are not verified.
    """
    if not target.is_file():
        raise BadInputError(f"{target}: no such file")
    if signature is not None:
        return SignedInput(str(target), target, read_limited(signature, MAX_SIGNATURE, "signature"), str(signature))
    with open(target, "rb") as handle:
        head = handle.read(4096)
    inline = _is_inline(head)
    if inline:
        data = read_limited(target, MAX_DOWNLOAD, "signed file")
        if not unsigned_bytes(data):
            return SignedInput(str(target), data, None)
    for suffix in SIGNATURE_SUFFIXES:
        candidate = target.with_name(target.name + suffix)
        if candidate.is_file():
            return SignedInput(str(target), target, read_limited(candidate, MAX_SIGNATURE, "signature"),
                               str(candidate))
    if inline:
        raise _outside_error(str(target))
    if target.suffix in SIGNATURE_SUFFIXES and target.with_suffix("").is_file():
        stem = target.with_suffix("")
        return SignedInput(str(stem), stem, read_limited(target, MAX_SIGNATURE, "signature"), str(target))
    raise NoSignatureError(f"{target}: no signature found, so not verified (give -s SIG, or put FILE.asc / FILE.sig "
                           "beside it)", file=str(target))


def locate_remote(ctx: Gkeys, url: str, signature: str | None) -> SignedInput:
    """Download a URL and its signature (``-s``, else URL.asc / URL.sig unless it is inline-signed as a
    whole; partly inline-signed without a detached signature is refused)."""
    data = ctx.http.get(url, max_bytes=MAX_DOWNLOAD)
    if signature is not None:
        sig = (ctx.http.get(signature, max_bytes=MAX_SIGNATURE) if "://" in signature
               else read_limited(Path(signature), MAX_SIGNATURE, "signature"))
        return SignedInput(url, data, sig, signature)
    inline = _is_inline(data)
    if inline and not unsigned_bytes(data):
        return SignedInput(url, data, None)
    for suffix in SIGNATURE_SUFFIXES:
        try:
            return SignedInput(url, data, ctx.http.get(url + suffix, max_bytes=MAX_SIGNATURE), url + suffix)
        except NotFoundError:
            continue
    if inline:
        raise _outside_error(url)
    raise NoSignatureError(f"{url}: no signature found at {', '.join(url + s for s in SIGNATURE_SUFFIXES)}, so not "
                           "verified", file=url)


def locate(ctx: Gkeys, target: str, signature: str | None) -> SignedInput:
    """A file or URL with its signature."""
    if "://" in target:
        return locate_remote(ctx, target, signature)
    return locate_local(Path(target), Path(signature) if signature else None)


def locate_message(ctx: Gkeys, target: str) -> SignedInput:
    """An inline-signed (clearsigned) message, local or URL, taken as such whatever its name or leading text."""
    if "://" in target:
        return SignedInput(target, ctx.http.get(target, max_bytes=MAX_DOWNLOAD), None, whole=False)
    path = Path(target)
    if not path.is_file():
        raise BadInputError(f"{target}: no such file")
    return SignedInput(target, read_limited(path, MAX_DOWNLOAD, "signed message"), None, whole=False)


def verify_input(ctx: Gkeys, signed: SignedInput, categories: list[str],
                 nick: str | None = None) -> tuple[Category, VerifyResult]:
    """Verify against each category in turn (pinned to its seeds, or only ``nick``); first success wins."""
    if not categories:
        raise UnknownSignerError("no keyring is installed; run 'gkeys install-key -C CATEGORY' first")
    if signed.signature is None and signed.whole:
        assert isinstance(signed.data, bytes)
        if unsigned_bytes(signed.data):
            raise _outside_error(signed.name)
    _refuse_truncated(signed)
    failures: list[NotVerifiedError] = []
    for name in categories:
        category = parse_category(name)
        verifier = ctx.verifier(category, [nick] if nick else [])
        try:
            if signed.signature is None:
                assert isinstance(signed.data, bytes)
                return category, verifier.clearsigned(signed.data)
            return category, verifier.detached(signed.signature, signed.data)
        except NotVerifiedError as exc:
            failures.append(exc)
    failures.sort(key=lambda e: next((i for i, k in enumerate(_SEVERITY) if isinstance(e, k)), len(_SEVERITY)))
    failure = failures[0]
    if signed.name not in failure.message:  # the refusal names the file
        failure.message = f"{signed.name}: {failure.message}"
    failure.file = failure.file or signed.name
    raise failure


_ARMOR_ENDS = ((b"-----BEGIN PGP SIGNATURE-----", b"-----END PGP SIGNATURE-----"),
               (b"-----BEGIN PGP SIGNED MESSAGE-----", b"-----END PGP SIGNATURE-----"))


def _refuse_truncated(signed: SignedInput) -> None:
    """Refuse an armored signature (or clearsigned message) that ends before its END line: cut short."""
    data = signed.signature if signed.signature is not None else signed.data
    if not isinstance(data, bytes):
        return
    name = signed.signature_name or signed.name
    head = data.lstrip()[:64]
    for begin, end in _ARMOR_ENDS:
        if head.startswith(begin) and end not in data:
            raise TruncatedSignatureError(f"{name}: the signature is truncated (its armor ends before "
                                          f"'{end.decode()}'), so {signed.name} is not verified: download "
                                          "the signature again", file=signed.name)


def _place(name: str) -> str:
    """A URL as it is, a local name made absolute (``audit --recheck`` finds it from any directory)."""
    return name if "://" in name or not name else str(Path(name).absolute())


def digest_of(data: bytes | Path | OpenFile) -> tuple[str, int]:
    """The SHA-256 (hex) and size of ``data`` (a file is read in chunks; an open file from its start, by
    ``pread`` on that descriptor)."""
    digest = hashlib.sha256()
    size = 0
    if isinstance(data, OpenFile):
        while chunk := os.pread(data.fd, 1 << 20, size):
            digest.update(chunk)
            size += len(chunk)
    elif isinstance(data, Path):
        with open(data, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
    else:
        digest.update(data)
        size = len(data)
    return digest.hexdigest(), size


def _names(signed: SignedInput) -> dict[str, str]:
    """The file (or URL) and its signature as an entry names them."""
    return {"file": _place(str(signed.data) if isinstance(signed.data, Path) else signed.name),
            "signature": _place(signed.signature_name) if signed.signature is not None else "inline"}


def journal_file(ctx: Gkeys, signed: SignedInput, category: str, result: VerifyResult,
                 extra: dict[str, object] | None = None, digest: tuple[str, int] | None = None) -> None:
    """Journal what ``gkeys verify -F`` accepted (``file-accepted``), once it accepted it: the file (or URL), its
    signature, the category, the SHA-256 and size of exactly the data verified, and every good signature
    (``extra``: who reported it, when root confirms what a build verified; ``digest``: the SHA-256 and size of
    the data verified, when the caller has it)."""
    sha256, size = digest or digest_of(signed.data)
    journal.record(ctx, "file-accepted", {**_names(signed), "category": category, "sha256": sha256, "size": size,
                                          "signatures": [good.to_json() for good in result.good], **(extra or {})})


def spool_file(ctx: Gkeys, signed: SignedInput, category: str, nick: str | None,
               result: VerifyResult | None, refusal: NotVerifiedError | None = None) -> None:
    """Leave a read-only reader's verdict on a local file in the journal spool (:mod:`~gkeys_portage.verify.spool`)
    for root to confirm; nothing for a URL, or when the eclass allowed no spool."""
    if "://" in signed.name or not spool.requested_quietly(ctx.layout):
        return
    try:
        sha256, size = digest_of(signed.data)
    except OSError:
        sha256, size = "0" * 64, 0
    # the real file, not the link in the build's ${DISTDIR}: root looks for it only in Portage's DISTDIR
    names = {key: value if value == "inline" else os.path.realpath(value) for key, value in _names(signed).items()}
    spool.spool_verdict(ctx.layout, {
        **names, "message": not signed.whole, "category": category, "nick": nick or "",
        "sha256": sha256, "size": size, "verdict": "accepted" if result else "refused",
        "code": refusal.reason if refusal else "",
        "signers": sorted({f for good in (result.good if result else []) for f in
                           (good.pin.fingerprint, good.signing_fingerprint) if f})[:16]})


def default_categories(ctx: Gkeys, category: str | None) -> list[str]:
    """``-C`` if given, else every category that has a keyring."""
    if category:
        return [category]
    return [c for c in ctx.seeds.categories() if ctx.keyring(c).exists()]
