"""Refusals name what gkeys knows (issue 23, item 21): the file and the pinned nick of a BAD signature, a truncated
signature as truncated, docs/tree.md's next step after a force-push, doctor's commands with the user's -c/--root,
and git's file-size cap only when it is the cause.  Real gpg, git and files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import GkeysEnv
from tree_helpers import build, install_devs

from gkeys_portage.core.errors import BadInputError
from gkeys_portage.verify.git.objects import GitRepo


@pytest.fixture
def signed(env: GkeysEnv) -> Path:
    """alice's signature over a file: good.txt (+ .asc), tampered.txt (other bytes), cut.txt (.asc cut short)."""
    env.install_devs("alice")
    data = b"the signed text\n"
    signature = env.keys.sign_bytes("alice", data, env.root)
    for name, body, sig in (("good.txt", data, signature), ("tampered.txt", b"the signed text!\n", signature),
                            ("cut.txt", data, signature[: len(signature) // 2])):
        (env.root / name).write_bytes(body)
        (env.root / f"{name}.asc").write_bytes(sig)
    return env.root


def test_a_bad_signature_names_the_file_and_the_pinned_nick(env: GkeysEnv, signed: Path) -> None:
    alice = env.keys.keys["alice"]
    result = env.run("verify", "-F", str(signed / "tampered.txt"), "-C", "gentoo-devs")
    assert result.code == 1, result.text
    assert f"{signed / 'tampered.txt'}: BAD signature by gentoo-devs/alice ({alice.fingerprint})" in result.err
    document = json.loads(env.run("--json", "verify", "-F", str(signed / "tampered.txt"), "-C", "gentoo-devs").out)
    assert document["reason"] == "bad-signature" and document["signer"] == "gentoo-devs/alice"


def test_a_truncated_signature_says_truncated_and_names_the_file(env: GkeysEnv, signed: Path) -> None:
    result = env.run("verify", "-F", str(signed / "cut.txt"), "-C", "gentoo-devs")
    assert result.code == 1, result.text
    assert f"{signed / 'cut.txt.asc'}: the signature is truncated" in result.err
    assert f"{signed / 'cut.txt'} is not verified" in result.err
    document = json.loads(env.run("--json", "verify", "-F", str(signed / "cut.txt"), "-C", "gentoo-devs").out)
    assert document["reason"] == "truncated" and document["file"] == str(signed / "cut.txt")
    assert env.run("verify", "-F", str(signed / "good.txt"), "-C", "gentoo-devs").code == 0


def test_the_force_push_refusal_gives_the_next_step(env: Any, tmp_path: Path) -> None:
    install_devs(env, ("alice", "bob"))
    repo = build(tmp_path / "repo", env.keys, ["alice", "bob", "alice"])
    root = repo.git("rev-list", "--max-parents=0", "HEAD").strip()
    assert env.run("verify-tree", str(repo.path), "--policy", "all").code == 0
    repo.force(root)
    repo.commit("bob", message="rewritten history, validly signed")
    result = env.run("verify-tree", str(repo.path))
    assert result.code == 1 and "history was rewritten" in result.err
    assert f"remove {repo.path} and sync again: a first clone is verified afresh" in result.err  # docs/tree.md
    document = json.loads(env.run("--json", "verify-tree", str(repo.path)).out)
    assert document["reason"] == "rollback" and document["next_step"] == f"rm -rf {repo.path} && emerge --sync"
    tree_md = (Path(__file__).resolve().parent.parent / "docs" / "tree.md").read_text()
    assert "remove the\nrepository directory and sync again" in tree_md


def test_doctor_keeps_the_config_and_root_given(env: GkeysEnv, tmp_path: Path) -> None:
    eroot, root = tmp_path / "eroot", tmp_path / "elsewhere"
    (eroot / "etc/portage").mkdir(parents=True)
    env.config.write_text("")
    result = env.run("--root", str(root), "doctor", "--eroot", str(eroot))
    assert result.code == 1
    fixes = [line.split("; fix: ", 1)[1] for line in result.err.splitlines() if "; fix: " in line]
    gkeys_fixes = [fix for fix in fixes if fix.startswith("gkeys ")]
    assert gkeys_fixes, fixes
    for fix in gkeys_fixes:
        assert fix.startswith(f"gkeys -c {env.config} --root {root} "), fix
    assert f"then 'gkeys -c {env.config} --root {root} doctor --eroot {eroot}' again" in result.err
    document = json.loads(env.run("--root", str(root), "--json", "doctor", "--eroot", str(eroot)).out)
    assert all(f["fix"].startswith(f"gkeys -c {env.config} --root {root} ")
               for f in document["findings"] if (f["fix"] or "").startswith("gkeys "))


def test_the_file_size_cap_is_named_only_when_it_is_the_cause(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    GitRepo(tmp_path).run("init", "-q", str(repo))
    with pytest.raises(BadInputError) as failed:
        GitRepo(repo).run("fetch", "-q", str(tmp_path / "no-such-repository"), "HEAD", max_file_size=1 << 20)
    assert "does not appear to be a git repository" in failed.value.message
    assert "capped" not in failed.value.message
