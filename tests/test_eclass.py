"""gkeys-verify.eclass run in bash with the ebuild helper harness, against real signed files and a
real gkeys keyring (category gentoo-devs: alice and bob pinned; mallory signs but is never pinned).

Every case goes through the eclass's default command, ``gkeys``, found on PATH (a shim that runs this
working tree's entry point), exactly as an ebuild environment would call it.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from conftest import GkeysEnv
from eclass_helpers import DATA, ECLASSDIR, HARNESS, Ebuild, installed_ebuild, tarball


@pytest.fixture
def ebuild(env: GkeysEnv) -> Ebuild:
    """gentoo-devs installed (alice, bob) and an empty build layout."""
    return installed_ebuild(env)


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


@pytest.mark.parametrize("files", ["", "   ", " \t "])
@pytest.mark.parametrize("function", ["signed", "unsigned"])
def test_checksums_with_no_files_die(ebuild: Ebuild, function: str, files: str) -> None:
    """An empty file list (or one of only spaces) used to check zero files and succeed."""
    ebuild.distfile("foo-1.0.tar.gz")
    sums = _sums(ebuild, ["foo-1.0.tar.gz"])
    checksums = sums if function == "signed" else ebuild.distdir / "SHA256SUMS"
    result = ebuild.run(f'gkeys-verify_verify_{function}_checksums "{checksums}" sha256 "{files}"\necho REACHED')
    assert result.code == 1 and "REACHED" not in result.out, result.err
    assert result.died, result.err


def test_checksums_nothing_checked_dies(ebuild: Ebuild) -> None:
    """A list whose words expand to nothing (nullglob set by the ebuild) checks zero files: die."""
    ebuild.distfile("foo-1.0.tar.gz")
    _sums(ebuild, ["foo-1.0.tar.gz"])
    result = ebuild.run(f'shopt -s nullglob\ncd "{ebuild.temp}"\n'
                        f'gkeys-verify_verify_unsigned_checksums "{ebuild.distdir}/SHA256SUMS" sha256 "nomatch-*"'
                        '\necho REACHED')
    assert result.code == 1 and "REACHED" not in result.out, result.err
    assert "no file checked" in result.died


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


def test_src_unpack_eapi7(ebuild: Ebuild) -> None:
    ebuild.distfile("foo-1.0.tar.gz", tarball())
    ebuild.sign("alice", "foo-1.0.tar.gz")
    result = ebuild.run("src_unpack", a="foo-1.0.tar.gz foo-1.0.tar.gz.asc", extra="", environ={"EAPI": "7"})
    assert result.code == 0, result.err
    assert (ebuild.workdir / "hello.txt").exists()


def test_verify_output_option(ebuild: Ebuild) -> None:
    """``gkeys verify -o``: only for inline-signed messages, written only once verified."""
    env = ebuild.env
    ebuild.distfile("NEWS", b"release notes\n")
    detached = ebuild.sign("alice", "NEWS")
    out = ebuild.temp / "out.txt"
    refused = env.run("verify", "-F", str(ebuild.distdir / "NEWS"), "-s", str(detached), "-o", str(out))
    assert refused.code == 2 and "cannot be combined with -s" in refused.text and not out.exists()
    signed = ebuild.sign("alice", "NEWS", clearsign=True)
    good = env.run("--json", "verify", "-F", str(signed), "-C", "gentoo-devs", "-o", str(out))
    assert good.code == 0, good.text
    assert out.read_bytes() == b"release notes\n" and '"output"' in good.out


def test_ebuild_phase_never_touches_the_live_keyring(ebuild: Ebuild) -> None:
    """The eclass verifies from the exported keyring (GKEYS_READ_ONLY_KEYRINGS=1): not even a chmod or a
    lock file in the live GnuPG home, which Portage's sandbox would report when a build runs as root."""
    home = ebuild.env.state / "keyrings" / "gentoo-devs"
    before = [(p.name, p.stat().st_ctime_ns, p.stat().st_mtime_ns) for p in [home, *sorted(home.iterdir())]]
    path = ebuild.distfile("foo-1.0.tar.gz")
    sig = ebuild.sign("alice", "foo-1.0.tar.gz")
    assert ebuild.run(f'gkeys-verify_verify_detached "{path}" "{sig}"').code == 0
    after = [(p.name, p.stat().st_ctime_ns, p.stat().st_mtime_ns) for p in [home, *sorted(home.iterdir())]]
    assert after == before
    assert not list(ebuild.temp.glob("gkeys-reader-*"))  # the throwaway home is gone once gkeys exits
