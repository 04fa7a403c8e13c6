"""Issue 43 items 8-13: the journal records the final verdict, once, by the caller that applied it, naming the
live location and a strong digest of what was accepted; a torn line never makes it unreadable for good."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from media_helpers import STAGE3, install_release_key, make_media
from tree_helpers import context, install_devs

from gkeys_portage.core import journal
from gkeys_portage.core.state import Layout
from gkeys_portage.demo.tree_repo import RepoBuilder, git_environment
from gkeys_portage.portage.hooks import repo_postsync_main
from gkeys_portage.portage.treesync import SyncOutcome, SyncRequest, clone_verified, update_verified
from gkeys_portage.verify.git.tree import TreeOptions


def _entries(root: Path, *kinds: str) -> list[dict[str, Any]]:
    found = [json.loads(line) for path in journal.JournalPaths.of(Layout(root)).files()
             for line in path.read_text().splitlines()]
    return [e for e in found if not kinds or e["kind"] in kinds]


def _sync(env: Any, location: Path, upstream: Path) -> SyncOutcome:
    request = SyncRequest(location, f"file://{upstream}", TreeOptions(policy="all", jobs=1), git_env=git_environment())
    action = update_verified if (location / ".git").exists() else clone_verified
    return action(context(env), request, lambda level, text: None)


def test_git_sync_journals_the_live_location_after_the_swap_and_never_a_refused_revision(env: Any,
                                                                                       tmp_path: Path) -> None:
    """Item 8: an update is journaled under the live location (it was the staging path, removed right after).
    Item 9: a signed revision that the content check refuses (a symlink out of the tree) is journaled as
    refused, never as accepted, and ``audit --recheck`` does not call it "verifies"."""
    install_devs(env, ("alice",))
    up = RepoBuilder(tmp_path / "upstream", env.keys)
    up.commit("alice")
    location = tmp_path / "repos" / "gentoo"
    assert _sync(env, location, up.path).ok
    second = up.commit("alice")
    assert _sync(env, location, up.path).ok
    accepted = _entries(env.state, "tree-accepted")
    assert [e["data"]["repo"] for e in accepted] == [str(location)] * 2, accepted
    assert accepted[-1]["data"]["tip"] == second

    (up.path / "dev-test" / "pkg" / "shadow").symlink_to("../../../../etc/shadow")
    refused_tip = up.commit("alice")
    outcome = _sync(env, location, up.path)
    assert not outcome.ok and "outside the repository" in outcome.reason, outcome.reason
    assert [e["data"]["tip"] for e in _entries(env.state, "tree-accepted")] == [accepted[0]["data"]["tip"], second]
    (refusal,) = _entries(env.state, "tree-refused")
    assert refusal["data"]["tip"] == refused_tip and refusal["data"]["repo"] == str(location)
    assert refusal["data"]["code"] == "bad-input" and "outside the repository" in refusal["data"]["why"]

    alice = env.keys.keys["alice"].fingerprint
    doc = json.loads(env.run("--json", "audit", "--key", alice, "--recheck").out)
    assert [a["subject"] for a in doc["artifacts"]] == [str(location)], doc
    assert refused_tip not in json.dumps(doc["artifacts"])
    assert all(r["status"] == "verifies" for r in doc["recheck"]), doc["recheck"]


def test_hook_journals_a_revision_refused_after_its_signatures_verified(env: Any, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 9 (hooks): HEAD's commits verify but the work tree is not HEAD: refused, and journaled so."""
    monkeypatch.setenv("GKEYS_CONFIG", str(env.config))
    install_devs(env, ("alice",))
    repo = RepoBuilder(tmp_path / "repo", env.keys)
    repo.commit("alice")
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 0
    (repo.path / "dev-test" / "pkg" / "file1").write_text("rewritten by a merge that failed part-way\n")
    assert repo_postsync_main(["test", "file:///up", str(repo.path)]) == 1
    kinds = [(e["kind"], e["data"].get("code")) for e in _entries(env.state, "tree-accepted", "tree-refused")]
    assert kinds == [("tree-accepted", None), ("tree-refused", "worktree-changed")], kinds


SHORT_WRITE = """
import resource, signal, sys
from pathlib import Path
from gkeys_portage.core import journal
from gkeys_portage.core.state import Layout
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a short write, then EFBIG: as a full disk does
size = journal.JournalPaths.of(Layout(Path(sys.argv[1]))).current.stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 40, size + 40))
assert journal.record(Layout(Path(sys.argv[1])), "media-accepted", {"file": "x" * 200}) is None
"""


