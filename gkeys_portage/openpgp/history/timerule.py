"""The time rule: each signature is judged at its own creation time, one rule for every engine (issue 41 item 2;
design.md §11 "Time rule", RFC 9580 5.2.3.31).

For a signature made at time *t* by a signing (sub)key of a pinned key:

1. *t* is not before the primary key's nor the signing key's creation;
2. a **hard** revocation of the primary key or of the signing subkey (compromised, or no reason, or a reason this
   rule does not know) counts for all time: every signature is refused;
3. a **soft** revocation (reason 1 superseded, 3 retired / no longer used, 32 user id no longer valid) counts from
   its own date: a signature made before it stays good, one made at or after it is refused; a later
   self-signature never undoes it (gkeys' revocation rule, :mod:`~gkeys_portage.openpgp.revocations`);
4. the primary key and the signing subkey are alive at *t* under the binding valid then: the newest of their
   self-signatures (user id certifications and direct-key signatures; subkey bindings) made at or before *t*
   says when the key expires, and it must not have expired by *t*; expiry after *t* is fine;
5. no binding made at or before *t* at all: the key's history lacks it (the copy gkeys has was exported after a
   renewal by a source that keeps only the newest self-signature): refused, naming that cause and the fix.

Which revocations are real is not decided here: a part counts as revoked only when the engine or gkeys'
revocation rule says so (the listing's ``r``); the history gives it its date and reason, and without a readable
one it is hard.  So a forged revocation packet in the history never revokes anything, and a forged self-signature
can only make the rule more lenient than GnuPG's own view when Sequoia, which checks every self-signature it
uses, accepts the signature too (:func:`~gkeys_portage.openpgp.verdict.decide`).

What each engine decides (measured, GnuPG 2.2.40 / 2.4.7, pysequoia 0.1.35; ``docs/engines.md``): GnuPG judges by
the key's state *now* under its newest self-signature (``EXPKEYSIG`` for a key expired now, ``REVKEYSIG`` for any
revocation, soft or hard, whatever the signature's date); Sequoia judges at the signature's time under the binding
valid then (soft revocations from their date, hard ones always, a lapsed key's older signatures good), but a soft
revocation older than a newer self-signature is undone there, which rule 3 does not allow.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from gkeys_portage.core.errors import BadSignatureError, ExpiredKeyError, MissingHistoryError, RevokedKeyError
from gkeys_portage.openpgp.history.store import KeyHistory, PartHistory, Revocation

#: Reason codes whose revocation counts only from its own date (RFC 9580 5.2.3.31).
SOFT_REASONS = {1: "superseded", 3: "retired (no longer used)", 32: "user id no longer valid"}
HARD_REASONS = {0: "no reason given", 2: "compromised"}


def when(epoch: float | None) -> str:
    """A time as gkeys prints it."""
    return "an unknown time" if epoch is None else \
        datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _revocation(part: PartHistory) -> tuple[Revocation | None, bool]:
    """The revocation that counts for ``part`` (the hardest, then the earliest) and whether it is hard; a part the
    listing says is revoked without a readable revocation in its history is hard (None, True)."""
    if not part.revocations:
        return None, True
    hard = [r for r in part.revocations if r.reason not in SOFT_REASONS]
    if hard:
        return min(hard, key=lambda r: r.created), True
    return min(part.revocations, key=lambda r: r.created), False


def _reason(revocation: Revocation | None) -> str:
    if revocation is None:
        return "a revocation gkeys cannot date"
    reason = revocation.reason
    name = SOFT_REASONS.get(reason, HARD_REASONS.get(reason, f"reason {reason}")) if reason is not None \
        else "no reason given"
    return f"a revocation ({name}) of {when(revocation.created)}"


def _binding_at(part: PartHistory, created: int) -> tuple[int, int | None] | None:
    """(made, expires) of the newest binding of ``part`` made at or before ``created``."""
    valid = [b for b in part.bindings if b.created <= created]
    if not valid:
        return None
    newest = max(valid, key=lambda b: b.created)
    return newest.created, newest.expires


def judge(history: KeyHistory, signing: str, created: int, *, revoked: Mapping[str, bool], who: str,
          refresh: str) -> None:
    """Raise unless the signature made at ``created`` by ``signing`` (the primary or a subkey of ``history``'s
    key) passes the rule; ``revoked`` says, per fingerprint of the primary and the signing key, whether the engine
    or gkeys' revocation rule holds it revoked; ``who`` names the signer; ``refresh`` is the command that brings a
    key's missing history (printed as the next step)."""
    primary = history.primary
    sub = history.part(signing)
    if sub is None:
        raise MissingHistoryError(
            f"signature by {who}: the keyring's history of the key holds no signing key {signing}; not verified",
            next_step=refresh)
    parts = [primary] if sub is primary else [primary, sub]
    for part in parts:
        if created < part.created:
            raise BadSignatureError(f"signature by {who} dated {when(created)} predates its key {part.fingerprint} "
                                    f"(created {when(part.created)})")
    for part in parts:
        if not revoked.get(part.fingerprint, False):
            continue
        if part is not primary and not part.revocations and revoked.get(primary.fingerprint, False):
            continue  # revoked with its primary key (GnuPG lists every subkey of a revoked key revoked)
        revocation, hard = _revocation(part)
        if hard:
            raise RevokedKeyError(f"signature by {who}: key {part.fingerprint} is revoked by {_reason(revocation)}, "
                                  f"which counts for every signature it ever made; not verified")
        assert revocation is not None
        if created >= revocation.created:
            raise RevokedKeyError(f"signature by {who} made {when(created)}, after key {part.fingerprint} was "
                                  f"revoked by {_reason(revocation)} (a signature made before it stays good)")
    for part in parts:
        binding = _binding_at(part, created)
        if binding is None:
            oldest = min((b.created for b in part.bindings), default=None)
            raise MissingHistoryError(
                f"signature by {who} made {when(created)}: the keyring's copy of key {part.fingerprint} holds no "
                f"self-signature from before it (its oldest is of {when(oldest)}): the key was renewed, and the copy "
                f"gkeys was given carries only its newest binding (a developer's own export, WKD or a bundle); "
                f"a keyserver keeps every binding; not verified", next_step=refresh)
        made, expires = binding
        if expires is not None and expires <= created:
            raise ExpiredKeyError(f"signature by {who} made {when(created)}: key {part.fingerprint} had expired on "
                                  f"{when(expires)} under its self-signature of {when(made)}, before the signature "
                                  f"was made")
