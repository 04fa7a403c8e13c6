"""fetch-seed / update-seed: signer pinning, rollback refusal, atomic install, Added/Updated/Removed."""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path

import pytest
from conftest import GkeysEnv

from gkeys_portage.cli.main import main as gkeys_main
from gkeys_portage.core.config import DEFAULT_AUTHORITY_SEEDS
from gkeys_portage.demo.world import past


@pytest.fixture
def installed(env: GkeysEnv) -> GkeysEnv:
    """Bootstrapped root, a signed gentoo-devs seed (alice, bob) fetched and keys installed."""
    env.install_devs("alice", "bob")
    return env


def test_fetch_seed_installs_and_names_the_signer(env: GkeysEnv) -> None:
    env.bootstrap()
    env.publish_seeds("gentoo-devs", ("alice", "bob"))
    result = env.run("fetch-seed", "-C", "gentoo-devs")
    assert result.code == 0, result.text
    assert "signed by seed-signers/gkeys" in result.out and "Added: alice, bob" in result.out
    listed = env.run("--json", "list-seed", "-C", "gentoo-devs")
    assert {s["nick"] for s in json.loads(listed.out)["seeds"]} == {"alice", "bob"}


BAD_SEEDS = {
    "signed by a developer key (in another keyring)": (
        lambda e: e.publish_seeds("gentoo-devs", ("alice", "mallory"), signer="alice"), "unknown key"),
    "signed by an unknown key": (lambda e: e.publish_seeds("gentoo-devs", ("alice", "mallory"), signer="mallory"),
                                 "unknown key"),
    "no signature": (lambda e: e.server.files.pop("/seeds/gentoo-devs.seeds.sig", None), "no signature"),
    "truncated signature": (lambda e: e.server.files.__setitem__(
        "/seeds/gentoo-devs.seeds.sig", e.server.files["/seeds/gentoo-devs.seeds.sig"][:30]), "no OpenPGP signature"),
    "tampered seed": (lambda e: e.server.files.__setitem__(
        "/seeds/gentoo-devs.seeds", e.seed_bytes("alice", "bob", "mallory")), "BAD signature"),
}


@pytest.mark.parametrize("case", list(BAD_SEEDS), ids=list(BAD_SEEDS))
def test_bad_seed_is_refused_and_nothing_changes(installed: GkeysEnv, case: str) -> None:
    make_bad, message = BAD_SEEDS[case]
    before = installed.snapshot()
    make_bad(installed)
    for action in ("fetch-seed", "update-seed"):
        result = installed.run(action, "-C", "gentoo-devs")
        assert result.code == 1, result.text
        assert message in result.text
        assert "Traceback" not in result.text
        assert installed.snapshot() == before
    good = installed.root / "f"
    good.write_bytes(b"x")
    (installed.root / "f.asc").write_bytes(installed.keys.sign("alice", good))
    assert installed.run("verify", "-F", str(good), "-C", "gentoo-devs").code == 0


def test_replayed_older_seed_is_refused(installed: GkeysEnv) -> None:
    """A mirror serving the previous, validly signed seed file (rollback) is refused."""
    env = installed
    old = {k: v for k, v in env.server.files.items() if k.startswith("/seeds/")}
    time.sleep(1.1)  # signature times have one-second resolution
    env.publish_seeds("gentoo-devs", ("alice", "bob", "carol"))
    assert env.run("fetch-seed", "-C", "gentoo-devs").code == 0
    before = env.snapshot()
    env.server.files.update(old)
    result = env.run("fetch-seed", "-C", "gentoo-devs")
    assert result.code == 1 and "older than the installed one" in result.text
    assert env.snapshot() == before


def test_seed_signed_by_other_key_of_the_signer_keyring_is_refused(installed: GkeysEnv) -> None:
    """releng is in the seed-signers keyring, but [verify-seeds] pins only gkeys."""
    env = installed
    env.pin_key("seed-signers", "releng", "releng", name="R")
    before = env.snapshot()
    env.publish_seeds("gentoo-devs", ("alice", "mallory"), signer="releng")
    result = env.run("fetch-seed", "-C", "gentoo-devs")
    assert result.code == 1 and "not pinned by the seeds (seed-signers/gkeys)" in result.text
    assert env.snapshot() == before


def _pin_the_expired_key_as_seed_signer(env: GkeysEnv) -> None:
    """Make the session key 'expired' the pinned signer of gentoo-devs seeds (category old-signers)."""
    conf = env.config.read_text().replace("gentoo-devs = seed-signers gkeys", "gentoo-devs = old-signers expired")
    env.config.write_text(conf)
    env.pin_key("old-signers", "expired", "expired", name="E")


