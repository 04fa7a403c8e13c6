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
   makes the same way; which revocations count is decided here, never by the engine's key validity.  One
   exception fails closed: GnuPG 2.4.7 lists a designated revoker's revocation as "no key to check it" (``?``)
   even when the revoker's key is in the keyring (unless it happened to be read first), so such a revocation, by a
   revoker the key itself designates and the category pins, counts unchecked on it.

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
UNCHECKABLE = "?"  # --check-sigs: the engine found no key to check the signature with


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
        if sig.check == UNCHECKABLE and _issuer(sig, designated) is not None:
            return sig  # fail closed: GnuPG 2.4 cannot check a designated revoker's revocation (rule 4)
    return None


def apply_revocation_rule(keys: Sequence[PublicKey], check_sigs: Callable[[], list[PublicKey]]) -> list[PublicKey]:
    """``keys`` (a ``--list-sigs`` listing of one keyring) with every key and subkey that the rule revokes
    marked revoked (validity ``r``), in place.  ``check_sigs`` lists the keyring with its signatures checked
    (:meth:`~gkeys_portage.openpgp.keyio.KeyIO.check_sigs`); it is called once, only when some key carries a
    revocation its engine did not apply.  The whole keyring, not the keys concerned: GnuPG 2.4 cannot check a
    designated revoker's signature in a listing of named keys ("?"), and does in a listing of all."""
    pending = [key.fingerprint for key in keys
               if any(part.validity != REVOKED and _revocations(key, part) for part in key.all_keys())]
    if not pending:
        return list(keys)
    keyring = {key.fingerprint for key in keys}
    checked = {key.fingerprint: key for key in check_sigs() if key.fingerprint in pending}
    for key in keys:
        listed = checked.get(key.fingerprint)
        if listed is None:
            continue
        for part in key.all_keys():
            twin = listed.find(part.fingerprint)
            if part.validity != REVOKED and twin is not None and valid_revocation(listed, twin, keyring) is not None:
                part.validity = REVOKED
    return list(keys)
