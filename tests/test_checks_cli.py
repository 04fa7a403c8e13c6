"""check-key and spec-check end to end: real gpg, the session keys, the CLI in-process."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from checks_helpers import split_packets, v3_key_file
from conftest import GkeysEnv, shared_path

from gkeys_portage.checks.glep63 import check_key
from gkeys_portage.checks.glep63.sources import file_subjects, parse_at
from gkeys_portage.core.types import Nick
from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.keys.seeds import Seed, dump_seeds
from gkeys_portage.openpgp.gnupg import GnuPG

CONFORMANCE = ("conformance", "glep63-check", "keys")


def _issues(result_out: str) -> list[tuple[str, str, str]]:
    document = json.loads(result_out)
    return [(i["code"], i["level"], i.get("subkey", i["on"])) for key in document["keys"] for i in key["issues"]]


def _future(days: float) -> str:
    return f"@{int(time.time() + days * 86400)}"


@pytest.fixture
def devs(env: GkeysEnv) -> GkeysEnv:
    """alice and bob installed in gentoo-devs (ed25519, signing subkey, no encryption subkey, 2 years)."""
    env.install_devs("alice", "bob")
    return env


def test_check_key_on_a_healthy_category(devs: GkeysEnv) -> None:
    result = devs.run("check-key", "-C", "gentoo-devs")
    assert result.code == 0, result.text
    assert "gentoo-devs/alice" in result.out and "gentoo-devs/bob" in result.out
    assert "2 of 2 keys ok" in result.out
    document = json.loads(devs.run("check-key", "-C", "gentoo-devs", "--json").out)
    assert document["ok"] is True and document["days"] == 30
    assert [k["nick"] for k in document["keys"]] == ["alice", "bob"]
    assert all(k["issues"] == [] and k["installed"] for k in document["keys"])


def test_check_key_expiring_soon_is_a_warning(devs: GkeysEnv) -> None:
    result = devs.run("check-key", "-C", "gentoo-devs", "-n", "alice", "--days", "800", "--json")
    assert result.code == 0
    assert _issues(result.out) == [("expire:soon", "warning", "key"),
                                   ("expire:soon", "warning", devs.keys.keys["alice"].signing_subkey[-16:])]
    failing = devs.run("check-key", "-C", "gentoo-devs", "-n", "alice", "--days", "800", "--warnings-fail")
    assert failing.code == 1
    assert "expire:soon" in failing.err


def test_check_key_days_default_comes_from_the_config(devs: GkeysEnv) -> None:
    devs.write_config(extra="[checks]\nexpiry-days = 800\n")
    document = json.loads(devs.run("check-key", "-C", "gentoo-devs", "-n", "bob", "--json").out)
    assert document["days"] == 800 and document["keys"][0]["counts"]["warning"] == 2


def test_check_key_as_of_a_later_time_sees_expiry(devs: GkeysEnv) -> None:
    result = devs.run("check-key", "-C", "gentoo-devs", "--at", _future(800), "--json")
    assert result.code == 1
    assert _issues(result.out) == [("validity:expired", "error", "key")] * 2


def test_check_key_reports_a_pinned_key_that_is_not_installed(devs: GkeysEnv) -> None:
    carol = devs.keys.keys["carol"]
    assert devs.run("add-seed", "-C", "gentoo-devs", "-n", "carol", "-N", "Carol", "-K", carol.fingerprint).code == 0
    result = devs.run("check-key", "-C", "gentoo-devs", "--json")
    assert result.code == 1
    (missing,) = [k for k in json.loads(result.out)["keys"] if k["nick"] == "carol"]
    assert missing["installed"] is False and missing["issues"][0]["code"] == "key:missing"
    assert "NOT INSTALLED" in devs.run("check-key", "-C", "gentoo-devs").out


def test_check_key_on_revoked_and_expired_key_files(env: GkeysEnv, keys: KeyFactory, tmp_path: Path) -> None:
    scratch = GnuPG(tmp_path / "scratch")
    scratch.import_keys(keys.public("carol"))
    scratch.import_keys(keys.revocation("carol"))
    revoked = tmp_path / "carol-revoked.asc"
    revoked.write_bytes(scratch.export_keys())
    result = env.run("check-key", "--keyring", str(revoked), "--json")
    assert result.code == 1 and _issues(result.out) == [("validity:revoked", "error", "key")]
    expired = tmp_path / "expired.asc"
    expired.write_bytes(keys.public("expired"))
    result = env.run("check-key", "--keyring", str(expired))
    assert result.code == 1 and "validity:expired" in result.err


def test_spec_check_glep63_2_2_wants_an_encryption_subkey(devs: GkeysEnv) -> None:
    result = devs.run("spec-check", "-C", "gentoo-devs", "-n", "alice", "--json")
    assert result.code == 1
    assert _issues(result.out) == [("subkey:none:e", "error", "key")]
    document = json.loads(result.out)
    assert document["spec"] == "glep63-2.2" and document["compliant"] is False
    older = devs.run("spec-check", "-C", "gentoo-devs", "--spec", "glep63-2")
    assert older.code == 0 and "2 of 2 keys compliant" in older.out


def test_spec_check_default_spec_from_config(devs: GkeysEnv) -> None:
    devs.write_config(extra="[checks]\nspec = glep63-2\n")
    assert json.loads(devs.run("spec-check", "-C", "gentoo-devs", "--json").out)["spec"] == "glep63-2"


def test_a_compliant_generated_key(env: GkeysEnv, tmp_path: Path) -> None:
    factory = KeyFactory(tmp_path / "home")
    try:
        dana = factory.create("dana", expire="1y")
        factory.gpg.add_subkey(dana.fingerprint, algorithm="cv25519", usage="encr", expire="1y")
        path = tmp_path / "dana.asc"
        path.write_bytes(factory.public("dana"))
    finally:
        factory.close()
    result = env.run("spec-check", "--keyring", str(path))
    assert result.code == 0, result.text
    assert "1 of 1 keys compliant" in result.out
    (subject,) = file_subjects(path)
    assert subject.key is not None and check_key(subject.key) == []


def test_spec_check_reports_sha1_self_signatures_with_real_gpg() -> None:
    at = "2018-08-03T00:01:00Z"
    (subject,) = file_subjects(shared_path(*CONFORMANCE, "algos", "dsa1024-rsa4096.gpg"), at=parse_at(at))
    assert subject.key is not None
    found = [(i.code, str(i.on)) for i in check_key(subject.key, "glep63-2.2", parse_at(at))]
    assert ("sig:sha1", "uid") in found and ("sig:sha1", "subkey") in found
    (good,) = file_subjects(shared_path(*CONFORMANCE, "algos", "rsa4096-good.gpg"), at=parse_at(at))
    assert good.key is not None
    assert not [i for i in check_key(good.key, "glep63-2.2", parse_at(at)) if i.code.startswith("sig:")]


def test_keyring_file_never_touches_state(devs: GkeysEnv) -> None:
    before = devs.snapshot()
    path = shared_path(*CONFORMANCE, "other", "no-gentoo-uid.gpg")
    result = devs.run("spec-check", "--keyring", str(path), "--at", "2018-08-03T00:01:00Z", "--json")
    assert result.code == 1 and _issues(result.out) == [("uid:nogentoo", "error", "key")]
    assert devs.snapshot() == before


def test_v3_key_is_refused_cleanly(env: GkeysEnv, tmp_path: Path) -> None:
    path = tmp_path / "v3.gpg"
    path.write_bytes(v3_key_file())
    result = env.run("spec-check", "--keyring", str(path))
    assert result.code == 2
    assert "no usable OpenPGP public key" in result.err and "Traceback" not in result.text


def test_key_without_user_id_is_refused_cleanly(env: GkeysEnv, keys: KeyFactory, tmp_path: Path) -> None:
    packets = split_packets(keys.public("bob", armor=False))
    assert packets[0][0] == 6 and any(tag == 13 for tag, _ in packets)
    path = tmp_path / "no-uid.gpg"
    path.write_bytes(b"".join(packet for tag, packet in packets if tag not in (13, 2)))  # no uid, no sigs
    result = env.run("check-key", "--keyring", str(path))
    assert result.code == 2 and "no usable OpenPGP public key" in result.err


@pytest.mark.parametrize(("argv", "message"), [
    (["spec-check", "--spec", "glep63-9", "-C", "gentoo-devs"], "unknown spec"),
    (["spec-check", "-n", "alice"], "needs -C"),
    (["check-key", "--at", "tomorrow", "-C", "gentoo-devs"], "--at"),
    (["check-key", "--days", "-1", "-C", "gentoo-devs"], "--days"),
    (["spec-check", "--keyring", "/nonexistent/key.asc"], "cannot read"),
    (["check-key", "-C", "gentoo-devs", "-n", "nobody"], "no seed 'nobody'"),
    (["check-key", "-C", "empty-category"], "has no seeds"),
])
def test_usage_errors_exit_2(devs: GkeysEnv, argv: list[str], message: str) -> None:
    result = devs.run(*argv)
    assert result.code == 2 and message in result.err


def test_keyring_cannot_be_combined_with_a_category(env: GkeysEnv, tmp_path: Path) -> None:
    path = tmp_path / "k.asc"
    path.write_bytes(b"")
    result = env.run("spec-check", "--keyring", str(path), "-C", "gentoo")
    assert result.code == 2 and "--keyring cannot be combined" in result.err


def test_oversized_key_file_is_refused(env: GkeysEnv, tmp_path: Path) -> None:
    path = tmp_path / "huge.asc"
    with open(path, "wb") as handle:
        handle.truncate(16 * 1024 * 1024 + 1)
    result = env.run("check-key", "--keyring", str(path))
    assert result.code == 2 and "larger than" in result.err


def test_list_specs(env: GkeysEnv) -> None:
    result = env.run("spec-check", "--list-specs")
    assert result.code == 0
    assert "glep63-2.2" in result.out and "[default]" in result.out and "glep63-1-strict" in result.out


def test_a_secret_key_file_is_checked_by_its_public_part(env: GkeysEnv, tmp_path: Path) -> None:
    factory = KeyFactory(tmp_path / "home")
    try:
        frank = factory.create("frank", expire="1y")
        factory.gpg.add_subkey(frank.fingerprint, algorithm="cv25519", usage="encr", expire="1y")
        exported = factory.gpg.run(["--pinentry-mode", "loopback", "--passphrase", "", "--armor",
                                    "--export-secret-keys", frank.fingerprint])
    finally:
        factory.close()
    assert b"PRIVATE KEY BLOCK" in exported.stdout
    path = tmp_path / "frank-secret.asc"
    path.write_bytes(exported.stdout)
    result = env.run("spec-check", "--keyring", str(path), "--json")
    assert result.code == 0, result.text
    assert json.loads(result.out)["keys"][0]["fingerprint"] == frank.fingerprint


def test_a_key_with_a_thousand_user_ids(env: GkeysEnv) -> None:
    path = Path(__file__).parent / "glep63_data" / "many-uids.gpg"
    result = env.run("spec-check", "--keyring", str(path), "--at", "2027-01-01", "--json")
    assert result.code == 0, result.text
    (key,) = json.loads(result.out)["keys"]
    assert key["issues"] == [] and key["uid_count"] == 1001
    assert len(key["uids"]) == 20  # the JSON lists the first 20 user ids only


def test_nothing_to_check_is_refused(env: GkeysEnv, keys: KeyFactory, tmp_path: Path) -> None:
    env.pin_key("lone", "alice", "alice", name="Alice")
    assert env.run("remove-seed", "-C", "lone", "-n", "alice").code == 0
    # a category keyring is left, but no seed pins a key: "0 of 0 keys ok" would be a pass that checked nothing
    for action in ("check-key", "spec-check"):
        result = env.run(action)
        assert result.code == 2, result.text
        assert "no keys to check" in result.err and "0 of 0" not in result.text


def test_a_primary_key_listed_only_under_fingerprint_is_checked(devs: GkeysEnv) -> None:
    alice, bob = devs.keys.keys["alice"], devs.keys.keys["bob"]
    # alice's seed pins bob's key too, but only under "fingerprint" (verification accepts it all the same)
    seed = Seed(Nick("alice"), alice.name, "alice", [alice.fingerprint],
                [alice.fingerprint, alice.signing_subkey, bob.fingerprint], [alice.uid])
    devs.state.joinpath("seeds", "gentoo-devs.seeds").write_bytes(dump_seeds({Nick("alice"): seed}))
    result = devs.run("check-key", "-C", "gentoo-devs", "--days", "800", "--json")
    document = json.loads(result.out)
    checked = [(k["nick"], k["fingerprint"], k["installed"]) for k in document["keys"]]
    # the subkey's fingerprint is not a primary key: not a subject of its own
    assert checked == [("alice", alice.fingerprint, True), ("alice", bob.fingerprint, True)]
    assert document["keys"][1]["counts"]["warning"] == 2  # bob's key was really checked (expire:soon)
    assert result.code == 0
    assert "2 of 2 keys ok" in devs.run("check-key", "-C", "gentoo-devs").out


def test_check_key_result_column_says_expires_soon(devs: GkeysEnv) -> None:
    """Issue 15 item 10: ``WARN 2 … ok`` read oddly; the result column says what the warning means."""
    result = devs.run("check-key", "-C", "gentoo-devs", "--days", "800")
    assert result.code == 0, result.text
    rows = [line.split() for line in result.out.splitlines() if line.startswith("gentoo-devs/")]
    assert rows and all(row[-2:] == ["expires", "soon"] for row in rows), result.out
    assert "2 of 2 keys ok (2 expire soon" in result.out
    assert devs.run("check-key", "-C", "gentoo-devs", "--days", "800", "--warnings-fail").code == 1
