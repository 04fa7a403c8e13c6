"""Signature classes (RFC 9580 §5.2.1, VALIDSIG field 9): what a signature covers decides its class.

A text-mode signature (class 0x01, ``gpg --textmode``) hashes the data with its line endings made CRLF, so
it verifies the LF and the CRLF form of a file alike: two byte strings under one signature.  Release
media, DIGESTS with a detached signature, seed files, overlay lists and git commits are signed in binary
mode (0x00); a cleartext block carries 0x01 by construction.  Real gpg and git throughout.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import GkeysEnv
from media_helpers import STAGE3, digest_block, install_release_key, make_media
from overlays_helpers import overlays_config
from tree_helpers import build, install_devs

from gkeys_portage.core.config import load_config
from gkeys_portage.core.errors import BadSignatureError, EnginesDisagreeError, SignatureClassError
from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.openpgp.status import StatusReport, parse_status

LF = b"line one\nline two\n"
CRLF = LF.replace(b"\n", b"\r\n")
TEXT_MODE = "signed in text mode (class 01)"
FIX = "gpg --detach-sign without --textmode"


def sign(keys: KeyFactory, nick: str, data: bytes, work: Path, *options: str) -> bytes:
    """An armored signature of ``data`` by ``nick``'s signing subkey (detached unless ``options`` say)."""
    path = work / f".to-sign-{time.monotonic_ns()}"
    path.write_bytes(data)
    mode = [] if {"--sign", "--clearsign"} & set(options) else ["--detach-sign"]
    result = keys.gpg.run([*options, "--armor", "--local-user", keys.keys[nick].signing_subkey + "!",
                           *mode, "--output", "-", str(path)])
    path.unlink()
    assert result.returncode == 0, result.stderr
    return result.stdout


def validsig_classes(report: StatusReport) -> list[int]:
    """The class field of each VALIDSIG line gpg printed (read from the raw line, not the parsed record)."""
    return [int(line.split(" ")[9], 16) for line in report.lines if line.startswith("VALIDSIG ")]


def gpg_class(keys: KeyFactory, signature: bytes, data: bytes) -> int | None:
    """What gpg itself says: the class of a *good* signature over ``data`` (None: not good)."""
    classes = validsig_classes(keys.gpg.verify_detached(signature, data))
    return classes[0] if classes else None


def _ctx(env: GkeysEnv) -> Gkeys:
    return Gkeys(load_config(env.config, None))


def _one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture
def devs(env: GkeysEnv) -> GkeysEnv:
    env.install_devs("alice")
    return env


def test_status_records_the_signature_class() -> None:
    fpr = "A02DA33B53E8CEC227618EDE72F04101AF2690F5"
    head = f"[GNUPG:] GOODSIG 72F04101AF2690F5 A\n[GNUPG:] VALIDSIG {fpr} 2026-12-03 1796287281 0 4 0 22 10"
    for written, expected in (("00", 0x00), ("01", 0x01), ("1f", 0x1F), ("1", None), ("0x", None), ("²0", None),
                              ("001", None)):
        report = parse_status(f"{head} {written} {fpr}".splitlines())
        assert report.signatures[0].sig_class == expected, written
    assert parse_status(head.splitlines()).signatures[0].sig_class is None  # gpg did not say


def test_text_mode_signature_over_binary_data_is_refused_in_both_line_endings(devs: GkeysEnv) -> None:
    """gpg accepts a text-mode signature for the LF and the CRLF file; gkeys refuses both, saying what to do.
    A binary signature verifies exactly its bytes."""
    keys = devs.keys
    text_mode = sign(keys, "alice", LF, devs.root, "--textmode")
    assert gpg_class(keys, text_mode, LF) == gpg_class(keys, text_mode, CRLF) == 0x01  # gpg: both good
    verifier = _ctx(devs).verifier("gentoo-devs")
    for data in (LF, CRLF):
        with pytest.raises(SignatureClassError) as refused:
            verifier.detached(text_mode, data)
        assert TEXT_MODE in refused.value.message and FIX in refused.value.message
        assert "gentoo-devs/alice" in refused.value.message
    binary = sign(keys, "alice", LF, devs.root)
    assert gpg_class(keys, binary, LF) == 0x00
    assert verifier.detached(binary, LF).signer.pin.nick == "alice"
    with pytest.raises(BadSignatureError):
        verifier.detached(binary, CRLF)


def test_gkeys_verify_refuses_a_text_mode_signature_with_one_line(devs: GkeysEnv) -> None:
    data = devs.root / "distfile.tar"
    data.write_bytes(CRLF)
    sig = devs.root / "distfile.tar.asc"
    sig.write_bytes(sign(devs.keys, "alice", LF, devs.root, "--textmode"))  # signed the LF form
    result = devs.run("verify", "-F", str(data), "-C", "gentoo-devs")
    assert result.code == 1, result.text
    line = _one_line(result.err)
    assert TEXT_MODE in line and FIX in line, line
    assert "Traceback" not in result.text
    sig.write_bytes(sign(devs.keys, "alice", CRLF, devs.root))
    assert devs.run("verify", "-F", str(data), "-C", "gentoo-devs").code == 0


@pytest.fixture
def menv(env: GkeysEnv) -> GkeysEnv:
    install_release_key(env)
    return env


