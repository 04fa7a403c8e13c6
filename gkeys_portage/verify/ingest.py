"""Root takes in the journal spool (:mod:`gkeys_portage.verify.spool`): each record is a claim by the build user
that owns it, never evidence.

For each record, under the spool's own lock (the journal's lock is taken for each append):

1. An entry that is not a record (a symbolic link, a FIFO, a hard link, another name, too large, not the exact
   JSON of a record, owned by a user outside the spool's group) is refused: a warning naming it, a
   ``spool-refused`` entry, removed, never trusted.
2. The file named, and its signature, are opened once as :mod:`gkeys_portage.verify.claimed` says: only below
   Portage's real DISTDIR, no link followed on the way, a regular file the record's owner may read, bounded; never
   by name again.  The file is hashed through that descriptor; if it is still the file the build described (same
   SHA-256), root verifies that same inode (gpg and Sequoia read the descriptor under a read lease, or the bytes
   hashed) with its own keyrings against the category and nick the build used, and journals **its own** verdict
   (``file-accepted`` or ``file-refused``) with the provenance ``reported_by`` (the owner's name and uid, the
   package, the build's verdict and time).
3. Anything else cannot be confirmed (a file gone, changed since or written to meanwhile, outside DISTDIR, behind
   a symbolic link, a FIFO or device, unreadable to the record's owner, too large; its signature likewise): the
   claim is journaled as ``file-reported`` with ``confirmed: false`` and why (``gkeys audit`` lists it as
   unconfirmed).  Nothing blocks: no open waits for a writer, no read is unbounded.
4. The record is removed once journaled.  Nothing here stops the command that runs it: a failure is a warning.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gkeys_portage.core import journal
from gkeys_portage.core.errors import GkeysError, NotVerifiedError, StateError
from gkeys_portage.core.state import StateLock
from gkeys_portage.core.types import Category
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.openpgp.process import OpenFile
from gkeys_portage.openpgp.verdict import VerifyResult
from gkeys_portage.verify import claimed, spool
from gkeys_portage.verify.file import (
    MAX_DOWNLOAD,
    MAX_FILE,
    MAX_SIGNATURE,
    SignedInput,
    digest_of,
    journal_file,
    verify_input,
)
from gkeys_portage.verify.media.pinned import FileChangedError, held


@dataclass
class Ingested:
    """What one ingest did: records confirmed, refused by root, unconfirmed, and entries refused."""

    confirmed: list[str] = field(default_factory=list)
    refused_now: list[str] = field(default_factory=list)
    unconfirmed: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)  # "NAME: why"

    def to_json(self) -> dict[str, Any]:
        """Machine-readable form."""
        return {"confirmed": self.confirmed, "refused": self.refused_now, "unconfirmed": self.unconfirmed,
                "rejected": self.rejected}


def _provenance(claim: spool.Claim) -> dict[str, Any]:
    data = claim.data
    return {"user": claim.user, "uid": claim.uid, "atom": data["atom"], "verdict": data["verdict"],
            "time": data["time"], "record": claim.name}


def _detached(named: str, owner: tuple[str, int], distdir: Path | None) -> tuple[bytes, str]:
    """The signature a detached claim names, read through a descriptor opened as :mod:`~.claimed` says."""
    try:
        fd, _ = claimed.open_claimed(distdir, named, owner, MAX_SIGNATURE)
        try:
            return claimed.read_claimed(fd, MAX_SIGNATURE), named
        finally:
            os.close(fd)
    except claimed.Unconfirmable as exc:
        raise claimed.Unconfirmable(f"its signature {named}: {exc}") from exc


def verify_claimed(ctx: Gkeys, data: Mapping[str, Any], owner: tuple[str, int], distdir: Path | None
                   ) -> tuple[SignedInput, Category, VerifyResult, tuple[str, int]]:
    """Root's own verification of what a build named (a record's ``data``: file, signature, SHA-256, category,
    nick, message; ``owner``: the record owner's name and uid; also ``audit --recheck`` of such a claim): the file
    and its signature opened once, without following a link, below DISTDIR (:mod:`~.claimed`); hashed and verified
    through that same descriptor (gpg and Sequoia read ``/dev/fd/N`` while a read lease holds the file still) or
    from the bytes read once.  Raises :class:`~.claimed.Unconfirmable` (the claim cannot be checked) or
    :class:`NotVerifiedError` (root refuses)."""
    name, message = data["file"], bool(data.get("message"))
    inline = message or data["signature"] == "inline"
    fd, info = claimed.open_claimed(distdir, name, owner, MAX_FILE)
    try:
        with held(fd, name) as holding:
            if holding and not inline:
                body: bytes | OpenFile = OpenFile(fd)
            elif info.st_size > MAX_DOWNLOAD:
                raise claimed.Unconfirmable(f"it is larger than {MAX_DOWNLOAD} bytes and cannot be held still "
                                            "while it is verified (open for writing?)")
            else:
                body = claimed.read_claimed(fd, MAX_DOWNLOAD)
            digest = digest_of(body)
            if digest[0] != data["sha256"]:
                raise claimed.Unconfirmable("the file changed since the build verified it")
            if inline:
                signed = SignedInput(name, body, None, whole=not message)
            else:
                signed = SignedInput(name, body, *_detached(data["signature"], owner, distdir))
            category, result = verify_input(ctx, signed, [data["category"]], data.get("nick") or None)
    except FileChangedError as exc:
        raise claimed.Unconfirmable("the file was written to while root verified it") from exc
    finally:
        os.close(fd)
    return signed, category, result, digest


def _confirm(ctx: Gkeys, claim: spool.Claim, done: Ingested, distdir: Path | None) -> None:
    """Journal root's own verdict on what ``claim`` names, or the claim as unconfirmed."""
    data = claim.data
    path = data["file"]
    reported = {"reported_by": _provenance(claim)}
    try:
        signed, category, result, digest = verify_claimed(ctx, data, (claim.user, claim.uid), distdir)
    except NotVerifiedError as exc:
        journal.record(ctx, "file-refused", {"file": path, "signature": data["signature"],
                                             "category": data["category"], "sha256": data["sha256"],
                                             "code": exc.reason, "why": exc.message[:400], **reported})
        if data["verdict"] == "accepted":
            journal.warn(f"{path}: a build as {claim.user} ({data['atom'] or 'no package'}) accepted it, but it "
                         f"does not verify now: {exc.message} (gkeys audit; rebuild {data['atom'] or 'it'})")
        done.refused_now.append(path)
        return
    except claimed.Unconfirmable as exc:
        why = str(exc)
    except (GkeysError, OSError) as exc:
        why = f"it cannot be verified again ({exc})"
    else:
        journal_file(ctx, signed, category, result, {**reported, "confirmed": True}, digest)
        done.confirmed.append(path)
        return
    journal.record(ctx, "file-reported", {
        "file": path, "signature": data["signature"], "category": data["category"], "nick": data["nick"],
        "sha256": data["sha256"], "size": data["size"], "verdict": data["verdict"], "code": data["code"],
        "signatures": [{"fingerprint": f} for f in data["signers"]], "confirmed": False, "why": why, **reported})
    done.unconfirmed.append(path)


