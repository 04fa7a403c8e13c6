"""Exception classes, one per failure kind.

Every error carries the exit status the command line uses (design.md §5):
1 not verified / a check failed, 2 usage or bad input, 3 network failure; and a stable ``reason`` code, the
``reason`` of ``--json`` output.  docs/exit-codes.md is the table (cause -> exit status -> reason).
The CLI catches :class:`GkeysError` once, prints its message as one line and
exits with :attr:`GkeysError.exit_code`.
"""

from __future__ import annotations

from typing import Self

EXIT_OK = 0
EXIT_NOT_VERIFIED = 1
EXIT_BAD_INPUT = 2
EXIT_NETWORK = 3


class GkeysError(Exception):
    """Base class of every error the package raises on purpose."""

    reason = "error"
    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, detail: str = "", next_step: str = "", file: str | None = None,
                 signer: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.next_step = next_step  # the command that fixes it, when the raiser knows one
        self.file = file  # what was being verified, when the raiser knows it
        self.signer = signer  # category/nick of the pinned key concerned, when known

    def __str__(self) -> str:
        return self.message

    def reworded(self, message: str) -> Self:
        """The same error (class, exit status, reason, detail, next step, every field a subclass adds) with
        ``message`` in place of its own: for a caller that names what the error is about."""
        clone = type(self).__new__(type(self))
        clone.__dict__.update(self.__dict__)
        Exception.__init__(clone, message)
        clone.message = message
        return clone


class UsageError(GkeysError):
    """The command line or config asks for something impossible."""

    reason = "usage"


class BadInputError(GkeysError):
    """A file or document could not be parsed or is not acceptable."""

    reason = "bad-input"


class UnknownKeyError(BadInputError):
    """A fingerprint asked about that no keyring, seed or journal entry ever named (``audit --key``)."""

    reason = "unknown-key"


class ConfigError(BadInputError):
    """The configuration file is malformed or incomplete."""

    reason = "config"


class SeedFormatError(BadInputError):
    """A seed file is malformed or in an unsupported format."""

    reason = "seed-format"


class StateError(GkeysError):
    """The state directory is unusable (locked, unsafe permissions, missing)."""

    reason = "state"


class GpgError(GkeysError):
    """GnuPG could not be run or failed in an unexpected way."""

    reason = "gpg"
    exit_code = EXIT_NOT_VERIFIED


class EngineError(GpgError):
    """The OpenPGP engine (``[gpg] program``) lacks what a job needs (:mod:`gkeys_portage.openpgp.engine`);
    ``capability`` names what is missing."""

    def __init__(self, message: str, *, capability: str, detail: str = "", next_step: str = "",
                 file: str | None = None, signer: str | None = None) -> None:
        super().__init__(message, detail=detail, next_step=next_step, file=file, signer=signer)
        self.capability = capability


class NetworkError(GkeysError):
    """A download failed after all retries."""

    reason = "network"
    exit_code = EXIT_NETWORK


class NotVerifiedError(GkeysError):
    """Base class: something could not be verified (exit 1)."""

    reason = "not-verified"
    exit_code = EXIT_NOT_VERIFIED


class NoSignatureError(NotVerifiedError):
    """No OpenPGP signature was found where one was required."""

    reason = "no-signature"


class TruncatedSignatureError(NoSignatureError):
    """A signature (or a signed message) is cut short: its armor has no END line."""

    reason = "truncated"


class BadSignatureError(NotVerifiedError):
    """A signature does not match the data (tampered data or signature)."""

    reason = "bad-signature"


class UnknownSignerError(NotVerifiedError):
    """The signing key is not in the keyring used for verification."""

    reason = "unknown-signer"


class SignerNotPinnedError(NotVerifiedError):
    """The signature is good but its key is not one the seeds pin for this purpose."""

    reason = "signer-not-pinned"


class RevokedKeyError(NotVerifiedError):
    """The signing key (or subkey) is revoked."""

    reason = "key-revoked"


class OutsideWindowError(NotVerifiedError):
    """A pinned key's signature is dated outside every window its seed authorizes it for."""

    reason = "signer-not-authorized"


class SignerRetiredError(OutsideWindowError):
    """A pinned key's signature is dated after its authorization closed (a retirement), or inside a window
    that has closed while nothing shows the signature was made before (a backdated signature?)."""

    reason = "signer-retired"


class ExpiredKeyError(NotVerifiedError):
    """The signing key had expired when the signature was made (or policy wants a valid key now)."""

    reason = "key-expired"


class MissingHistoryError(NotVerifiedError):
    """The keyring's copy of a key holds no binding from before a signature: the key's history is missing (a copy
    exported after a renewal by a source that keeps only the newest self-signature)."""

    reason = "key-history-missing"


class FutureSignatureError(NotVerifiedError):
    """The signature claims a creation time in the future beyond the allowed clock skew."""

    reason = "future-signature"


class UntrustedRepositoryError(NotVerifiedError):
    """A git repository is owned by a user git must not act for (its configuration runs commands)."""

    reason = "untrusted-repository"


class RollbackError(NotVerifiedError):
    """A validly signed document is older than the one already installed."""

    reason = "rollback"


class StaleError(NotVerifiedError):
    """A validly signed document is older than the configured maximum age (freeze attack)."""

    reason = "stale"


class SeedCategoryError(NotVerifiedError):
    """A validly signed seed file was signed for another category than the one it is fetched for."""

    reason = "seed-category"


class UnboundSeedError(NotVerifiedError):
    """A validly signed seed file's signature names no category, and config does not allow that."""

    reason = "unbound-seed"


class KeyMismatchError(NotVerifiedError):
    """A key source returned keys, none of which matched the pinned fingerprint."""

    reason = "key-mismatch"


class UnsignedDataError(NotVerifiedError):
    """Input holds bytes outside its signed part (an inline signature covers only some of a file)."""

    reason = "unsigned-data"


class WeakHashError(BadSignatureError):
    """A pinned key's signature is made over a weak digest (MD5, SHA-1, RIPEMD-160)."""

    reason = "weak-hash"


class SignatureClassError(BadSignatureError):
    """A pinned key's signature has the wrong signature class for what it covers (a text-mode signature
    over binary data, whose CRLF variant verifies too, or a binary signature framed as cleartext)."""

    reason = "signature-class"


class EnginesDisagreeError(NotVerifiedError):
    """GnuPG, the verifier of record, accepted a signature that Sequoia, the second opinion, refused or
    credited to another signer (or no second opinion was taken): two implementations disagree."""

    reason = "engines-disagree"


class TreeMismatchError(NotVerifiedError):
    """A file of a signed Manifest tree does not match its Manifest entry (changed, missing or stray)."""

    reason = "tree-mismatch"
