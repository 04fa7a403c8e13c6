"""Crypto cut-offs (issue 25 item 5): check-key and spec-check warn a year ahead of the dates from which
Sequoia-based verifiers (apt's sqv) refuse SHA-1/SHA-224 self-signatures and bindings, brainpool and RSA under
3072 bits, as findings of their own (``cutoff:*``), naming the key, what, when and the fix.  Real gpg keys."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import GkeysEnv

from gkeys_portage.demo.world import DemoKey, KeyFactory


@pytest.fixture(scope="module")
def sha1_rsa(keys: KeyFactory) -> DemoKey:
    """An RSA 2048 key whose user id self-signature and (encryption) subkey binding use SHA-1 (gpg 2.2 makes no
    SHA-1 back-signature for a signing subkey)."""
    if "cutsha1" not in keys.keys:
        primary = keys.gpg.generate_key("Cut Sha1 <cutsha1@gentoo.org>", algorithm="rsa2048", usage="cert",
                                        cert_digest="SHA1")
        keys.keys["cutsha1"] = DemoKey("Cut Sha1", "cutsha1@gentoo.org", primary,
                                       keys.gpg.add_subkey(primary, algorithm="rsa2048", usage="encrypt",
                                                         cert_digest="SHA1"))  # no backsig
    return keys.keys["cutsha1"]


def _check(env: GkeysEnv, keyfile: Path, action: str, at: str) -> tuple[int, dict[str, object], str]:
    result = env.run("--json", action, "--keyring", str(keyfile), "--at", at)
    text = env.run(action, "--keyring", str(keyfile), "--at", at).text
    return result.code, json.loads(result.out), text


def _codes(document: dict[str, object]) -> list[tuple[str, str, str]]:
    [key] = document["keys"]  # type: ignore[index]
    return sorted((i["code"], i["level"], i["on"]) for i in key["issues"] if i["code"].startswith("cutoff:"))


def test_sha1_bindings_are_warned_a_year_ahead_then_refused_and_rsa_2048_before_2030(
        env: GkeysEnv, sha1_rsa: DemoKey) -> None:
    keyfile = env.root / "cutsha1.asc"
    keyfile.write_bytes(env.keys.public("cutsha1"))
    code, document, text = _check(env, keyfile, "check-key", "2024-12-01")
    assert _codes(document) == [], document  # more than a year ahead of every cut-off
    code, document, text = _check(env, keyfile, "check-key", "2025-06-01")
    assert _codes(document) == [("cutoff:sha1", "warning", "subkey"), ("cutoff:sha1", "warning", "uid")]
    assert "refused from 2026-02-01 by Sequoia-based verifiers" in text and sha1_rsa.fingerprint in text
    assert f"gpg --cert-digest-algo SHA512 --quick-set-expire {sha1_rsa.fingerprint}" in text
    assert f"{sha1_rsa.signing_subkey}" in text  # the binding's fix names the subkey
    code, document, text = _check(env, keyfile, "check-key", "2026-12-04")
    assert code == 1 and _codes(document) == [("cutoff:sha1", "error", "subkey"), ("cutoff:sha1", "error", "uid")]
    assert "refused since 2026-02-01" in text
    code, document, text = _check(env, keyfile, "spec-check", "2029-06-01")
    assert ("cutoff:rsa3072", "warning", "key") in _codes(document)
    assert ("cutoff:rsa3072", "warning", "subkey") in _codes(document)
    assert "RSA keys under 3072 bits: this key is RSA 2048, refused from 2030-02-01" in text
    assert "gkeys-gen" in text and "gpg --quick-add-key" in text


def test_cutoff_dates_are_configurable_and_typos_are_errors(env: GkeysEnv, sha1_rsa: DemoKey) -> None:
    keyfile = env.root / "cutsha1.asc"
    keyfile.write_bytes(env.keys.public("cutsha1"))
    base = env.config.read_text()
    env.config.write_text(base + "[checks]\ncutoffs = sha1:2027-06-01\n")
    code, document, _ = _check(env, keyfile, "check-key", "2026-12-04")
    assert _codes(document) == [("cutoff:sha1", "warning", "subkey"), ("cutoff:sha1", "warning", "uid")]
    for bad in ("sha256:2026-01-01", "sha1:2026-13-01", "sha1", "rsa3072:2030/02/01"):
        env.config.write_text(base + f"[checks]\ncutoffs = {bad}\n")
        result = env.run("check-key", "--keyring", str(keyfile))
        assert result.code == 2 and "[checks] cutoffs" in result.text, (bad, result.text)


def test_an_ed25519_key_signed_with_sha512_has_no_cutoff_findings(env: GkeysEnv) -> None:
    keyfile = env.root / "alice.asc"
    keyfile.write_bytes(env.keys.public("alice"))
    for action in ("check-key", "spec-check"):
        _, document, _ = _check(env, keyfile, action, "2029-12-01")
        assert _codes(document) == []


@pytest.fixture(scope="module")
def sha1_backsig(keys: KeyFactory) -> DemoKey:
    """An ed25519 key whose signing subkey was bound with SHA-1 (binding and back-signature), then bound again with
    SHA-512: GnuPG keeps the SHA-1 back-signature inside the new binding, the only SHA-1 left (issue 34 case 9)."""
    if "cutbacksig" not in keys.keys:
        key = keys.create("cutbacksig")
        weak = keys.gpg.run(["--pinentry-mode", "loopback", "--passphrase-fd", "0", "--cert-digest-algo", "SHA1",
                             "--allow-weak-key-signatures", "--quick-add-key", key.fingerprint, "ed25519", "sign",
                             "2y"], passphrase="")
        assert weak.returncode == 0, weak.stderr
        listed = keys.gpg.list_keys([key.fingerprint])[0]
        subkey = listed.subkeys[-1].fingerprint
        time.sleep(1.1)  # the new binding must be newer than the first
        again = keys.gpg.run(["--pinentry-mode", "loopback", "--passphrase-fd", "0", "--cert-digest-algo", "SHA512",
                              "--quick-set-expire", key.fingerprint, "2y", subkey], passphrase="")
        assert again.returncode == 0, again.stderr
        keys.keys["cutbacksig"] = DemoKey(key.name, key.email, key.fingerprint, subkey)
    return keys.keys["cutbacksig"]


def test_a_sha1_back_signature_is_a_cutoff_finding_like_a_sha1_binding(env: GkeysEnv, sha1_backsig: DemoKey) -> None:
    keyfile = env.root / "cutbacksig.asc"
    keyfile.write_bytes(env.keys.public("cutbacksig"))
    for action in ("check-key", "spec-check"):
        code, document, text = _check(env, keyfile, action, "2026-12-04")
        assert code == 1 and ("cutoff:sha1", "error", "subkey") in _codes(document), document
        assert "its back-signature" in text, text
        assert f"(subkey {sha1_backsig.signing_subkey[-16:]})" in text, text
        assert f"gpg --quick-add-key {sha1_backsig.fingerprint} ed25519 sign" in text
