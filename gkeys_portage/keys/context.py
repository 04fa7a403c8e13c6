"""The context every action works in: config, state layout, seeds, keyrings, HTTP, lock."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from gkeys_portage.core import journal
from gkeys_portage.core.config import Config, KeyRef
from gkeys_portage.core.errors import GkeysError, SignerNotPinnedError, UnknownSignerError, UsageError
from gkeys_portage.core.http import HttpClient
from gkeys_portage.core.state import Layout, StateLock
from gkeys_portage.core.types import Category, Nick, parse_category
from gkeys_portage.keys.keyring import Keyring
from gkeys_portage.keys.purposes import Purpose, PurposeScope, check_purpose_seeds, purpose_pins
from gkeys_portage.keys.seeds import SeedStore
from gkeys_portage.openpgp.process import DataSource, use_program
from gkeys_portage.openpgp.sequoia import use_second_opinion
from gkeys_portage.openpgp.signatures import is_cleartext
from gkeys_portage.openpgp.status import SigOutcome, StatusReport
from gkeys_portage.openpgp.verdict import PinSet, SignedData, VerifyPolicy, VerifyResult, decide


@dataclass
class SignatureVerifier:
    """Verify signatures against one keyring, accepting only pinned signers (of one purpose, if ``scope``
    says which: a signature by a pinned key it left out is refused naming both purposes)."""

    keyring: Keyring
    pins: PinSet
    policy: VerifyPolicy = field(default_factory=VerifyPolicy)
    faked_time: datetime | None = None
    scope: PurposeScope | None = None

    def detached(self, signature: bytes, data: DataSource) -> VerifyResult:
        """Verify a detached signature over ``data`` (bytes, path or binary stream); binary signatures only
        (class 0x00: a text-mode signature would verify ``data`` with other line endings too)."""
        report = self.keyring.gpg(self.faked_time).verify_detached(signature, data)
        return self._decide(report, SignedData.BINARY)

    def clearsigned(self, message: bytes) -> VerifyResult:
        """Verify a clearsigned (or inline-signed) message; the result carries the signed text.

        A cleartext block needs a cleartext signature (class 0x01), a signed message 0x00 or 0x01
        (:class:`SignedData`)."""
        report, plaintext = self.keyring.gpg(self.faked_time).verify_clearsigned(message)
        result = self._decide(report, SignedData.CLEARTEXT if is_cleartext(message) else SignedData.MESSAGE)
        result.plaintext = plaintext
        return result

    def _decide(self, report: StatusReport, signed: SignedData) -> VerifyResult:
        """:func:`decide`, with an unknown signer worded as missing trust and the command that adds it."""
        installed = self.keyring.installed()
        try:
            return decide(report, self.pins, installed, self.policy, signed)
        except SignerNotPinnedError as exc:
            wrong = self.scope.refusal_for(report) if self.scope is not None else None
            if wrong is None:
                raise
            raise wrong from exc
        except UnknownSignerError as exc:
            cat = self.keyring.category
            pinned = [f"{pin.category}/{pin.nick}" for pin in
                      (self.pins.get(sig.signing_fingerprint) for sig in report.signatures
                       if sig.outcome is SigOutcome.NO_PUBKEY) if pin is not None]
            if not installed:
                why = (f"; the {cat} keyring holds no keys at all (missing trust, not a bad signature): "
                       f"install the pinned keys with: gkeys install-key -C {cat}")
            elif pinned:
                why = f"; it is pinned ({', '.join(pinned)}) but not installed: gkeys install-key -C {cat}"
            else:
                raise
            raise UnknownSignerError(exc.message + why, detail=exc.detail) from exc


class Gkeys:
    """Config plus everything derived from it.  Cheap to build; nothing touches disk until used."""

    def __init__(self, config: Config, *, adding: KeyRef | None = None) -> None:
        """``adding``: the seed this run adds (``add-seed``), which a ``[purposes]`` line may name already."""
        self.config = config
        use_program(config.gpg_program)  # [gpg] program: the engine every GnuPG object of this run uses
        use_second_opinion(config.second_opinion)  # [gpg] second-opinion: Sequoia confirms GnuPG's verdicts
        self.layout = Layout(config.gkeysdir)
        self.seeds = SeedStore(self.layout)
        self.lock = StateLock(self.layout)
        self._keyrings: dict[Category, Keyring] = {}
        self._http: HttpClient | None = None
        #: told when a download waits (the console's :meth:`~gkeys_portage.ui.output.Console.waiting`)
        self.waiting: Callable[[str], None] | None = None
        check_purpose_seeds(config, self._nicks, adding)  # a config error for every action: a malformed
        # [purposes] line, or one naming no seed of a category whose seeds are there (but the seed being added)

    def _nicks(self, category: Category) -> set[Nick]:
        """The nicks of ``category``'s seeds; none when they cannot be read (that is said where they are used)."""
        try:
            return set(self.seeds.load(category))
        except GkeysError:
            return set()

    @property
    def http(self) -> HttpClient:
        """The shared HTTP client (timeouts and retries from ``[sources]``)."""
        if self._http is None:
            src = self.config.sources
            self._http = HttpClient(timeout=src.timeout, retries=src.retries, backoff=src.backoff,
                                    waiting=self.waiting)
        return self._http

    def ensure_layout(self) -> Layout:
        """Create and check the state directories (and journal a change of the trust-relevant config)."""
        layout = self.layout.ensure()
        journal.note_config(self)
        return layout

    def keyring(self, category: str) -> Keyring:
        """The keyring of ``category`` (one object per category, so its key listing is cached)."""
        cat = parse_category(category)
        if cat not in self._keyrings:
            self._keyrings[cat] = Keyring(self.layout, cat, timeout=self.config.policy.gpg_timeout)
        return self._keyrings[cat]

    def policy(self, now: float | None = None) -> VerifyPolicy:
        """The verification policy from ``[policy]``."""
        return VerifyPolicy(clock_skew=self.config.policy.clock_skew,
                            require_currently_valid=self.config.policy.require_currently_valid, now=now,
                            weak_hashes=self.config.policy.weak_hashes)

    def verifier(self, category: str, nicks: Iterable[str] = (), *, pins: PinSet | None = None,
                 policy: VerifyPolicy | None = None, purpose: Purpose | None = None) -> SignatureVerifier:
        """A verifier for ``category``'s keyring pinned to its seeds (or only ``nicks`` of them); with
        ``purpose``, only to the seeds of that purpose (:func:`~gkeys_portage.keys.purposes.purpose_pins`)."""
        self.ensure_layout()
        cat = parse_category(category)
        if pins is None:
            pins = self.seeds.pins(cat, nicks)
            if not len(pins):
                self.require_category(cat)
        scope = None
        if purpose is not None:
            pins, scope = purpose_pins(self.config, pins, purpose)
        return SignatureVerifier(self.keyring(cat), pins, policy or self.policy(), scope=scope)

    def require_category(self, category: str) -> Category:
        """``category`` if it is known (seeds or a keyring installed or packaged, or configured in
        ``[seedurls]``, ``[verify-seeds]``, ``[authority-seeds]`` or ``[keyrings]``); otherwise a
        :class:`UsageError` listing the installed ones (a typo is not a category to fetch from the network)."""
        cat = parse_category(category)
        known = (set(self.seeds.categories()) | set(self.config.seedurls) | set(self.config.verify_seeds)
                 | set(self.config.authority.sources) | set(self.config.keyrings))
        if cat in known or self.keyring(cat).exists():
            return cat
        installed = ", ".join(sorted(self.seeds.categories())) or "none"
        raise UsageError(f"unknown category {cat!r}: the installed categories are {installed} (gkeys list-cats)")
