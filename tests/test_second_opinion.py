"""The second opinion: Sequoia confirms every signature GnuPG accepts (issue 34).

An engine fooled into reporting a good signature for bytes it was not given (here a wrapper around the real
gpg that strips a mirror's tampering before gpg sees it, selected as gkeys selects any engine: ``$GKEYS_GPG``)
must never produce "verified": Sequoia reads the bytes gkeys handed over, and the verdict refuses with
``engines-disagree``.  The table below lists every module that asks for a verdict; a new one fails
:func:`test_every_verifying_path_is_listed` until it is added here, with a test that fools GnuPG on it.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import shared_path

from gkeys_portage.core.errors import EngineError, EnginesDisagreeError, NotVerifiedError
from gkeys_portage.core.types import Category, Nick
from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.openpgp import sequoia
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.process import OpenFile
from gkeys_portage.openpgp.verdict import Pin, PinSet, SignedData, decide

PROJECT = Path(__file__).resolve().parent.parent
MARK = b"TAMPERED-BY-A-MIRROR"
SWAP = (b"EVIL-DIGESTS", b"GOOD-DIGESTS")  # a same-size change, for a signed message's literal packet

#: Every module that asks for a verdict, and what takes it through the two-engine door.
VERIFYING_PATHS = {
    "keys/context.py": "SignatureVerifier.detached / .clearsigned: test_fooled_engine_never_verifies_alone",
    "keys/bundle.py": "SignatureVerifier.detached (bundles)",
    "keys/seedfetch.py": "SignatureVerifier.detached (seed files)",
    "verify/file.py": "SignatureVerifier.detached / .clearsigned (gkeys verify, .asc .sig .sha256 latest-*.txt)",
    "verify/media/verifier.py": "SignatureVerifier.detached on an OpenFile or a stream; DIGESTS cleartext",
    "verify/media/fetch.py": "SignatureVerifier.clearsigned (latest-*.txt)",
    "verify/overlays/verifier.py": "SignatureVerifier.detached (repositories.xml)",
    "verify/manifest/snapshot.py": "SignatureVerifier.detached on a path (webrsync snapshots)",
    "verify/git/commits.py": "multifile batch + decide: test_fooled_engine_never_verifies_a_batch",
    "openpgp/multifile.py": "the batch door itself (Sequoia reads the files gpg reads)",
    "verify/manifest/signedtext.py": "the top Manifest: test_fooled_engine_never_verifies_a_top_manifest",
    "verify/manifest/tree.py": "calls check_top_manifest before gemato",
    "portage/rsyncsync.py": "verify_tree (rsync sync-type = gkeys)",
    "verify/recheck.py": "SignatureVerifier.detached and the tree verifier (gkeys audit --recheck)",
}

FOOLED = f"""#!{sys.executable}
# An OpenPGP engine fooled by a mirror: it checks the bytes without the mirror's tampering, not the bytes given.
import os, subprocess, sys, tempfile
MARK = {MARK!r}
EVIL, GOOD = {SWAP!r}
ECHO = "echo" in os.path.basename(sys.argv[0])
args = sys.argv[1:]
if "--multifile" in args:  # copies without the tampering; status lines name the files given
    status = int(args[args.index("--status-fd") + 1])
    args[args.index("--status-fd") + 1] = "1"
    scratch, renamed = tempfile.mkdtemp(), {{}}
    for i, arg in enumerate(args):
        if arg.endswith(".sig") and os.path.isfile(arg[:-4]) and MARK in open(arg[:-4], "rb").read():
            copy = os.path.join(scratch, os.path.basename(arg))
            open(copy, "wb").write(open(arg, "rb").read())
            open(copy[:-4], "wb").write(open(arg[:-4], "rb").read().replace(MARK, b""))
            args[i], renamed[copy] = copy, arg
    out = subprocess.run(["gpg", *args], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL).stdout
    for copy, arg in renamed.items():
        out = out.replace(copy.encode(), arg.encode())
    os.write(status, out)
    sys.exit(0)
if "--verify" in args or "--decrypt" in args:
    for i, arg in enumerate(args):
        if i and args[i - 1] in ("--homedir", "--status-fd", "--faked-system-time"):
            continue
        if os.path.isfile(arg) or arg.startswith("/dev/fd/"):
            try:
                data = open(arg, "rb").read()
            except OSError:
                continue
            if MARK in data or EVIL in data:
                handle = tempfile.NamedTemporaryFile(delete=False)
                handle.write(data.replace(MARK, b"").replace(EVIL, GOOD))
                handle.close()
                args[i] = handle.name
    if "--decrypt" in args and ECHO:  # the verdict on the bytes without the tampering, the text of those given
        data = sys.stdin.buffer.read()
        quiet, null = list(args), os.open(os.devnull, os.O_WRONLY)
        quiet[quiet.index("--status-fd") + 1] = str(null)
        text = subprocess.run(["gpg", *quiet], input=data, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              pass_fds=(null,)).stdout
        done = subprocess.run(["gpg", *args], input=data.replace(MARK, b"").replace(EVIL, GOOD),
                              stdout=subprocess.PIPE, pass_fds=(int(args[args.index("--status-fd") + 1]),))
        sys.stdout.buffer.write(text)
        sys.exit(done.returncode)
    if args[-1] == "-" or "--decrypt" in args:
        data = sys.stdin.buffer.read()
        handle = tempfile.TemporaryFile()
        handle.write(data.replace(MARK, b"").replace(EVIL, GOOD))
        handle.seek(0)
        os.dup2(handle.fileno(), 0)
