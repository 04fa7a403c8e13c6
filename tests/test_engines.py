"""Every OpenPGP engine Gentoo ships (issue 25): same bytes, same verdict, or a refusal that names the engine.

The table (:func:`_cases`, more than 100 cases) is made once, by the reference GnuPG (``gpg`` on ``PATH``,
the signers' side): the signature matrix and the red-team cases (text mode, critical notations, weak
hashes, compressed packets, good+bad pairs, unpinned, unknown, revoked and future signers, inline and
cleartext messages), the fuzz corpus, and bit flips through the data and the signature.  Each engine then
checks the same files in a process of its own (``$GKEYS_GPG``), against its own copy of one keyring, one
signature at a time *and* as one batch (``verify_detached_many``: ``--verify --multifile``, or one
``--verify`` per signature where the engine has no multifile verdicts), and must give the verdict the
table expects: ``verified:<nicks>`` or the refusal's class.

Engines: ``gpg`` always; ``gpg-2.4`` and ``gpg-sq`` from ``$GKEYS_TEST_ENGINES`` (default
``/opt/gkeys-engines/bin``, built by ``../shared/openpgp-engines/make-engines.sh``).  Without them their cases
are skipped with that message; with ``$GKEYS_TEST_ENGINES`` set (CI), a missing engine fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import PROJECT, SIGNER_PROGRAM, GkeysEnv
from engine_expectations import expected_failure, known_lacks

from gkeys_portage.core.config import load_config
from gkeys_portage.core.errors import ConfigError, EngineError
from gkeys_portage.demo.world import DemoKey, KeyFactory, LoopbackServer, past
from gkeys_portage.openpgp.engine import Capability, Engine, probe
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.packets import armor

ENGINES_VARIABLE = "GKEYS_TEST_ENGINES"
DEFAULT_ENGINES = Path("/opt/gkeys-engines/bin")
MAKE_ENGINES = "bash ../shared/openpgp-engines/make-engines.sh /opt/gkeys-engines"
PINNED = ("alice", "bob", "expired", "engrev", "engrsa")  # mallory is in the keyring, never pinned


def _engine_params() -> list[Any]:
    explicit = os.environ.get(ENGINES_VARIABLE)
    where = Path(explicit) if explicit else DEFAULT_ENGINES
    params = [pytest.param("gpg", id="gpg")]
    for name in ("gpg-2.4", "gpg-sq"):
        program = where / name
        marks = [] if program.exists() or explicit else [pytest.mark.skip(
            reason=f"{program} is not built: run {MAKE_ENGINES} (or set ${ENGINES_VARIABLE} to its bin/)")]
        params.append(pytest.param(str(program), id=name, marks=marks))
    return params


ENGINES = _engine_params()


def _require(program: str) -> str:
    if program != "gpg" and not Path(program).exists():
        pytest.fail(f"engine {program} is missing (${ENGINES_VARIABLE} is set: did make-engines.sh fail?)")
    return program


def _sq() -> str:
    where = Path(os.environ.get(ENGINES_VARIABLE) or DEFAULT_ENGINES)
    program = where / "gpg-sq"
    if not program.exists():
        if os.environ.get(ENGINES_VARIABLE):
            pytest.fail(f"{program} is missing (${ENGINES_VARIABLE} is set: did make-engines.sh fail?)")
        pytest.skip(f"{program} is not built: run {MAKE_ENGINES}")
    return str(program)


# -- the table ---------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One row: the bytes an engine checks, and the verdict every engine must give (None: the reference's,
    and never ``verified``)."""

    name: str
    kind: str  # "detached" (signature + data) or "inline" (one message)
    signature: bytes
    data: bytes = b""
    expected: str | None = None


class _NoCapture:
    """GkeysEnv's capture for a module-wide world (output goes to pytest's own capture)."""

    def readouterr(self) -> Any:
        return type("Captured", (), {"out": "", "err": ""})()


@dataclass
class World:
    env: GkeysEnv
    cases: list[Case]
    directory: Path


