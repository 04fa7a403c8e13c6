"""Only pure detached signatures reach gpg: a signed message armored as a signature is refused.

In ``--multifile`` mode gpg verifies a signed *message* against its own text and never reads the
data file, so any message a pinned developer ever signed could "sign" any commit.
"""

from __future__ import annotations

import base64
import textwrap
from pathlib import Path

import pytest
from conftest import GkeysEnv
from tree_helpers import build, install_devs

from gkeys_portage.core.config import load_config
from gkeys_portage.core.context import Gkeys
from gkeys_portage.core.errors import NoSignatureError, NotVerifiedError
from gkeys_portage.core.packets import crc24, detached_signature_packets
from gkeys_portage.demo.world import KeyFactory


def _armor(packets: bytes) -> bytes:
    body = "\n".join(textwrap.wrap(base64.b64encode(packets).decode(), 64))
    checksum = base64.b64encode(crc24(packets).to_bytes(3, "big")).decode()
    return f"-----BEGIN PGP SIGNATURE-----\n\n{body}\n={checksum}\n-----END PGP SIGNATURE-----\n".encode()


def _signed_message(keys: KeyFactory, nick: str, text: bytes, work: Path, compress: bool = False) -> bytes:
    """``gpg --sign`` output (one-pass signature, literal data, signature), binary; uncompressed unless asked."""
    source = work / "message.txt"
    source.write_bytes(text)
    level = ["-z", "6"] if compress else ["-z", "0"]
    result = keys.gpg.run([*level, "--local-user", keys.keys[nick].fingerprint, "--sign", "--output", "-",
                           str(source)])
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_detached_signatures_pass_and_everything_else_is_refused(keys: KeyFactory, tmp_path: Path) -> None:
    doc = tmp_path / "doc"
    doc.write_bytes(b"doc")
    binary = keys.sign("alice", doc, armor=False)
    assert detached_signature_packets(binary) == binary
    assert detached_signature_packets(_armor(binary)) == binary
    assert detached_signature_packets(binary + keys.sign("bob", doc, armor=False))  # several signatures
    message = _signed_message(keys, "alice", b"any old mail\n", tmp_path)
    compressed = _signed_message(keys, "alice", b"any old mail\n", tmp_path, compress=True)
    for bad in (message, _armor(message), _armor(compressed), binary + b"\x00junk", binary[:-5],
                _armor(binary) + _armor(binary), _armor(binary).replace(b"\n=", b"\n=AAAA\n=", 1), b"", b"-----BEGIN PGP SIGNATURE-----\n"):
        with pytest.raises(NoSignatureError):
            detached_signature_packets(bad)


def test_signed_message_as_commit_signature_is_refused(env: GkeysEnv, tmp_path: Path) -> None:
    """An attacker's commit carrying alice's old signed e-mail (re-armored) as its gpgsig."""
    install_devs(env, ("alice",))
    repo = build(tmp_path / "repo", env.keys, ["alice"])
    forged = _armor(_signed_message(env.keys, "alice", b"Hi all, see you at FOSDEM\n", tmp_path))
    repo.commit(None, signature=forged, message="backdoor")
    env.config.write_text(env.config.read_text() + "[tree]\npolicy = all\n")
    result = env.run("verify-tree", str(repo.path))
    assert result.code == 1, result.text
    assert "not only signatures" in result.text


def test_signed_message_as_detached_signature_is_refused(env: GkeysEnv, tmp_path: Path) -> None:
    env.install_devs("alice")
    target = tmp_path / "file.tar.gz"
    target.write_bytes(b"tarball")
    (tmp_path / "file.tar.gz.asc").write_bytes(_armor(_signed_message(env.keys, "alice", b"x\n", tmp_path)))
    result = env.run("verify", "-F", str(target), "-C", "gentoo-devs")
    assert result.code == 1 and "not only signatures" in result.text
    trailing = env.keys.sign("alice", target, armor=False) + b"\x00trailing"
    with pytest.raises(NotVerifiedError):
        Gkeys(load_config(env.config)).verifier("gentoo-devs").detached(trailing, target)
