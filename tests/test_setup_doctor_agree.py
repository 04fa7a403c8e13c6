"""setup-portage and doctor agree (issue 37, items 1-3): every finding's fix, run as printed, clears it; --undo
never leaves make.conf sourcing a removed file; a category gkeys does not know is refused, not set up.

A throwaway root whose make.conf is a *file* (the common case, where setup-portage cannot add its fragment by
itself); doctor's fixes are run exactly as printed (gkeys commands in-process, the rest with bash).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import install_devs


def file_root(env: Any, tmp_path: Path) -> Path:
    """Keys installed, a git repository, make.conf a file with the user's own lines; nothing set up yet."""
    env.write_config("[fetch]\ncategory = gentoo-devs\n")
    install_devs(env, ("alice",))
    root = tmp_path / "root"
    (root / "etc/portage/repos.conf").mkdir(parents=True)
    (root / "etc/portage/make.conf").write_text('COMMON_FLAGS="-O2 -pipe"\n')
    (root / "etc/portage/repos.conf/test.conf").write_text(
        f"[test]\nlocation = {tmp_path}/repos/test\nsync-type = git\nsync-uri = https://example.org/test.git\n"
        "clone-depth = 0\nsync-depth = 0\n")
    return root


def findings(env: Any, root: Path) -> dict[tuple[str, str], str]:
    """doctor's findings: (code, subject) -> fix, as printed."""
    result = env.run("--json", "doctor", "--eroot", str(root))
    return {(f["code"], f["subject"]): f["fix_note"] or f["fix"] for f in json.loads(result.out)["findings"]}


def run_fix(env: Any, fix: str) -> None:
    """Run a printed fix: each ``&&`` part, gkeys commands in-process, others with bash; each must succeed.
    ``CAT``, the one word the user fills in (the finding's message says what it is), is the overlay's category."""
    for part in fix.replace("--category CAT", "--category gentoo-devs").split(" && "):
        words = shlex.split(part)
        if words[0] == "gkeys":
            result = env.run_printed(part)  # it names the test's config itself
            assert result.code == 0, (part, result.text)
        else:
            done = subprocess.run(["bash", "-c", part], capture_output=True, text=True, check=False)
            assert done.returncode == 0, (part, done.stderr)


SETUP_CODES = ("fetch:", "repo:", "hook:", "portage:")


def test_every_setup_finding_is_cleared_by_its_fix_run_as_printed(env: Any, tmp_path: Path) -> None:
    root = file_root(env, tmp_path)
    seen: set[tuple[str, str, str]] = set()
    for _ in range(4):
        todo = {k: fix for k, fix in findings(env, root).items() if k[0].startswith(SETUP_CODES)}
        if not todo:
            break
        for (code, subject), fix in todo.items():
            assert (code, subject, fix) not in seen, f"{code} {subject}: its fix ran and it came back: {fix}"
            seen.add((code, subject, fix))
            run_fix(env, fix)
            assert (code, subject) not in findings(env, root), f"{code} {subject} not cleared by: {fix}"
    assert not [k for k in findings(env, root) if k[0].startswith(SETUP_CODES)]
    assert "gkeys-fetch" in (root / "etc/portage/gkeys-fetch.conf").read_text()


def test_fetch_wrapper_setup_prints_the_make_conf_line_as_the_step_doctor_checks(env: Any, tmp_path: Path) -> None:
    root = file_root(env, tmp_path)
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs",
                     "--fetch-wrapper")
    step = f"echo 'source {root}/etc/portage/gkeys-fetch.conf' >> {root}/etc/portage/make.conf"
    assert result.code == 0 and f"one step left, setup-portage never edits make.conf: run  {step}" in result.err
    found = findings(env, root)
    assert found[("fetch:not-sourced", "FETCH_WRAPPER")] == step
    again = env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs",
                    "--fetch-wrapper")
    assert "nothing to do" not in again.text and step in again.err, again.text
    run_fix(env, step)
    assert not [k for k in findings(env, root) if k[0].startswith("fetch:")]
    done = env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs",
                   "--fetch-wrapper")
    assert "nothing to do" in done.out and "step left" not in done.text


def test_undo_refuses_while_make_conf_sources_its_file(env: Any, tmp_path: Path) -> None:
    root = file_root(env, tmp_path)
    env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs", "--fetch-wrapper")
    run_fix(env, f"echo 'source {root}/etc/portage/gkeys-fetch.conf' >> {root}/etc/portage/make.conf")
    refused = env.run("setup-portage", "--eroot", str(root), "--undo")
    sed = f"sed -i '\\#^source {root}/etc/portage/gkeys-fetch\\.conf$#d' {root}/etc/portage/make.conf"
    assert refused.code == 1 and "nothing removed" in refused.err and sed in refused.err, refused.text
    assert (root / "etc/portage/gkeys-fetch.conf").is_file()
    run_fix(env, sed)
    assert (root / "etc/portage/make.conf").read_text() == 'COMMON_FLAGS="-O2 -pipe"\n'
    undone = env.run("setup-portage", "--eroot", str(root), "--undo")
    assert undone.code == 0 and not (root / "etc/portage/gkeys-fetch.conf").exists(), undone.text
    second = env.run("setup-portage", "--eroot", str(root), "--undo")
    assert second.code == 0 and "nothing to undo" in second.out, second.text


def test_doctor_counts_a_make_conf_source_of_a_removed_file(env: Any, tmp_path: Path) -> None:
    root = file_root(env, tmp_path)
    env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs", "--fetch-wrapper")
    run_fix(env, f"echo 'source {root}/etc/portage/gkeys-fetch.conf' >> {root}/etc/portage/make.conf")
    (root / "etc/portage/gkeys-fetch.conf").unlink()  # removed by hand
    result = env.run("doctor", "--eroot", str(root))
    assert result.code == 1 and "portage:config" in result.err and "No such file" not in result.err, result.text
    fix = findings(env, root)[("portage:config", f"{root}/etc/portage/make.conf")]
    run_fix(env, fix)
    assert not [k for k in findings(env, root) if k[0] == "portage:config"]


def test_second_undo_after_files_removed_by_hand_says_what_it_found(env: Any, tmp_path: Path) -> None:
    root = file_root(env, tmp_path)
    env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs")
    for hook in ("repo.postsync.d/gkeys-verify", "postsync.d/gkeys-verify", "repos.conf/zz-gkeys.conf"):
        (root / "etc/portage" / hook).unlink()
    result = env.run("setup-portage", "--eroot", str(root), "--undo")
    assert result.code == 0 and "gone already" in result.out, result.text


@pytest.mark.parametrize("category", ["nosuchcat", "gentoo-devz"])
def test_setup_portage_refuses_a_category_gkeys_does_not_know(env: Any, tmp_path: Path, category: str) -> None:
    root = file_root(env, tmp_path)
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", category)
    assert result.code == 2 and f"unknown category {category!r}" in result.err, result.text
    assert "gentoo-devs" in result.err and not (root / "etc/portage/repos.conf/zz-gkeys.conf").exists()
