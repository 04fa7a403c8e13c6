"""build-keyring: reproducible, signed keyring bundles (issue 16 item 1)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import GkeysEnv

from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.keyblocks import split_keyblocks

NICKS = ("alice", "bob", "carol")


@pytest.fixture
def no_source_date_epoch() -> Iterator[None]:
    saved = os.environ.pop("SOURCE_DATE_EPOCH", None)
    yield
    if saved is None:
        os.environ.pop("SOURCE_DATE_EPOCH", None)
    else:
        os.environ["SOURCE_DATE_EPOCH"] = saved


def _import_in_order(env: GkeysEnv, order: tuple[str, ...]) -> None:
    for nick in order:
        keyfile = env.root / f"{nick}.asc"
        keyfile.write_bytes(env.keys.public(nick))
        result = env.run("import-key", "-C", "gentoo-devs", "-n", nick, "-F", str(keyfile))
        assert result.code == 0, result.text


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_bundle_is_byte_identical_whatever_the_import_order(env: GkeysEnv, no_source_date_epoch: None) -> None:
    """Same seeds + keys imported in opposite orders (into fresh keyrings) -> identical bytes."""
    env.install_devs(*NICKS)  # seeds installed; keys in seed order
    env.run("remove-key", "-C", "gentoo-devs", "-n", "alice")
    env.run("remove-key", "-C", "gentoo-devs", "-n", "bob")
    env.run("remove-key", "-C", "gentoo-devs", "-n", "carol")
    _import_in_order(env, ("carol", "bob", "alice"))
    first = env.root / "first"
    result = env.run("build-keyring", "-C", "gentoo-devs", "-o", str(first))
    assert result.code == 0, result.text
    for nick in NICKS:
        env.run("remove-key", "-C", "gentoo-devs", "-n", nick)
    _import_in_order(env, ("bob", "alice", "carol"))
    second = env.root / "second"
    assert env.run("build-keyring", "-C", "gentoo-devs", "-o", str(second)).code == 0
    assert _files(first) == _files(second)
    assert sorted(_files(first)) == ["gentoo-devs.asc", "gentoo-devs.gpg", "gentoo-devs.json"]


def test_bundle_holds_exactly_the_pinned_primaries_in_fingerprint_order(env: GkeysEnv,
                                                                       no_source_date_epoch: None) -> None:
    env.install_devs(*NICKS)
    out = env.root / "out"
    assert env.run("build-keyring", "-C", "gentoo-devs", "-n", "bob", "-n", "alice", "-o", str(out)).code == 0
    binary = (out / "gentoo-devs.gpg").read_bytes()
    wanted = sorted(env.keys.keys[n].fingerprint for n in ("alice", "bob"))
    assert [block.primary for block in split_keyblocks(binary)] == wanted
    gpg = GnuPG(env.root / "reader")
    try:
        # gpg reads the armored file as the same keys, and dearmors it to the same bytes.
        assert gpg.show_primaries((out / "gentoo-devs.asc").read_bytes()) == set(wanted)
        assert gpg.run(["--dearmor"], (out / "gentoo-devs.asc").read_bytes()).stdout == binary
    finally:
        gpg.close()
    manifest = json.loads((out / "gentoo-devs.json").read_bytes())
    assert manifest["category"] == "gentoo-devs" and manifest["nicks"] == ["alice", "bob"]
    assert [k["fingerprint"] for k in manifest["keys"]] == [env.keys.keys[n].fingerprint for n in ("alice", "bob")]
    assert all(isinstance(k["expires"], int) for k in manifest["keys"])
    seed_file = env.state / "seeds" / "gentoo-devs.seeds"
    assert manifest["seed-file-sha512"] == hashlib.sha512(seed_file.read_bytes()).hexdigest()
    assert manifest["gentoo-devs.gpg-sha512"] == hashlib.sha512(binary).hexdigest()
    assert isinstance(manifest["created"], int) and manifest["created"] > 1_600_000_000  # from the keys
    assert manifest["tool"].startswith("gkeys-portage ")


def test_source_date_epoch_is_the_manifest_time(env: GkeysEnv, no_source_date_epoch: None) -> None:
    env.install_devs("alice")
    os.environ["SOURCE_DATE_EPOCH"] = "1700000000"
    out = env.root / "out"
    assert env.run("build-keyring", "-C", "gentoo-devs", "-o", str(out)).code == 0
    assert json.loads((out / "gentoo-devs.json").read_bytes())["created"] == 1700000000
    os.environ["SOURCE_DATE_EPOCH"] = "yesterday"
    result = env.run("build-keyring", "-C", "gentoo-devs", "-o", str(env.root / "bad"))
    assert result.code == 2 and "SOURCE_DATE_EPOCH" in result.text and "Traceback" not in result.text
    assert not (env.root / "bad").exists()


def test_bundle_refuses_keys_that_are_not_installed_and_unknown_nicks(env: GkeysEnv) -> None:
    env.install_devs("alice", "bob")
    env.run("remove-key", "-C", "gentoo-devs", "-n", "bob")
    result = env.run("build-keyring", "-C", "gentoo-devs", "-o", str(env.root / "out"))
    assert result.code != 0 and "install-key -C gentoo-devs" in result.text
    result = env.run("build-keyring", "-C", "gentoo-devs", "-n", "zed", "-o", str(env.root / "out"))
    assert result.code == 2 and "zed" in result.text
    assert not (env.root / "out").exists()


def test_signed_bundle_verifies_with_the_sign_key(env: GkeysEnv) -> None:
    env.install_devs("alice", "bob")
    env.write_config(f"[sign]\ncategory = gentoo-devs\nnick = alice\ngnupghome = {env.keys.home}\n")
    out = env.root / "out"
    result = env.run("build-keyring", "-C", "gentoo-devs", "-o", str(out), "--sign")
    assert result.code == 0, result.text
    for name in ("gentoo-devs.gpg", "gentoo-devs.asc", "gentoo-devs.json"):
        verified = env.run("verify", "-F", str(out / name), "-s", str(out / f"{name}.asc"),
                           "-C", "gentoo-devs", "-n", "alice")
        assert verified.code == 0, verified.text
