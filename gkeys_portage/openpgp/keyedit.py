"""Making and changing keys: generation, subkeys, certifications and their revocation, expiry, deletion."""

from __future__ import annotations

from collections.abc import Sequence

from gkeys_portage.core.errors import GpgError
from gkeys_portage.core.types import Fingerprint, parse_fingerprint
from gkeys_portage.openpgp.engine import Capability, probe
from gkeys_portage.openpgp.process import (
    GpgProcess,
    GpgResult,
)


class KeyEditing(GpgProcess):
    """Create and change keys in one GnuPG home (gkeys-gen, the demo and the tests' worlds).

    Every job gives the passphrase through loopback pinentry: an engine that cannot use an unprotected key
    that way (gpg-sq) is refused before anything is made (:mod:`gkeys_portage.openpgp.engine`).
    """

    def _loopback(self, what: str) -> list[str]:
        probe(self.program).require(Capability.LOOPBACK, what)
        return ["--pinentry-mode", "loopback", "--passphrase-fd", "0"]

    def generate_key(self, uid: str, *, algorithm: str = "ed25519", usage: str = "cert",
                     expire: str = "1y", passphrase: str = "", preferences: Sequence[str] = (),
                     cert_digest: str | None = None) -> Fingerprint:
        """Create a primary key non-interactively (``--quick-generate-key``).

        ``preferences`` (e.g. ``["SHA512", "AES256", "ZLIB"]``) become the key's algorithm preferences
        (``--default-preference-list``); ``cert_digest`` is the self-signature hash (``--cert-digest-algo``).
        """
        args = [*_key_options(preferences, cert_digest), *self._loopback("generate keys"),
                "--quick-generate-key", uid, algorithm, usage, expire]
        result = self._checked(args, passphrase=passphrase, what="generating a key")
        return _created_fingerprint(result, "generating a key")

    def add_subkey(self, primary: Fingerprint, *, algorithm: str = "ed25519", usage: str = "sign",
                   expire: str = "1y", passphrase: str = "", cert_digest: str | None = None) -> Fingerprint:
        """Add a subkey to ``primary``; return the subkey fingerprint.

        ``cert_digest`` is the hash of the binding signature (``--cert-digest-algo``).
        """
        args = [*_key_options((), cert_digest), *self._loopback("add subkeys"),
                "--quick-add-key", primary, algorithm, usage, expire]
        result = self._checked(args, passphrase=passphrase, what="adding a subkey")
        return _created_fingerprint(result, "adding a subkey")

    def certify(self, subject: Fingerprint, certifier: Fingerprint, uids: Sequence[str] = (), *,
                expire: str = "0", passphrase: str = "") -> None:
        """Certify ``uids`` (all when empty) of ``subject`` with ``certifier`` (exportable; ``expire``
        like ``1y``, ``0`` = never), as an authority does (``--quick-sign-key``)."""
        args = [*self._loopback("certify keys"), "--local-user", certifier,
                "--default-cert-expire", expire, "--quick-sign-key", subject, *uids]
        self._checked(args, passphrase=passphrase, what="certifying a key")

    def revoke_certification(self, subject: Fingerprint, certifier: Fingerprint, uids: Sequence[str] = (), *,
                             passphrase: str = "") -> None:
        """Revoke ``certifier``'s certification of ``uids`` of ``subject`` (``--quick-revoke-sig``)."""
        args = [*self._loopback("revoke certifications"), "--quick-revoke-sig", subject, certifier,
                *uids]
        self._checked(args, passphrase=passphrase, what="revoking a certification")

    def add_uid(self, fingerprint: Fingerprint, uid: str, *, passphrase: str = "") -> None:
        """Add the user id ``uid`` to the own key ``fingerprint`` (``--quick-add-uid``)."""
        args = ["--pinentry-mode", "loopback", "--passphrase-fd", "0", "--quick-add-uid", fingerprint, uid]
        self._checked(args, passphrase=passphrase, what="adding a user id")

    def revoke_uid(self, fingerprint: Fingerprint, uid: str, *, passphrase: str = "") -> None:
        """Revoke the user id ``uid`` of the own key ``fingerprint`` (``--quick-revoke-uid``)."""
        args = ["--pinentry-mode", "loopback", "--passphrase-fd", "0", "--quick-revoke-uid", fingerprint, uid]
        self._checked(args, passphrase=passphrase, what="revoking a user id")

    def set_expiry(self, fingerprint: Fingerprint, expire: str, *, subkeys: bool = False,
                   passphrase: str = "") -> None:
        """Set the expiry of the primary key (or of all its subkeys) relative to the current time."""
        args = [*self._loopback("change expiry dates"), "--quick-set-expire", fingerprint, expire]
        if subkeys:
            args.append("*")
        self._checked(args, passphrase=passphrase, what="setting the expiry")

    def delete_secret_and_public(self, fingerprint: Fingerprint) -> None:
        """Delete a key and its secret parts from this home (used to undo a half-generated key)."""
        self._checked(["--batch", "--yes", "--delete-secret-and-public-key", fingerprint], what="deleting a key")

    def revocation_certificate(self, fingerprint: Fingerprint) -> bytes:
        """The revocation certificate GnuPG wrote when it generated ``fingerprint``, ready to import."""
        path = self.homedir / "openpgp-revocs.d" / f"{fingerprint}.rev"
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise GpgError(f"no revocation certificate for {fingerprint}: {exc}") from exc
        return text.replace(b"\n:-----BEGIN PGP PUBLIC KEY BLOCK-----", b"\n-----BEGIN PGP PUBLIC KEY BLOCK-----")


def _key_options(preferences: Sequence[str], cert_digest: str | None) -> list[str]:
    options: list[str] = []
    if preferences:
        options += ["--default-preference-list", " ".join(preferences)]
    if cert_digest:
        options += ["--cert-digest-algo", cert_digest]
    return options



def _created_fingerprint(result: GpgResult, what: str) -> Fingerprint:
    for line in result.status.lines:
        keyword, _, value = line.partition(" ")
        if keyword == "KEY_CREATED":
            return parse_fingerprint(value.split(" ")[-1])
    raise GpgError(f"{what}: gpg reported no new key", detail=result.stderr)