def test_seed_signed_by_expired_key_is_refused(env: GkeysEnv) -> None:
    """The seed signer's key expired (a year ago): a fresh signature by it is impossible, an old one
    made before expiry is older than the installed seed -> rollback; with no seed installed the old
    signature is accepted only because it was made while the key was valid."""
    _pin_the_expired_key_as_seed_signer(env)
    env.publish_seeds("gentoo-devs", ("alice",), signer="expired", when=past(700))
    assert env.run("fetch-seed", "-C", "gentoo-devs").code == 0
    env.publish_seeds("gentoo-devs", ("alice", "mallory"), signer="expired", when=past(710))
    result = env.run("fetch-seed", "-C", "gentoo-devs")
    assert result.code == 1 and "older than the installed" in result.text


def test_update_seed_reports_added_updated_removed_and_prunes_keys(installed: GkeysEnv) -> None:
    env = installed
    carol = env.seed("carol")
    bob = env.seed("bob")
    bob.name = "Robert"
    from gkeys_portage.keys.seeds import dump_seeds

    data = dump_seeds({"alice": env.seed("alice"), "bob": bob, "carol": carol})  # type: ignore[dict-item]
    env.server.hkp[env.keys.keys["carol"].fingerprint] = env.keys.public("carol")
    env.publish_seeds("gentoo-devs", (), data=data)
    result = env.run("update-seed", "-C", "gentoo-devs")
    assert result.code == 0, result.text
    assert "Added: carol" in result.out and "Updated: bob" in result.out
    env.publish_seeds("gentoo-devs", ("alice", "carol"))
    result = env.run("--json", "update-seed", "-C", "gentoo-devs")
    document = json.loads(result.out)
    assert result.code == 0, document
    assert document["updated"][0]["seed"]["changes"]["removed"] == ["bob"]
    assert document["updated"][0]["removed_keys"] == [env.keys.keys["bob"].fingerprint]
    listed = json.loads(env.run("--json", "list-key", "-C", "gentoo-devs").out)
    assert {k["nick"] for k in listed["keys"] if k["installed"]} == {"alice", "carol"}


def test_unsigned_seed_for_unconfigured_category_is_usage_error(env: GkeysEnv) -> None:
    result = env.run("fetch-seed", "-C", "nowhere")
    assert result.code == 2 and "no seed URL configured" in result.text


def test_frozen_seed_older_than_max_seed_age_is_refused(installed: GkeysEnv) -> None:
    """A mirror that keeps serving an old (validly signed) seed file is caught by [policy] max-seed-age."""
    env = installed
    env.config.write_text(env.config.read_text() + "[policy]\nmax-seed-age = 30\n")
    assert env.run("fetch-seed", "-C", "gentoo-devs").code == 0  # signed today
    record = env.state / "state" / "seeds.json"
    data = json.loads(record.read_text())
    data["gentoo-devs"]["signed"] -= 40 * 86400  # pretend the installed one is old, then serve an old one
    record.write_text(json.dumps(data))
    _pin_the_expired_key_as_seed_signer(env)  # its signatures can be dated 700 days back
    env.publish_seeds("gentoo-devs", ("alice", "bob"), signer="expired", when=past(700))
    result = env.run("fetch-seed", "-C", "gentoo-devs")
    assert result.code == 1 and "max-seed-age" in result.text


def test_a_category_without_a_seed_source_names_the_section_that_gives_it_one(tmp_path: Path) -> None:
    """Issue 42: a config's [authority-seeds] section (here empty) replaces the built-in gentoo-devs line;
    'update-seed -C gentoo-devs' then names [authority-seeds] and the line to add, not [seedurls]."""
    config = tmp_path / "gkeys.conf"
    config.write_text(f"[base]\ngkeysdir = {tmp_path / 'state'}\n[authority-seeds]\n")
    capture = io.StringIO()
    with contextlib.redirect_stdout(capture), contextlib.redirect_stderr(capture):
        code = gkeys_main(["-c", str(config), "update-seed", "-C", "gentoo-devs"])
    text = capture.getvalue()
    assert code == 2, text
    assert "[authority-seeds]" in text and DEFAULT_AUTHORITY_SEEDS["gentoo-devs"] in text, text
    assert "[seedurls]" not in text, text
    capture = io.StringIO()
    with contextlib.redirect_stdout(capture), contextlib.redirect_stderr(capture):
        code = gkeys_main(["-c", str(config), "fetch-seed", "-C", "my-overlay"])
    assert code == 2 and "[seedurls]" in capture.getvalue() and "my-overlay = URL" in capture.getvalue()
