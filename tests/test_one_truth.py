"""One truth in text and ``--json`` (issue 45, item 1): each action is run twice, as text and as JSON, on success
and on refusal, and the facts compared: the exit status, the cause's own ``reason`` code, and the next step (the
command the text prints after "next:" is the JSON's ``next_step``, and a JSON ``next_step`` is printed in the
text, after "next:" or in the refusal's own words).  Real gpg, a real git repository, a loopback HTTP server
(the ``env`` fixture)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import GkeysEnv
from tree_helpers import build, install_devs

from gkeys_portage.ui.output import VERDICT_KEYS

STAGE3 = "releases/amd64/stage3-amd64-openrc-20260101T000000Z.tar.xz"
#: "(next: CMD)" at the end of a refusal line, or "next: what: CMD" on a line of its own
NEXT = re.compile(r"\(next: (?P<paren>.+)\)$|^ \* next: [^:]+: (?P<line>.+)$")


@dataclass(frozen=True)
class World:
    """What the cases act on."""

    root: Path
    url: str
    alice: str  # her primary fingerprint
    repo: Path  # two commits by alice
    unsigned: Path  # alice's commit, then an unsigned one


@pytest.fixture
def world(env: GkeysEnv, tmp_path: Path) -> World:
    install_devs(env, ("alice",))
    (env.root / "plain.txt").write_bytes(b"hello\n")
    (env.root / "signed.txt").write_bytes(b"hello\n")
    (env.root / "signed.txt.asc").write_bytes(env.keys.sign_bytes("alice", b"hello\n", env.root))
    repo = build(tmp_path / "repo", env.keys, ["alice", "alice"]).path
    unsigned = build(tmp_path / "unsigned", env.keys, ["alice", None]).path
    return World(env.root, env.server.url, env.keys.keys["alice"].fingerprint, repo, unsigned)


Argv = Callable[[World], list[str]]
#: name -> (argv, exit status, reason (None on success), whether a next step must be given)
CASES: dict[str, tuple[Argv, int, str | None, bool]] = {
    "verify: verified": (lambda w: ["verify", "-F", str(w.root / "signed.txt"), "-C", "gentoo-devs"], 0, None, False),
    "verify: no signature": (lambda w: ["verify", "-F", str(w.root / "plain.txt"), "-C", "gentoo-devs"], 1,
                             "no-signature", False),
    "verify-tree: verified": (lambda w: ["verify-tree", str(w.repo), "--policy", "all", "--no-record"], 0, None,
                              False),
    "verify-tree: unsigned commit": (lambda w: ["verify-tree", str(w.unsigned), "--policy", "all", "--no-record"], 1,
                                     "no-signature", True),
    "verify-media: not on the mirror": (lambda w: ["verify-media", f"{w.url}/{STAGE3}"], 3, "not-found", False),
    "verify-overlays: no signature": (lambda w: ["verify-overlays", str(w.root / "plain.txt")], 1, "no-signature",
                                      False),
    "audit: a known key": (lambda w: ["audit", "--key", w.alice], 0, None, False),
    "audit: a key nothing knew": (lambda w: ["audit", "--key", "0123456789ABCDEF0123456789ABCDEF01234567"], 2,
                                  "unknown-key", True),
    "audit: a key id": (lambda w: ["audit", "--key", "1234"], 2, "usage", True),
    "history": (lambda w: ["history"], 0, None, False),
    "history: a bad date": (lambda w: ["history", "--since", "yesterday"], 2, "usage", True),
    "journal verify": (lambda w: ["journal", "verify"], 0, None, False),
    "list-key": (lambda w: ["list-key", "-C", "gentoo-devs"], 0, None, False),
    "list-key: no such category": (lambda w: ["list-key", "-C", "gentoo-nope"], 2, "usage", False),
    "status": (lambda w: ["status", "--eroot", str(w.root)], 0, None, False),
    "remove-seed: no such nick": (lambda w: ["remove-seed", "-C", "gentoo-devs", "-n", "nobody"], 2, "bad-input",
                                  False),
}


def _run(env: GkeysEnv, *argv: str) -> tuple[int, str]:
    try:
        result = env.run(*argv)
    except SystemExit as exc:  # argparse
        captured = env.capsys.readouterr()
        return int(exc.code or 0), captured.out + captured.err
    return result.code, result.out + result.err


def _next_in_text(text: str) -> list[str]:
    found = []
    for line in text.splitlines():
        match = NEXT.search(line)
        if match:
            found.append(match.group("paren") or match.group("line"))
    return found


@pytest.mark.slow
def test_text_and_json_carry_the_same_facts(env: GkeysEnv, world: World) -> None:
    for name, (argv, status, reason, needs_next) in CASES.items():
        code, text = _run(env, *argv(world))
        json_code, out = _run(env, "--json", *argv(world))
        assert code == json_code == status, (name, code, json_code, text, out)
        document: dict[str, Any] = json.loads(out)
        assert document["exit"] == status, (name, document)
        if "reason" in document or status:
            assert document["reason"] == reason, (name, document)
        step = document.get("next_step")
        printed = _next_in_text(text)
        assert all(command == step for command in printed), (name, printed, step, text)
        assert not step or step in text, (name, step, text)  # "(next: CMD)", or the command in the message
        if needs_next:
            assert step, (name, document)
        if status and "reason" in document:  # every refusal document carries the keys a success carries
            assert set(VERDICT_KEYS) <= set(document), (name, document)


def test_a_verifying_actions_success_and_refusal_share_their_keys(env: GkeysEnv, world: World) -> None:
    """audit is one of them: the README says "a refusal carries the same keys as a success"."""
    for success, refusal in (("audit: a known key", "audit: a key nothing knew"),
                             ("verify: verified", "verify: no signature"),
                             ("verify-tree: verified", "verify-tree: unsigned commit")):
        good = json.loads(_run(env, "--json", *CASES[success][0](world))[1])
        bad = json.loads(_run(env, "--json", *CASES[refusal][0](world))[1])
        assert set(VERDICT_KEYS) <= set(good) and set(VERDICT_KEYS) <= set(bad), (good, bad)
        assert good["reason"] is None and bad["reason"] == CASES[refusal][2]


def test_journal_times_carry_their_zone(env: GkeysEnv, world: World) -> None:
    changes = json.loads(_run(env, "--json", "history")[1])["changes"]
    assert changes and all(change["when"].endswith("+00:00") for change in changes), changes
    artifacts = json.loads(_run(env, "--json", "audit", "--key", world.alice)[1])["artifacts"]
    assert all(hit["when"].endswith("+00:00") for artifact in artifacts for hit in artifact["accepted"])


def test_doctor_prints_each_fix_its_json_carries(env: GkeysEnv, world: World, tmp_path: Path) -> None:
    """A finding's text ends with "fix: F", where F is the JSON's fix_note (the whole fix) or, when the fix is
    a command alone, its fix; a fix, when given, is that command (issue 45, item 1)."""
    root = tmp_path / "root"
    (root / "etc/portage/repos.conf").mkdir(parents=True)
    (root / "etc/portage/repos.conf/test.conf").write_text(
        f"[test]\nlocation = {tmp_path}/repos/test\nsync-type = git\nsync-uri = https://example.org/test.git\n")
    code, text = _run(env, "doctor", "--eroot", str(root))
    json_code, out = _run(env, "--json", "doctor", "--eroot", str(root))
    findings = json.loads(out)["findings"]
    assert code == json_code == 1 and findings, text
    for finding in findings:
        printed = finding["fix_note"] or finding["fix"]
        assert f"{finding['code']}: {finding['subject']}: {finding['message']}; fix: {printed}" in text, finding
        assert finding["fix"] is None or finding["fix"] in printed, finding
    assert any(finding["fix"] for finding in findings)


def test_a_one_commit_repository_gets_no_hint_that_repeats_itself(env: GkeysEnv, world: World,
                                                                  tmp_path: Path) -> None:
    """Issue 45, item 7: under policy top, a first run of a repository of one commit checked its whole history;
    the hint "to check every commit up to it: gkeys verify-tree REPO --range ..TOP" would print the same again."""
    one = build(tmp_path / "one", env.keys, ["alice"]).path
    code, text = _run(env, "verify-tree", str(one), "--no-record")
    assert code == 0 and "policy top" not in text, text
    assert json.loads(_run(env, "--json", "verify-tree", str(one), "--no-record")[1])["history_checked"] is True
    code, text = _run(env, "verify-tree", str(world.repo), "--no-record")  # two commits: the hint stays
    assert code == 0 and "policy top: only the top commit" in text, text
