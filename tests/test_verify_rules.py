"""The trust rules of design.md §3 with real gpg: pinning, time, several signatures, fail closed.

One table of (how the signature is made, expected outcome) runs through the library and the CLI.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import GkeysEnv, shared_path

from gkeys_portage.core.config import load_config
from gkeys_portage.core.errors import (
    BadSignatureError,
    ExpiredKeyError,
    FutureSignatureError,
    NoSignatureError,
    NotVerifiedError,
    RevokedKeyError,
    SignerNotPinnedError,
    UnknownSignerError,
)
from gkeys_portage.demo.world import KeyFactory, past
from gkeys_portage.keys.context import Gkeys

DATA = b"Gentoo test data\n"


@pytest.fixture
def devs(env: GkeysEnv) -> GkeysEnv:
    """alice, bob and carol pinned in gentoo-devs; mallory's key installed elsewhere (gentoo)."""
    env.install_devs("alice", "bob", "carol")
    return env


def _ctx(env: GkeysEnv) -> Gkeys:
    return Gkeys(load_config(env.config, None))


def _sig(env: GkeysEnv, nick: str, data: bytes = DATA, **kwargs: object) -> bytes:
    return env.keys.sign_bytes(nick, data, env.root, armor=False, **kwargs)


def test_good_signature_names_the_pinned_signer(devs: GkeysEnv) -> None:
    result = _ctx(devs).verifier("gentoo-devs").detached(_sig(devs, "alice"), DATA)
    assert [g.pin.nick for g in result.good] == ["alice"]
    assert result.signer.pin.fingerprint == devs.keys.keys["alice"].fingerprint
    assert result.signer.signing_fingerprint == devs.keys.keys["alice"].signing_subkey


Case = tuple[str, Callable[[GkeysEnv], tuple[bytes, bytes]], type[NotVerifiedError]]

CASES: list[Case] = [
    ("tampered data", lambda e: (_sig(e, "alice"), DATA + b"x"), BadSignatureError),
    ("unknown signer", lambda e: (_sig(e, "mallory"), DATA), UnknownSignerError),
    ("garbage signature", lambda e: (b"\x89\x01garbage" * 10, DATA), NoSignatureError),
    ("empty signature", lambda e: (b"", DATA), NoSignatureError),
    ("truncated signature", lambda e: (_sig(e, "alice")[:40], DATA), NoSignatureError),
    ("armored garbage", lambda e: (b"-----BEGIN PGP SIGNATURE-----\n\nAAAA\n-----END PGP SIGNATURE-----\n", DATA),
     NoSignatureError),
    ("future-dated signature", lambda e: (_sig(e, "alice", when=datetime.fromtimestamp(time.time() + 86400, UTC)),
                                         DATA), FutureSignatureError),
    ("good + bad signature", lambda e: (_sig(e, "alice") + _sig(e, "bob", DATA + b"other"), DATA),
     BadSignatureError),
]


@pytest.mark.parametrize(("label", "make", "error"), CASES, ids=[c[0] for c in CASES])
def test_refusals_library_and_cli(devs: GkeysEnv, label: str, make: Callable[[GkeysEnv], tuple[bytes, bytes]],
                                  error: type[NotVerifiedError]) -> None:
    signature, data = make(devs)
    with pytest.raises(error):
        _ctx(devs).verifier("gentoo-devs").detached(signature, data)
    target, sig = devs.root / "data.bin", devs.root / "data.bin.sig"
    target.write_bytes(data)
    sig.write_bytes(signature)
    result = devs.run("verify", "-F", str(target), "-s", str(sig), "-C", "gentoo-devs")
    assert result.code == 1, result.text
    assert "Traceback" not in result.text and len(result.err.strip().splitlines()) == 1


def test_good_signature_by_unpinned_key_in_keyring_is_refused(devs: GkeysEnv) -> None:
    """The original gkeys accepted any installed key: a key in the keyring is not enough."""
    with pytest.raises(SignerNotPinnedError):
        _ctx(devs).verifier("gentoo-devs", ["bob"]).detached(_sig(devs, "alice"), DATA)
    # mallory's key present in *another* category's keyring does not help either.
    with pytest.raises(UnknownSignerError):
        _ctx(devs).verifier("gentoo-devs").detached(_sig(devs, "mallory"), DATA)


