"""gkeys-verify.eclass run in bash with the ebuild helper harness, against real signed files and a
real gkeys keyring (category gentoo-devs: alice and bob pinned; mallory signs but is never pinned).

Every case goes through the eclass's default command, ``gkeys``, found on PATH (a shim that runs this
working tree's entry point), exactly as an ebuild environment would call it.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import GkeysEnv

PROJECT = Path(__file__).resolve().parent.parent
HARNESS = PROJECT / "tests" / "eclass_harness.sh"
ECLASSDIR = PROJECT / "eclass-helpers"
DATA = b"upstream release tarball contents\n" * 100


@dataclass
class Bash:
    """Outcome of one harness run."""

    code: int
    out: str
    err: str

    @property
    def died(self) -> str:
        """The die message (empty if the script did not die)."""
        lines = [line for line in self.err.splitlines() if line.startswith("DIE: ")]
        return lines[-1][5:] if lines else ""


class Ebuild:
    """A DISTDIR / WORKDIR / T layout plus a way to run eclass code in the harness."""

    def __init__(self, env: GkeysEnv) -> None:
        self.env = env
        base = env.root / "build"
        self.distdir, self.workdir, self.temp, self.bin = (base / d for d in ("distdir", "work", "temp", "bin"))
        for directory in (self.distdir, self.workdir, self.temp, self.bin):
            directory.mkdir(parents=True, exist_ok=True)
        shim = self.bin / "gkeys"
        shim.write_text(f'#!/bin/sh\nPYTHONPATH="{PROJECT}" exec python3 -m gkeys_portage.cli.main "$@"\n')
        shim.chmod(0o755)

    def distfile(self, name: str, data: bytes = DATA) -> Path:
        """Write a distfile."""
        path = self.distdir / name
        path.write_bytes(data)
        return path

    def sign(self, nick: str, name: str, *, suffix: str = ".asc", clearsign: bool = False) -> Path:
        """Sign a distfile as ``nick``: FILE+suffix (detached) or the clearsigned copy."""
        signature = self.env.keys.sign(nick, self.distdir / name, clearsign=clearsign)
        path = self.distdir / (name + suffix)
        path.write_bytes(signature)
        return path

    def run(self, body: str, *, a: str = "", use: str = "verify-sig", category: str = "gentoo-devs",
            nick: str = "", extra: str = "") -> Bash:
        """Source the harness and the eclass, then run ``body`` in bash."""
        script = (f'source "{HARNESS}"\ninherit gkeys-verify\n'
                  f'GKEYS_VERIFY_CATEGORY={category}\nGKEYS_VERIFY_NICK={nick}\n{extra}\n{body}\n')
        environ = {
            "PATH": f"{self.bin}:{os.environ['PATH']}", "HOME": os.environ["HOME"], "LC_ALL": "C",
            "ECLASSDIR": str(ECLASSDIR), "DISTDIR": str(self.distdir), "WORKDIR": str(self.workdir),
            "T": str(self.temp), "A": a, "USE": use, "EAPI": "8",
            "GKEYS_VERIFY_CONFIG": str(self.env.config),
        }
        proc = subprocess.run(["bash", "-c", script], env=environ, capture_output=True, text=True, timeout=120,
                              check=False)
        return Bash(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def ebuild(env: GkeysEnv) -> Ebuild:
    """gentoo-devs installed (alice, bob) and an empty build layout."""
    env.install_devs("alice", "bob")
    return Ebuild(env)


def tarball(member: str = "hello.txt", text: bytes = b"hello\n") -> bytes:
    """A small .tar.gz with one file."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo(member)
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
    return buffer.getvalue()


# -- verify_detached -------------------------------------------------------------------------------------

DETACHED_CASES = [
    # (id, signer, nick, tamper, drop signature, expected die text or "" for success)
    ("good", "alice", "", False, False, ""),
    ("good-pinned-nick", "alice", "alice", False, False, ""),
    ("tampered", "alice", "", True, False, "NOT verified"),
    ("missing-signature", "alice", "", False, True, "signature"),
    ("wrong-signer-nick", "bob", "alice", False, False, "NOT verified"),
    ("unpinned-signer", "mallory", "", False, False, "NOT verified"),
]


@pytest.mark.parametrize(("signer", "nick", "tamper", "drop", "expected"),
                         [c[1:] for c in DETACHED_CASES], ids=[c[0] for c in DETACHED_CASES])
def test_verify_detached(ebuild: Ebuild, signer: str, nick: str, tamper: bool, drop: bool, expected: str) -> None:
    path = ebuild.distfile("foo-1.0.tar.gz")
    sig = ebuild.sign(signer, "foo-1.0.tar.gz")
    if tamper:
        path.write_bytes(DATA + b"x")
    if drop:
        sig.unlink()
    result = ebuild.run(f'gkeys-verify_verify_detached "{path}" "{sig}"\necho REACHED', nick=nick)
    if not expected:
        assert result.code == 0 and "REACHED" in result.out, result.err
        assert result.died == ""
    else:
        assert result.code == 1 and "REACHED" not in result.out
        assert expected in result.died, result.err
        assert "foo-1.0.tar.gz" in result.died