def test_media_asc_in_text_mode_is_refused(menv: GkeysEnv, keys: KeyFactory, tmp_path: Path) -> None:
    """A stage3 whose .asc is text-mode, and the copy of it with CRLF line ends: gpg verifies both; each
    is refused (exit 1, one line).  (Before the rule, verify-media said "verified" for both.)"""
    data = b"stage3 bytes with line breaks\n" * 4096
    media = make_media(keys, tmp_path / "m", data=data, siblings=(".asc",))
    asc = sign(keys, "releng", data, tmp_path, "--textmode")
    (media.folder / (media.name + ".asc")).write_bytes(asc)
    for variant in (data, data.replace(b"\n", b"\r\n")):
        media.path.write_bytes(variant)
        assert gpg_class(keys, asc, variant) == 0x01
        result = menv.run("verify-media", str(media.path))
        assert result.code == 1, result.text
        line = _one_line(result.err)
        assert f"{STAGE3}.asc" in line and TEXT_MODE in line and FIX in line, line


def test_detached_digests_asc_in_text_mode_is_refused(menv: GkeysEnv, keys: KeyFactory, tmp_path: Path) -> None:
    """An unsigned .DIGESTS with a text-mode .DIGESTS.asc over it: its CRLF copy would verify too."""
    media = make_media(keys, tmp_path / "d", siblings=())
    unsigned = digest_block("SHA512", media.data, media.name).encode()
    (media.folder / (media.name + ".DIGESTS")).write_bytes(unsigned.replace(b"\n", b"\r\n"))
    (media.folder / (media.name + ".DIGESTS.asc")).write_bytes(sign(keys, "releng", unsigned, tmp_path, "--textmode"))
    result = menv.run("verify-media", str(media.path))
    assert result.code == 1, result.text
    assert TEXT_MODE in _one_line(result.err)


def test_overlay_list_with_a_text_mode_signature_is_refused(env: GkeysEnv) -> None:
    env.pin_key("gentoo-infra", "infra", "releng", name="Infra")
    env.write_config(extra=overlays_config())
    listing = (b'<?xml version="1.0" encoding="UTF-8"?>\n<repositories version="1.0">\n</repositories>\n')
    path = env.root / "repositories.xml"
    path.write_bytes(listing.replace(b"\n", b"\r\n"))
    path.with_name("repositories.xml.asc").write_bytes(sign(env.keys, "releng", listing, env.root, "--textmode"))
    result = env.run("verify-overlays", str(path))
    assert result.code == 1, result.text
    assert TEXT_MODE in _one_line(result.err)


def test_cleartext_block_needs_a_cleartext_signature(devs: GkeysEnv) -> None:
    """``gpg --clearsign`` (0x01) verifies; a binary signature of the canonical CRLF text moved into a
    cleartext frame is good to gpg but refused here.  An inline signed message may be either class."""
    keys = devs.keys
    verifier = _ctx(devs).verifier("gentoo-devs")
    clearsigned = sign(keys, "alice", LF, devs.root, "--clearsign")
    assert verifier.clearsigned(clearsigned).plaintext == LF
    canonical = b"line one\r\nline two"  # what gpg hashes for the cleartext "line one\nline two\n"
    moved = b"-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA512\n\n" + LF + sign(keys, "alice", canonical, devs.root,
                                                                               "--digest-algo", "SHA512")
    report, _ = keys.gpg.verify_clearsigned(moved)
    assert validsig_classes(report) == [0x00] and report.signatures[0].valid  # gpg: good
    with pytest.raises(SignatureClassError, match=r"binary signature \(class 00\).*gpg --clearsign"):
        verifier.clearsigned(moved)
    for options, signed in ((("--sign",), LF), (("--sign", "--textmode"), LF.replace(b"\n", b"\r\n"))):
        message = sign(keys, "alice", LF, devs.root, *options)
        # the literal data as signed: gpg puts a text-mode one in CRLF (and strips the CRs when it writes it out)
        assert verifier.clearsigned(message).plaintext == signed, options


def _git(repo: Path, *args: str, gpg: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(repo.parent), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_COMMITTER_NAME": "alice", "GIT_AUTHOR_NAME": "alice",
           "GIT_COMMITTER_EMAIL": "alice@gentoo.org", "GIT_AUTHOR_EMAIL": "alice@gentoo.org"}
    options = ["-c", f"gpg.program={gpg}"] if gpg else []
    return subprocess.run(["git", "-C", str(repo), *options, *args], capture_output=True, text=True, env=env,
                          check=False)


def test_text_mode_commit_is_refused_though_git_accepts_it(env: GkeysEnv, tmp_path: Path) -> None:
    """git signs commits in binary mode; a commit signed through a gpg that adds --textmode is good to
    ``git verify-commit`` (VALIDSIG ... 01) and refused by verify-tree (stricter than git, on purpose)."""
    install_devs(env, ("alice",))
    repo = build(tmp_path / "repo", env.keys, ["alice"])
    wrapper = tmp_path / "gpg-textmode"
    wrapper.write_text(f'#!/bin/sh\nexec gpg --homedir "{env.keys.home}" --textmode "$@"\n')
    wrapper.chmod(0o755)
    signer = env.keys.keys["alice"].signing_subkey + "!"
    made = _git(repo.path, "commit", "-q", "--allow-empty", f"-S{signer}", "-m", "text mode", gpg=wrapper)
    assert made.returncode == 0, made.stderr
    top = _git(repo.path, "rev-parse", "HEAD").stdout.strip()
    checked = _git(repo.path, "verify-commit", "--raw", top, gpg=wrapper)
    assert checked.returncode == 0 and " 01 " in next(
        line for line in checked.stderr.splitlines() if "VALIDSIG" in line), checked.stderr
    result = env.run("--json", "verify-tree", str(repo.path), "--policy", "all")
    assert result.code == 1, result.text
    data = json.loads(result.out)
    assert [bad["commit"] for bad in data["bad"]] == [top]
    assert data["bad"][0]["code"] == "bad-signature" and TEXT_MODE in data["bad"][0]["reason"], data["bad"][0]