os.execvp("gpg", ["gpg", *args])
"""


@pytest.fixture(scope="module")
def fooled(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("engine") / "gpg-fooled"
    path.write_text(FOOLED)
    path.chmod(0o755)
    return str(path)


@pytest.fixture(scope="module")
def echoing(fooled: str) -> str:
    """The fooled engine that also prints the signed text it was given (tampering included), as an engine fooled
    into a good verdict would: gkeys' own comparison of the texts then agrees, and only Sequoia is left."""
    path = Path(fooled).with_name("gpg-fooled-echo")
    shutil.copy(fooled, path)
    return str(path)


@pytest.fixture
def home(keys: KeyFactory, tmp_path: Path, fooled: str) -> Iterator[tuple[GnuPG, PinSet]]:
    gpg = GnuPG(tmp_path / "home", program=fooled)
    gpg.import_keys(keys.public("alice"))
    alice = keys.keys["alice"]
    yield gpg, PinSet.of([Pin(Category("gentoo-devs"), Nick("alice"), alice.fingerprint)])


@pytest.fixture
def echo_home(keys: KeyFactory, tmp_path: Path, echoing: str) -> tuple[GnuPG, PinSet]:
    gpg = GnuPG(tmp_path / "echo-home", program=echoing)
    gpg.import_keys(keys.public("alice"))
    return gpg, PinSet.of([Pin(Category("gentoo-devs"), Nick("alice"), keys.keys["alice"].fingerprint)])


def test_every_verifying_path_is_listed() -> None:
    asks = re.compile(r"\.(detached|clearsigned)\b|\bdecide\(|verify_(detached|clearsigned|prepared|detached_many|"
                      r"many_multifile)\b|\bverify_tree\(|\bcheck_top_manifest\(")
    found = set()
    for path in (PROJECT / "gkeys_portage").rglob("*.py"):
        rel = str(path.relative_to(PROJECT / "gkeys_portage"))
        if rel.startswith("openpgp/") and rel != "openpgp/multifile.py" or rel.startswith(("cli/", "demo/")):
            continue  # the door itself; presentation
        for line in path.read_text().splitlines():
            code = line.split("#")[0].strip()
            if asks.search(code) and not code.startswith(("def ", '"', "*", ":")) and ":meth:" not in code \
                    and ":func:" not in code and "``" not in code:
                found.add(rel)
    assert found == set(VERIFYING_PATHS), (found ^ set(VERIFYING_PATHS))


def _signed(keys: KeyFactory, tmp_path: Path, data: bytes, **kwargs: object) -> bytes:
    return keys.sign_bytes("alice", data, tmp_path, **kwargs)


@pytest.mark.parametrize("source", ["bytes", "path", "stream", "open-file"])
def test_fooled_engine_never_verifies_alone(keys: KeyFactory, tmp_path: Path, home: tuple[GnuPG, PinSet],
                                            source: str) -> None:
    gpg, pins = home
    genuine = b"stage3 tarball bytes\n"
    signature = _signed(keys, tmp_path, genuine)
    tampered = genuine + MARK
    path = tmp_path / "served"
    path.write_bytes(tampered)
    fd = os.open(path, os.O_RDONLY)
    try:
        data = {"bytes": tampered, "path": path, "stream": io.BytesIO(tampered), "open-file": OpenFile(fd)}[source]
        report = gpg.verify_detached(signature, data)  # type: ignore[arg-type]
    finally:
        os.close(fd)
    assert any(sig.valid for sig in report.signatures), "the engine was not fooled: the test proves nothing"
    with pytest.raises(EnginesDisagreeError, match="GnuPG says good signature by gentoo-devs/alice.*Sequoia "
                       "refuses it"):
        decide(report, pins, {k.fingerprint: k for k in gpg.list_keys()})
    # and the genuine bytes are verified by both
    decide(gpg.verify_detached(signature, genuine), pins, {k.fingerprint: k for k in gpg.list_keys()})