def ingest(ctx: Gkeys, distdir: Callable[[], Path | None], *, create: bool = True) -> Ingested:
    """Take in every record of the spool (root only; see the module docstring); the spool is made when missing
    and ``create``.  ``distdir``: Portage's DISTDIR (asked once, when a record is there; None: unknown, every
    claim unconfirmed).  Raises :class:`StateError` only when the spool cannot be read at all."""
    done = Ingested()
    layout = ctx.layout
    where = spool.spool_dir(layout)
    if os.geteuid() != 0 or not journal.enabled():
        return done
    if not os.path.lexists(where):
        if create:
            spool.ensure_spool(layout)
        return done
    if (unsafe := spool.unsafe_spool(where)):
        raise StateError(f"the journal spool {where} is not read: {unsafe} (remove it; gkeys makes it again)")
    lock = journal.JournalPaths.of(layout).root / "ingest.lock"
    lock.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
    with StateLock(layout, timeout=journal.LOCK_WAIT, path=lock):
        where_files: list[Path | None] = []
        for item in spool.read_claims(where):
            if isinstance(item, tuple):
                name, why = item
                text = f"{why}; removed, never trusted"
                if (stays := spool.remove(where / name)):
                    text = f"{why}; not trusted; {stays}"
                journal.warn(f"journal spool: {where / name}: refused: {text}")
                journal.record(ctx, "spool-refused", {"record": str(where / name), "why": why})
                done.rejected.append(f"{name}: {why}")
                continue
            if not where_files:
                where_files.append(distdir())
            _confirm(ctx, item, done, where_files[0])
            spool.remove(where / item.name)
    return done


def ingest_quietly(ctx: Gkeys, distdir: Callable[[], Path | None]) -> None:
    """:func:`ingest` before a root command when the spool holds something (made when missing), never that
    command's reason to fail (one warning)."""
    try:
        if spool.pending(ctx.layout):
            ingest(ctx, distdir)
    except Exception as exc:  # noqa: BLE001 - the spool never blocks a command
        journal.warn(f"the journal spool was not taken in: {exc} (gkeys journal ingest)")
