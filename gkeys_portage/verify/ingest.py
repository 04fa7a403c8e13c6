"""Root takes in the journal spool (:mod:`gkeys_portage.verify.spool`): each record is a claim by the build user
that owns it, never evidence.

For each record, under the spool's own lock (the journal's lock is taken for each append):

1. An entry that is not a record (a symbolic link, a FIFO, a hard link, another name, too large, not the exact
   JSON of a record, owned by a user outside the spool's group) is refused: a warning naming it, a
   ``spool-refused`` entry, removed, never trusted.
2. The file named is hashed again; if it is still the file the build described (same SHA-256), root verifies it
   again with its own keyrings against the category and nick the build used, and journals **its own** verdict
   (``file-accepted`` or ``file-refused``) with the provenance ``reported_by`` (the owner's name and uid, the
   package, the build's verdict and time).
3. A file gone, changed since, or whose signature is gone cannot be confirmed: the claim is journaled as
   ``file-reported`` with ``confirmed: false`` and why (``gkeys audit`` lists it as unconfirmed).
4. The record is removed once journaled.  Nothing here stops the command that runs it: a failure is a warning.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gkeys_portage.core import journal
from gkeys_portage.core.errors import GkeysError, NotVerifiedError, StateError
from gkeys_portage.core.state import StateLock
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.verify import spool
from gkeys_portage.verify.file import digest_of, journal_file, locate_local, locate_message, verify_input


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


def _confirm(ctx: Gkeys, claim: spool.Claim, done: Ingested) -> None:
    """Journal root's own verdict on what ``claim`` names, or the claim as unconfirmed."""
    data = claim.data
    path = Path(data["file"])
    reported = {"reported_by": _provenance(claim)}
    why = ""
    try:
        if not path.is_file() or path.is_symlink():
            why = "the file is gone"
        elif digest_of(path)[0] != data["sha256"]:
            why = "the file changed since the build verified it"
    except OSError as exc:
        why = f"the file cannot be read ({exc.strerror})"
    if not why:
        try:
            signed = (locate_message(ctx, str(path)) if data["message"] else
                      locate_local(path, None if data["signature"] == "inline" else Path(data["signature"])))
            category, result = verify_input(ctx, signed, [data["category"]], data["nick"] or None)
        except NotVerifiedError as exc:
            journal.record(ctx, "file-refused", {"file": str(path), "signature": data["signature"],
                                                 "category": data["category"], "sha256": data["sha256"],
                                                 "code": exc.reason, "why": exc.message[:400], **reported})
            if data["verdict"] == "accepted":
                journal.warn(f"{path}: a build as {claim.user} ({data['atom'] or 'no package'}) accepted it, but it "
                             f"does not verify now: {exc.message} (gkeys audit; rebuild {data['atom'] or 'it'})")
            done.refused_now.append(str(path))
            return
        except (GkeysError, OSError) as exc:
            why = f"it cannot be verified again ({exc})"
        else:
            journal_file(ctx, signed, category, result, {**reported, "confirmed": True})
            done.confirmed.append(str(path))
            return
    journal.record(ctx, "file-reported", {
        "file": str(path), "signature": data["signature"], "category": data["category"], "nick": data["nick"],
        "sha256": data["sha256"], "size": data["size"], "verdict": data["verdict"], "code": data["code"],
        "signatures": [{"fingerprint": f} for f in data["signers"]], "confirmed": False, "why": why, **reported})
    done.unconfirmed.append(str(path))


def ingest(ctx: Gkeys, *, create: bool = True) -> Ingested:
    """Take in every record of the spool (root only; see the module docstring); the spool is made when missing
    and ``create``.  Raises :class:`StateError` only when the spool cannot be read at all."""
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
            _confirm(ctx, item, done)
            spool.remove(where / item.name)
    return done


def ingest_quietly(ctx: Gkeys) -> None:
    """:func:`ingest` before a root command when the spool holds something (made when missing), never that
    command's reason to fail (one warning)."""
    try:
        if spool.pending(ctx.layout):
            ingest(ctx)
    except Exception as exc:  # noqa: BLE001 - the spool never blocks a command
        journal.warn(f"the journal spool was not taken in: {exc} (gkeys journal ingest)")
