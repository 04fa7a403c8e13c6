"""One commit at a time: its verdict, and the verifier that decides commits against one keyring and its pins.

:class:`CommitVerifier` writes the signed commits' signatures and payloads out for one ``gpg --verify
--multifile`` run, then applies the pinning and time rules of :func:`gkeys_portage.openpgp.verdict.decide` to
each commit's own status lines (:mod:`gkeys_portage.verify.git.tree` drives it over a range).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gkeys_portage.core.errors import (
    BadInputError,
    BadSignatureError,
    ExpiredKeyError,
    FutureSignatureError,
    GpgError,
    NoSignatureError,
    NotVerifiedError,
    OutsideWindowError,
    RevokedKeyError,
    SignerNotPinnedError,
    SignerRetiredError,
    StaleError,
    UnknownSignerError,
)
from gkeys_portage.core.types import Fingerprint
from gkeys_portage.core.windows import Window
from gkeys_portage.keys.keyring import Keyring
from gkeys_portage.keys.purposes import PurposeScope, WrongPurposeError
from gkeys_portage.openpgp.colons import PublicKey
from gkeys_portage.openpgp.multifile import PreparedSignatures
from gkeys_portage.openpgp.status import StatusReport
from gkeys_portage.openpgp.verdict import PinSet, SignedData, VerifyPolicy, VerifyResult, decide
from gkeys_portage.verify.git.objects import Commit, printable
from gkeys_portage.verify.git.revocation import Revocation, revoked_subkey_reason, subkey_revocation

ARMOR_BEGIN = b"-----BEGIN PGP SIGNATURE-----"

#: Machine codes of the reasons a commit is refused (stable, for --json).
REASON_CODES: dict[type[NotVerifiedError], str] = {
    NoSignatureError: "no-signature",
    BadSignatureError: "bad-signature",
    UnknownSignerError: "unknown-signer",
    WrongPurposeError: "wrong-purpose",
    SignerNotPinnedError: "signer-not-pinned",
    SignerRetiredError: "signer-retired",
    OutsideWindowError: "signer-not-authorized",
    RevokedKeyError: "revoked-key",
    ExpiredKeyError: "expired-key",
    FutureSignatureError: "future-signature",
    StaleError: "stale",
}


@dataclass
class CommitVerdict:
    """The verdict on one commit."""

    commit: str
    author: str
    summary: str
    reason: str = ""  # empty when good
    code: str = ""
    signer: str = ""  # category/nick
    fingerprint: str = ""
    signed: int = 0  # signature time (epoch) of a good commit
    verified: bool = False  # set only once the signature passed every rule (fail-closed by default)
    #: a good signature dated inside an authorization window that has closed since: when it closed (0: open),
    #: and the window; the tree verifier wants evidence the commit existed before (:mod:`.evidence`)
    closed_since: int = 0
    window: Window | None = None

    @property
    def good(self) -> bool:
        """True if the commit carries a good signature by a pinned key (and nothing refused it since)."""
        return self.verified and not self.reason and not self.code

    def to_json(self) -> dict[str, object]:
        """Machine-readable form."""
        data: dict[str, object] = {"commit": self.commit, "author": self.author, "good": self.good}
        if self.good:
            data.update(signer=self.signer, fingerprint=self.fingerprint)
        else:
            data.update(reason=self.reason, code=self.code)
        return data




@dataclass
class PreparedCommits:
    """Commits whose signatures wait, written out, for one gpg run (:meth:`CommitVerifier.prepare`)."""

    commits: list[Commit]
    signed: list[Commit]
    signatures: PreparedSignatures | None


#: what writing to a full (or over-quota) scratch file system raises
SCRATCH_FULL = (errno.ENOSPC, errno.EDQUOT)


class CommitVerifier:
    """Decides commits against one category's keyring and pins (key listing read once)."""

    def __init__(self, keyring: Keyring, pins: PinSet, policy: VerifyPolicy, jobs: int = 0,
                 scope: PurposeScope | None = None) -> None:
        self.keyring = keyring
        self.pins = pins
        self.scope = scope  # the pins a purpose left out (keys.purposes), to name them when they sign
        self.policy = policy
        self.jobs = jobs or max(1, min(4, os.cpu_count() or 1))
        self.full_scratch: set[str] = set()  # scratch directories found full: not tried again
        self._signatures: dict[Fingerprint, PublicKey | None] = {}  # --list-sigs listings, revoked subkeys only
        self.location = "REPO"  # the repository being verified, for the commands messages name

    @property
    def keys(self) -> Mapping[Fingerprint, PublicKey]:
        """The keyring listing (cached by the :class:`Keyring`)."""
        return self.keyring.installed()

    def statuses(self, commits: Sequence[Commit], scratch: str | None = None) -> dict[str, StatusReport | None]:
        """gpg's status for each commit, in one gpg run (None: no OpenPGP signature at all): the
        signatures and payloads go to gpg from memory, under ``scratch`` (:meth:`prepare`, :meth:`finish`)."""
        return self.finish(self.prepare(commits, scratch))

    def prepare(self, commits: Sequence[Commit], scratch: str | None = None) -> PreparedCommits:
        """Write the signed commits' signatures and payloads for one later gpg run (:meth:`finish`), so
        the caller can write the next commits while gpg checks these.

        ``scratch`` (``/dev/shm``) is world-writable: any local user can fill it.  When it is full (or over
        quota) the round is written again under the default temporary directory (``$TMPDIR``), and so
        is every later round of this verifier: a full ``/dev/shm`` never stops a verification.
        """
        signed = [c for c in commits if c.signature is not None and c.signature.lstrip().startswith(ARMOR_BEGIN)]
        if not signed:
            return PreparedCommits(list(commits), signed, None)
        items = [(c.signature or b"", c.payload) for c in signed]
        gpg = self.keyring.gpg()
        if scratch in self.full_scratch:
            scratch = None
        try:
            prepared = gpg.prepare_detached_many(items, scratch=scratch)
        except OSError as exc:
            if scratch is None or exc.errno not in SCRATCH_FULL:
                raise
            self.full_scratch.add(scratch)
            prepared = gpg.prepare_detached_many(items, scratch=None)  # the same round under $TMPDIR
        return PreparedCommits(list(commits), signed, prepared)

    def finish(self, prepared: PreparedCommits) -> dict[str, StatusReport | None]:
        """gpg's status for each commit of :meth:`prepare` (one gpg run; None: no OpenPGP signature)."""
        result: dict[str, StatusReport | None] = {c.hash: None for c in prepared.commits}
        if prepared.signatures is not None:
            reports = self.keyring.gpg().verify_prepared(prepared.signatures)
            result.update((commit.hash, report) for commit, report in zip(prepared.signed, reports, strict=True))
        return result

    def judge(self, commit: Commit, report: StatusReport | None) -> CommitVerdict:
        """Apply the pinning and time rules to one commit."""
        # author and summary are the committer's words: escaped before they reach a terminal line
        verdict = CommitVerdict(commit.hash, printable(commit.author, 200), printable(commit.summary, 200))
        try:
            if report is None:
                what = "no gpgsig header" if commit.signature is None else "gpgsig is not an OpenPGP signature"
                raise NoSignatureError(f"unsigned commit ({what})")
            # git signs commits in binary mode; a text-mode signature is refused (stricter than git verify-commit)
            result = self._decide(report)
        except NotVerifiedError as exc:
            subkey = self._revoked_subkey(report) if isinstance(exc, RevokedKeyError) and report else None
            # never empty: an empty reason is no pass
            verdict.reason = subkey or exc.message or type(exc).__name__
            verdict.code = _reason_code(exc)
        except BadInputError as exc:
            verdict.reason, verdict.code = exc.message or type(exc).__name__, "bad-signature"
        else:
            verdict.verified = True
            verdict.signer = f"{result.signer.pin.category}/{result.signer.pin.nick}"
            verdict.fingerprint = result.signer.pin.fingerprint
            verdict.signed = result.signer.created
            verdict.closed_since = result.signer.closed_since or 0
            verdict.window = result.signer.window
        return verdict

    def _decide(self, report: StatusReport) -> VerifyResult:
        """:func:`decide` on binary data (git signs commits in binary mode); a signature by a pinned key
        of another purpose (a release or snapshot key signing a commit) is refused naming both."""
        try:
            return decide(report, self.pins, self.keys, self.policy, SignedData.BINARY)
        except SignerNotPinnedError as exc:
            wrong = self.scope.refusal_for(report) if self.scope is not None else None
            if wrong is None:
                raise
            raise wrong from exc

    def _revoked_subkey(self, report: StatusReport) -> str | None:
        """The refusal of a pinned signature whose signing *subkey* is revoked while the key is not (e.g. a
        rotation that revoked the old subkey as superseded), or None.  GnuPG reports REVKEYSIG for every
        signature of a revoked subkey, however old; that verdict stands (fail closed), only the words and
        the next step depend on when and why the subkey was revoked (:mod:`.revocation`)."""
        for sig in report.signatures:
            pin = self.pins.get(sig.primary_fingerprint)
            key = self.keys.get(pin.fingerprint) if pin else None
            sub = key.find(sig.signing_fingerprint) if key and sig.signing_fingerprint else None
            if pin and key and sub and sub is not key.primary and sub.revoked and not key.primary.revoked:
                return revoked_subkey_reason(f"{pin.category}/{pin.nick}", pin.fingerprint, sub.fingerprint,
                                             sig.created, self._revocation(pin.fingerprint, sub.fingerprint),
                                             self.location)
        return None

    def _revocation(self, primary: Fingerprint, subkey: Fingerprint) -> Revocation | None:
        """The subkey's revocation, from a ``--list-sigs`` listing of its key (read once per key, and
        only on this refusal path); None if it cannot be read."""
        if primary not in self._signatures:
            try:
                listed = self.keyring.gpg().list_keys([primary], sigs=True)
            except GpgError:
                listed = []
            self._signatures[primary] = next((k for k in listed if k.fingerprint == primary), None)
        key = self._signatures[primary]
        sub = key.find(subkey) if key else None
        return subkey_revocation(sub) if sub else None


def _reason_code(exc: NotVerifiedError) -> str:
    for cls in type(exc).__mro__:
        if cls in REASON_CODES:
            return REASON_CODES[cls]
    return "not-verified"


