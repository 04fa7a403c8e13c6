"""``gkeys setup-portage`` keeps a ::gentoo that syncs with rsync on rsync (through the gkeys module), says so,
and does not tell the user to move the tree away; ``doctor`` then names gkeys rsync as its verifier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gkeys_portage.portage.reposconf import read_files
from gkeys_portage.portage.setup import REPOS_FRAGMENT


def test_gentoo_on_rsync_stays_rsync_through_gkeys(env: Any, tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc/portage/repos.conf").mkdir(parents=True)
    tree = tmp_path / "repos" / "gentoo"
    (tree / "metadata").mkdir(parents=True)
    (tree / "Manifest").write_text("an rsync tree\n")
    (root / "etc/portage/repos.conf/gentoo.conf").write_text(
        f"[gentoo]\nlocation = {tree}\nsync-type = rsync\nsync-uri = rsync://rsync.gentoo.org/gentoo-portage\n")
    result = env.run("setup-portage", "--eroot", str(root))
    assert result.code == 0, result.text
    gentoo = read_files([root / REPOS_FRAGMENT])["gentoo"]
    assert gentoo.get("sync-type") == "gkeys" and not gentoo.get("sync-uri"), gentoo.options  # the rsync URI stays
    assert not gentoo.get("sync-gkeys-category"), gentoo.options  # not the git categories: rsync's default, gentoo
    assert "keeps rsync" in result.text and f"mv {tree}" not in result.text, result.text
    assert (tree / "Manifest").is_file()
    document = json.loads(env.run("--json", "doctor", "--eroot", str(root)).out)
    assert "repository gentoo: sync-type gkeys, verified by gkeys rsync" in document["checked"], document
    assert "repo:not-git" not in {finding["code"] for finding in document["findings"]}