def test_detached_reason_names_the_failure(ebuild: Ebuild) -> None:
    """The die line carries gkeys' own reason (here: a key that the category does not pin)."""
    path = ebuild.distfile("foo-1.0.tar.gz")
    sig = ebuild.sign("bob", "foo-1.0.tar.gz")
    result = ebuild.run(f'gkeys-verify_verify_detached "{path}" "{sig}"', nick="alice")
    assert result.code == 1
    assert "not pinned" in result.died and "gentoo-devs/alice" in result.died, result.died
    assert "not installed" not in result.died


def test_keys_not_installed_says_how_to_install(ebuild: Ebuild) -> None:
    path = ebuild.distfile("foo-1.0.tar.gz")
    sig = ebuild.sign("alice", "foo-1.0.tar.gz")
    result = ebuild.run(f'gkeys-verify_verify_detached "{path}" "{sig}"', category="upstream", nick="foo")
    assert result.code == 1
    assert "not installed" in result.died
    assert "gkeys update-seed -C upstream" in result.died and "gkeys install-key -C upstream -n foo" in result.died


def test_missing_gkeys_command(ebuild: Ebuild) -> None:
    path = ebuild.distfile("foo-1.0.tar.gz")
    sig = ebuild.sign("alice", "foo-1.0.tar.gz")
    result = ebuild.run(f'gkeys-verify_verify_detached "{path}" "{sig}"',
                        extra="GKEYS_VERIFY_COMMAND=gkeys-not-there")
    assert result.code == 1 and "not found" in result.died and "USE=-verify-sig" in result.died


def test_category_required(ebuild: Ebuild) -> None:
    path = ebuild.distfile("foo-1.0.tar.gz")
    sig = ebuild.sign("alice", "foo-1.0.tar.gz")
    result = ebuild.run(f'gkeys-verify_verify_detached "{path}" "{sig}"', category="")
    assert result.code == 1 and "GKEYS_VERIFY_CATEGORY" in result.died


# -- verify_message ----------------------------------------------------------------------------------------

def test_verify_message_writes_signed_text_only(ebuild: Ebuild) -> None:
    ebuild.distfile("NEWS", b"release notes\n")
    signed = ebuild.sign("alice", "NEWS", clearsign=True)
    signed.write_bytes(b"unsigned text before\n" + signed.read_bytes() + b"unsigned text after\n")
    out = ebuild.temp / "NEWS.txt"
    result = ebuild.run(f'gkeys-verify_verify_message "{signed}" "{out}"\n'
                        f'gkeys-verify_verify_message "{signed}" - > "{ebuild.temp}/stdout.txt"')
    assert result.code == 0, result.err
    assert out.read_bytes() == b"release notes\n"
    assert (ebuild.temp / "stdout.txt").read_bytes() == b"release notes\n"


@pytest.mark.parametrize("case", ["tampered", "unpinned", "detached-only"])
def test_verify_message_refuses(ebuild: Ebuild, case: str) -> None:
    ebuild.distfile("NEWS", b"release notes\n")
    signed = ebuild.sign("mallory" if case == "unpinned" else "alice", "NEWS", clearsign=case != "detached-only")
    if case == "tampered":
        signed.write_bytes(signed.read_bytes().replace(b"release notes", b"release NOTES"))
    target = ebuild.distdir / "NEWS" if case == "detached-only" else signed
    out = ebuild.temp / "NEWS.txt"
    result = ebuild.run(f'gkeys-verify_verify_message "{target}" "{out}"')
    assert result.code == 1 and result.died, result.err
    assert not out.exists()


# -- verify_signed_checksums -------------------------------------------------------------------------------

def _sums(ebuild: Ebuild, names: list[str], *, signer: str = "alice", body: bytes | None = None) -> Path:
    lines = b"".join(hashlib.sha256((ebuild.distdir / n).read_bytes()).hexdigest().encode() + b"  " + n.encode()
                     + b"\n" for n in names)
    ebuild.distfile("SHA256SUMS", body if body is not None else lines)
    return ebuild.sign(signer, "SHA256SUMS", clearsign=True)


def test_signed_checksums_good(ebuild: Ebuild) -> None:
    ebuild.distfile("foo-1.0.tar.gz")
    ebuild.distfile("foo-1.0-docs.tar.gz", b"docs\n")
    sums = _sums(ebuild, ["foo-1.0.tar.gz", "foo-1.0-docs.tar.gz"])
    result = ebuild.run(f'gkeys-verify_verify_signed_checksums "{sums}" sha256 "foo-1.0.tar.gz foo-1.0-docs.tar.gz"'
                        '\necho REACHED')
    assert result.code == 0 and "REACHED" in result.out, result.err