def test_one_short_write_never_makes_the_journal_unreadable(env: Any, tmp_path: Path) -> None:
    """Item 13, reproduced as the issue did (``RLIMIT_FSIZE`` standing in for a full disk): a short write is cut
    off at once, a torn line a crash left is cut before the next append, ``history`` and ``audit`` read on; a
    line that cannot be read is named and passed over, and a broken chain is a warning of ``history`` and
    ``audit``."""
    layout = Layout(env.state)
    journal.record(layout, "keys-changed", {"category": "gentoo", "keys": [
        {"nick": "a", "fingerprint": "A" * 40, "change": "added"}]})
    current = journal.JournalPaths.of(layout).current
    before = current.read_bytes()
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", SHORT_WRITE, str(env.state)], check=True,
                   env={**os.environ, "PYTHONPATH": str(root)})
    assert current.read_bytes() == before  # the 40 bytes written were cut off again at once
    with open(current, "ab") as handle:
        handle.write(b'{"seq":3,"time":1,"ki')  # a crash in the middle of a write: no one cut it off
    journal.record(layout, "keys-changed", {"category": "gentoo", "keys": [
        {"nick": "b", "fingerprint": "B" * 40, "change": "added"}]})
    assert journal.verify_chain(layout).ok
    result = env.run("history")
    assert result.code == 0 and "A" * 40 in result.out and "B" * 40 in result.out, result.text
    assert env.run("audit", "--key", "A" * 40).code == 0

    lines = current.read_bytes().splitlines(keepends=True)
    current.write_bytes(b"".join([*lines[:-1], b"garbage\n", lines[-1]]))  # an unreadable line in the middle
    result = env.run("--json", "history")
    assert result.code == 0, result.text
    doc = json.loads(result.out)
    assert "B" * 40 in json.dumps(doc["changes"]), doc
    assert any(f"journal.jsonl:{len(lines)}: not a journal entry" in w for w in doc["warnings"]), doc["warnings"]
    text = env.run("audit", "--key", "B" * 40)
    assert text.code == 0 and "passed over" in text.err, text.text

    current.write_bytes(b"".join([*lines[:-2], lines[-1]]))  # an entry removed: the chain is broken
    warned = env.run("history")
    assert warned.code == 0 and "chain is broken" in warned.err and "journal verify)" in warned.err, warned.text


def _audit(env: Any, key: str, *extra: str) -> dict[str, Any]:
    result = env.run("--json", "audit", "--key", key, *extra)
    assert result.code in (0, 1), result.text
    return json.loads(result.out)


def test_verify_F_is_journaled_with_the_files_digest_and_recheck_tells_replaced_from_gone(env: Any,
                                                                                         tmp_path: Path) -> None:
    """Item 10: every file ``gkeys verify -F`` accepts (what ``gkeys-verify.eclass`` runs for each distfile) is a
    ``file-accepted`` entry with the file's SHA-256; ``audit --recheck`` verifies it again only while it is the
    very file accepted."""
    install_devs(env, ("alice",))
    tarball = tmp_path / "foo-1.tar.gz"
    tarball.write_bytes(b"the release\n")
    signature = tmp_path / "foo-1.tar.gz.asc"
    signature.write_bytes(env.keys.sign_bytes("alice", tarball.read_bytes(), tmp_path))
    assert env.run("verify", "-F", str(tarball), "-s", str(signature), "-C", "gentoo-devs").code == 0
    (entry,) = _entries(env.state, "file-accepted")
    assert entry["data"]["file"] == str(tarball) and entry["data"]["signature"] == str(signature)
    assert entry["data"]["sha256"] == hashlib.sha256(b"the release\n").hexdigest()
    alice = env.keys.keys["alice"].fingerprint
    doc = _audit(env, alice, "--recheck")
    assert [(a["artifact"], a["subject"]) for a in doc["artifacts"]] == [("signed file", str(tarball))]
    assert [r["status"] for r in doc["recheck"]] == ["verifies"], doc["recheck"]
    assert f"verify -F {tarball} -s {signature}" in doc["artifacts"][0]["accepted"][0]["next_step"]

    tarball.write_bytes(b"another build\n")  # signed by alice too: it verifies, but it is not what was accepted
    signature.write_bytes(env.keys.sign_bytes("alice", tarball.read_bytes(), tmp_path))
    assert [r["status"] for r in _audit(env, alice, "--recheck")["recheck"]] == ["replaced"]
    tarball.unlink()
    assert [r["status"] for r in _audit(env, alice, "--recheck")["recheck"]] == ["gone"]


