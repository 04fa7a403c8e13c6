"""The trust journal: the hash chain, its rotation and limits, and a key compromise driven end to end
(keys installed, trees verified and release files accepted over several simulated days, then one key
revoked: ``audit --key`` lists exactly what it signed, ``--recheck`` refuses it, the chain shows edits)."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import keys_installed_by_gnupg
from media_helpers import make_media
from overlays_helpers import GOOD
from rsync_helpers import CATEGORY, make_snapshot, pin_repository_keys
from test_overlays_cli import infra, previous_copy, write_list  # noqa: F401 - infra: releng pinned for the list
from test_rsync_nochange import daemon, synced  # noqa: F401 - the fixtures of a synced rsync location
from tree_helpers import build, install_devs

from gkeys_portage.core import journal
from gkeys_portage.core.config import load_config
from gkeys_portage.core.state import Layout
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.openpgp.gnupg import GnuPG

DAY = 86400.0
DAY1 = 1796000000.0  # 2026-11-30 (the journal's clock only; signatures are made and checked at real time)


def _entries(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in journal.JournalPaths.of(Layout(root)).files()
            for line in path.read_text().splitlines()]


def test_chain_holds_across_rotation_and_names_the_first_broken_link(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    layout = Layout(tmp_path)
    monkeypatch.setattr(journal, "MAX_FILE", 600)
    monkeypatch.setattr(journal, "KEEP_FILES", 3)
    for number in range(12):
        assert journal.record(layout, "tree-accepted", {"n": number, "signers": {"A" * 40: number}})
    paths = journal.JournalPaths.of(layout)
    files = paths.files()
    assert len(files) == 4 and paths.current in files  # three rotated files kept, the oldest dropped
    first = json.loads(files[-1].read_text().splitlines()[0])
    last_of_old = files[-2].read_text().splitlines()[-1].encode()
    assert first["kind"] == "journal-rotated" and first["prev"] == journal.line_hash(last_of_old)
    chain = journal.verify_chain(layout)
    assert chain.ok and chain.starts_at > 1, chain.broken
    assert oct(paths.current.stat().st_mode & 0o777) == "0o640"

    lines = files[1].read_text().splitlines()
    edited = lines[1].replace('"n":', '"n": 1') if '"n":' in lines[1] else lines[1].replace("rotated", "rotatee")
    files[1].write_text("\n".join([lines[0], edited, *lines[2:]]) + "\n")
    broken = journal.verify_chain(layout)
    assert not broken.ok and f"{files[1].name} line 3" in broken.broken and "changed or removed" in broken.broken

    files[1].write_text("\n".join([lines[0], *lines[2:]]) + "\n")  # a whole entry removed
    assert "changed or removed" in journal.verify_chain(layout).broken
    files[1].write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n")  # re-ordered
    assert not journal.verify_chain(layout).ok
    files[1].write_text("\n".join(lines) + "\n")
    assert journal.verify_chain(layout).ok and journal.problems(layout) == []

    current = paths.current.read_text().splitlines()
    paths.current.write_text("\n".join(current[:-1]) + "\n")  # the newest entry cut off the end
    cut = journal.verify_chain(layout)
    assert not cut.ok and "removed" in cut.broken and "head" in cut.broken
    assert [code for code, _, _ in journal.problems(layout)] == ["journal:broken"]
    assert journal.record(layout, "tree-accepted", {}) is not None  # the chain goes on from the last line


def test_a_journal_that_cannot_be_written_is_one_warning_and_never_a_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    layout = Layout(tmp_path)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "journal").write_text("not a directory")  # root ignores modes; a file does not
    monkeypatch.setattr(journal, "_warned", [])
    assert journal.record(layout, "tree-accepted", {}) is None
    assert journal.record(layout, "media-accepted", {}) is None
    err = capsys.readouterr().err
    assert err.count("WARNING") == 1 and "cannot write the trust journal" in err and "gkeys doctor" in err
    assert [code for code, _, _ in journal.problems(layout)] == ["journal:unwritable"]
    monkeypatch.setenv("GKEYS_JOURNAL", "off")
    (tmp_path / "state" / "journal").unlink()
    assert journal.record(layout, "tree-accepted", {}) is None and not (tmp_path / "state" / "journal").exists()


def test_a_config_change_of_pins_or_engine_is_journaled_once(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    env.bootstrap()
    first = [e for e in _entries(env.state) if e["kind"] == "config-changed"]
    assert len(first) == 1 and first[0]["data"]["first"] is True
    env.run("list-key", "-C", "seed-signers")
    env.write_config("[purposes]\nrelease-media = gentoo/releng\n")
    env.run("history")  # reading records nothing
    env.pin_key("seed-signers", "other", "bob")
    changes = [e for e in _entries(env.state) if e["kind"] == "config-changed"]
    assert len(changes) == 2 and changes[1]["data"]["sections"] == ["purposes"]
    history = env.run("history").out
    assert "config changed: purposes" in history


def _day(monkeypatch: pytest.MonkeyPatch, number: int) -> None:
    monkeypatch.setattr(journal, "clock", lambda: DAY1 + (number - 1) * DAY)


def _pin_media_keys(env: Any) -> None:
    """gentoo pins releng and carol, both for release media."""
    env.write_config("[purposes]\nrelease-media = gentoo/releng gentoo/carol\n")
    seeds = env.state / "seeds"
    seeds.mkdir(parents=True, exist_ok=True)
    (seeds / "gentoo.seeds").write_bytes(env.seed_bytes("releng", "carol"))
    for nick in ("releng", "carol"):
        keyfile = env.root / f"{nick}.media.asc"
        keyfile.write_bytes(env.keys.public(nick))
        with keys_installed_by_gnupg():
            assert env.run("import-key", "-C", "gentoo", "-n", nick, "-F", str(keyfile)).code == 0


def test_compromised_key_audit_lists_exactly_what_it_signed_and_recheck_refuses_it(
        env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = env.keys
    carol, carol_sub = keys.keys["carol"].fingerprint, keys.keys["carol"].signing_subkey
    _day(monkeypatch, 1)
    install_devs(env, ("alice", "carol"))
    _pin_media_keys(env)
    repo = build(tmp_path / "repo", keys, ["alice", "alice"])
    assert env.run("verify-tree", str(repo.path), "--policy", "all").code == 0
    media_a = make_media(keys, tmp_path / "a", signer="releng")
    assert env.run("verify-media", str(media_a.path)).code == 0
    day1_tip = repo.head()

    _day(monkeypatch, 2)
    repo.commit("carol")
    repo.commit("alice")
    assert env.run("verify-tree", str(repo.path), "--policy", "all").code == 0
    day2_tip = repo.head()
    media_b = make_media(keys, tmp_path / "b", signer="carol")
    assert env.run("verify-media", str(media_b.path)).code == 0

    _day(monkeypatch, 3)
    repo.commit("alice")
    assert env.run("verify-tree", str(repo.path), "--policy", "all").code == 0
    unsigned = build(tmp_path / "unsigned", keys, [None])
    assert env.run("verify-tree", str(unsigned.path), "--no-record").code == 1

    kinds = [e["kind"] for e in _entries(env.state)]
    assert kinds.count("tree-accepted") == 3 and kinds.count("media-accepted") == 2
    refused = next(e for e in _entries(env.state) if e["kind"] == "tree-refused")
    assert refused["data"]["code"] == "no-signature"

    for key in (carol, carol_sub):  # the primary, or the subkey that made the signatures
        doc = json.loads(env.run("--json", "audit", "--key", key).out)
        found = {(a["artifact"], a["subject"]): a["accepted"] for a in doc["artifacts"]}
        assert set(found) == {("git tree", str(repo.path)), ("release file", str(media_b.path))}, found
        (tree_hit,) = found[("git tree", str(repo.path))]
        assert tree_hit["detail"] == f"1 of 2 commit(s) in {day1_tip}..{day2_tip}"
        assert f"--range {day1_tip}..{day2_tip}" in tree_hit["next_step"]
    text = env.run("audit", "--key", carol).out
    assert f"release file {media_b.path}" in text and str(media_a.path) not in text
    assert json.loads(env.run("--json", "audit", "--key", carol, "--since", "2026-12-02").out)["artifacts"] == []
    alice = json.loads(env.run("--json", "audit", "--key", keys.keys["alice"].fingerprint).out)
    assert [len(a["accepted"]) for a in alice["artifacts"]] == [3]  # three ranges, no release file

    seeds = json.loads(env.run("--json", "audit", "--key", keys.keys["gkeys"].fingerprint, "--recheck").out)
    assert [a["artifact"] for a in seeds["artifacts"]] == ["seed file"]  # the seed signer signed nothing else
    assert [r["status"] for r in seeds["recheck"]] == ["verifies"]
    before = env.run("audit", "--key", carol, "--recheck")
    assert before.code == 0 and before.out.count("verifies:") == 2, before.text

    _day(monkeypatch, 4)  # the revocation is published; the weekly refresh brings it
    scratch = GnuPG(tmp_path / "scratch")
    scratch.import_keys(keys.public("carol"))
    scratch.import_keys(keys.revocation("carol"))
    env.server.hkp[carol] = scratch.export_keys([carol], armor=False)
    scratch.close()
    for nick in ("alice", "releng"):
        env.server.hkp[keys.keys[nick].fingerprint] = keys.public(nick)
    with keys_installed_by_gnupg():
        env.run("refresh-key", "--force")
    history = env.run("history", "-C", "gentoo-devs").out
    assert f"key {carol} (gentoo-devs/carol) revoked" in history and env.server.url in history

    journaled = len(_entries(env.state))
    after = env.run("--json", "audit", "--key", carol, "--recheck")
    assert after.code == 1, after.text
    assert [e["kind"] for e in _entries(env.state)[journaled:]] == ["audit-recheck"]  # its summary, nothing else
    rechecked = {(r["artifact"], r["subject"]): r for r in json.loads(after.out)["recheck"]}
    assert set(rechecked) == {("git tree", str(repo.path)), ("release file", str(media_b.path))}
    assert all(r["status"] == "refused" for r in rechecked.values()), rechecked
    assert rechecked[("git tree", str(repo.path))]["code"] == "revoked-key"
    # alice's ranges verify again, except the one carol's commit shares with hers (named as carol's)
    alice_now = json.loads(env.run("--json", "audit", "--key", keys.keys["alice"].fingerprint, "--recheck").out)
    assert [r["status"] for r in alice_now["recheck"]] == ["verifies", "refused", "verifies"]
    assert "gentoo-devs/carol" in alice_now["recheck"][1]["why"]

    assert env.run("journal", "verify").code == 0
    current = journal.JournalPaths.of(Layout(env.state)).current
    lines = current.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"media-accepted"' in line and str(media_b.path) in line)
    current.write_text("\n".join(lines[:at] + lines[at + 1:]) + "\n")  # hide what carol signed
    gone = env.run("journal", "verify")
    assert gone.code == 1 and f"line {at + 1}" in gone.err and "changed or removed" in gone.err
    current.write_text("\n".join(lines[:at] + [lines[at].replace(carol, keys.keys["releng"].fingerprint)]
                                 + lines[at + 1:]) + "\n")
    assert env.run("journal", "verify").code == 1


def test_history_shows_control_characters_from_a_key_escaped(env: Any) -> None:
    journal.record(Layout(env.state), "keys-changed", {"category": "gentoo-devs", "keys": [
        {"nick": "evil\x1b[2J\x1b]0;owned\x07", "fingerprint": "A" * 40, "change": "added", "source": "x\ny"}]})
    out = env.run("history").out
    assert "\x1b" not in out and "\x07" not in out and "evil\\x1b[2J\\x1b]0;owned\\x07" in out
    assert "x\\x0ay" in out and out.count("\n") == 1


def test_a_torn_last_line_is_cut_before_the_next_append(tmp_path: Path) -> None:
    """Issue 43 item 13: the torn line is truncated under the lock; the chain goes on from the last whole entry."""
    layout = Layout(tmp_path)
    journal.record(layout, "tree-accepted", {"at": Path("/var/db/repos/gentoo")})  # not JSON: stored as text
    current = journal.JournalPaths.of(layout).current
    with open(current, "ab") as handle:
        handle.write(b'{"seq":2,"time":1,"ki')  # power lost in the middle of a write
    assert journal.record(layout, "media-accepted", {}) is not None
    lines = current.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["prev"] == journal.line_hash(lines[0].encode())
    assert json.loads(lines[1])["seq"] == 2 and journal.verify_chain(layout).ok


@pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed")
def test_rsync_trees_are_journaled_audited_and_rechecked(env: Any, synced: Any) -> None:  # noqa: F811
    sync, location, _served = synced
    assert sync().ok  # the no-change path journals its acceptance too
    repository_key = env.keys.keys["infra"].fingerprint
    accepted = [e["data"] for e in _entries(env.state) if e["kind"] == "rsync-accepted"]
    assert len(accepted) == 2
    assert all(d["fingerprint"] == repository_key and d["location"] == str(location) for d in accepted)
    doc = json.loads(env.run("--json", "audit", "--key", repository_key, "--recheck").out)
    assert [r["status"] for r in doc["recheck"]] == ["verifies", "verifies"]
    ctx = Gkeys(load_config(env.config))
    with ctx.lock, ctx.keyring(CATEGORY).update() as staging:
        staging.import_keys(env.keys.revocation("infra"))
    assert not sync().ok
    assert [e["data"]["code"] for e in _entries(env.state) if e["kind"] == "rsync-refused"] == ["key-revoked"]
    after = env.run("--json", "audit", "--key", repository_key, "--recheck")
    assert after.code == 1 and {r["code"] for r in json.loads(after.out)["recheck"]} == {"key-revoked"}


def test_webrsync_snapshots_are_journaled_and_rechecked(env: Any, tmp_path: Path) -> None:
    pinned = pin_repository_keys(env)
    today = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
    snapshot = make_snapshot(tmp_path, pinned.keys, "infra", today)
    assert env.run("verify-snapshot", str(snapshot), "-C", CATEGORY).code == 0
    older = make_snapshot(tmp_path, pinned.keys, "infra", today - timedelta(days=1))
    assert env.run("verify-snapshot", str(older), "-C", CATEGORY).code == 1
    kinds = {e["kind"]: e["data"] for e in _entries(env.state)}
    assert kinds["snapshot-accepted"]["file"] == str(snapshot) and kinds["snapshot-refused"]["code"] == "rollback"
    repository_key = env.keys.keys["infra"].fingerprint
    doc = json.loads(env.run("--json", "audit", "--key", repository_key, "--recheck").out)
    assert [(r["artifact"], r["status"]) for r in doc["recheck"]] == [("webrsync snapshot", "verifies")]
    snapshot.write_bytes(b"another tree")
    doc = json.loads(env.run("--json", "audit", "--key", repository_key, "--recheck").out)
    assert [r["status"] for r in doc["recheck"]] == ["replaced"]  # another file at the path (issue 43 item 11)
    snapshot.unlink()
    doc = json.loads(env.run("--json", "audit", "--key", repository_key, "--recheck").out)
    assert [r["status"] for r in doc["recheck"]] == ["gone"]


def test_overlay_lists_and_key_removals_are_journaled(env: Any, infra: Any) -> None:  # noqa: F811
    pinned = infra
    out = previous_copy(pinned)
    assert pinned.run("verify-overlays", str(write_list(pinned, GOOD)), "-o", str(out)).code == 0
    assert pinned.run("verify-overlays", str(write_list(pinned, GOOD, signer="alice")), "-o", str(out)).code == 1
    releng = env.keys.keys["releng"].fingerprint
    entries = _entries(env.state)
    accepted = next(e["data"] for e in entries if e["kind"] == "overlays-accepted")
    assert accepted["output"] == str(out.resolve()) and accepted["signer"]["fingerprint"] == releng
    assert next(e["data"]["code"] for e in entries if e["kind"] == "overlays-refused") == "unknown-signer"
    doc = json.loads(env.run("--json", "audit", "--key", releng, "--recheck").out)
    assert [(r["artifact"], r["status"]) for r in doc["recheck"]] == [("overlay list", "not rechecked")]
    assert env.run("remove-key", "-C", "gentoo-infra", "-n", "infra").code == 0
    assert f"key {releng} (gentoo-infra) removed" in env.run("history", "-C", "gentoo-infra").out


def test_doctor_names_a_journal_it_cannot_write_or_whose_chain_is_broken(env: Any, tmp_path: Path) -> None:
    eroot = tmp_path / "eroot"
    (eroot / "etc" / "portage").mkdir(parents=True)
    env.bootstrap()
    codes = [f["code"] for f in json.loads(env.run("--json", "doctor", "--eroot", str(eroot)).out)["findings"]]
    assert not [c for c in codes if c.startswith("journal:")]
    current = journal.JournalPaths.of(Layout(env.state)).current
    lines = current.read_text().splitlines()
    current.write_text("\n".join(lines[1:]) + "\n")  # the first entry removed
    codes = [f["code"] for f in json.loads(env.run("--json", "doctor", "--eroot", str(eroot)).out)["findings"]]
    assert "journal:broken" in codes
