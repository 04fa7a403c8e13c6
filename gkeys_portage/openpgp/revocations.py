"""gkeys' revocation rule, the same on every engine (design.md §10).

A key or signing subkey that carries any valid revocation is revoked, whatever later self-signatures say:

1. a **key revocation** (class 0x20) made by the key itself, or by a designated revoker (a ``Revocation Key``
   the key's self-signature names, listed as ``rvk``) whose own key is in the same keyring (the keyring of a
   category holds only the keys its seeds pin), revokes the key;
2. a **subkey revocation** (class 0x28) made by the key (or by such a revoker) revokes that subkey;
3. every reason counts, "superseded" and "no longer used" as much as "compromised" (no reason, too): Sequoia
   (gpg-sq) undoes a soft revocation older than the key's newest self-signature, GnuPG does not, and a verdict
   must not depend on the engine;
4. "valid" is the engine's cryptographic check of that signature (``--check-sigs``: ``!``), which every engine
   makes the same way (in a scratch home holding the revokers' keys first: GnuPG 2.4.7 checks a designated
   revoker's signature only then); which revocations count is decided here, never by the engine's key validity.
   A revocation the engine cannot check does not count (a forged one, which anyone can add to a key on a
   keyserver, must not revoke a key).

An engine that says "revoked" is believed too (fail closed): the rule only adds revocations.  The listing
without checks (``--list-sigs``) names the candidates, so the checks run only for a key carrying a revocation its
engine did not apply.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence

from gkeys_portage.core.types import Fingerprint
from gkeys_portage.openpgp.colons import PublicKey, Signature, SubKey

KEY_REVOCATION = "20"
SUBKEY_REVOCATION = "28"
REVOKED = "r"


def _revocations(key: PublicKey, part: SubKey) -> list[Signature]:
    """The revocation records of ``part`` of ``key`` (a key revocation may be listed under a user id too)."""
    if part is key.primary:
        records = [*part.signatures, *(sig for uid in key.uids for sig in uid.signatures)]
        wanted = KEY_REVOCATION
    else:
        records, wanted = part.signatures, SUBKEY_REVOCATION
    return [sig for sig in records if sig.kind == "rev" and sig.sig_class[:2] == wanted]


def _issuer(sig: Signature, candidates: Iterable[Fingerprint]) -> Fingerprint | None:
    """Which of ``candidates`` issued ``sig`` (by its issuer fingerprint, else its key id), if any."""
    for fingerprint in candidates:
        if sig.issuer_fingerprint == fingerprint or (
                not sig.issuer_fingerprint and len(sig.key_id) == 16 and fingerprint.endswith(sig.key_id.upper())):
            return fingerprint
    return None


def valid_revocation(key: PublicKey, part: SubKey, keyring: Collection[Fingerprint]) -> Signature | None:
    """The first revocation of ``part`` (``key``'s primary or one of its subkeys) that counts under the rule,
    from a ``--check-sigs`` listing of ``key``; ``keyring`` holds the primary fingerprints of the same keyring
    (where a designated revoker's key must be)."""
    designated = [fpr for fpr in key.revokers if fpr in keyring]
    for sig in _revocations(key, part):
        if sig.good and _issuer(sig, [key.fingerprint, *designated]) is not None:
            return sig
    return None


#: ``check(revokers, key)``: ``key`` listed with its signatures checked, by an engine that read the keys of
#: ``revokers`` first (None if it cannot list it).
Check = Callable[[Sequence[Fingerprint], Fingerprint], "PublicKey | None"]


def apply_revocation_rule(keys: Sequence[PublicKey], check: Check) -> list[PublicKey]:
    """``keys`` (a ``--list-sigs`` listing of one keyring) with every key and subkey that the rule revokes
    marked revoked (validity ``r``), in place.  ``check`` (:meth:`~gkeys_portage.keys.keyring.Keyring`) lists
    one key with its signatures checked; it is called only for a key carrying a revocation its engine did not
    apply, with the designated revokers of that key that the keyring holds: GnuPG 2.4.7 checks a designated
    revoker's signature only when it read the revoker's key first (else "?", no key to check it)."""
    keyring = {key.fingerprint for key in keys}
    for key in keys:
        if not any(part.validity != REVOKED and _revocations(key, part) for part in key.all_keys()):
            continue
        listed = check([fpr for fpr in key.revokers if fpr in keyring], key.fingerprint)
        if listed is None:
            continue
        for part in key.all_keys():
            twin = listed.find(part.fingerprint)
            if part.validity != REVOKED and twin is not None and valid_revocation(listed, twin, keyring) is not None:
                part.validity = REVOKED
    return list(keys)