def test_a_read_only_reader_never_writes_the_journal(env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``gkeys-verify.eclass`` and the bashrc hook run ``verify -F`` with ``GKEYS_READ_ONLY_KEYRINGS=1`` inside
    Portage's build sandbox, where opening the journal for writing is an access violation that fails the build:
    such a run touches no file of the journal (not even its lock)."""
    install_devs(env, ("alice",))
    tarball = tmp_path / "foo-1.tar.gz"
    tarball.write_bytes(b"the release\n")
    signature = tmp_path / "foo-1.tar.gz.asc"
    signature.write_bytes(env.keys.sign_bytes("alice", tarball.read_bytes(), tmp_path))
    root = journal.JournalPaths.of(Layout(env.state)).root
    before = {p.name: p.stat().st_mtime_ns for p in root.iterdir()}
    monkeypatch.setenv("GKEYS_READ_ONLY_KEYRINGS", "1")
    assert env.run("verify", "-F", str(tarball), "-s", str(signature), "-C", "gentoo-devs").code == 0
    assert {p.name: p.stat().st_mtime_ns for p in root.iterdir()} == before and not _entries(env.state, "file-accepted")


def test_a_lone_asc_release_file_records_its_digest_and_a_replacement_is_not_verified_again(
        env: Any, tmp_path: Path) -> None:
    """Item 11: a release file with only a detached ``.asc`` is journaled with its SHA-256; another build at the
    same path (signed by a pinned key too) is "replaced", never "verifies"."""
    install_release_key(env)
    media = make_media(env.keys, tmp_path / "media", siblings=(".asc",))
    assert env.run("verify-media", "--allow-unnamed", str(media.path)).code == 0
    (entry,) = _entries(env.state, "media-accepted")
    assert entry["data"]["digests"]["sha256"] == hashlib.sha256(media.data).hexdigest()
    releng = env.keys.keys["releng"].fingerprint
    make_media(env.keys, tmp_path / "media", data=b"another build\n", siblings=(".asc",))  # same path
    (result,) = _audit(env, releng, "--recheck")["recheck"]
    assert result["status"] == "replaced" and "sha256 differs" in result["why"], result


def test_audit_never_lists_scratch_paths_and_counts_a_stage3_once(env: Any, tmp_path: Path) -> None:
    """Item 12: ``fetch-media`` verifies in quarantine and installs; the journal names the installed file, once,
    and ``audit`` would leave out an entry journaled at a scratch path by an older gkeys."""
    install_release_key(env)
    url = make_media(env.keys, tmp_path / "src").publish(env.server)
    dest = tmp_path / "dest"
    assert env.run("fetch-media", url, "-d", str(dest)).code == 0
    assert [e["data"]["file"] for e in _entries(env.state, "media-accepted")] == [str(dest / STAGE3)]
    quarantined = env.state / "state" / "quarantine" / "media" / STAGE3
    journal.record(Layout(env.state), "media-accepted", {**_entries(env.state, "media-accepted")[0]["data"],
                                                         "file": str(quarantined)})  # as main journaled it
    doc = _audit(env, env.keys.keys["releng"].fingerprint)
    assert [(a["subject"], len(a["accepted"])) for a in doc["artifacts"]] == [(str(dest / STAGE3), 1)], doc


def test_a_refused_release_file_is_journaled_where_the_user_asked_for_it_never_at_a_scratch_path(
        env: Any, tmp_path: Path) -> None:
    """Item 12: ``fetch-media`` and ``verify-media URL`` verify in the quarantine; a refusal is journaled under the
    destination the user asked for (with the URL) and under the URL, never the quarantine path."""
    install_release_key(env)
    media = make_media(env.keys, tmp_path / "src")
    url = media.publish(env.server)
    env.server.publish(url.split("/", 3)[3], media.data[:-1] + b"!")  # the mirror serves another file
    dest = tmp_path / "dest"
    assert env.run("fetch-media", url, "-d", str(dest)).code == 1
    assert env.run("verify-media", url).code == 1
    refused = [e["data"] for e in _entries(env.state, "media-refused")]
    assert [(r["file"], r.get("url")) for r in refused] == [(str(dest / STAGE3), url), (url, None)], refused
    assert all(r["code"] and "/quarantine/" not in json.dumps(r) for r in refused), refused


def test_audit_lists_the_periods_a_key_was_trusted_in_the_binary_package_home(env: Any) -> None:
    """Item 10: binary packages are verified by Portage itself; ``audit`` lists the periods the key was trusted
    in the binary-package home (the ``binpkg-home`` entries), with the next step."""
    layout = Layout(env.state)
    key, other = "A" * 40, "B" * 40
    home = "/etc/portage/gnupg"
    journal.record(layout, "binpkg-home", {"home": home, "keys": [key, other], "unusable": []})
    journal.record(layout, "binpkg-home", {"home": home, "keys": [other], "unusable": []})
    journal.record(layout, "binpkg-home", {"home": home, "keys": [key], "unusable": []})
    doc = _audit(env, key)
    ((artifact, periods),) = [(a["artifact"], a["accepted"]) for a in doc["artifacts"]]
    assert artifact == "binary package home" and len(periods) == 2
    assert " to " in periods[0]["detail"] and periods[1]["detail"].endswith("until now")
    assert "emerge -1 --usepkg=n" in periods[0]["next_step"]
    (alone,) = _audit(env, other)["artifacts"][0]["accepted"]
    assert " to " in alone["detail"] and "until now" not in alone["detail"]