@pytest.mark.parametrize("case", ["tampered-distfile", "not-listed", "unpinned-signer", "tampered-list"])
def test_signed_checksums_refuses(ebuild: Ebuild, case: str) -> None:
    ebuild.distfile("foo-1.0.tar.gz")
    ebuild.distfile("other.tar.gz", b"other\n")
    sums = _sums(ebuild, ["foo-1.0.tar.gz"], signer="mallory" if case == "unpinned-signer" else "alice")
    files = "foo-1.0.tar.gz"
    if case == "tampered-distfile":
        ebuild.distfile("foo-1.0.tar.gz", DATA + b"!")
    elif case == "not-listed":
        files = "foo-1.0.tar.gz other.tar.gz"
    elif case == "tampered-list":
        digest = hashlib.sha256(b"evil").hexdigest().encode()
        text = sums.read_bytes()
        start = text.index(b"\n\n") + 2
        sums.write_bytes(text[:start] + digest + text[start + 64:])
    result = ebuild.run(f'gkeys-verify_verify_signed_checksums "{sums}" sha256 "{files}"\necho REACHED')
    assert result.code == 1 and "REACHED" not in result.out
    expected = {"tampered-distfile": "mismatch", "not-listed": "other.tar.gz", "unpinned-signer": "NOT verified",
                "tampered-list": "NOT verified"}[case]
    assert expected in result.died, result.err


def test_unsigned_checksums_digests_sections(ebuild: Ebuild) -> None:
    """A Gentoo DIGESTS file lists BLAKE2B and SHA512 hashes of the same length: sections keep them apart."""
    data = ebuild.distfile("stage3.tar.xz").read_bytes()
    digests = ebuild.distfile("stage3.tar.xz.DIGESTS", (
        f"# BLAKE2B HASH\n{hashlib.blake2b(data).hexdigest()}  stage3.tar.xz\n"
        f"# SHA512 HASH\n{hashlib.sha512(data).hexdigest()}  stage3.tar.xz\n"
        f"SHA256 (stage3.tar.xz) = {hashlib.sha256(data).hexdigest()}\n").encode())
    body = "\n".join(f'gkeys-verify_verify_unsigned_checksums "{digests}" {algo} stage3.tar.xz'
                     for algo in ("sha512", "blake2b", "sha256"))
    assert ebuild.run(body + "\necho REACHED").out.strip().endswith("REACHED")
    bad = ebuild.run(f'gkeys-verify_verify_unsigned_checksums "{digests}" md5 stage3.tar.xz')
    assert bad.code == 1 and "not supported" in bad.died


# -- src_unpack --------------------------------------------------------------------------------------------

def test_src_unpack_verifies_then_unpacks(ebuild: Ebuild) -> None:
    ebuild.distfile("foo-1.0.tar.gz", tarball())
    ebuild.sign("alice", "foo-1.0.tar.gz", suffix=".sig")
    ebuild.distfile("fix.patch", b"--- a\n+++ b\n")
    result = ebuild.run("src_unpack", a="foo-1.0.tar.gz foo-1.0.tar.gz.sig fix.patch",
                        extra="GKEYS_VERIFY_UNSIGNED='*.patch'")
    assert result.code == 0, result.err
    assert "UNPACKED: foo-1.0.tar.gz" in result.out
    assert (ebuild.workdir / "hello.txt").read_bytes() == b"hello\n"


@pytest.mark.parametrize("case", ["missing-signature", "bad-signature", "unlisted-extra"])
def test_src_unpack_dies_before_unpacking(ebuild: Ebuild, case: str) -> None:
    ebuild.distfile("foo-1.0.tar.gz", tarball())
    ebuild.sign("alice", "foo-1.0.tar.gz")
    a = "foo-1.0.tar.gz foo-1.0.tar.gz.asc"
    if case == "missing-signature":
        a = "foo-1.0.tar.gz"
    elif case == "bad-signature":
        ebuild.distfile("foo-1.0.tar.gz", tarball(text=b"evil\n"))
    else:
        ebuild.distfile("fix.patch", b"--- a\n+++ b\n")
        a += " fix.patch"
    result = ebuild.run("src_unpack", a=a)
    assert result.code == 1 and "UNPACKED" not in result.out
    assert not (ebuild.workdir / "hello.txt").exists()
    expected = {"missing-signature": "foo-1.0.tar.gz has no signature", "bad-signature": "NOT verified",
                "unlisted-extra": "fix.patch has no signature"}[case]
    assert expected in result.died, result.err


def test_src_unpack_use_flag_off_skips_verification(ebuild: Ebuild) -> None:
    ebuild.distfile("foo-1.0.tar.gz", tarball(text=b"unchecked\n"))
    result = ebuild.run("src_unpack", a="foo-1.0.tar.gz", use="")
    assert result.code == 0, result.err
    assert (ebuild.workdir / "hello.txt").read_bytes() == b"unchecked\n"


def test_eapi_refused(ebuild: Ebuild) -> None:
    result = ebuild.run("echo REACHED", extra="")
    assert result.code == 0
    old = subprocess.run(["bash", "-c", f'source "{HARNESS}"; EAPI=6; ECLASSDIR="{ECLASSDIR}"; inherit gkeys-verify'],
                         capture_output=True, text=True, check=False)
    assert old.returncode == 1 and "EAPI 6 not supported" in old.stderr
