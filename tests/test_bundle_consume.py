"""[keyrings] CAT = URL: a keyring bundle as the first key source (issue 16 item 2), and its bad inputs."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import GkeysEnv

from gkeys_portage.core.types import Category
from gkeys_portage.demo.world import KeyFactory, past
from gkeys_portage.keys.seedbinding import category_notation
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.keyblocks import _packets, armor_public_keys

BUNDLE = "bundles/gentoo-devs.gpg"
USER_ID_TAG, SIGNATURE_TAG, PUBLIC_SUBKEY_TAG = 13, 2, 14


def _lookalike(keys: KeyFactory) -> bytes:
    """A key with alice's name and address (and so her user id), but another fingerprint."""
    if "alice-lookalike" not in keys.keys:
        keys.create("alice-lookalike", name="Alice (Gentoo)", email="alice@gentoo.org")
    return keys.public("alice-lookalike", armor=False)


def _strip_user_ids(keyblock: bytes) -> bytes:
    """The keyblock without its User ID packets and their certifications (primary + subkeys only)."""
    out, in_uid = [], False
    for tag, start, _body, end in _packets(keyblock):
        if tag == USER_ID_TAG:
            in_uid = True
            continue
        if tag == PUBLIC_SUBKEY_TAG:
            in_uid = False
        if tag == SIGNATURE_TAG and in_uid:
            continue
        out.append(keyblock[start:end])
    return b"".join(out)


def _setup(env: GkeysEnv, bundle: bytes, *, signer: str | None = "gkeys", signature: bytes | None = None,
           nicks: tuple[str, ...] = ("alice", "bob")) -> None:
    """Seeds for ``nicks`` installed (no keys), keys only in a bundle on the server (no keyserver has them)."""
    env.bootstrap()
    env.publish_seeds("gentoo-devs", nicks)
    assert env.run("fetch-seed", "-C", "gentoo-devs").code == 0
    env.write_config(f"[keyrings]\ngentoo-devs = {env.server.url}/{BUNDLE}\n")
    if signer is None and signature is None:  # an unsigned bundle: only where no signer is configured
        _no_bundle_signer(env)
    env.server.publish(BUNDLE, bundle)
    if signature is None and signer is not None:
        signature = _sign(env, signer, bundle)
    if signature is not None:
        env.server.publish(BUNDLE + ".sig", signature)


def _sign(env: GkeysEnv, signer: str, data: bytes, category: str = "gentoo-devs", **kwargs: object) -> bytes:
    """A detached signature bound to ``category`` (as build-keyring --sign makes them)."""
    kwargs.setdefault("armor", False)
    return env.keys.sign_bytes(signer, data, env.root, notations=category_notation(Category(category)), **kwargs)


def _no_bundle_signer(env: GkeysEnv) -> None:
    """Drop '[verify-seeds] gentoo-devs' (the seeds are fetched already): bundles may then be unsigned."""
    env.config.write_text(env.config.read_text().replace("gentoo-devs = seed-signers gkeys\n", ""))


def _installed(env: GkeysEnv) -> set[str]:
    listed = json.loads(env.run("--json", "list-key", "-C", "gentoo-devs").out)["keys"]
    return {k["nick"] for k in listed if k["installed"]}


def test_signed_bundle_installs_the_pinned_keys_without_any_keyserver(env: GkeysEnv) -> None:
    _setup(env, env.keys.public("alice", "bob", armor=False))
    result = env.run("--json", "install-key", "-C", "gentoo-devs")
    assert result.code == 0, result.text
    report = json.loads(result.out)
    assert {k["status"] for k in report["keys"]} == {"added"}
    assert all(k["source"].startswith(f"bundle {env.server.url}/{BUNDLE} (signed by seed-signers/gkeys)")
               for k in report["keys"])
    assert not [path for path in env.server.log if "/pks/" in path or "openpgpkey" in path]
    assert _installed(env) == {"alice", "bob"}


def test_unsigned_armored_bundle_is_a_source_like_any_other(env: GkeysEnv) -> None:
    _setup(env, env.keys.public("alice", "bob", armor=True), signer=None)
    assert env.run("install-key", "-C", "gentoo-devs").code == 0
    assert _installed(env) == {"alice", "bob"}