def test_fooled_engine_never_verifies_a_signed_message(keys: KeyFactory, tmp_path: Path,
                                                       echo_home: tuple[GnuPG, PinSet]) -> None:
    """The engine says good and prints the literal data gkeys read: only Sequoia's refusal is left (with the
    second opinion removed this verifies)."""
    gpg, pins = echo_home
    message = subprocess.run(["gpg", "--homedir", str(keys.home), "--batch", "-u", keys.keys["alice"].fingerprint,
                              "--compress-algo", "none", "--sign"], input=SWAP[1] + b"\n", capture_output=True,
                             check=True).stdout
    report, text = gpg.verify_clearsigned(message.replace(*SWAP[::-1]))
    assert any(sig.valid for sig in report.signatures) and text == SWAP[0] + b"\n", "the test proves nothing"
    with pytest.raises(EnginesDisagreeError, match="GnuPG says good signature by gentoo-devs/alice.*Sequoia"):
        decide(report, pins, {k.fingerprint: k for k in gpg.list_keys()}, signed=SignedData.MESSAGE)
    genuine, _ = gpg.verify_clearsigned(message)  # and the genuine message is verified by both
    decide(genuine, pins, {k.fingerprint: k for k in gpg.list_keys()}, signed=SignedData.MESSAGE)


def test_fooled_engine_never_verifies_cleartext(keys: KeyFactory, tmp_path: Path,
                                                echo_home: tuple[GnuPG, PinSet]) -> None:
    """The engine says good and prints the tampered text gkeys parsed: only Sequoia's refusal is left."""
    gpg, pins = echo_home
    message = _signed(keys, tmp_path, b"# SHA512 HASH\nabc  stage3.tar.xz\n", clearsign=True)
    tampered = message.replace(b"abc  stage3", b"abc" + MARK + b"  stage3")
    report, text = gpg.verify_clearsigned(tampered)
    assert any(sig.valid for sig in report.signatures) and MARK in text, "the test proves nothing"
    with pytest.raises(EnginesDisagreeError, match="GnuPG says good signature by gentoo-devs/alice.*Sequoia"):
        decide(report, pins, {k.fingerprint: k for k in gpg.list_keys()}, signed=SignedData.CLEARTEXT)
    genuine, _ = gpg.verify_clearsigned(message)
    decide(genuine, pins, {k.fingerprint: k for k in gpg.list_keys()}, signed=SignedData.CLEARTEXT)


def test_fooled_engine_that_prints_the_given_text_is_refused_by_the_text_check_alone(
        keys: KeyFactory, tmp_path: Path, home: tuple[GnuPG, PinSet]) -> None:
    """The plain fooled engine prints the text without the tampering: gkeys' comparison of the texts refuses
    it before any verdict (its own protection, beside the second opinion)."""
    gpg, _pins = home
    message = _signed(keys, tmp_path, b"# SHA512 HASH\nabc  stage3.tar.xz\n", clearsign=True)
    report, _ = gpg.verify_clearsigned(message.replace(b"abc  stage3", b"abc" + MARK + b"  stage3"))
    assert report.failures == ["gpg and gkeys disagree on the signed text; refused"], report


def test_fooled_engine_never_verifies_a_batch(keys: KeyFactory, tmp_path: Path, home: tuple[GnuPG, PinSet]) -> None:
    gpg, pins = home
    genuine = b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor a\n\nmessage\n"
    signature = _signed(keys, tmp_path, genuine)
    good, bad = gpg.verify_detached_many([(signature, genuine), (signature, genuine + MARK)])
    listing = {k.fingerprint: k for k in gpg.list_keys()}
    decide(good, pins, listing)
    assert any(sig.valid for sig in bad.signatures)
    with pytest.raises(EnginesDisagreeError):
        decide(bad, pins, listing)


