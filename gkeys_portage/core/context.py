"""The context every action works in: config, state layout, seeds, keyrings, HTTP, lock."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from gkeys_portage.core.config import Config
from gkeys_portage.core.gpg import DataSource
from gkeys_portage.core.http import HttpClient
from gkeys_portage.core.keyring import Keyring
from gkeys_portage.core.seeds import SeedStore
from gkeys_portage.core.state import Layout, StateLock
from gkeys_portage.core.types import Category, parse_category
from gkeys_portage.core.verification import PinSet, VerifyPolicy, VerifyResult, decide


@dataclass
class SignatureVerifier:
    """Verify signatures against one keyring, accepting only pinned signers."""

    keyring: Keyring
    pins: PinSet
    policy: VerifyPolicy = field(default_factory=VerifyPolicy)
    faked_time: datetime | None = None

    def detached(self, signature: bytes, data: DataSource) -> VerifyResult:
        """Verify a detached signature over ``data`` (bytes, path or binary stream)."""
        report = self.keyring.gpg(self.faked_time).verify_detached(signature, data)
        return decide(report, self.pins, self.keyring.installed(), self.policy)

    def clearsigned(self, message: bytes) -> VerifyResult:
        """Verify a clearsigned (or inline-signed) message; the result carries the signed text."""
        report, plaintext = self.keyring.gpg(self.faked_time).verify_clearsigned(message)
        result = decide(report, self.pins, self.keyring.installed(), self.policy)
        result.plaintext = plaintext
        return result


class Gkeys:
    """Config plus everything derived from it.  Cheap to build; nothing touches disk until used."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.layout = Layout(config.gkeysdir)
        self.seeds = SeedStore(self.layout)
        self.lock = StateLock(self.layout)
        self._keyrings: dict[Category, Keyring] = {}
        self._http: HttpClient | None = None

    @property
    def http(self) -> HttpClient:
        """The shared HTTP client (timeouts and retries from ``[sources]``)."""
        if self._http is None:
            src = self.config.sources
            self._http = HttpClient(timeout=src.timeout, retries=src.retries, backoff=src.backoff)
        return self._http

    def ensure_layout(self) -> Layout:
        """Create and check the state directories."""
        return self.layout.ensure()

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
                 policy: VerifyPolicy | None = None) -> SignatureVerifier:
        """A verifier for ``category``'s keyring pinned to its seeds (or only ``nicks`` of them)."""
        self.ensure_layout()
        cat = parse_category(category)
        return SignatureVerifier(self.keyring(cat), pins if pins is not None else self.seeds.pins(cat, nicks),
                                 policy or self.policy())
