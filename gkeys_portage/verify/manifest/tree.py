"""Verify a GLEP 74 Manifest tree with gemato's library, accepting only pinned repository keys.

gemato checks the top Manifest's OpenPGP signature in its own isolated GnuPG home (holding only the keyring
given here: exactly the pinned keys of the repository purpose) and then every file of the tree, stray
files included.  On top of gemato this module requires that the top Manifest *is* signed, that the
signer's primary key is pinned, and that it carries a ``TIMESTAMP``; what the time stamp must be is
:mod:`gkeys_portage.verify.manifest.marks`' job.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gkeys_portage.core.errors import (
    BadSignatureError,
    ExpiredKeyError,
    NoSignatureError,
    NotVerifiedError,
    RevokedKeyError,
    SignerNotPinnedError,
    TreeMismatchError,
    UnsignedDataError,
)
from gkeys_portage.core.text import neutralise
from gkeys_portage.core.types import is_fingerprint, parse_fingerprint
from gkeys_portage.openpgp.process import selected_program
from gkeys_portage.openpgp.verdict import Pin, PinSet
from gkeys_portage.verify.manifest import gematohome
from gkeys_portage.verify.manifest.shape import covered_paths
from gkeys_portage.verify.manifest.signedtext import check_top_manifest

if TYPE_CHECKING:
    import gemato.exceptions

TOP = "Manifest"


@dataclass(frozen=True)
class VerifiedTree:
    """A tree gemato verified: its signed ``TIMESTAMP``, who signed it, and the top Manifest's digest."""

    root: Path
    timestamp: datetime  # the top Manifest's TIMESTAMP, UTC
    signer: Pin
    digest: str  # SHA-256 of the top Manifest as served (equal time stamps must mean equal trees)
    files_hashed: bool = True  # False: the files were vouched for by the caller (``known_digest``)
    covered: frozenset[str] = frozenset()  # every path the Manifests cover (when the files were hashed)

    def to_json(self) -> dict[str, str]:
        """The facts, for ``--json``."""
        return {"timestamp": self.timestamp.isoformat(), "signer": f"{self.signer.category}/{self.signer.nick}",
                "fingerprint": self.signer.fingerprint, "manifest_sha256": self.digest}


@contextlib.contextmanager
def gkeys_engine(openpgp: Any) -> Iterator[str]:
    """gemato runs gkeys' OpenPGP engine (``$GKEYS_GPG``, ``[gpg] program``), not its own ``$GNUPG`` or ``gpg``
    from ``PATH``: one engine decides every verdict.  gemato reads the program from its module's ``GNUPG`` at
    each call; it is set for the block and put back after.  Yields the program."""
    saved = openpgp.GNUPG
    openpgp.GNUPG = selected_program()
    try:
        yield str(openpgp.GNUPG)
    finally:
        openpgp.GNUPG = saved


def _first_line(exc: BaseException) -> str:
    """The first line of gemato's message, escaped (it may quote a file name the mirror chose)."""
    text = str(exc).strip()
    return neutralise(text.splitlines()[0]) if text else type(exc).__name__


def _refusal(where: str, exc: gemato.exceptions.GematoException, pins: PinSet) -> NotVerifiedError:
    """The gkeys error for a gemato failure (one class per cause, gemato's words kept as detail).  Every name
    from the tree (a file path, gemato's words about it) is escaped here: the message goes to a terminal, the
    journal and ``emerge.log``, and a file name with ESC, CR or a newline must stay one harmless line."""
    import gemato.exceptions as gemato_errors
    import gemato.openpgp

    where, detail = neutralise(where), neutralise(str(exc))
    if isinstance(exc, gemato_errors.OpenPGPRevokedKeyFailure):
        return RevokedKeyError(f"{where}: the top Manifest is signed by a revoked key; refused", detail=detail)
    if isinstance(exc, gemato_errors.OpenPGPExpiredKeyFailure):
        return ExpiredKeyError(f"{where}: the top Manifest is signed by an expired key; refused", detail=detail)
    if isinstance(exc, gemato_errors.OpenPGPVerificationFailure):
        sig = getattr(exc, "sig_data", None)
        status = getattr(sig, "sig_status", None)
        if status is gemato.openpgp.OpenPGPSignatureStatus.NO_PUBLIC_KEY:
            return SignerNotPinnedError(
                f"{where}: the top Manifest is signed by a key that is not a pinned repository key (pinned: "
                f"{pins.describe()}); refused (a developer or release-media key may not sign a tree)", detail=detail)
        return BadSignatureError(f"{where}: the top Manifest's signature does not verify; refused", detail=detail)
    if isinstance(exc, gemato_errors.ManifestUnsignedData):
        return UnsignedDataError(f"{where}: the top Manifest has data outside its signature; refused", detail=detail)
    if isinstance(exc, gemato_errors.ManifestMismatch):
        exists = dict((key, (expected, got)) for key, expected, got in exc.diff).get("__exists__")
        if exists == (True, False):
            what = "is missing (listed in its Manifest; too large for the fetch cap, or not served)"
        elif exists == (False, True):
            what = "is in no Manifest (a stray file)"
        else:
            what = "does not match its Manifest entry (changed after signing, or a damaged transfer)"
        return TreeMismatchError(f"{where}: {neutralise(str(exc.path))} {what}; refused", detail=detail)
    return NotVerifiedError(f"{where}: gemato refused the tree: {_first_line(exc)}", detail=detail)