@pytest.mark.parametrize("engine", ["fooled", "echoing"])
def test_fooled_engine_never_verifies_a_top_manifest(keys: KeyFactory, tmp_path: Path, engine: str,
                                                     request: pytest.FixtureRequest,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Fooled into a good verdict, the engine prints either the text without the tampering (refused: the texts
    differ) or the tampered text gkeys parsed (refused: Sequoia, the second opinion)."""
    from gkeys_portage.verify.manifest.signedtext import check_top_manifest

    alice = keys.keys["alice"]
    pins = PinSet.of([Pin(Category("infra"), Nick("alice"), alice.fingerprint)])
    manifest = _signed(keys, tmp_path, b"TIMESTAMP 2026-12-06T00:00:00Z\nDATA a 1 SHA512 00\n", clearsign=True)
    monkeypatch.setenv("GKEYS_GPG", request.getfixturevalue(engine))
    check_top_manifest(manifest, keys.public("alice", armor=False), pins, "mirror")
    tampered = manifest.replace(b"SHA512 00", b"SHA512 00" + MARK)
    with pytest.raises(EnginesDisagreeError if engine == "echoing" else NotVerifiedError,
                       match="Sequoia" if engine == "echoing" else "disagree on the signed text"):
        check_top_manifest(tampered, keys.public("alice", armor=False), pins, "mirror")


def test_a_report_without_a_second_opinion_is_not_verified(keys: KeyFactory, tmp_path: Path,
                                                           home: tuple[GnuPG, PinSet]) -> None:
    gpg, pins = home
    genuine = b"data\n"
    report = gpg.verify_detached(_signed(keys, tmp_path, genuine), genuine)
    report.second = None  # a path that bypassed the door
    with pytest.raises(EnginesDisagreeError, match="Sequoia was not asked"):
        decide(report, pins, {k.fingerprint: k for k in gpg.list_keys()})


def test_missing_pysequoia_refuses_naming_the_fix_and_off_is_gnupg_alone(
        keys: KeyFactory, tmp_path: Path, home: tuple[GnuPG, PinSet], monkeypatch: pytest.MonkeyPatch) -> None:
    gpg, pins = home
    genuine = b"data\n"
    signature = _signed(keys, tmp_path, genuine)
    listing = {k.fingerprint: k for k in gpg.list_keys()}
    monkeypatch.setitem(sys.modules, "pysequoia", None)  # import pysequoia raises ImportError
    with pytest.raises(EngineError) as refused:
        decide(gpg.verify_detached(signature, genuine), pins, listing)
    assert "pip install pysequoia" in refused.value.next_step
    monkeypatch.setattr(sequoia, "_enabled", False)  # [gpg] second-opinion = no
    assert decide(gpg.verify_detached(signature, genuine + MARK), pins, listing).signer.pin.nick == "alice"


def test_second_opinion_off_is_a_config_line_and_a_doctor_finding(tmp_path: Path) -> None:
    config = tmp_path / "gkeys.conf"
    config.write_text(f"[base]\ngkeysdir = {tmp_path / 'state'}\n[gpg]\nsecond-opinion = no\n")
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    status = subprocess.run([sys.executable, "-m", "gkeys_portage.cli.main", "-c", str(config), "status", "--json"],
                            capture_output=True, text=True, env=env, check=False)
    assert json.loads(status.stdout)["second_opinion"]["state"] == "off", status
    doctor = subprocess.run([sys.executable, "-m", "gkeys_portage.cli.main", "-c", str(config), "doctor", "--eroot",
                             str(tmp_path)], capture_output=True, text=True, env=env, check=False)
    assert "second opinion is turned off" in doctor.stdout + doctor.stderr, doctor


REAL_SHA1_ONLY = "D99EAC7379A850BCE47DA5F29E6438C817072058"  # the old DSA release key: SHA-1 bindings only


def test_real_gentoo_keys_bind_the_same_way_for_both_engines_but_the_sha1_only_one(tmp_path: Path) -> None:
    """The real keys carry SHA-1 signatures beside SHA-2 ones: both engines use the newest (SHA-2) binding, so
    they agree on every expiry; only a key with nothing but SHA-1 bindings is refused by Sequoia's policy."""
    import pysequoia

    flagged = set()
    (tmp_path / "show").mkdir(mode=0o700)
    for path in sorted(shared_path("fixtures", "real", "keys").glob("*.asc")):
        data = path.read_bytes()
        flagged |= sequoia.sha1_self_signed(data)
        listing = subprocess.run(["gpg", "--homedir", str(tmp_path / "show"), "--with-colons", "--show-keys",
                                  str(path)], capture_output=True, text=True, check=False).stdout
        gnupg = {line.split(":")[4]: line.split(":")[6] for line in listing.splitlines() if line.startswith("pub:")}
        for cert in pysequoia.Cert.split_bytes(data):
            fingerprint = str(cert.fingerprint).upper()
            if fingerprint == REAL_SHA1_ONLY:
                continue
            assert str(int(cert.expiration.timestamp())) == gnupg[fingerprint[-16:]], fingerprint
    assert flagged == {REAL_SHA1_ONLY}


def test_a_key_bound_with_sha1_is_a_disagreement_naming_cause_and_fix(tmp_path: Path, home: tuple[GnuPG, PinSet],
                                                                      fooled: str) -> None:
    signer = tmp_path / "signer"
    signer.mkdir(mode=0o700)
    gpg_cli = ["gpg", "--homedir", str(signer), "--batch", "--passphrase", "", "--pinentry-mode", "loopback",
               "--cert-digest-algo", "SHA1"]
    subprocess.run([*gpg_cli, "--quick-gen-key", "Old <old@example.org>", "rsa3072", "sign", "2y"], check=True,
                   capture_output=True)
    listing = subprocess.run([*gpg_cli, "--with-colons", "-k"], capture_output=True, text=True, check=True).stdout
    fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    data = tmp_path / "data"
    data.write_bytes(b"release\n")
    subprocess.run([*gpg_cli, "--digest-algo", "SHA512", "-b", str(data)], check=True, capture_output=True)
    gpg = GnuPG(tmp_path / "verify")
    gpg.import_keys(subprocess.run([*gpg_cli, "--export"], capture_output=True, check=True).stdout)
    pins = PinSet.of([Pin(Category("gentoo"), Nick("old"), fingerprint)])  # type: ignore[arg-type]
    report = gpg.verify_detached((tmp_path / "data.sig").read_bytes(), data)
    with pytest.raises(EnginesDisagreeError) as refused:
        decide(report, pins, {k.fingerprint: k for k in gpg.list_keys()})
    assert "GnuPG says good signature by gentoo/old" in refused.value.message
    assert "SHA-1" in refused.value.message and "re-signs them with SHA-256" in refused.value.message


def test_a_stream_larger_than_a_pipe_is_checked_by_both(keys: KeyFactory, tmp_path: Path) -> None:
    """A stream (media that cannot be held still) reaches gpg through a pipe and Sequoia through a spooled copy:
    pysequoia holds Python's lock while it reads, so a pipe fed from this process would never drain."""
    gpg = GnuPG(tmp_path / "home")
    gpg.import_keys(keys.public("alice"))
    pins = PinSet.of([Pin(Category("gentoo-devs"), Nick("alice"), keys.keys["alice"].fingerprint)])
    data = os.urandom(4 << 20)
    report = gpg.verify_detached(_signed(keys, tmp_path, data), io.BytesIO(data))
    assert report.second is not None and report.second.opinion is sequoia.Opinion.ACCEPTED
    assert decide(report, pins, {k.fingerprint: k for k in gpg.list_keys()}).signer.pin.nick == "alice"


@pytest.fixture
def apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file counts as large: Sequoia checks it in a child process, never in this one."""
    from gkeys_portage.openpgp import signatures

    def in_process(*args: object) -> None:
        raise AssertionError("a large file was checked in-process")

    monkeypatch.setattr(signatures, "APART_BYTES", 0)
    monkeypatch.setattr(signatures, "check_detached", in_process)


@pytest.mark.parametrize("source", ["path", "open-file"])
def test_a_large_file_is_checked_by_sequoia_in_a_child_and_a_fooled_engine_still_refuses(
        keys: KeyFactory, tmp_path: Path, home: tuple[GnuPG, PinSet], apart: None, source: str) -> None:
    gpg, pins = home
    genuine = b"a large release image\n"
    signature = _signed(keys, tmp_path, genuine)
    listing = {k.fingerprint: k for k in gpg.list_keys()}
    for name, content in (("served", genuine + MARK), ("genuine", genuine)):
        path = tmp_path / name
        path.write_bytes(content)
        fd = os.open(path, os.O_RDONLY)
        try:
            report = gpg.verify_detached(signature, OpenFile(fd) if source == "open-file" else path)
        finally:
            os.close(fd)
        if name == "served":
            assert any(sig.valid for sig in report.signatures), "the engine was not fooled: the test proves nothing"
            with pytest.raises(EnginesDisagreeError, match="Sequoia refuses it"):
                decide(report, pins, listing)
        else:
            assert decide(report, pins, listing).signer.pin.nick == "alice"


@pytest.mark.parametrize("child", [
    "print('verified')",
    "import sys; sys.exit(3)",
    "",
    "import json, sys; print(json.dumps({'valid': [[sys.argv[0], 'x']], 'said': []}))",
    "import json; print(json.dumps({'valid': [], 'said': 'no', 'extra': 1}))",
    "import json; print(json.dumps({'valid': [['ab' * 20]], 'said': []}))",
    "import json; print(json.dumps({'valid': [['ab' * 20, 'ab' * 20]], 'said': []}))",  # lower case: not Sequoia's
    "import json, sys; print(json.dumps({'valid': [['PRIMARY', 'SIGNING']], 'said': []})); sys.exit(1)",
], ids=["garbled", "failed", "silent", "not-a-fingerprint", "extra-field", "half-a-signer", "lower-case",
        "good-answer-then-failed"])
def test_a_garbled_or_missing_answer_from_the_child_is_a_refusal(
        keys: KeyFactory, tmp_path: Path, apart: None, monkeypatch: pytest.MonkeyPatch, child: str) -> None:
    gpg = GnuPG(tmp_path / "home")
    gpg.import_keys(keys.public("alice"))
    pins = PinSet.of([Pin(Category("gentoo-devs"), Nick("alice"), keys.keys["alice"].fingerprint)])
    genuine = b"a large release image\n"
    path = tmp_path / "image"
    path.write_bytes(genuine)
    script = tmp_path / "child.py"
    alice = keys.keys["alice"]
    script.write_text(child.replace("PRIMARY", alice.fingerprint).replace("SIGNING", alice.signing_subkey) + "\n")
    monkeypatch.setattr(sequoia, "CHILD", script)
    report = gpg.verify_detached(_signed(keys, tmp_path, genuine), path)
    assert report.second is not None and report.second.opinion is sequoia.Opinion.REFUSED
    assert "child process" in report.second.said
    with pytest.raises(EnginesDisagreeError, match="Sequoia refuses it"):
        decide(report, pins, {k.fingerprint: k for k in gpg.list_keys()})


def test_an_admitted_weak_signature_does_not_spare_a_strong_one_by_the_same_key_the_second_opinion(
        keys: KeyFactory, tmp_path: Path, home: tuple[GnuPG, PinSet]) -> None:
    """Only a signature whose own digest ``[policy] weak-hashes`` admits is GnuPG's word alone; a SHA-512 signature
    beside it by the same key still needs Sequoia (the exemption was once keyed by the signing key)."""
    import dataclasses

    from gkeys_portage.openpgp.verdict import VerifyPolicy

    gpg, pins = home
    genuine = b"data\n"
    report = gpg.verify_detached(_signed(keys, tmp_path, genuine), genuine)
    strong = report.signatures[0]
    weak = dataclasses.replace(strong, hash_algo=2)  # SHA-1, admitted below for its creation time
    report.signatures = [weak, strong]
    report.second = sequoia.SecondOpinion(sequoia.Opinion.REFUSED, said="bad signature")
    policy = VerifyPolicy(weak_hashes={2: float(strong.created or 0) + 1})
    with pytest.raises(EnginesDisagreeError, match="Sequoia refuses it"):
        decide(report, pins, {k.fingerprint: k for k in gpg.list_keys()}, policy)


def _rsa_clearsigned_with_padded_mpi(tmp_path: Path) -> tuple[GnuPG, bytes, bytes]:
    """A throwaway RSA key (Gentoo's release keys are RSA) in a verifying home, a genuine cleartext block over
    text with a decoy END line, and the same block with its signature MPI padded by a zero octet (GnuPG reads it;
    :func:`canonical_mpis` rewrites it for Sequoia)."""
    from gkeys_portage.openpgp.mpis import mpi_start, read_mpis
    from gkeys_portage.openpgp.packets import ARMOR_BEGIN, Packet, _new_format, armor, find_clearsigned, parse_packets

    signer = tmp_path / "signer"
    signer.mkdir(mode=0o700)
    gpg_cli = ["gpg", "--homedir", str(signer), "--batch", "--passphrase", "", "--pinentry-mode", "loopback"]
    subprocess.run([*gpg_cli, "--quick-gen-key", "Rel <rel@example.org>", "rsa2048", "sign", "2y"], check=True,
                   capture_output=True)
    data = tmp_path / "DIGESTS"
    data.write_bytes(b"# SHA512 HASH\nx-----END PGP SIGNATURE-----\nabc  stage3.tar.xz\n")
    subprocess.run([*gpg_cli, "--digest-algo", "SHA512", "--clearsign", str(data)], check=True, capture_output=True)
    message = (tmp_path / "DIGESTS.asc").read_bytes()
    (packet,) = parse_packets(find_clearsigned(message).signature)
    start = mpi_start(packet.body)
    assert start is not None
    ((_, value),) = read_mpis(packet.body[2], packet.body[start:])
    padded = packet.body[:start] + ((len(value) + 1) * 8).to_bytes(2, "big") + b"\x00" + value
    at = message.index(ARMOR_BEGIN)
    forged = message[:at] + armor(_new_format(Packet(packet.tag, padded)))
    gpg = GnuPG(tmp_path / "verify")
    gpg.import_keys(subprocess.run([*gpg_cli, "--export"], capture_output=True, check=True).stdout)
    return gpg, message, forged


def test_decoy_markers_inside_lines_neither_crash_nor_cut_the_second_opinions_input(tmp_path: Path) -> None:
    """Issue 43 item 14: ``x-----BEGIN PGP SIGNED MESSAGE-----`` before the block and ``x-----END PGP
    SIGNATURE-----`` inside its text are text, not block markers: Sequoia reads the block the parser found at line
    starts (on main, the decoys cut its input and a rewritten RSA MPI raised ValueError in a worker thread)."""
    gpg, genuine, padded = _rsa_clearsigned_with_padded_mpi(tmp_path)
    for message in (genuine, padded):
        report, text = gpg.verify_clearsigned(b"x-----BEGIN PGP SIGNED MESSAGE-----\n" + message)
        assert report.second is not None and report.second.opinion is sequoia.Opinion.ACCEPTED, report.second
        assert text == b"# SHA512 HASH\nx-----END PGP SIGNATURE-----\nabc  stage3.tar.xz\n"


def test_any_failure_building_the_second_opinions_input_is_a_refusal(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 14: whatever goes wrong while Sequoia's input is built is Sequoia's refusal, never an exception."""
    gpg, _, padded = _rsa_clearsigned_with_padded_mpi(tmp_path)

    def broken(packets: bytes) -> bytes:
        raise ValueError("subsection not found")

    monkeypatch.setattr(sequoia, "canonical_mpis", broken)
    report, _ = gpg.verify_clearsigned(padded)
    assert report.second is not None and report.second.opinion is sequoia.Opinion.REFUSED
    assert "subsection not found" in report.second.said


PEAK_WRAPPER = """
import resource, runpy
try:
    runpy.run_path({child!r}, run_name="__main__")
finally:
    own = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the checks it started (KiB)
    open({out!r}, "w").write(f"{{own}} {{children}}")
"""


@pytest.mark.slow
@pytest.mark.parametrize("packets", ["the same packet twice", "two signatures"])
def test_the_large_file_child_hashes_in_bounded_memory_whatever_the_number_of_packets(
        keys: KeyFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, packets: str) -> None:
    """Issue 43 item 15: a 96 MiB file with two signature packets in its ``.asc`` (the genuine one twice, or two
    distinct ones) is checked by Sequoia in the child with every process's peak (VmHWM of the child, the largest
    of the checks it starts) well below the file's size; on main the child read the whole file (96 MiB -> 304 MiB)."""
    from gkeys_portage.openpgp.packets import detached_signature_packets

    gpg = GnuPG(tmp_path / "home")
    gpg.import_keys(keys.public("alice"))
    pins = PinSet.of([Pin(Category("gentoo-devs"), Nick("alice"), keys.keys["alice"].fingerprint)])
    image = tmp_path / "image.iso"
    with open(image, "wb") as out:
        for _ in range(96):
            out.write(os.urandom(1 << 20))
    first = detached_signature_packets(keys.sign(Nick("alice"), image, armor=False))
    second = first if packets == "the same packet twice" else detached_signature_packets(
        keys.sign(Nick("alice"), image, armor=False, notations={"second@example.org": "yes"}))
    peak = tmp_path / "peak"
    wrapper = tmp_path / "child.py"
    wrapper.write_text(PEAK_WRAPPER.format(child=str(sequoia.CHILD), out=str(peak)))
    monkeypatch.setattr(sequoia, "CHILD", wrapper)
    report = gpg.verify_detached(first + second, image)
    assert report.second is not None and report.second.opinion is sequoia.Opinion.ACCEPTED, report.second
    assert decide(report, pins, {k.fingerprint: k for k in gpg.list_keys()}).signer.pin.nick == "alice"
    own, children = (int(n) for n in peak.read_text().split())
    assert max(own, children) < 64 * 1024, (own, children)  # KiB: the file is 96 MiB


def test_identical_packets_are_checked_once_and_more_than_eight_distinct_ones_are_refused(tmp_path: Path) -> None:
    """The large-file child (``sequoia_child.answer``) counts distinct packets: the same packet nine times is one
    check (here of a packet that does not parse), nine distinct ones over one large file are refused, saying so,
    before any child is started or the file is read."""
    from gkeys_portage.openpgp import sequoia_child

    request = {"data": str(tmp_path / "never-read"), "certs": [], "path": []}
    refused = sequoia_child.answer({**request, "signatures": [f"packet{n}" for n in range(9)]})
    assert refused == {"valid": [], "said": ["9 distinct signature packets over one large file; at most 8 are "
                                             "checked: refused"]}
    once = sequoia_child.answer({**request, "signatures": ["packet"] * 9})
    assert not once["valid"] and len(once["said"]) == 1 and "distinct" not in once["said"][0], once


PIPED_PEAK = """
import sys
from pathlib import Path
from gkeys_portage.openpgp.gnupg import GnuPG

def peak():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))

gpg = GnuPG(Path(sys.argv[1]))
signature = Path(sys.argv[2]).read_bytes()
gpg.verify_detached(signature, b"warm-up")  # pysequoia, the keyring export: loaded before the measure
before = peak()
report = gpg.verify_detached(signature, Path(sys.argv[3]))
print(report.second.opinion.value, peak() - before)
"""


def test_a_file_reaches_sequoia_through_a_pipe_never_mapped_whole(keys: KeyFactory, tmp_path: Path) -> None:
    """A 48 MiB file (checked in this process: below the child's threshold) reaches Sequoia through the pipe
    gkeys feeds: the verifying process's peak grows by far less than the file (Sequoia maps a file it opens
    itself whole: +48 MiB resident)."""
    home = tmp_path / "home"
    GnuPG(home).import_keys(keys.public("alice"))
    image = tmp_path / "image.iso"
    with open(image, "wb") as out:
        for _ in range(48):
            out.write(os.urandom(1 << 20))
    signature = tmp_path / "image.iso.sig"
    signature.write_bytes(keys.sign(Nick("alice"), image, armor=False))
    done = subprocess.run([sys.executable, "-c", PIPED_PEAK, str(home), str(signature), str(image)], cwd=PROJECT,
                          capture_output=True, text=True, timeout=120, check=False)
    opinion, grown = done.stdout.split()
    assert opinion == sequoia.Opinion.ACCEPTED.value, done.stderr
    assert int(grown) < 16 * 1024, f"the peak grew by {grown} KiB for a 48 MiB file"


def test_an_empty_keyring_export_is_never_kept(keys: KeyFactory, tmp_path: Path) -> None:
    """An export that answered nothing (gpg-sq rewriting its home at that moment) is not remembered for the
    process: the next check of the same unchanged keyring exports again and finds the key."""
    home = tmp_path / "home"
    GnuPG(home).import_keys(keys.public("alice"))
    assert sequoia._certificates(home, lambda: b"").certs == []
    again = sequoia._certificates(home, lambda: keys.public("alice", armor=False))
    assert len(again.certs) == 1


BUSY_HOME = f"""#!{sys.executable}
# An engine that rewrites its home while it verifies (as gpg-sq does): an export that overlaps a verify answers
# nothing.  Each waits (up to 2 s) for the other, so whether they overlap does not depend on timing: they do
# exactly when the export was asked for after the verification began being prepared (no read-ahead).
import os, subprocess, sys, time
MARKS, HOME = {{marks!r}}, {{home!r}}
args = sys.argv[1:]
ours = "--homedir" in args and args[args.index("--homedir") + 1] == HOME  # not the engine probes' homes
busy, asked = os.path.join(MARKS, "verifying"), os.path.join(MARKS, "asked-while-verifying")

def wait_for(path):
    deadline = time.monotonic() + 2
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    return os.path.exists(path)

if ours and "--export" in args and wait_for(busy):
    open(asked, "w").close()
    sys.exit(0)
if ours and "--verify" in args:
    open(busy, "w").close()
    wait_for(asked)
    done = subprocess.run(["gpg", *args], close_fds=False)
    os.unlink(busy)
    sys.exit(done.returncode)
os.execvp("gpg", ["gpg", *args])
"""


def test_the_certificates_are_read_before_gpg_runs_in_the_home(keys: KeyFactory, tmp_path: Path) -> None:
    """Sequoia's certificates are exported before gpg starts verifying in the same home (an engine that rewrites
    its home then answers an export with nothing: the second opinion would refuse every good signature)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    program = tmp_path / "gpg-busy-home"
    program.write_text(BUSY_HOME.format(marks=str(marks), home=str(tmp_path / "home")))
    program.chmod(0o755)
    gpg = GnuPG(tmp_path / "home", program=str(program))
    gpg.import_keys(keys.public("alice"))
    pins = PinSet.of([Pin(Category("gentoo-devs"), Nick("alice"), keys.keys["alice"].fingerprint)])
    data = b"payload\n"
    report = gpg.verify_detached(_signed(keys, tmp_path, data), data)
    assert not (marks / "asked-while-verifying").exists(), "the keyring was exported while gpg verified"
    decide(report, pins, {k.fingerprint: k for k in gpg.list_keys()})


def test_a_signed_text_sequoia_read_otherwise_is_its_refusal() -> None:
    """Row 157: Sequoia's good signature counts only for the text GnuPG returned (a cleartext's last line ending
    aside): a block whose lines each engine split otherwise (CRLF kept by one) is refused, naming where they
    differ.  No mutant of the differential test reaches this check past the cleartext parser, so it is proven
    here."""
    from gkeys_portage.openpgp.signatures import same_text

    accepted = sequoia.SecondOpinion(sequoia.Opinion.ACCEPTED, frozenset({("A" * 40, "B" * 40)}), text=b"one\ntwo")
    assert same_text(accepted, b"one\ntwo\n", cleartext=True) is accepted
    assert same_text(accepted, b"one\ntwo\r\n", cleartext=True) is accepted
    refused = same_text(accepted, b"one\r\ntwo\r\n", cleartext=True)
    assert refused.opinion is sequoia.Opinion.REFUSED and not refused.signers, refused
    assert "another signed text than GnuPG" in refused.said and "line 1" in refused.said, refused.said
    message = sequoia.SecondOpinion(sequoia.Opinion.ACCEPTED, frozenset({("A" * 40, "B" * 40)}), text=b"data\r\n")
    assert same_text(message, b"data\r\n", cleartext=False) is message
    assert same_text(message, b"data\n", cleartext=False).opinion is sequoia.Opinion.REFUSED
