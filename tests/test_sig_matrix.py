"""Issue 11 "Held" list, signature side: cases that hold today, kept in the test matrix with real gpg.

Text-mode signatures over CRLF data (refused: a detached signature must be binary), critical unknown
notations, expired signatures, revoked user ids, a good and a bad signature by one key.  (``GNUPGHOME`` in
the environment: ``tests/test_isolation.py::test_hostile_gnupghome_and_gpg_conf_do_not_change_the_verdict``.)
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import GkeysEnv

from gkeys_portage.core.config import load_config
from gkeys_portage.core.errors import BadSignatureError, ExpiredKeyError, SignatureClassError
from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.keys.context import Gkeys, SignatureVerifier

CRLF = b"line one\r\nline two\r\n"


def _ctx(env: GkeysEnv) -> Gkeys:
    return Gkeys(load_config(env.config, None))


def _sign(keys: KeyFactory, nick: str, data: bytes, work: Path, *options: str) -> bytes:
    """A binary detached signature by ``nick``'s signing subkey, with extra gpg options."""
    path = work / f"to-sign-{time.monotonic_ns()}"
    path.write_bytes(data)
    result = keys.gpg.run([*options, "--local-user", keys.keys[nick].signing_subkey + "!", "--detach-sign",
                           "--output", "-", str(path)])
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def devs(env: GkeysEnv) -> GkeysEnv:
    env.install_devs("alice")
    return env


def test_text_mode_signature_over_crlf_data(devs: GkeysEnv) -> None:
    """A text-mode (class 0x01) signature covers the text with canonical line ends, so gpg accepts the LF
    form too; a detached signature must be binary (0x00), so both forms are refused, as is any change
    (``tests/test_sig_class.py`` has the verifiers' cases)."""
    signature = _sign(devs.keys, "alice", CRLF, devs.root, "--textmode")
    verifier = _ctx(devs).verifier("gentoo-devs")
    for same_text in (CRLF, CRLF.replace(b"\r\n", b"\n")):
        with pytest.raises(SignatureClassError, match="text mode"):
            verifier.detached(signature, same_text)
    for changed in (CRLF + b"\r\n", CRLF.replace(b"two", b"tw0"), b"line one\r\n"):
        with pytest.raises(BadSignatureError):
            verifier.detached(signature, changed)


def test_critical_unknown_notation_is_refused(devs: GkeysEnv) -> None:
    signature = _sign(devs.keys, "alice", CRLF, devs.root, "--sig-notation", "!unknown@example.org=x")
    with pytest.raises(BadSignatureError):
        _ctx(devs).verifier("gentoo-devs").detached(signature, CRLF)
    fine = _sign(devs.keys, "alice", CRLF, devs.root, "--sig-notation", "known@example.org=x")
    assert _ctx(devs).verifier("gentoo-devs").detached(fine, CRLF).signer.pin.nick == "alice"


def test_expired_signature_is_refused(devs: GkeysEnv) -> None:
    """A signature with its own expiry (1 day), checked three days later."""
    signature = _sign(devs.keys, "alice", CRLF, devs.root, "--default-sig-expire", "1d")
    ctx = _ctx(devs)
    later = time.time() + 3 * 86400
    plain = ctx.verifier("gentoo-devs")
    assert plain.detached(signature, CRLF).signer.pin.nick == "alice"  # today it is good
    verifier = SignatureVerifier(plain.keyring, plain.pins, ctx.policy(now=later),
                                 faked_time=datetime.fromtimestamp(later, UTC))
    with pytest.raises(ExpiredKeyError, match="has expired"):
        verifier.detached(signature, CRLF)


def test_good_and_bad_signature_by_one_key_is_refused(devs: GkeysEnv) -> None:
    good = _sign(devs.keys, "alice", CRLF, devs.root)
    bad = _sign(devs.keys, "alice", CRLF + b"other", devs.root)
    for pair in (good + bad, bad + good):
        with pytest.raises(BadSignatureError):
            _ctx(devs).verifier("gentoo-devs").detached(pair, CRLF)


def test_revoked_user_id_does_not_change_the_verdict(env: GkeysEnv) -> None:
    """Pinning is by fingerprint: a key with a revoked (old) user id still signs; its revoked *key* does not
    (``tests/test_verify_rules.py::test_revoked_key_is_refused``)."""
    keys = env.keys
    if "uidrev" not in keys.keys:
        key = keys.create("uidrev")
        new_uid = "Uid Rev <uidrev-new@gentoo.org>"
        for args in (["--quick-add-uid", key.fingerprint, new_uid], ["--quick-revoke-uid", key.fingerprint, key.uid]):
            result = keys.gpg.run(["--pinentry-mode", "loopback", "--passphrase-fd", "0", *args], passphrase="")
            assert result.returncode == 0, result.stderr
    listing = keys.gpg.run(["--with-colons", "--list-keys", keys.keys["uidrev"].fingerprint]).stdout
    assert b"\nuid:r:" in listing  # the old uid is revoked
    env.install_devs("uidrev")
    signature = _sign(keys, "uidrev", CRLF, env.root)
    assert _ctx(env).verifier("gentoo-devs").detached(signature, CRLF).signer.pin.nick == "uidrev"