def test_refresh_key_takes_news_from_the_bundle(env: GkeysEnv) -> None:
    _setup(env, env.keys.public("alice", "bob", armor=False), signer=None)
    assert env.run("install-key", "-C", "gentoo-devs").code == 0
    result = env.run("--json", "refresh-key", "-C", "gentoo-devs", "--force")
    assert result.code == 0, result.text
    assert {k["status"] for k in json.loads(result.out)["refreshed"][0]["keys"]} == {"unchanged"}


def test_key_missing_from_the_bundle_comes_from_the_other_sources(env: GkeysEnv) -> None:
    _setup(env, env.keys.public("alice", armor=False), signer=None)
    env.server.hkp[env.keys.keys["bob"].fingerprint] = env.keys.public("bob")
    result = env.run("--json", "install-key", "-C", "gentoo-devs")
    assert result.code == 0, result.text
    sources = {k["nick"]: k["source"] for k in json.loads(result.out)["keys"]}
    assert sources["alice"].startswith("bundle ") and sources["bob"].startswith("keyserver ")


# (name, bundle maker, signer, expected exit, installed afterwards, words in the output)
Case = tuple[str, Callable[[KeyFactory], bytes], str | None, int, set[str], tuple[str, ...]]
CASES: list[Case] = [
    ("extra key", lambda k: k.public("alice", "bob", "mallory", armor=False), "gkeys", 0, {"alice", "bob"},
     ("dropped from", "not pinned")),
    ("look-alike key", lambda k: k.public("alice", "bob", armor=False) + _lookalike(k), "gkeys", 0,
     {"alice", "bob"}, ("dropped from", "not pinned")),
    ("user ids stripped", lambda k: _strip_user_ids(k.public("alice", armor=False)) + k.public("bob", armor=False),
     "gkeys", 1, {"bob"}, ("alice",)),
    ("truncated", lambda k: k.public("alice", "bob", armor=False)[:-40], "gkeys", 1, set(),
     ("refused, nothing installed", "truncated")),
    ("armor checksum broken", lambda k: re.sub(rb"\n=[A-Za-z0-9+/]{4}\n", b"\n=AAAA\n",
                                               armor_public_keys(k.public("alice", "bob", armor=False))),
     None, 1, set(), ("refused, nothing installed", "checksum mismatch")),
    ("two armor blocks", lambda k: k.public("alice") + k.public("bob"), None, 1, set(),
     ("refused, nothing installed", "more than one")),
    ("not key data", lambda k: b"<html>moved</html>", None, 1, set(), ("refused, nothing installed",)),
    ("signed by an unpinned key", lambda k: k.public("alice", "bob", armor=False), "mallory", 1, set(),
     ("refused, nothing installed", "seed-signers/gkeys", "remove [keyrings] gentoo-devs")),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_hostile_bundles(env: GkeysEnv, case: Case) -> None:
    _name, make, signer, code, installed, words = case
    _setup(env, make(env.keys), signer=signer)
    before = env.snapshot() if code == 1 and not installed else None
    result = env.run("install-key", "-C", "gentoo-devs")
    assert result.code == code, result.text
    assert "Traceback" not in result.text
    for word in words:
        assert word in result.text, result.text
    if before is not None:
        assert env.snapshot() == before
    assert _installed(env) == installed


def test_bundle_whose_signature_does_not_match_is_refused_whole(env: GkeysEnv) -> None:
    bundle = env.keys.public("alice", "bob", armor=False)
    other = _sign(env, "gkeys", env.keys.public("alice", armor=False))
    _setup(env, bundle, signature=other)
    before = env.snapshot()
    result = env.run("install-key", "-C", "gentoo-devs")
    assert result.code == 1 and "refused, nothing installed" in result.text, result.text
    assert env.snapshot() == before


def test_bundle_built_by_build_keyring_is_consumed_elsewhere(env: GkeysEnv, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The overlay-owner walkthrough: build and sign a bundle, publish seeds + bundle, users install."""
    env.install_devs("alice", "bob")
    env.write_config(f"[sign]\ncategory = seed-signers\nnick = gkeys\ngnupghome = {env.keys.home}\n")
    out = env.root / "out"
    assert env.run("build-keyring", "-C", "gentoo-devs", "-o", str(out), "--sign").code == 0
    env.server.publish(BUNDLE, (out / "gentoo-devs.gpg").read_bytes())
    env.server.publish(BUNDLE + ".asc", (out / "gentoo-devs.gpg.asc").read_bytes())
    env.server.hkp.clear()
    (tmp_path / "user").mkdir()
    user = GkeysEnv(tmp_path / "user", env.server, env.keys, capsys)
    user.write_config(f"[keyrings]\ngentoo-devs = {env.server.url}/{BUNDLE}\n")
    user.bootstrap()
    result = user.run("--json", "update-seed", "-C", "gentoo-devs")
    assert result.code == 0, result.text
    assert _installed(user) == {"alice", "bob"}


def test_keyrings_config_is_checked(env: GkeysEnv) -> None:
    env.write_config("[keyrings]\ngentoo-devs = ftp://example.org/x.gpg\n")
    result = env.run("list-cats")
    assert result.code == 2 and "[keyrings] gentoo-devs" in result.text


def test_refused_bundle_makes_refresh_warn_not_block(env: GkeysEnv) -> None:
    """refresh-key with a bundle gone bad: warn (the keys in place keep working), record no refresh."""
    _setup(env, env.keys.public("alice", "bob", armor=False))
    assert env.run("install-key", "-C", "gentoo-devs").code == 0
    record = env.state / "state" / "refresh.json"
    before = record.read_bytes() if record.exists() else None
    env.server.publish(BUNDLE + ".sig", _sign(env, "mallory", env.server.files["/" + BUNDLE]))
    result = env.run("refresh-key", "-C", "gentoo-devs", "--force")
    assert result.code == 0 and "refused, nothing installed" in result.text and "refresh failed" in result.text
    assert (record.read_bytes() if record.exists() else None) == before


@pytest.mark.parametrize("form", ["path", "file-url"])
def test_a_local_bundle_file_with_its_signature(env: GkeysEnv, form: str) -> None:
    bundle = env.keys.public("alice", "bob", armor=False)
    _setup(env, bundle, signer=None)
    local = env.root / "gentoo-devs.gpg"
    local.write_bytes(bundle)
    (env.root / "gentoo-devs.gpg.asc").write_bytes(_sign(env, "gkeys", bundle, armor=True))
    env.write_config(f"[keyrings]\ngentoo-devs = {'file://' if form == 'file-url' else ''}{local}\n")
    result = env.run("--json", "install-key", "-C", "gentoo-devs")
    assert result.code == 0, result.text
    assert all("signed by seed-signers/gkeys" in k["source"] for k in json.loads(result.out)["keys"])
    (env.root / "gentoo-devs.gpg.asc").write_bytes(_sign(env, "mallory", bundle, armor=True))
    env.run("remove-key", "-C", "gentoo-devs", "-n", "alice")
    result = env.run("install-key", "-C", "gentoo-devs")
    assert result.code == 1 and "refused, nothing installed" in result.text


def test_a_revocation_in_the_bundle_applies_on_refresh(env: GkeysEnv) -> None:
    _setup(env, env.keys.public("alice", "carol", armor=False), nicks=("alice", "carol"))
    assert env.run("install-key", "-C", "gentoo-devs").code == 0
    scratch = GnuPG(env.root / "revoke")
    try:
        scratch.import_keys(env.keys.public("alice", "carol", armor=False))
        scratch.import_report(env.keys.revocation("carol"))
        revoked = scratch.export_keys(sorted([env.keys.keys["alice"].fingerprint,
                                              env.keys.keys["carol"].fingerprint]), armor=False)
    finally:
        scratch.close()
    env.server.publish(BUNDLE, revoked)
    env.server.publish(BUNDLE + ".sig", _sign(env, "gkeys", revoked))
    result = env.run("--json", "refresh-key", "-C", "gentoo-devs", "--force")
    assert result.code == 0, result.text
    states = {k["nick"]: k["state"] for k in json.loads(env.run("--json", "list-key", "-C", "gentoo-devs").out)["keys"]}
    assert states == {"alice": "valid", "carol": "revoked"}


def test_update_seed_reports_what_a_bundle_dropped(env: GkeysEnv) -> None:
    """update-seed installs keys through the same sources as install-key: what the bundle dropped is said
    there too (text and --json), not only by install-key."""
    _setup(env, env.keys.public("alice", "bob", "mallory", armor=False))
    result = env.run("--json", "update-seed", "-C", "gentoo-devs")
    assert result.code == 0, result.text
    notes = json.loads(result.out)["updated"][0]["notes"]
    assert notes and any("dropped from" in note and "not pinned" in note for note in notes), notes
    text = env.run("update-seed", "-C", "gentoo-devs")
    assert " * gentoo-devs: dropped from " in text.out, text.text  # information naming the category (issue 45)


# -- issue 34 case 8: a bundle that goes quiet, or one a mirror keeps replaying -----------------------------------

def _age_refresh_records(env: GkeysEnv, days: float) -> None:
    """Make the category's refresh records ``days`` old (as if the last answers were that long ago)."""
    then = time.time() - days * 86400
    for name in ("refresh", "refresh-sources"):
        path = env.state / "state" / f"{name}.json"
        data = json.loads(path.read_text()) if path.exists() else {}
        value = data.get("gentoo-devs")
        data["gentoo-devs"] = {source: then for source in value} if isinstance(value, dict) else then
        path.write_text(json.dumps(data))


def test_a_bundle_that_stops_answering_is_a_silent_source_like_a_keyserver(env: GkeysEnv) -> None:
    _setup(env, env.keys.public("alice", "bob", armor=False))
    for nick in ("alice", "bob"):  # the keyserver answers all along
        env.server.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick)
    assert env.run("install-key", "-C", "gentoo-devs").code == 0
    assert env.run("refresh-key", "-C", "gentoo-devs", "--force").code == 0
    record = env.state / "state" / "refresh.json"
    before = record.read_bytes()
    del env.server.files["/" + BUNDLE]  # the bundle URL stops answering (a mirror blocking it)
    result = env.run("refresh-key", "-C", "gentoo-devs", "--force")
    assert result.code == 0 and f"refresh failed for bundle {env.server.url}/{BUNDLE}" in result.text, result.text
    assert record.read_bytes() == before  # no full refresh recorded
    _age_refresh_records(env, 40)
    result = env.run("refresh-key", "-C", "gentoo-devs", "--force")
    assert result.code == 3 and f"bundle {env.server.url}/{BUNDLE} last answered 40 days ago" in result.text, \
        result.text
    assert "max-refresh-age" in result.text and "[keyrings]" in result.text


def _old_signer(env: GkeysEnv) -> None:
    """A seed signer whose key is 60 days old signs the bundles ([verify-seeds] gentoo-devs)."""
    if "oldsigner" not in env.keys.keys:
        env.keys.create("oldsigner", created=past(60))
    env.pin_key("seed-signers", "oldsigner", "oldsigner")
    env.config.write_text(env.config.read_text().replace("gentoo-devs = seed-signers gkeys\n",
                                                         "gentoo-devs = seed-signers oldsigner\n"))


def test_a_bundle_signed_longer_ago_than_max_bundle_age_is_stale(env: GkeysEnv) -> None:
    bundle = env.keys.public("alice", "bob", armor=False)
    _setup(env, bundle)
    _old_signer(env)
    env.server.publish(BUNDLE + ".sig", _sign(env, "oldsigner", bundle, when=past(31)))  # a replayed bundle
    result = env.run("install-key", "-C", "gentoo-devs")
    assert result.code == 1 and "it is stale, signed " in result.text and "max-bundle-age (30 days)" in result.text
    assert "gkeys build-keyring -C gentoo-devs --sign" in result.text
    env.config.write_text(env.config.read_text() + "[policy]\nmax-bundle-age = 45\n")
    assert env.run("install-key", "-C", "gentoo-devs").code == 0  # configurable
    env.config.write_text(env.config.read_text().replace("max-bundle-age = 45", "max-bundle-age = 30"))
    result = env.run("refresh-key", "-C", "gentoo-devs", "--force")
    assert result.code == 1 and "it is stale" in result.text, result.text
