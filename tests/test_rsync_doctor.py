"""``gkeys doctor`` on rsync repositories: what verifies each one, no git advice for a gkeys rsync tree, and a
plain finding when nothing verifies an rsync repository."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rsync_helpers import CATEGORY, pin_repository_keys


def _root(tmp_path: Path, repos: str) -> Path:
    root = tmp_path / "root"
    (root / "etc/portage/repos.conf").mkdir(parents=True)
    (root / "etc/portage/repos.conf/repos.conf").write_text(repos)
    return root


def _doctor(env: Any, root: Path) -> dict[str, Any]:
    result = env.run("--json", "doctor", "--eroot", str(root))
    return dict(json.loads(result.out))


def test_a_gkeys_rsync_tree_gets_no_git_advice_and_its_category_is_checked(env: Any, tmp_path: Path) -> None:
    pin_repository_keys(env)
    tree = tmp_path / "repos" / "gentoo"
    (tree / "metadata").mkdir(parents=True)
    (tree / "Manifest").write_text("a synced Manifest tree, no .git\n")
    root = _root(tmp_path, f"[gentoo]\nlocation = {tree}\nsync-type = gkeys\nsync-uri = rsync://127.0.0.1/gentoo\n"
                           f"sync-gkeys-category = {CATEGORY}\n")
    document = _doctor(env, root)
    codes = {finding["code"] for finding in document["findings"]}
    assert "repo:not-git" not in codes, document  # "mv the tree away" would be wrong advice for an rsync tree
    assert "repository gentoo: sync-type gkeys, verified by gkeys rsync" in document["checked"]
    assert f"category {CATEGORY}" in document["checked"] and "category gentoo-devs" not in document["checked"]


def test_rsync_with_verification_off_is_a_finding_and_portage_verification_is_named(env: Any,
                                                                                    tmp_path: Path) -> None:
    root = _root(tmp_path, f"[gentoo]\nlocation = {tmp_path}/repos/gentoo\nsync-type = rsync\n"
                           "sync-uri = rsync://rsync.gentoo.org/gentoo-portage\nsync-rsync-verify-metamanifest = no\n"
                           f"[other]\nlocation = {tmp_path}/repos/other\nsync-type = rsync\n"
                           "sync-uri = rsync://example.org/other\nsync-rsync-verify-metamanifest = yes\n")
    document = _doctor(env, root)
    unverified = [f for f in document["findings"] if f["code"] == "repo:unverified"]
    assert [f["subject"] for f in unverified] == ["gentoo"], document
    assert "nothing verifies it" in unverified[0]["message"] and "sync-type = gkeys" in unverified[0]["fix_note"]
    assert any(line.startswith("repository other: sync-type rsync, verified by Portage (gemato")
               for line in document["checked"]), document["checked"]
