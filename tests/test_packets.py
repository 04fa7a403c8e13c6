"""Only pure detached signatures reach gpg: a signed message armored as a signature is refused.

In ``--multifile`` mode gpg verifies a signed *message* against its own text and never reads the
data file, so any message a pinned developer ever signed could "sign" any commit.
"""

from __future__ import annotations

import base64
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import GkeysEnv
from tree_helpers import build, head, install_devs

from gkeys_portage.core.config import load_config
from gkeys_portage.core.errors import NoSignatureError, NotVerifiedError
from gkeys_portage.demo.tree_repo import git_environment
from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.openpgp.packets import (
    ARMOR_BEGIN,
    armor,
    crc24,
    dearmor_signature,
    detached_signature_packets,
    find_clearsigned,
    parse_packets,
)
from gkeys_portage.portage.hooks import repo_postsync_main
from gkeys_portage.portage.treesync import SyncRequest, clone_verified, update_verified
from gkeys_portage.verify.git.tree import TreeOptions


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
                _armor(binary) + _armor(binary), _armor(binary).replace(b"\n=", b"\n=AAAA\n=", 1),
                b"", b"-----BEGIN PGP SIGNATURE-----\n"):
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


# -- issue 11 item 1: the armor differential (whitespace before BEGIN) -------------------------------------


def _packet(tag: int, body: bytes) -> bytes:
    return bytes([0xC0 | tag, 255]) + len(body).to_bytes(4, "big") + body


def _inline_message(payload: bytes, signature: bytes, signing_subkey: str) -> bytes:
    """A signed message (one-pass signature, literal data, signature) made of a public detached signature."""
    [sig] = [p for p in parse_packets(signature) if p.tag == 2]
    version, sigclass, pubkey_algo, hash_algo = sig.body[:4]
    assert version == 4
    ops = bytes([3, sigclass, hash_algo, pubkey_algo]) + bytes.fromhex(signing_subkey[-16:]) + b"\x01"
    literal = b"b\x00" + (0).to_bytes(4, "big") + payload
    return _packet(4, ops) + _packet(11, literal) + _packet(2, sig.body)


def _commit_parts(repo: Path, commit: str) -> tuple[bytes, bytes]:
    """(payload, armored gpgsig) of a commit, as git stores them."""
    raw = subprocess.run(["git", "-C", str(repo), "cat-file", "commit", commit], check=True,
                         capture_output=True).stdout
    head, _, body = raw.partition(b"\n\n")
    kept, sig, in_sig = [], [], False
    for line in head.split(b"\n"):
        if line.startswith(b"gpgsig "):
            in_sig = True
            sig.append(line[7:])
        elif in_sig and line.startswith(b" "):
            sig.append(line[1:])
        else:
            in_sig = False
            kept.append(line)
    return b"\n".join(kept) + b"\n\n" + body, b"\n".join(sig) + b"\n"


def whitespace_armor_forgery(payload: bytes, old_signature: bytes, signing_subkey: str,
                             lead: bytes = b" ") -> bytes:
    """The red-team ``gpgsig``: a BEGIN line behind whitespace (gpg does not take it as armor), then a
    signed *message* with no blank line after its BEGIN (the old parser skipped it as "armor headers",
    gpg reads it), then a genuine detached signature (what the old parser checked)."""
    binary = dearmor_signature(old_signature)
    message = armor(_inline_message(payload, binary, signing_subkey), "MESSAGE").replace(b"-----\n\n", b"-----\n", 1)
    tail = _armor(binary).split(b"\n\n", 1)[1]
    return lead + ARMOR_BEGIN + b"\n" + message + b"\n" + tail


@pytest.mark.parametrize("lead", [b" ", b"\t", b"\x0c"], ids=["space", "tab", "form-feed"])
def test_whitespace_armor_forgery_of_a_commit_is_refused_end_to_end(env: GkeysEnv, tmp_path: Path,
                                                                    lead: bytes) -> None:
    """Issue 11 item 1: a new commit with any tree, "signed" with alice's old public commit signature."""
    install_devs(env, ("alice",))
    repo = build(tmp_path / "repo", env.keys, ["alice"])
    old = repo.head()
    assert old is not None
    payload, old_signature = _commit_parts(repo.path, old)
    forged = whitespace_armor_forgery(payload, old_signature, env.keys.keys["alice"].signing_subkey, lead)
    # gpg itself verifies the forgery (against the old payload inside it), which is the danger:
    check = tmp_path / "forged.asc"
    check.write_bytes(forged)
    listing = env.keys.gpg.run(["--list-packets", str(check)])
    assert b":literal data packet:" in listing.stdout
    repo.commit(None, signature=forged, message="backdoor", files={"dev-test/pkg/evil.ebuild": "rm -rf /\n"})
    env.config.write_text(env.config.read_text() + "[tree]\npolicy = all\n")
    result = env.run("verify-tree", str(repo.path))
    assert result.code == 1, result.text
    assert "BEGIN PGP SIGNATURE at a line start" in result.text


