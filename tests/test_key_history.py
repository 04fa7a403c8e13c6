"""A key's history is kept (issue 41, item 1): every self-signature gkeys has seen for a pinned key stays, merged
across sources and time, so a signature made before a renewal is judged by the binding valid when it was made.

On main the imports used ``import-clean`` and the exports ``export-clean``: the real weekly release key kept one
of its eight self-signatures, and a throwaway key's signature made before ``--quick-set-expire`` was good to
GnuPG and refused by Sequoia (``engines-disagree``) whichever order its two exports were imported in.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import GkeysEnv, shared_path
from history_helpers import LifeKey

from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.keyblocks import dearmor_public_keys

CATEGORY = "gentoo-devs"
WEEKLY = "13EBBDBEDE7A12775DFDB1BABB572E0E2D182910"
DATA = b"made before the renewal\n"


def _self_signatures(env: GkeysEnv, fingerprint: str, category: str = CATEGORY, *, good: bool = True) -> list[int]:
    """The creation times of the (``good``: good) user id self-signatures the keyring holds for ``fingerprint``."""
    gpg = GnuPG(env.state / "keyrings" / category, read_only=True)
    key = next(k for k in gpg.check_sigs([fingerprint]) if k.fingerprint == fingerprint)
    return sorted(sig.created or 0 for uid in key.uids for sig in uid.signatures
                  if (sig.good or not good) and sig.issuer_fingerprint in ("", fingerprint)
                  and sig.key_id == fingerprint[-16:] and sig.sig_class[:2] in ("10", "11", "12", "13"))


def test_the_weekly_release_key_keeps_all_eight_self_signatures(env: GkeysEnv) -> None:
    keyfile = shared_path("fixtures", "real", "keys", f"{WEEKLY}.asc")
    assert env.run("add-seed", "-C", "releng", "-n", "weekly", "-N", "Weekly", "-K", WEEKLY).code == 0
    result = env.run("import-key", "-C", "releng", "-n", "weekly", "-F", str(keyfile))
    assert result.code == 0, result.text
    held = _self_signatures(env, WEEKLY, "releng", good=False)
    # main: 1 (the 2019 one); of the eight, GnuPG finds seven good (the file holds a bad copy of the 2009 one)
    assert len(held) == 8 and len(_self_signatures(env, WEEKLY, "releng")) == 7, held
    # A source that publishes only the newest self-signature erases none of the older ones.
    scratch = GnuPG(env.root / "newest-only")
    scratch.import_keys(keyfile.read_bytes(), options=())
    env.server.hkp[WEEKLY] = scratch.export_keys([WEEKLY], clean=True)
    result = env.run("refresh-key", "-C", "releng", "--force")
    assert _self_signatures(env, WEEKLY, "releng", good=False) == held, result.text
    exported = (env.state / "keyrings" / "releng.asc").read_bytes()
    listed = GnuPG(env.root / "reader")
    listed.import_keys(exported, options=())
    assert len([s for u in listed.list_keys([WEEKLY], sigs=True)[0].uids for s in u.signatures
                if s.sig_class == "13x"]) >= 8  # the export readers and Sequoia get carries them too


@pytest.fixture
def renewed(tmp_path: Path) -> tuple[LifeKey, bytes, bytes, bytes]:
    """A key made 400 days ago for a year, a signature 300 days ago, renewed 100 days ago: the key, its export
    from before the renewal, its export after it as a source without history sends it, the signature."""
    key = LifeKey(tmp_path / "renewed", "renata", created=400)
    signature = key.sign(DATA, when=300)
    before = key.public()
    key.renew(when=100)
    after = key.public(history=False)
    key.close()
    return key, before, after, signature


def _import(env: GkeysEnv, key: LifeKey, data: bytes, name: str) -> None:
    path = env.root / name
    path.write_bytes(data)
    result = env.run("import-key", "-C", CATEGORY, "-n", key.nick, "-F", str(path))
    assert result.code == 0, result.text


@pytest.mark.parametrize("order", ["before-then-after", "after-then-before"])
def test_a_signature_made_before_a_renewal_verifies_with_both_engines(
        env: GkeysEnv, renewed: tuple[LifeKey, bytes, bytes, bytes], order: str) -> None:
    key, before, after, signature = renewed
    assert env.run("add-seed", "-C", CATEGORY, "-n", key.nick, "-N", "Renata", "-K", key.fingerprint).code == 0
    exports = [("before.asc", before), ("after.asc", after)]
    for name, data in exports if order == "before-then-after" else exports[::-1]:
        _import(env, key, data, name)
    assert len(_self_signatures(env, key.fingerprint)) == 2
    target = env.root / "file.txt"
    target.write_bytes(DATA)
    (env.root / "file.txt.asc").write_bytes(signature)
    result = env.run("verify", "-F", str(target), "-C", CATEGORY)
    assert result.code == 0, result.text  # main: engines-disagree (Sequoia finds no binding from 300 days ago)


def test_a_reader_of_the_exported_keyring_gets_the_history(
        env: GkeysEnv, renewed: tuple[LifeKey, bytes, bytes, bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    """Portage's user reads ``keyrings/<category>.asc``, not the keybox: the export carries the history."""
    key, before, after, signature = renewed
    assert env.run("add-seed", "-C", CATEGORY, "-n", key.nick, "-N", "Renata", "-K", key.fingerprint).code == 0
    _import(env, key, after, "after.asc")
    _import(env, key, before, "before.asc")
    monkeypatch.setenv("GKEYS_READ_ONLY_KEYRINGS", "1")
    target = env.root / "file.txt"
    target.write_bytes(DATA)
    (env.root / "file.txt.asc").write_bytes(signature)
    result = env.run("verify", "-F", str(target), "-C", CATEGORY)
    assert result.code == 0, result.text


def test_a_key_first_seen_without_its_history_names_the_cause_and_the_printed_fix_brings_it(
        env: GkeysEnv, renewed: tuple[LifeKey, bytes, bytes, bytes]) -> None:
    """Only the newest self-signature held: ``key-history-missing`` (main: ``engines-disagree``, a cause nobody
    can act on); the next step, run as printed, asks the keyservers, which merge every binding."""
    key, before, after, signature = renewed
    assert env.run("add-seed", "-C", CATEGORY, "-n", key.nick, "-N", "Renata", "-K", key.fingerprint).code == 0
    _import(env, key, after, "after.asc")
    target = env.root / "file.txt"
    target.write_bytes(DATA)
    (env.root / "file.txt.asc").write_bytes(signature)
    refused = env.run("--json", "verify", "-F", str(target), "-C", CATEGORY)
    document = json.loads(refused.out)
    assert refused.code == 1 and document["reason"] == "key-history-missing", refused.text
    assert "renewed" in document["error"] and "newest binding" in document["error"], document["error"]
    # a keyserver merges every copy it was sent
    env.server.hkp[key.fingerprint] = dearmor_public_keys(before) + dearmor_public_keys(after)
    fixed = env.run_printed(str(document["next_step"]))
    assert fixed.code == 0, fixed.text
    result = env.run("verify", "-F", str(target), "-C", CATEGORY)
    assert result.code == 0, result.text