def verify_tree(root: Path, keyring: bytes, pins: PinSet, *, where: str | None = None,
                jobs: int | None = None, before_files: Callable[[datetime, str], object] | None = None,
                known_digest: str | None = None, only_known: bool = False) -> VerifiedTree:
    """Verify the Manifest tree at ``root`` against ``keyring`` (exactly the keys of ``pins``).

    ``known_digest``: the caller vouches that every file under ``root`` is the very file (same inode) of a
    tree verified in full with a top Manifest of that SHA-256.  When the top Manifest has that digest, its
    signature, signer and TIMESTAMP are still checked (today's keyring: a revoked key refuses) but the files
    are not hashed again; with ``only_known`` another top Manifest raises :class:`TreeMismatchError` instead of
    hashing the tree (the live tree another user may write is never what gemato judges in full).

    ``where`` names the tree in messages (the mirror, not the staging directory).  ``before_files`` is called
    with the signed ``TIMESTAMP`` and the top Manifest's digest once the signature verified and before the
    files are (a rollback is refused without hashing the whole tree); whatever it raises propagates.  Raises a
    :class:`NotVerifiedError` subclass: :class:`NoSignatureError` (no or unsigned top Manifest),
    :class:`SignerNotPinnedError`, :class:`BadSignatureError`, :class:`RevokedKeyError`,
    :class:`ExpiredKeyError`, :class:`TreeMismatchError` (a file differs from its entry, is missing or stray).
    """
    try:  # imported on use: every gkeys command would otherwise pay gemato's start-up (and need it installed)
        import gemato.exceptions as gemato_errors
        import gemato.openpgp
        import gemato.recursiveloader
    except ImportError as exc:
        raise NotVerifiedError("gemato is not installed, so no Manifest tree can be verified: install it "
                               "(emerge app-portage/gemato, or pip install gemato)") from exc
    where = neutralise(where or str(root))
    top = root / TOP
    if not top.is_file():
        raise NoSignatureError(f"{where}: no top-level Manifest; refused (not a signed Manifest tree)")
    served = top.read_bytes()
    check_top_manifest(served, keyring, pins, where)  # both engines, and gemato reads the text they checked
    digest = hashlib.sha256(served).hexdigest()
    gematohome.remove_stale()  # the homes (and gpg-agents) of verifications that were killed
    try:
        with gkeys_engine(gemato.openpgp), gematohome.owned_homes(gemato.openpgp), \
                gemato.openpgp.OpenPGPEnvironment() as env:
            env.import_key(io.BytesIO(keyring))
            loader = gemato.recursiveloader.ManifestRecursiveLoader(
                str(top), verify_openpgp=True, openpgp_env=env, max_jobs=jobs)
            if not loader.openpgp_signed:
                raise NoSignatureError(f"{where}: the top Manifest is not OpenPGP-signed; refused")
            signature = loader.openpgp_signature
            primary = str(signature.primary_key_fingerprint or "").upper()
            pin = pins.get(parse_fingerprint(primary)) if is_fingerprint(primary) else None
            if pin is None:
                raise SignerNotPinnedError(f"{where}: the top Manifest is signed by {primary or 'an unknown key'}, "
                                           f"not a pinned repository key ({pins.describe()}); refused")
            entry = loader.find_timestamp()
            if entry is None:
                raise NoSignatureError(f"{where}: the signed top Manifest has no TIMESTAMP, so its age and order "
                                       f"cannot be checked; refused")
            stamp = (entry.ts if entry.ts.tzinfo else entry.ts.replace(tzinfo=UTC)).astimezone(UTC)
            if before_files is not None:
                before_files(stamp, digest)
            hashed = known_digest is None or digest != known_digest
            if hashed and only_known:
                raise TreeMismatchError(f"{where}: the live top Manifest is not the one verified last time")
            covered: frozenset[str] = frozenset()
            if hashed:
                loader.assert_directory_verifies()
                covered = covered_paths(loader)
    except gemato_errors.GematoException as exc:
        raise _refusal(where, exc, pins) from exc
    return VerifiedTree(root, stamp, pin, digest, files_hashed=hashed, covered=covered)
