"""Words for a signature refused because its signing *subkey* is revoked (the key itself is not).

GnuPG reports ``REVKEYSIG`` for every signature of a revoked subkey, whatever the reason and however
old the signature, and that verdict stands: gkeys never accepts such a signature.  A key rotation that
revokes the old subkey as "superseded" then fails every commit that subkey ever signed, so the
refusal says what happened and what to do: when the subkey was revoked and why (read from its
revocation signature, class 0x28, in gpg's ``--list-sigs`` colon listing: ``28x,01`` is reason 1,
superseded), and whether this signature was made before that.  The wording never decides anything.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import UTC, datetime

from gkeys_portage.openpgp.colons import SubKey
from gkeys_portage.verify.git.objects import printable

#: RFC 9580 reasons for revocation (the hex after the comma of ``28x,NN``).
REASONS = {"00": "no reason given", "01": "superseded", "02": "compromised", "03": "retired"}
#: Reasons that say the subkey was replaced or retired, not compromised: what it signed before is the owner's.
SOFT = frozenset({"01", "03"})


@dataclass(frozen=True)
class Revocation:
    """A subkey's revocation: when (epoch, None if unknown) and the reason code (two hex digits or "")."""

    created: int | None
    reason: str

    @property
    def soft(self) -> bool:
        """True if the reason says superseded or retired (a rotation), not compromised or unspecified."""
        return self.reason in SOFT

    def describe(self) -> str:
        """``on 2026-05-18 (superseded)``."""
        when = f"on {_day(self.created)} " if self.created is not None else ""
        what = REASONS.get(self.reason, f"reason {printable(self.reason, 8)}" if self.reason else "no reason given")
        return f"{when}({what})"


def subkey_revocation(subkey: SubKey) -> Revocation | None:
    """The newest revocation signature (class 0x28) of ``subkey`` in a ``--list-sigs`` listing, or None."""
    found: Revocation | None = None
    for sig in subkey.signatures:
        sig_class, _, reason = sig.sig_class.partition(",")
        if sig.kind != "rev" or sig_class.lower() not in ("28x", "28l"):
            continue
        if found is None or (sig.created or 0) >= (found.created or 0):
            found = Revocation(sig.created, reason.strip().lower())
    return found


def revoked_subkey_reason(signer: str, primary: str, subkey: str, signed: int | None,
                          revocation: Revocation | None, repo: str = "REPO") -> str:
    """The refusal of a signature by ``signer`` (category/nick) whose signing ``subkey`` is revoked.

    A rotation (superseded or retired) revoked after the signature was made: the history is the
    developer's own, and the next step is to start from the top commit of ``repo``.  Anything else (compromised,
    no reason, signed after the revocation, no revocation found): the signature must not be trusted,
    and the next step is to ask the developer.
    """
    head = f"signature by {signer} ({primary}): its signing subkey {subkey} was revoked"
    rule = "GnuPG refuses every signature of a revoked subkey, even one made before the revocation"
    if revocation is None:
        return f"{head} ({rule}): ask {signer} which commits this subkey signed"
    before = signed is not None and revocation.created is not None and signed < revocation.created
    if revocation.soft and before:
        return (f"{head} {revocation.describe()}, after this commit was signed ({_day(signed)}), as a key rotation "
                f"does; {rule}: once checked, accept it by name (gkeys verify-tree {shlex.quote(repo)} "
                "--accept COMMIT --reason TEXT, journaled)")
    when = (f"after the revocation ({_day(signed)})" if signed is not None and not before
            else f"before the revocation ({_day(signed)})")
    return (f"{head} {revocation.describe()} and this commit was signed {when}; {rule}: "
            f"do not trust it, and ask {signer} whether they made it")


def _day(epoch: int | None) -> str:
    return "unknown date" if epoch is None else datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d")