def test_unknown_extra_signature_is_ignored(devs: GkeysEnv) -> None:
    result = _ctx(devs).verifier("gentoo-devs").detached(_sig(devs, "mallory") + _sig(devs, "alice"), DATA)
    assert [g.pin.nick for g in result.good] == ["alice"]
    assert any("unknown signer" in note for note in result.ignored)


def test_revoked_key_is_refused(devs: GkeysEnv) -> None:
    signature = _sig(devs, "carol")
    ctx = _ctx(devs)
    with ctx.keyring("gentoo-devs").update() as staging:
        staging.import_keys(devs.keys.revocation("carol"))
    with pytest.raises(RevokedKeyError):
        ctx.verifier("gentoo-devs").detached(signature, DATA)


def test_clearsigned_text_is_only_the_signed_part(devs: GkeysEnv) -> None:
    source = devs.root / "msg.txt"
    source.write_bytes(b"signed line\n")
    message = devs.keys.sign("alice", source, clearsign=True)
    framed = b"unsigned prefix 0000  evil\n" + message + b"unsigned suffix\n"
    result = _ctx(devs).verifier("gentoo-devs").clearsigned(framed)
    assert result.plaintext == b"signed line\n"


def test_expired_key_time_rules(tmp_path: Path, env: GkeysEnv) -> None:
    """Signed while valid: still good after expiry.  Signed after expiry: refused.

    A key without expiry (made 900 days ago) signs two documents, 800 and 300 days ago.  Then a
    new self-signature, dated 850 days ago, gives it a 450-day expiry: it expired 400 days ago,
    between the two signatures.
    """
    lapsed = KeyFactory(tmp_path / "lapsed-home")
    try:
        key = lapsed.create("lapsed", created=past(900), expire="never")
        doc = tmp_path / "doc"
        doc.write_bytes(DATA)
        early = lapsed.sign("lapsed", doc, armor=False, when=past(800))
        late = lapsed.sign("lapsed", doc, armor=False, when=past(300))
        gpg = lapsed._at(past(850))
        gpg.set_expiry(key.fingerprint, "450d")
        gpg.set_expiry(key.fingerprint, "450d", subkeys=True)
        public = lapsed.public("lapsed")
    finally:
        lapsed.close()
    env.bootstrap()
    assert env.run("add-seed", "-C", "old", "-n", "lapsed", "-N", "L", "-K", key.fingerprint).code == 0
    (tmp_path / "lapsed.asc").write_bytes(public)
    assert env.run("import-key", "-C", "old", "-n", "lapsed", "-F", str(tmp_path / "lapsed.asc")).code == 0
    ctx = _ctx(env)
    assert ctx.verifier("old").detached(early, DATA).signer.pin.nick == "lapsed"
    with pytest.raises(ExpiredKeyError, match="before the signature was made"):
        ctx.verifier("old").detached(late, DATA)
    strict = ctx.policy()
    object.__setattr__(strict, "require_currently_valid", True)
    with pytest.raises(ExpiredKeyError):
        ctx.verifier("old", policy=strict).detached(early, DATA)


def test_expired_session_key_signed_while_valid(devs: GkeysEnv) -> None:
    """The session key 'expired' (made 800 days ago, 1-year expiry) signed 700 days ago: good."""
    devs.pin_key("old-devs", "expired", "expired", name="E")
    signature = _sig(devs, "expired", when=past(700))
    assert _ctx(devs).verifier("old-devs").detached(signature, DATA).signer.pin.nick == "expired"


def test_real_seed_signature_is_unknown_signer(env: GkeysEnv) -> None:
    """The real gentoo-devs.seeds.sig's key is not available: 'unknown signer', never good."""
    seeds = shared_path("fixtures", "real", "seeds", "gentoo-devs.seeds")
    result = env.run("verify", "-F", str(seeds), "-s", str(seeds) + ".sig", "-C", "gentoo")
    assert result.code == 1
    assert "unknown key" in result.text and "A41DBBD9151C3FC7" in result.text
    assert env.run("--json", "verify", "-F", str(seeds), "-C", "gentoo").code == 1
