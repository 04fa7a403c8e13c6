"""verify-tree: every commit's signature against pinned developer keys (real gpg and git, no Portage)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import build, expiring_key, extend_secret_key, install_devs, records, revoke

from gkeys_portage.demo.tree_repo import GARBAGE_SIGNATURE, RepoBuilder
from gkeys_portage.verify.git.objects import GitRepo, parse_commit


def verify(env: Any, repo: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = env.run("--json", "verify-tree", str(repo), *args)
    return result.code, json.loads(result.out)


def test_all_good_with_merge_then_only_new_commits(env: Any, tmp_path: Path) -> None:
    install_devs(env, ("alice", "bob"))
    repo = build(tmp_path / "repo", env.keys, ["alice", "bob"])
    base = repo.head()
    assert base
    side = repo.commit("bob", parents=[base], move=False)
    main = repo.commit("alice")
    merge = repo.commit("alice", parents=[main, side], message="merge side branch")
    code, data = verify(env, repo.path, "--policy", "all")
    assert code == 0, data
    assert data["verified"] is True and data["checked"] == 5
    assert records(env)[str(repo.path.resolve())]["revision"] == merge
    repo.commit("bob")
    code, data = verify(env, repo.path)
    assert code == 0 and data["checked"] == 1 and data["base"] == merge


@pytest.mark.parametrize("case", ["unsigned", "unpinned", "garbage", "unsigned-merge", "future"])
def test_bad_commit_below_good_top_is_named(env: Any, tmp_path: Path, case: str) -> None:
    install_devs(env, ("alice", "bob"))
    repo = build(tmp_path / "repo", env.keys, ["alice"])
    good = repo.head()
    assert good
    if case == "unsigned":
        bad = repo.commit(None)
    elif case == "unpinned":
        bad = repo.commit("mallory")
    elif case == "garbage":
        bad = repo.commit("alice", signature=GARBAGE_SIGNATURE)
    elif case == "future":
        bad = repo.commit("alice", sign_when=datetime.fromtimestamp(time.time() + 86400, UTC))
    else:
        side = repo.commit("bob", parents=[good], move=False)
        bad = repo.commit(None, parents=[good, side], message="unsigned merge")
    repo.commit("bob")
    repo.commit("alice")
    code, data = verify(env, repo.path, "--policy", "all")
    assert code == 1, data
    assert [b["commit"] for b in data["bad"]] == [bad]
    expected = {"unsigned": "no-signature", "unpinned": "unknown-signer", "garbage": "no-signature",
                "unsigned-merge": "no-signature", "future": "future-signature"}[case]
    assert data["bad"][0]["code"] == expected, data["bad"][0]["reason"]
    print(data["bad"][0]["reason"])
    assert data["bad"][0]["author"].startswith(("alice", "mallory", "anonymous"))
    assert data["first_good_ancestor"] == good
    # issue 41 item 6: the part that passed is recorded, so the next run checks only what lies above it
    assert {k: v["revision"] for k, v in records(env).items()} == {str(repo.path.resolve()): good}
    text = env.run("verify-tree", str(repo.path), "--range", f"{good}..HEAD").text
    assert bad[:12] in text and f"first good ancestor: {good[:12]}" in text


def test_top_policy_checks_only_the_top_on_first_run(env: Any, tmp_path: Path) -> None:
    install_devs(env, ("alice",))
    repo = build(tmp_path / "repo", env.keys, [None, "alice"])
    code, data = verify(env, repo.path, "--policy", "top")
    assert code == 0 and data["checked"] == 1
    code, data = verify(env, repo.path, "--policy", "all", "--range", "HEAD~1..HEAD")
    assert code == 0


def test_revoked_key_is_refused(env: Any, tmp_path: Path) -> None:
    install_devs(env, ("alice", "carol"))
    repo = build(tmp_path / "repo", env.keys, ["alice", "carol", "alice"])
    assert verify(env, repo.path, "--policy", "all", "--no-record")[0] == 0
    revoke(env, "carol")
    code, data = verify(env, repo.path, "--policy", "all")
    assert code == 1 and data["bad"][0]["code"] == "revoked-key"


def test_expired_key_good_before_expiry_refused_after(env: Any, tmp_path: Path) -> None:
    public = expiring_key(env.keys, "treexp")
    install_devs(env, ("alice", "treexp"), {"treexp": public})
    repo = RepoBuilder(tmp_path / "repo", env.keys)
    repo.commit("alice")
    repo.commit("treexp", when=datetime.fromtimestamp(time.time() - 600 * 86400, UTC))
    repo.commit("alice")
    code, data = verify(env, repo.path, "--policy", "all")
    assert code == 0, data
    late = repo.commit("treexp", when=extend_secret_key(env.keys, "treexp"))
    repo.commit("alice")
    code, data = verify(env, repo.path)
    assert code == 1 and [b["commit"] for b in data["bad"]] == [late]
    assert data["bad"][0]["code"] == "expired-key"


def test_force_push_over_verified_history_is_refused(env: Any, tmp_path: Path) -> None:
    install_devs(env, ("alice", "bob"))
    repo = build(tmp_path / "repo", env.keys, ["alice", "bob", "alice"])
    root = repo.git("rev-list", "--max-parents=0", "HEAD").strip()
    assert verify(env, repo.path, "--policy", "all")[0] == 0
    before = records(env)
    repo.force(root)
    repo.commit("bob", message="rewritten history, validly signed")
    result = env.run("verify-tree", str(repo.path))
    assert result.code == 1 and "history was rewritten" in result.text
    assert records(env) == before


def test_not_a_repository_and_bad_range(env: Any, tmp_path: Path) -> None:
    install_devs(env, ("alice",))
    assert env.run("verify-tree", str(tmp_path)).code == 2
    repo = build(tmp_path / "repo", env.keys, ["alice"])
    assert env.run("verify-tree", str(repo.path), "--range", "HEAD").code == 2


def test_parse_commit_strips_only_the_signature_header(env: Any, tmp_path: Path) -> None:
    repo = build(tmp_path / "repo", env.keys, ["alice"])
    head = repo.head()
    assert head
    commit = GitRepo(repo.path).read_commits([head])[head]
    assert commit.signature and commit.signature.startswith(b"-----BEGIN PGP SIGNATURE-----")
    assert b"gpgsig" not in commit.payload and commit.payload.startswith(b"tree ")
    assert commit.author == "alice <alice@gentoo.org>"
    raw = b"tree 0\nparent 1\ngpgsig-sha256 x\n y\nmergetag object 2\n type commit\n\nmsg\n"
    parsed = parse_commit("a" * 40, raw)
    assert parsed.signature is None and parsed.parents == ["1"]
    assert parsed.payload == b"tree 0\nparent 1\nmergetag object 2\n type commit\n\nmsg\n"


def test_top_commit_may_be_signed_by_the_mirror_category(env: Any, tmp_path: Path) -> None:
    install_devs(env, ("alice",))
    env.pin_key("gentoo-infra", "releng", "releng", name="Mirror")
    # beside the packaged gentoo-infra/mirror (purpose git-mirror), another seed signs commits only if
    # [purposes] says it is a git-mirror key (issue 23 item 2)
    env.write_config(extra="[purposes]\ngit-mirror = gentoo-infra/mirror gentoo-infra/releng\n")
    repo = build(tmp_path / "repo", env.keys, ["alice", "alice", "releng"])
    assert verify(env, repo.path, "--policy", "all", "--no-record")[0] == 1  # releng is no developer
    code, data = verify(env, repo.path, "--policy", "all", "-T", "gentoo-infra", "--no-record")
    assert code == 0, data
    repo.commit("alice")  # now the mirror's commit is below the top: refused again
    code, data = verify(env, repo.path, "--policy", "all", "-T", "gentoo-infra")
    assert code == 1 and data["bad"][0]["author"].startswith("releng")


def test_batches_give_the_same_verdicts(env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gkeys_portage.verify.git import tree

    install_devs(env, ("alice", "bob"))
    repo = build(tmp_path / "repo", env.keys, ["alice", "bob", None, "alice", "bob"])
    whole = verify(env, repo.path, "--policy", "all", "--no-record")
    monkeypatch.setattr(tree, "BATCH", 2)
    batched = verify(env, repo.path, "--policy", "all", "--no-record")
    assert whole == batched and whole[0] == 1 and len(whole[1]["bad"]) == 1
    assert whole[1]["first_good_ancestor"] == repo.git("rev-parse", "HEAD~3").strip()



@pytest.mark.parametrize("batch", [1, 2, 1000])
def test_chunks_read_ahead_of_gpg_report_progress_in_order(env: Any, tmp_path: Path, batch: int,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Commits are read in chunks while gpg checks earlier ones: the progress reports rise to the total,
    and a bad commit in a middle chunk is still the one refused."""
    from gkeys_portage.core.config import load_config
    from gkeys_portage.keys.context import Gkeys
    from gkeys_portage.verify.git import tree

    install_devs(env, ("alice", "bob"))
    repo = build(tmp_path / "repo", env.keys, ["alice", "bob", "alice", None, "bob", "alice", "bob"])
    monkeypatch.setattr(tree, "BATCH", batch)
    verifier = tree.TreeVerifier(Gkeys(load_config(env.config, None)),
                                 tree.TreeOptions(policy="all", jobs=2))
    seen: list[tuple[int, int]] = []
    report = verifier.verify_repo(repo.path, record=False, progress=lambda done, total: seen.append((done, total)))
    assert report.checked == 7 and [v.commit for v in report.bad] == [repo.git("rev-parse", "HEAD~3").strip()]
    assert seen and seen[-1] == (7, 7) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert len(seen) == (4 if batch == 1 else 2)  # one report per round of jobs runs (BATCH per run at most)

def test_committer_words_reach_the_terminal_escaped(env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A refused commit's author is printed in the refusal line: an escape sequence in it must not reach the
    terminal (it could clear the screen or rewrite the line that says NOT verified)."""
    install_devs(env, ("alice",))
    repo = build(tmp_path / "repo", env.keys, ["alice"])
    repo.commit(None, author="Mallory \x1b[2J\x1b[1A <m@x>", message="\x1b]0;owned\x07 subject")
    result = env.run("verify-tree", str(repo.path), "--policy", "all")
    assert result.code == 1, result.text
    assert "\x1b" not in result.text and "\x07" not in result.text
    assert "Mallory \\x1b[2J\\x1b[1A <m@x>" in result.text