def test_whitespace_armor_forgery_is_refused_by_the_sync_module_and_the_hook(env: GkeysEnv, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The same forgery through ``sync-type = gkeys`` (first clone and update) and repo.postsync.d."""
    install_devs(env, ("alice",))
    upstream = build(tmp_path / "upstream", env.keys, ["alice"])
    good = upstream.head()
    assert good is not None
    payload, old_signature = _commit_parts(upstream.path, good)
    forged = whitespace_armor_forgery(payload, old_signature, env.keys.keys["alice"].signing_subkey)
    location = tmp_path / "repos" / "gentoo"
    ctx = Gkeys(load_config(env.config))

    def request() -> SyncRequest:
        return SyncRequest(location, str(upstream.path), TreeOptions(policy="all", jobs=1), git_env=git_environment(),
                           quiet=True)

    assert clone_verified(ctx, request(), lambda *line: None).ok
    upstream.commit(None, signature=forged, message="backdoor", files={"dev-test/pkg/evil.ebuild": "rm -rf /\n"})
    outcome = update_verified(ctx, request(), lambda *line: None)
    assert not outcome.ok and "BEGIN PGP SIGNATURE at a line start" in outcome.reason, outcome.reason
    assert head(location) == good
    fresh = tmp_path / "repos" / "fresh"
    first = clone_verified(ctx, SyncRequest(fresh, str(upstream.path), TreeOptions(policy="all", jobs=1),
                                            git_env=git_environment(), quiet=True), lambda *line: None)
    assert not first.ok
    env.config.write_text(env.config.read_text() + "[tree]\npolicy = all\n")
    monkeypatch.setenv("GKEYS_CONFIG", str(env.config))
    assert repo_postsync_main(["test", "file:///up", str(upstream.path)]) == 1


def test_armor_parser_is_strict() -> None:
    """RFC 9580 armor only: BEGIN at line start, 'Key: Value' headers, one blank line, base64, CRC, END."""
    packets = _packet(2, b"\x04" + b"\x00" * 20)
    good = _armor(packets)
    assert dearmor_signature(good) == packets
    assert dearmor_signature(good.replace(b"-----\n\n", b"-----\nVersion: GnuPG v2\nComment: x\n\n", 1)) == packets
    assert dearmor_signature(good.replace(b"\n", b"\r\n")) == packets  # CRLF line ends
    assert dearmor_signature(b"\n\n" + good + b"\n\n") == packets  # blank lines around
    bad = [
        b" " + good, b"\t" + good, b"\x0c" + good,  # BEGIN not at a line start
        good.replace(b"-----\n\n", b"-----\n", 1),  # no blank line after BEGIN
        good.replace(b"-----\n\n", b"-----\nnot a header\n\n", 1),
        good.replace(b"-----\n\n", b"-----\n-----BEGIN PGP MESSAGE-----\n\n", 1),
        good.replace(b"\n=", b"\n\n=", 1),  # blank line inside the data
        good.replace(b"\n=", b"\n-----END PGP MESSAGE-----\n=", 1),
        good.replace(b"\n-----END", b"\nAAAA\n-----END", 1),  # data after the CRC line
        good + b"trailing text\n", b"leading text\n" + good,
        good.replace(b"-----END PGP SIGNATURE-----", b" -----END PGP SIGNATURE-----"),
    ]
    for data in bad:
        with pytest.raises(NoSignatureError):
            dearmor_signature(data)


def test_a_cleartext_block_with_no_signed_text_is_refused() -> None:
    """The signature line right after the header: GnuPG reads one empty line where the parse finds none (found
    by tests/test_fuzz_armor.py); such a block is refused before any engine reads it."""
    block = (b"-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA512\n\n" + armor(b"\xc2\x00"))
    with pytest.raises(NoSignatureError, match="no signed text"):
        find_clearsigned(block)
