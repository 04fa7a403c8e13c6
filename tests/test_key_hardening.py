"""Key management against hostile key sources (issue 12, items 1-4).

* subkey aliasing: an attacker key carrying a byte copy of a pinned primary key as its subkey never
  leaves quarantine, and is removed from keyrings an older version exported it into;
* imports are checked: an answer GnuPG does not import completely is a failed refresh;
* certification floods are never stored (``import-clean,self-sigs-only``), and keyblocks an older
  version stored with them are cleaned on the next update;
* refresh asks every source: a revocation published only on the keyserver applies even when WKD
  answers first with an old copy.

The attack keys are built with real gpg (``--edit-key addkey`` with the victim's keygrip, under
``--faked-system-time`` so the copied subkey has the victim's creation time and fingerprint).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import GkeysEnv

from gkeys_portage.core.types import Fingerprint
from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.keyblocks import split_keyblocks
from gkeys_portage.openpgp.keyio import _import_report
from gkeys_portage.openpgp.process import GpgResult
from gkeys_portage.openpgp.status import parse_status

CATEGORY = "gentoo-devs"


@pytest.fixture
def seeded(env: GkeysEnv) -> GkeysEnv:
    """Bootstrapped root with a fetched gentoo-devs seed (alice, bob) and no developer keys yet."""
    env.bootstrap()
    env.publish_seeds(CATEGORY, ("alice", "bob"))
    assert env.run("fetch-seed", "-C", CATEGORY).code == 0
    return env


@pytest.fixture(scope="module")
def aliasing(keys: KeyFactory, tmp_path_factory: pytest.TempPathFactory) -> tuple[Fingerprint, bytes]:
    """An attacker key A (fingerprint, exported public key) whose subkey is alice's primary key packet.

    Built in a copy of the session key home (which holds alice's secret key, needed by GnuPG's
    "existing key" route), so the session keys stay untouched.
    """
    home = tmp_path_factory.mktemp("alias")
    shutil.copytree(keys.home, home, dirs_exist_ok=True, ignore=shutil.ignore_patterns("S.*", "*.lock"))
    alice = keys.keys["alice"].fingerprint
    from datetime import UTC, datetime

    gpg = GnuPG(home)
    created = datetime.fromtimestamp(gpg.list_keys([alice])[0].primary.created or 0, UTC)
    # A is made "at" alice's creation time, so the copied key gets alice's creation time (and fingerprint).
    then = GnuPG(home, faked_time=created)
    attacker = then.generate_key("Mallet <mallet@example.org>", usage="cert", expire="2y")
    grip = _keygrip(gpg, alice)
    commands = f"addkey\n13\n{grip}\nQ\n2y\nsave\n".encode()
    result = then.run(["--expert", "--pinentry-mode", "loopback", "--passphrase", "", "--command-fd", "0",
                       "--edit-key", attacker], commands)
    assert result.returncode == 0, result.stderr
    raw = gpg.run(["--export", attacker]).stdout
    blocks = split_keyblocks(raw)
    assert [b.primary for b in blocks] == [attacker] and alice in blocks[0].subkeys, "attack key not built"
    gpg.close()
    then.close()
    return attacker, raw


def _keygrip(gpg: GnuPG, fingerprint: str) -> str:
    listing = gpg.run(["--with-colons", "--with-keygrip", "--list-keys", fingerprint]).stdout.decode()
    return next(line.split(":")[9] for line in listing.splitlines() if line.startswith("grp:"))


def _primaries(data: bytes) -> set[str]:
    """The primary keys GnuPG itself sees in key data (armored or not)."""
    home = Path(os.environ["HOME"]) / f"show-{os.urandom(4).hex()}"
    return set(GnuPG(home).import_keys(data)) if data.strip() else set()


def _keybox_primaries(env: GkeysEnv) -> set[str]:
    return {k.fingerprint for k in GnuPG(env.state / "keyrings" / CATEGORY, read_only=True).list_keys()}


def _import_as_before(env: GkeysEnv, data: bytes) -> None:
    """Store ``data`` in the live keyring as an older version did (plain ``--import``, everything kept)."""
    result = GnuPG(env.state / "keyrings" / CATEGORY).run(["--import"], data)
    assert "IMPORT_OK" in " ".join(result.status.lines), result.stderr


def _serve(env: GkeysEnv, nick: str, data: bytes) -> None:
    env.server.hkp[env.keys.keys[nick].fingerprint] = data


def test_key_carrying_a_pinned_primary_as_subkey_never_leaves_quarantine(
        seeded: GkeysEnv, aliasing: tuple[Fingerprint, bytes], tmp_path: Path) -> None:
    env = seeded
    attacker, attack_key = aliasing
    alice, bob = env.keys.keys["alice"].fingerprint, env.keys.keys["bob"].fingerprint
    _serve(env, "alice", env.keys.public("alice", armor=False) + attack_key)
    _serve(env, "bob", env.keys.public("bob"))
    result = env.run("install-key", "-C", CATEGORY)
    assert result.code == 0, result.text
    assert f"Dropped for alice: {attacker}" in result.text
    assert _keybox_primaries(env) == {alice, bob}
    exported = (env.state / "keyrings" / f"{CATEGORY}.asc").read_bytes()
    assert _primaries(exported) == {alice, bob}  # what Portage / gemato import
    out = tmp_path / "k.asc"
    assert env.run("export-keyring", "-C", CATEGORY, "-o", str(out)).code == 0
    assert _primaries(out.read_bytes()) == {alice, bob}
    # prune / remove rebuild through the same exact export: the attacker key does not come back.
    assert env.run("remove-key", "-C", CATEGORY, "-n", "bob").code == 0
    assert _keybox_primaries(env) == {alice}
    assert _primaries((env.state / "keyrings" / f"{CATEGORY}.asc").read_bytes()) == {alice}
    assert env.run("remove-key", "-C", CATEGORY, "-n", "alice").code == 0
    assert _keybox_primaries(env) == set()
    assert not (env.state / "keyrings" / f"{CATEGORY}.asc").read_bytes().strip()


def test_aliasing_key_stored_by_an_older_version_is_removed(
        seeded: GkeysEnv, aliasing: tuple[Fingerprint, bytes], tmp_path: Path) -> None:
    env = seeded
    attacker, attack_key = aliasing
    alice, bob = env.keys.keys["alice"].fingerprint, env.keys.keys["bob"].fingerprint
    for nick in ("alice", "bob"):
        _serve(env, nick, env.keys.public(nick))
    assert env.run("install-key", "-C", CATEGORY).code == 0
    # What the old commit step left behind: A in the live keybox.
    _import_as_before(env, attack_key)
    assert attacker in _keybox_primaries(env)
    out = tmp_path / "k.asc"
    assert env.run("export-keyring", "-C", CATEGORY, "-o", str(out)).code == 0
    assert _primaries(out.read_bytes()) == {alice, bob}
    refreshed = env.run("refresh-key", "-C", CATEGORY, "--force")
    assert refreshed.code == 0, refreshed.text
    assert _keybox_primaries(env) == {alice, bob}
    assert _primaries((env.state / "keyrings" / f"{CATEGORY}.asc").read_bytes()) == {alice, bob}


# -- certification floods (items 2, 3) ------------------------------------------------------------

def _certification(when: int, issuer: bytes) -> bytes:
    """A v4 EdDSA certification (0x10) by an unknown issuer: GnuPG stores such signatures unchecked."""
    hashed = bytes([5, 2]) + when.to_bytes(4, "big") + bytes([22, 33, 4]) + issuer
    unhashed = bytes([9, 16]) + issuer[-8:]
    mpis = b"".join(b"\x00\xff" + b"\x40" + os.urandom(31) for _ in range(2))
    body = (bytes([4, 0x10, 22, 8]) + len(hashed).to_bytes(2, "big") + hashed
            + len(unhashed).to_bytes(2, "big") + unhashed + os.urandom(2) + mpis)
    return bytes([0xC2, 0xFF]) + len(body).to_bytes(4, "big") + body


def flooded(key: bytes, count: int, start: int) -> bytes:
    """``key`` (binary, one keyblock) with ``count`` distinct third-party certifications on its first uid."""
    from gkeys_portage.openpgp.keyblocks import _packets

    packets = list(_packets(key))
    cut = packets[2][3]  # after the first user id's self-signature
    assert [p[0] for p in packets[:3]] == [6, 13, 2]
    flood = b"".join(_certification(start + i, os.urandom(20)) for i in range(count))
    return key[:cut] + flood + key[cut:]


def _stored_signatures(env: GkeysEnv, nick: str) -> int:
    fpr = env.keys.keys[nick].fingerprint
    keybox = GnuPG(env.state / "keyrings" / CATEGORY, read_only=True)
    raw = keybox.run(["--export", fpr]).stdout
    return sum(block.signatures for block in split_keyblocks(raw) if block.primary == fpr)


def test_certification_flood_is_not_stored_and_does_not_grow_the_key(seeded: GkeysEnv) -> None:
    env = seeded
    alice = env.keys.public("alice", armor=False)
    _serve(env, "alice", flooded(alice, 2000, 1_600_000_000))
    _serve(env, "bob", env.keys.public("bob"))
    assert env.run("install-key", "-C", CATEGORY).code == 0
    clean = _stored_signatures(env, "alice")
    assert clean <= 3  # uid self-signature and subkey binding
    _serve(env, "alice", flooded(alice, 2000, 1_650_000_000))  # a second answer with 2,000 new ones
    result = env.run("refresh-key", "-C", CATEGORY, "--force")
    assert result.code == 0 and "refreshed" in result.text, result.text
    assert _stored_signatures(env, "alice") == clean
    assert len((env.state / "keyrings" / f"{CATEGORY}.asc").read_bytes()) < 4096


def test_flood_stored_by_an_older_version_is_cleaned_and_a_revocation_applies(seeded: GkeysEnv) -> None:
    env = seeded
    for nick in ("alice", "bob"):
        _serve(env, nick, env.keys.public(nick))
    assert env.run("install-key", "-C", CATEGORY).code == 0
    # An older version stored every certification a source sent (here 40,000: a 5 MiB keyblock).
    _import_as_before(env, flooded(env.keys.public("bob", armor=False), 40_000, 1_500_000_000))
    assert _stored_signatures(env, "bob") > 40_000
    scratch = GnuPG(env.root / "scratch")
    scratch.import_keys(env.keys.public("bob"))
    scratch.import_keys(env.keys.revocation("bob"))
    _serve(env, "bob", scratch.export_keys([env.keys.keys["bob"].fingerprint]))
    result = env.run("refresh-key", "-C", CATEGORY, "--force")
    assert result.code == 0, result.text
    assert _stored_signatures(env, "bob") <= 4
    signed = env.root / "doc"
    signed.write_bytes(b"doc")
    (env.root / "doc.asc").write_bytes(env.keys.sign("bob", signed))
    refused = env.run("verify", "-F", str(signed), "-C", CATEGORY)
    assert refused.code == 1 and "revoked" in refused.text


def test_an_answer_gpg_does_not_import_completely_is_a_failed_refresh(seeded: GkeysEnv) -> None:
    env = seeded
    for nick in ("alice", "bob"):
        _serve(env, nick, env.keys.public(nick))
    assert env.run("install-key", "-C", CATEGORY).code == 0
    assert env.run("refresh-key", "-C", CATEGORY).code == 0  # (an install records no refresh)
    record = env.state / "state" / "refresh.json"
    before = json.loads(record.read_text())[CATEGORY]
    conf = env.config.read_text().replace("wkd = yes", "wkd = no")
    env.config.write_text(conf)
    # The key, then a keyblock gpg cannot read ("import from '[stdin]' failed: Invalid keyring", exit 2):
    # gpg merged bob and then failed, so what it merged of the answer is unknown.
    _serve(env, "bob", env.keys.public("bob", "mallory", armor=False) + b"\x6fjunk")
    result = env.run("refresh-key", "-C", CATEGORY, "--force")
    assert "refresh failed" in result.text and "Refused: bob" in result.text, result.text
    assert "2 keys refreshed" not in result.text
    assert json.loads(record.read_text())[CATEGORY] == before  # max-refresh-age keeps counting


def test_import_keys_reports_what_gpg_did_not_import(tmp_path: Path, keys: KeyFactory) -> None:
    gpg = GnuPG(tmp_path / "home")
    assert gpg.import_report(b"not a key").problem
    from gkeys_portage.core.errors import GpgError

    with pytest.raises(GpgError, match="importing keys failed"):
        gpg.import_keys(keys.public("alice", armor=False) + b"\x6fjunk")
    assert gpg.import_keys(keys.public("bob")) == [keys.keys["bob"].fingerprint]


def test_import_status_parser_on_recorded_output() -> None:
    from gkeys_portage.openpgp.keyio import _import_report
    from gkeys_portage.openpgp.process import GpgResult
    from gkeys_portage.openpgp.status import StatusReport, parse_status

    fpr = "A" * 40
    def status(*lines: str) -> StatusReport:
        return parse_status([f"[GNUPG:] {line}" for line in lines])

    ok = GpgResult(0, status(f"IMPORT_OK 1 {fpr}", "IMPORT_RES 1 0 1 0 0 0 0 0 0 0 0 0 0 0 0"), b"", "")
    assert _import_report(ok).problem == "" and _import_report(ok).imported == [fpr]
    lost = GpgResult(2, status(*["IMPORT_RES 1 0 0 0 0 0 0 0 0 0 0 0 0 1 0"]), b"",
                     "gpg: error writing keyring 'pubring.kbx': Provided object is too large\n")
    assert "1 key(s) not imported" in _import_report(lost).problem
    problem = GpgResult(0, status(f"IMPORT_PROBLEM 1 {fpr}", "IMPORT_RES 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0"),
                        b"", "")
    assert "IMPORT_PROBLEM" in _import_report(problem).problem
    agent_only = GpgResult(2, status(f"IMPORT_OK 1 {fpr}", "IMPORT_RES 1 0 1 0 0 0 0 0 0 0 0 0 0 0 0"),
                           b"", "gpg: can't connect to the agent: File name too long\n")
    assert _import_report(agent_only).problem == ""
    assert _import_report(GpgResult(2, status(), b"", "")).problem


# -- refresh asks every source (item 4) -----------------------------------------------------------

def test_refresh_merges_every_source_so_a_keyserver_revocation_beats_a_stale_wkd(seeded: GkeysEnv) -> None:
    env = seeded
    for nick in ("alice", "bob"):
        env.server.publish_wkd(f"{nick}@gentoo.org", env.keys.public(nick, armor=False))
        _serve(env, nick, env.keys.public(nick))
    install = env.run("--json", "install-key", "-C", CATEGORY)
    assert install.code == 0
    assert {k["source"].split()[0] for k in json.loads(install.out)["keys"]} == {"wkd-advanced"}
    # WKD keeps serving the old, unrevoked copy; only the keyserver knows the revocation.
    scratch = GnuPG(env.root / "scratch")
    scratch.import_keys(env.keys.public("bob"))
    scratch.import_keys(env.keys.revocation("bob"))
    _serve(env, "bob", scratch.export_keys([env.keys.keys["bob"].fingerprint]))
    env.server.log.clear()
    result = env.run("refresh-key", "-C", CATEGORY, "--force")
    assert result.code == 0, result.text
    assert any("/pks/lookup" in line for line in env.server.log)
    signed = env.root / "doc"
    signed.write_bytes(b"doc")
    (env.root / "doc.asc").write_bytes(env.keys.sign("bob", signed))
    refused = env.run("verify", "-F", str(signed), "-C", CATEGORY)
    assert refused.code == 1 and "revoked" in refused.text


def test_refresh_succeeds_when_one_source_is_down(seeded: GkeysEnv) -> None:
    env = seeded
    env.write_config(keyservers=f"http://127.0.0.1:1 {env.server.url}")
    for nick in ("alice", "bob"):
        _serve(env, nick, env.keys.public(nick))
    assert env.run("install-key", "-C", CATEGORY).code == 0
    result = env.run("refresh-key", "-C", CATEGORY, "--force")
    # The keys the live source brought are installed; the dead one is named, and this is no full
    # refresh (tests/test_refresh_sources.py: it fails once the source is silent for max-refresh-age).
    assert result.code == 0 and "refresh failed for http://127.0.0.1:1 " in result.text, result.text
    assert "keys refreshed" not in result.text


# -- the keyblock filter on its own ---------------------------------------------------------------

def test_keyblock_filter_keeps_primaries_drops_aliasing_and_caps(
        keys: KeyFactory, aliasing: tuple[Fingerprint, bytes], tmp_path: Path) -> None:
    from gkeys_portage.openpgp.keyblocks import MAX_KEYBLOCK_SIGNATURES, armor_public_keys, select_keyblocks

    attacker, attack_key = aliasing
    alice, bob = keys.keys["alice"].fingerprint, keys.keys["bob"].fingerprint
    data = keys.public("alice", armor=False) + attack_key + keys.public("bob", armor=False)
    chosen = select_keyblocks(data, [alice])
    assert chosen.primaries == {alice} and chosen.aliasing == {attacker: [alice]}
    everything = select_keyblocks(data)
    assert everything.primaries == {alice, bob} and attacker in everything.aliasing
    # gpg reads the armored result as the same keys (the bytes written to <category>.asc).
    assert set(GnuPG(tmp_path / "home").import_keys(armor_public_keys(everything.data))) == {alice, bob}
    big = flooded(keys.public("bob", armor=False), MAX_KEYBLOCK_SIGNATURES + 1, 1_600_000_000)
    assert bob in select_keyblocks(big, [bob]).oversized


def test_real_gentoo_keys_pass_the_filter_unchanged(tmp_path: Path) -> None:
    from conftest import shared_path

    for path in sorted(shared_path("fixtures", "real", "keys").glob("*.asc")):
        gpg = GnuPG(tmp_path / path.stem[:12])
        imported = gpg.import_report(path.read_bytes()).imported
        assert imported, path
        # export_exact raises if gpg and the filter disagree on the primaries of the bytes.
        assert gpg.export_exact(imported).primaries == set(imported), path


def test_error_words_in_file_names_are_not_import_errors() -> None:
    """gpg exits 2 when it cannot reach an agent; its other stderr lines name files, and a home under a
    directory called "failed-bad-error" must not turn a complete import into a failed one."""
    status = parse_status([("IMPORT_OK", "1 " + "A" * 40), ("IMPORT_RES", " ".join(["1"] + ["0"] * 14))])
    home = "/tmp/pytest/test_refused_bundle_is_a_failed-bad-error0/home"
    stderr = f"gpg: {home}/trustdb.gpg: trustdb created\ngpg: can't connect to the agent: IPC connect call failed\n"
    assert _import_report(GpgResult(returncode=2, status=status, stdout=b"", stderr=stderr)).problem == ""
    quoted = ('gpg: key F1A466ECBBADBCC1: public key "L2-gone <openpgp-auth+l2-gone@gentoo.org>" imported\n'
              'gpg: key 0123456789ABCDEF: "Bad Error <fail@x>" not changed\n')  # key id holds "BAD"; a uid anything
    assert _import_report(GpgResult(returncode=2, status=status, stdout=b"", stderr=quoted)).problem == ""
    broken = GpgResult(returncode=2, status=status, stdout=b"", stderr="gpg: key 1234: error reading keyblock\n")
    assert "error reading keyblock" in _import_report(broken).problem