def _signer(keys: KeyFactory, when: datetime | None = None) -> GnuPG:
    return keys.gpg if when is None else GnuPG(keys.home, faked_time=when, program=keys.gpg.program)


def _sign(keys: KeyFactory, work: Path, nick: str, data: bytes, *options: str, when: datetime | None = None,
          mode: str = "--detach-sign") -> bytes:
    path = work / f"to-sign-{time.monotonic_ns()}"
    path.write_bytes(data)
    result = _signer(keys, when).run([*options, "--local-user", keys.keys[nick].signing_subkey + "!", mode,
                                      "--output", "-", str(path)])
    assert result.returncode == 0, result.stderr
    return result.stdout


def _flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1:]


def _unhashed_area(packet: bytes) -> range:
    """The bytes of a binary v4 signature packet (one-byte old-format length) that hold its unhashed
    subpackets, their length field included."""
    assert packet[0] == 0x88 and packet[2] == 4, packet[:3].hex()
    hashed = int.from_bytes(packet[6:8], "big")
    start = 8 + hashed
    return range(start, start + 2 + int.from_bytes(packet[start:start + 2], "big"))


def _cases(keys: KeyFactory, work: Path, revoked: bytes) -> list[Case]:
    data = b"stage3-amd64-20261204.tar.xz\n" + bytes(range(256)) + b"\nend\n"
    crlf = b"line one\r\nline two\r\n"
    good = _sign(keys, work, "alice", data)
    cases = [Case("good/binary", "detached", good, data, "verified:alice"),
             Case("good/armored", "detached", armor(good), data, "verified:alice"),
             Case("good/bob", "detached", _sign(keys, work, "bob", data), data, "verified:bob"),
             Case("good/empty-data", "detached", _sign(keys, work, "alice", b""), b"", "verified:alice")]
    # the data changed: every flip, a cut and an extra byte are bad signatures
    for index in range(0, len(data), 13):
        cases.append(Case(f"data/flip-{index}", "detached", good, _flip(data, index), "BadSignatureError"))
    cases += [Case("data/truncated", "detached", good, data[:-1], "BadSignatureError"),
              Case("data/extended", "detached", good, data + b"\n", "BadSignatureError"),
              Case("data/empty", "detached", good, b"", "BadSignatureError")]
    # the signature changed: never verified (but in its unhashed area, which no signature covers), and the
    # same verdict on every engine
    unhashed = _unhashed_area(good)
    for index in range(0, len(good), 4):
        # after the unhashed area: the hash's left 16 bits, then the first MPI's bit count, which gpg reads
        # only to size the number (a count one lower names the same 32 bytes of an ed25519 value)
        where = ("unhashed-" if index in unhashed else "mpi-bits-" if index == unhashed.stop + 3 else "")
        cases.append(Case(f"signature/flip-{where}{index}", "detached", _flip(good, index), data))
    cases += [Case("signature/cut-half", "detached", good[: len(good) // 2], data, "NoSignatureError"),
              Case("signature/empty", "detached", b"", data, "NoSignatureError"),
              Case("signature/garbage", "detached", bytes(range(1, 200)), data, "NoSignatureError"),
              Case("signature/trailing-garbage", "detached", good + b"\x00garbage", data),
              Case("signature/public-key", "detached", keys.public("alice", armor=False), data, "NoSignatureError"),
              Case("signature/compressed", "detached", armor(b"\xa3\x02" + zlib.compress(good)), data,
                   "NoSignatureError"),
              Case("signature/armor-as-message", "detached", armor(good, "MESSAGE"), data)]
    # who signed
    cases += [Case("signer/unpinned", "detached", _sign(keys, work, "mallory", data), data, "SignerNotPinnedError"),
              Case("signer/unknown", "detached", _sign(keys, work, "releng", data), data, "UnknownSignerError"),
              Case("signer/revoked", "detached", revoked, b"", "RevokedKeyError"),
              Case("signer/expired-key-signed-while-valid", "detached",
                   _sign(keys, work, "expired", data, when=past(600)), data, "verified:expired"),
              Case("signer/future", "detached",
                   _sign(keys, work, "alice", data, when=datetime.fromtimestamp(time.time() + 86400, UTC)), data,
                   "FutureSignatureError")]
    # what the signature says
    text = _sign(keys, work, "alice", crlf, "--textmode")
    cases += [Case("class/textmode-crlf", "detached", text, crlf, "SignatureClassError"),
              Case("class/textmode-lf", "detached", text, crlf.replace(b"\r\n", b"\n"), "SignatureClassError"),
              Case("notation/critical-unknown", "detached",
                   _sign(keys, work, "alice", crlf, "--sig-notation", "!unknown@example.org=x"), crlf,
                   "BadSignatureError"),
              Case("notation/known", "detached",
                   _sign(keys, work, "alice", crlf, "--sig-notation", "known@example.org=x"), crlf, "verified:alice"),
              Case("expiry/expired-signature", "detached",
                   _sign(keys, work, "expired", crlf, "--default-sig-expire", "1d", when=past(600)), crlf,
                   "ExpiredKeyError")]
    for digest in ("SHA256", "SHA384", "SHA512", "SHA224"):
        cases.append(Case(f"hash/ed25519-{digest}", "detached",
                          _sign(keys, work, "alice", data, "--digest-algo", digest), data, "verified:alice"))
    for digest, verdict in (("SHA1", "WeakHashError"), ("RIPEMD160", "WeakHashError"), ("SHA256", "verified:engrsa"),
                            ("SHA512", "verified:engrsa"), ("SHA224", "verified:engrsa")):
        cases.append(Case(f"hash/rsa-{digest}", "detached",
                          _sign(keys, work, "engrsa", data, "--digest-algo", digest), data, verdict))
    # several signatures in one file
    bad = _sign(keys, work, "alice", data + b"other")
    bob = _sign(keys, work, "bob", data)
    mallory = _sign(keys, work, "mallory", data)
    releng = _sign(keys, work, "releng", data)
    cases += [Case("multi/good+bad", "detached", good + bad, data, "BadSignatureError"),
              Case("multi/bad+good", "detached", bad + good, data, "BadSignatureError"),
              Case("multi/alice+bob", "detached", good + bob, data, "verified:alice,bob"),
              Case("multi/good+unknown", "detached", good + releng, data, "verified:alice"),
              Case("multi/unknown+unpinned", "detached", releng + mallory, data, "SignerNotPinnedError"),
              Case("multi/unpinned+good", "detached", mallory + good, data, "verified:alice"),
              Case("multi/good+revoked", "detached", _sign(keys, work, "alice", b"") + revoked, b"",
                   "RevokedKeyError"),
              Case("multi/good-twice", "detached", good + good, data, "verified:alice"),
              Case("multi/good+unpinned-future", "detached", good + _sign(
                  keys, work, "mallory", data, when=datetime.fromtimestamp(time.time() + 86400, UTC)), data,
                   "verified:alice")]
    # inline: cleartext and signed messages
    note = b"latest-stage3-amd64.txt\n- dash line\nFrom the top\n"
    clear = _sign(keys, work, "alice", note, mode="--clearsign")
    message = _sign(keys, work, "alice", note, mode="--sign")
    cases += [Case("inline/clearsigned", "inline", clear, expected="verified:alice"),
              Case("inline/clearsigned-crlf", "inline", clear.replace(b"\n", b"\r\n"), expected="verified:alice"),
              Case("inline/clearsigned-changed", "inline", clear.replace(b"From the top", b"From the tip"),
                   expected="BadSignatureError"),
              Case("inline/clearsigned-unpinned", "inline", _sign(keys, work, "mallory", note, mode="--clearsign"),
                   expected="SignerNotPinnedError"),
              Case("inline/clearsigned-unsigned-tail", "inline", clear + b"echo evil\n"),
              Case("inline/clearsigned-unsigned-head", "inline", b"echo evil\n" + clear),
              Case("inline/signed-message", "inline", message, expected="verified:alice"),
              Case("inline/signed-message-armored", "inline", armor(message, "MESSAGE"), expected="verified:alice"),
              Case("inline/signed-message-flipped", "inline", _flip(message, len(message) // 2)),
              Case("inline/binary-signature-of-other-bytes-in-cleartext", "inline",
                   clear.split(b"-----BEGIN PGP SIGNATURE-----")[0] + armor(_sign(keys, work, "alice", note)),
                   expected="BadSignatureError"),
              Case("inline/binary-class-in-cleartext", "inline",  # a binary signature of the canonical text
                   clear.split(b"-----BEGIN PGP SIGNATURE-----")[0]
                   + armor(_sign(keys, work, "alice", note.rstrip(b"\n").replace(b"\n", b"\r\n"))),
                   expected="SignatureClassError")]
    # the fuzz corpus (inputs that once crashed a parser)
    corpus = PROJECT / "tests" / "fuzz_corpus"
    for name in ("detached-whitespace-armor",):
        cases.append(Case(f"corpus/{name}", "detached", (corpus / name).read_bytes(), data, "NoSignatureError"))
    for name in ("clearsigned-nul-in-text", "message-zlib-bomb-header"):
        cases.append(Case(f"corpus/{name}", "inline", (corpus / name).read_bytes()))
    return cases


@pytest.fixture(scope="module")
def world(keys: KeyFactory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One keyring (installed by gkeys with the reference GnuPG: alice, bob, mallory, a key expired since, an
    RSA key and a key revoked after it signed) and the table, written to disk."""
    root = tmp_path_factory.mktemp("engines")
    if "engrsa" not in keys.keys:
        primary = keys.gpg.generate_key("Eng Rsa <engrsa@gentoo.org>", algorithm="rsa2048", usage="cert")
        keys.keys["engrsa"] = DemoKey("Eng Rsa", "engrsa@gentoo.org", primary,
                                      keys.gpg.add_subkey(primary, algorithm="rsa2048", usage="sign"))
    fresh = "engrev" not in keys.keys
    if fresh:
        keys.create("engrev")
    revoked = _sign(keys, root, "engrev", b"")  # made while the key was good (empty data is enough)
    if fresh:
        keys.revoke("engrev")
    cases = _cases(keys, root, revoked)
    server = LoopbackServer()
    try:
        env = GkeysEnv(root, server, keys, _NoCapture())  # type: ignore[arg-type]
        env.install_devs(*PINNED, "mallory")
        directory = root / "table"
        directory.mkdir()
        index = []
        for number, case in enumerate(cases):
            (directory / f"{number}.sig").write_bytes(case.signature)
            (directory / f"{number}.data").write_bytes(case.data)
            index.append({"name": case.name, "kind": case.kind, "number": number})
        (directory / "index.json").write_text(json.dumps(index))
        yield World(env, cases, directory)
    finally:
        server.close()


#: Where an engine refuses by its own policy (Sequoia's), with a less precise refusal than gkeys' own: still
#: refused, never verified (SECURITY.md: the engine rows and the known limits).  Each must stay exactly so: a
#: change is a finding.
KNOWN_DIFFERENCES: dict[str, dict[str, tuple[str, str]]] = {
    "gpg-sq": {
        "signer/future": ("BadSignatureError", "Sequoia reports a signature dated in the future as BADSIG"),
        "expiry/expired-signature": ("BadSignatureError", "Sequoia reports an expired signature as BADSIG"),
        "hash/rsa-SHA1": ("BadSignatureError", "Sequoia's policy refuses SHA-1 (ERRSIG rc 5)"),
        "hash/rsa-RIPEMD160": ("BadSignatureError", "Sequoia's policy refuses RIPEMD-160 (ERRSIG rc 5)"),
        # stricter, never weaker: a future-dated signature by a key that is not pinned, beside a good one
        "multi/good+unpinned-future": ("BadSignatureError", "Sequoia's BADSIG for the unpinned future signature"),
    },
}


# -- each engine checks the table ------------------------------------------------------------------------

RUNNER = """
import json, sys
from pathlib import Path
from gkeys_portage.core.config import load_config
from gkeys_portage.core.errors import EngineError, GkeysError
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.openpgp.verdict import decide

config, table, nicks = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split(",")
verifier = Gkeys(load_config(config)).verifier("gentoo-devs", nicks)

def verdict(check):
    try:
        result = check()
    except EngineError as exc:
        return "engine-lacks:" + exc.capability
    except GkeysError as exc:
        return type(exc).__name__
    return "verified:" + ",".join(sorted({good.pin.nick for good in result.good}))

single, batch, items = {}, {}, []
for row in json.loads((table / "index.json").read_text()):
    sig = (table / f"{row['number']}.sig").read_bytes()
    data = (table / f"{row['number']}.data").read_bytes()
    if row["kind"] == "detached":
        single[row["name"]] = verdict(lambda: verifier.detached(sig, data))
        items.append((row["name"], sig, data))
    else:
        single[row["name"]] = verdict(lambda: verifier.clearsigned(sig))
reports = verifier.keyring.gpg().verify_detached_many([(sig, data) for _, sig, data in items], jobs=2)
installed = verifier.keyring.installed()
for (name, _, _), report in zip(items, reports):
    batch[name] = verdict(lambda: decide(report, verifier.pins, installed, verifier.policy))
print(json.dumps({"single": single, "batch": batch}))
"""


def _verdicts(world: World, program: str, work: Path) -> dict[str, dict[str, str]]:
    """The table's verdicts by ``program``, run as gkeys runs it (``$GKEYS_GPG``), on a copy of the state."""
    state = work / "state"
    shutil.copytree(world.env.state, state, symlinks=True,
                    ignore=shutil.ignore_patterns("S.gpg-agent*", "lock"))
    config = work / "gkeys.conf"
    config.write_text(f"[base]\ngkeysdir = {state}\n")
    done = subprocess.run([sys.executable, "-c", RUNNER, str(config), str(world.directory), ",".join(PINNED)],
                          capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "GKEYS_GPG": program, "GKEYS_CONFIG": str(config)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def reference(world: World, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """The reference GnuPG's verdicts (the signers' GnuPG, ``gpg`` on PATH)."""
    return _verdicts(world, SIGNER_PROGRAM, tmp_path_factory.mktemp("reference"))


def test_the_table_has_more_than_100_cases_and_the_reference_gives_the_expected_verdicts(
        world: World, reference: dict[str, dict[str, str]]) -> None:
    assert len(world.cases) >= 100, len(world.cases)
    wrong = {case.name: reference["single"][case.name] for case in world.cases
             if case.expected is not None and reference["single"][case.name] != case.expected}
    assert not wrong, wrong
    # a changed signature or message is never good
    allowed = ("trailing", "unsigned", "unhashed")  # bytes no signature covers
    assert not [case.name for case in world.cases if case.expected is None
                and reference["single"][case.name].startswith("verified")
                and not any(word in case.name for word in allowed)], reference


@pytest.mark.parametrize("program", ENGINES)
def test_every_engine_gives_the_same_verdict_one_at_a_time_and_in_a_batch(
        world: World, reference: dict[str, dict[str, str]], program: str, tmp_path: Path) -> None:
    """Same bytes, same verdict: one signature at a time and as a batch (multifile, or one --verify per
    signature where the engine has no multifile verdicts), on every engine."""
    engine = probe(_require(program))
    verdicts = _verdicts(world, program, tmp_path)
    known = KNOWN_DIFFERENCES.get(Path(program).name, {})
    for name, (verdict, _why) in known.items():
        assert not verdict.startswith("verified")  # an engine may refuse more, never verify more
        assert verdicts["single"][name] == verdict, (name, verdicts["single"][name])
    lacking = {f"engine-lacks:{cap.name}" for cap in Capability if not engine.has(cap)}
    differ = {name: (verdicts["single"][name], verdict) for name, verdict in reference["single"].items()
              if verdicts["single"][name] != verdict and name not in known
              and verdicts["single"][name] not in lacking}
    assert not differ, f"{engine.describe()} disagrees with the reference GnuPG: {differ}"
    refused = {name: verdict for name, verdict in verdicts["single"].items() if verdict in lacking}
    print(f"{engine.describe()}: {len(verdicts['single'])} cases, {len(known)} known differences, "
          f"{len(refused)} refused for a missing capability ({sorted(set(refused.values()))})")
    batch = {name: (verdicts["batch"][name], verdicts["single"][name]) for name in verdicts["batch"]
             if verdicts["batch"][name] != verdicts["single"][name]}
    assert not batch, f"{engine.describe()}: batch and one-at-a-time verdicts differ: {batch}"


# -- what an engine lacks is refused by name; what it can do is judged by probing, not by its number ---------


@pytest.mark.parametrize("program", ENGINES)
def test_each_engine_lacks_exactly_what_its_table_names(program: str) -> None:
    """The probes find, for each engine, exactly the capabilities :data:`engine_expectations.KNOWN_LACKS` says
    it lacks (GnuPG 2.2 and 2.4: none): the report hook makes an expected failure of nothing else."""
    engine = probe(_require(program))
    lacking = {cap for cap in Capability if not engine.has(cap)}
    assert lacking == known_lacks(engine), (engine.describe(), sorted(cap.name for cap in lacking))


def _engine(name: str) -> Engine:
    return Engine("/opt/x/" + name.split()[0].lower(), name, name)


def test_only_a_capability_in_the_engines_table_makes_an_expected_failure() -> None:
    """The refusal's capability decides, against the engine's table: a GnuPG 2.4 refusing cleartext is a failure
    (its probe broke), gpg-sq refusing it is expected; a message cut short counts by its job; a failure
    without a refusal, or with one refusal outside the table, stays a failure."""
    cleartext = ("AssertionError: gpg-2.4 (GnuPG 2.4.7) cannot verify cleartext-signed messages: it lacks "
                 f"{Capability.CLEARTEXT.value}; GnuPG 2.2 or 2.4 can: ...")
    sq, gnupg = _engine("Sequoia Chameleon 0.13.1"), _engine("GnuPG 2.4.7")
    assert expected_failure(gnupg, cleartext) is None
    assert expected_failure(_engine("GnuPG 2.2.40"), cleartext) is None
    assert expected_failure(_engine("Unknown PGP 1.0"), cleartext) is None
    assert "lacks " + Capability.CLEARTEXT.value in (expected_failure(sq, cleartext) or "")
    cut = "assert 0 == 1 where ... 'gpg-sq (Sequoia Chameleon 0.13.1) cannot import keys without ...'"
    assert expected_failure(sq, cut) and not expected_failure(gnupg, cut)
    assert expected_failure(sq, "gpg-sq (Sequoia Chameleon 0.13.1) cannot verify ...") is None  # STATUS: has it
    assert expected_failure(sq, "assert 'BADSIG' in text") is None
    assert expected_failure(sq, cleartext + "\n" + cleartext.replace("cleartext-signed messages", "signatures")
                            .replace(Capability.CLEARTEXT.value, Capability.STATUS.value)) is None


def test_gpg_sq_verifies_a_tree_with_one_verify_per_commit(env: GkeysEnv, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """gpg-sq has no --multifile verdicts (it pairs no data file: FILE_START, NODATA, FILE_DONE): the tree
    verifier gets one --verify per commit from it, and the same verdicts (a bad commit is still named)."""
    from tree_helpers import build, install_devs

    sq = _sq()
    install_devs(env, ("alice", "bob"))
    repo = build(tmp_path / "repo", env.keys, ["alice", "bob", "alice"])
    monkeypatch.setenv("GKEYS_GPG", sq)
    assert not probe(sq).has(Capability.MULTIFILE)
    result = env.run("--json", "verify-tree", str(repo.path), "--policy", "all")
    assert result.code == 0, result.text
    assert json.loads(result.out)["checked"] == 3
    repo.commit("mallory")
    result = env.run("verify-tree", str(repo.path))
    assert result.code == 1 and "bad commit" in result.text and "unknown key" in result.text, result.text


def test_gpg_sq_refuses_key_import_naming_the_engine_and_what_it_lacks(env: GkeysEnv,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``self-sigs-only`` an import would keep every third-party certification (the flooding gkeys'
    imports are built to refuse): refused, never a weaker import, and nothing is written."""
    sq = _sq()
    fingerprint = env.keys.keys["alice"].fingerprint
    assert env.run("add-seed", "-C", "gentoo-devs", "-n", "alice", "-N", "Alice", "-K", fingerprint).code == 0
    keyfile = env.root / "alice.asc"
    keyfile.write_bytes(env.keys.public("alice"))
    monkeypatch.setenv("GKEYS_GPG", sq)
    result = env.run("import-key", "-C", "gentoo-devs", "-n", "alice", "-F", str(keyfile))
    assert result.code == 1, result.text
    assert (f"{sq} (Sequoia Chameleon" in result.text and "lacks --import-options self-sigs-only,no-import-clean"
            in result.text and "GnuPG 2.2 or 2.4" in result.text and "[gpg] program" in result.text), result.text
    assert "Traceback" not in result.text
    assert not (env.state / "keyrings" / "gentoo-devs" / "pubring.kbx").exists()


def test_gpg_sq_refuses_key_generation_before_making_anything(tmp_path: Path) -> None:
    """gpg-sq makes a key with an empty passphrase and then cannot use it ("No passphrase given"): gkeys-gen
    and the demo get the refusal first, not a half-made key."""
    sq = _sq()
    with pytest.raises(EngineError, match="cannot generate keys: it lacks unprotected keys through --pinentry-mode"):
        GnuPG(tmp_path / "home", program=sq).generate_key("X <x@example.org>")
    assert not list((tmp_path / "home").glob("pubring*"))


def _wrapper(path: Path, banner: str, real: str) -> str:
    """A program that says it is ``banner`` and runs ``real`` for everything else."""
    path.write_text(f"#!/bin/sh\ncase \"$*\" in *--version*) echo '{banner}'; exit 0;; esac\n"
                    f"echo \"$@\" >> {path}.log\nexec {real} \"$@\"\n")
    path.chmod(0o755)
    return str(path)


def test_an_unknown_newer_gnupg_is_judged_by_its_capabilities_not_its_number(tmp_path: Path) -> None:
    """GnuPG 2.5 is not in Debian, so untested here: an engine that calls itself 2.5.9 (real 2.2 underneath)
    gets every capability from the probes; one that calls itself 2.4.7 and is gpg-sq underneath does not."""
    newer = probe(_wrapper(tmp_path / "gpg-2.5", "gpg (GnuPG) 2.5.9", shutil.which("gpg") or "gpg"))
    assert newer.name == "GnuPG 2.5.9" and all(newer.capabilities().values()), newer.capabilities()
    where = Path(os.environ.get(ENGINES_VARIABLE) or DEFAULT_ENGINES) / "gpg-sq"
    if where.exists():
        liar = probe(_wrapper(tmp_path / "gpg-liar", "gpg (GnuPG) 2.4.7", str(where)))
        assert liar.name == "GnuPG 2.4.7" and not liar.has(Capability.MULTIFILE)


def test_gpg_program_in_the_config_selects_the_engine_and_gkeys_gpg_wins(env: GkeysEnv, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GKEYS_GPG", raising=False)
    env.install_devs("alice")
    data = env.root / "file"
    data.write_bytes(b"payload\n")
    (env.root / "file.sig").write_bytes(env.keys.sign("alice", data))
    program = _wrapper(tmp_path / "my-gpg", "gpg (GnuPG) 2.2.40", shutil.which("gpg") or "gpg")
    base = env.config.read_text()
    env.config.write_text(base + f"[gpg]\nprogram = {program}\n")
    try:
        assert env.run("verify", "-F", str(data), "-C", "gentoo-devs").code == 0
        assert "--verify" in Path(program + ".log").read_text()  # the configured engine checked it
        Path(program + ".log").unlink()
        monkeypatch.setenv("GKEYS_GPG", shutil.which("gpg") or "gpg")
        assert env.run("verify", "-F", str(data), "-C", "gentoo-devs").code == 0
        assert not Path(program + ".log").exists()  # $GKEYS_GPG won
        for bad in ("program = bin/gpg", "program = /usr/bin/gpg --options x", "programm = /usr/bin/gpg"):
            env.config.write_text(base + f"[gpg]\n{bad}\n")
            with pytest.raises(ConfigError):
                load_config(env.config)
            assert env.run("verify", "-F", str(data), "-C", "gentoo-devs").code == 2
    finally:
        env.config.write_text(base)
        env.run("list-cats")  # a context without [gpg]: back to the default engine


def test_ci_builds_the_engines_and_runs_the_verdict_tests_on_each() -> None:
    """CI builds the engines after its packages (a failure stops it: ``set -e``), makes a missing engine fail
    this module (``$GKEYS_TEST_ENGINES``), and runs the verdict tests under each engine."""
    lines = (PROJECT / ".ci" / "run").read_text().splitlines()
    assert "set -euo pipefail" in lines
    build = lines.index("bash ../shared/openpgp-engines/make-engines.sh /opt/gkeys-engines")
    assert build > next(i for i, line in enumerate(lines) if line.startswith("apt-get install"))
    assert f"export {ENGINES_VARIABLE}=/opt/gkeys-engines/bin" in lines[build + 1:]
    text = "\n".join(lines)
    assert 'for engine in gpg-2.4 gpg-sq; do' in text and 'GKEYS_GPG="$GKEYS_TEST_ENGINES/$engine"' in text
    for name in ("test_sig_matrix.py", "test_sig_redteam.py", "test_media.py", "test_tree.py", "test_key_install.py",
                 "test_binpkg.py"):
        assert f"tests/{name}" in text


def test_an_engine_that_writes_into_homes_it_verifies_with_never_writes_a_live_keyring(
        env: GkeysEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """gpg-sq keeps a signature verification cache (sqlite) in ``pubring.cert.d`` of the home it verifies with:
    live keyrings are replaced by rename, never written in place, so it verifies in a private copy."""
    sq = _sq()
    env.install_devs("alice")
    data = env.root / "file"
    data.write_bytes(b"payload\n")
    (env.root / "file.sig").write_bytes(env.keys.sign("alice", data))
    home = env.state / "keyrings" / "gentoo-devs"
    before = sorted(str(p.relative_to(home)) for p in home.rglob("*") if not p.name.startswith("S.gpg-agent"))
    monkeypatch.setenv("GKEYS_GPG", sq)
    assert not probe(sq).has(Capability.READ_ONLY)
    result = env.run("verify", "-F", str(data), "-C", "gentoo-devs")
    assert result.code == 0 and "gentoo-devs/alice" in result.text, result.text
    after = sorted(str(p.relative_to(home)) for p in home.rglob("*") if not p.name.startswith("S.gpg-agent"))
    assert after == before


def test_the_probes_need_no_agent_socket_under_a_long_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ebuild phase verifies with TMPDIR=${T}, deep enough that no gpg-agent socket name fits: the probes
    must not depend on an agent (GnuPG 2.2 then failed every import probe, and the eclass refused good files)."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read $TMPDIR
    program = _wrapper(tmp_path / "gpg", "gpg (GnuPG) 2.2.40", shutil.which("gpg") or "gpg")  # a fresh cache key
    assert all(probe(program).capabilities().values()), probe(program).capabilities()
