"""``gkeys doctor`` (issue 14, item 4): exit 0 on a healthy root; each planted fault is reported with its
stable code and the command that fixes it (exit 1)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import install_devs

from gkeys_portage.core.state import atomic_write_json
from gkeys_portage.openpgp import process as gpg

Plant = Callable[[Any, Path], None]


def healthy_root(env: Any, tmp_path: Path, nicks: tuple[str, ...] = ("alice", "bob")) -> Path:
    """Keys installed, a git repository switched to sync-type = gkeys, hooks and FETCH_WRAPPER set."""
    env.write_config("[fetch]\ncategory = gentoo-devs\n")
    install_devs(env, nicks)
    root = tmp_path / "root"
    (root / "etc/portage/repos.conf").mkdir(parents=True)
    (root / "etc/portage/make.conf").mkdir()
    (root / "etc/portage/repos.conf/test.conf").write_text(
        f"[test]\nlocation = {tmp_path}/repos/test\nsync-type = git\nsync-uri = https://example.org/test.git\n"
        "clone-depth = 0\nsync-depth = 0\n")
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs",
                     "--fetch-wrapper")
    assert result.code == 0, result.text
    return root


def doctor(env: Any, root: Path, *extra: str) -> dict[str, Any]:
    """``gkeys --json doctor --eroot ROOT``: the JSON document (its exit status under "exit")."""
    result = env.run("--json", "doctor", "--eroot", str(root), *extra)
    document: dict[str, Any] = json.loads(result.out)
    assert document["exit"] == result.code
    for finding in document["findings"]:  # env.run passes -c CONFIG, which every suggested gkeys command keeps
        # "fix" is a command (or None for a prose-only fix), "fix_note" the whole fix the text prints (issue 45)
        command, note = finding["fix"], finding["fix_note"]
        assert command is not None or note is not None, finding
        assert command is None or note is None or command in note, finding
        text = note or command
        assert f"-c {env.config}" in text or "gkeys " not in text, finding
        finding["fix"] = text.replace(f" -c {env.config}", "")
    return document


def test_healthy_root_exits_0(env: Any, tmp_path: Path) -> None:
    root = healthy_root(env, tmp_path)
    document = doctor(env, root)
    assert document["findings"] == [] and document["exit"] == 0, document
    assert "category gentoo-devs" in document["checked"]
    # the engine is named, as probed (docs/engines.md)
    assert any(line.startswith(f"OpenPGP engine: {gpg.selected_program()} (") for line in document["checked"]), document
    text = env.run("doctor", "--eroot", str(root))
    assert text.code == 0 and "nothing would make verification fail" in text.out


def _unhook(env: Any, root: Path) -> None:
    (root / "etc/portage/repos.conf/zz-gkeys.conf").unlink()  # back to sync-type = git
    for hook in ("repo.postsync.d/gkeys-verify", "postsync.d/gkeys-verify"):
        (root / "etc/portage" / hook).unlink()


def _shallow(env: Any, root: Path) -> None:
    (root / "etc/portage/repos.conf/zz-gkeys.conf").unlink()
    conf = root / "etc/portage/repos.conf/test.conf"
    conf.write_text(conf.read_text().replace("sync-depth = 0\n", ""))


def _old_refresh(env: Any, root: Path) -> None:
    atomic_write_json(env.state / "state" / "refresh.json", {"gentoo-devs": time.time() - 40 * 86400})


def _old_seeds(env: Any, root: Path) -> None:
    env.write_config("[fetch]\ncategory = gentoo-devs\n[policy]\nmax-seed-age = 10\n")
    record = json.loads((env.state / "state" / "seeds.json").read_text())
    record["gentoo-devs"]["signed"] = time.time() - 11 * 86400
    atomic_write_json(env.state / "state" / "seeds.json", record)


def _clock_by_seed_signature(env: Any, root: Path) -> None:
    record = json.loads((env.state / "state" / "seeds.json").read_text())
    record["gentoo-devs"]["signed"] = time.time() + 3600
    atomic_write_json(env.state / "state" / "seeds.json", record)


def _clock(env: Any, root: Path) -> None:
    when = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + 3600))
    atomic_write_json(env.state / "state" / "tree-revisions.json", {"/x": {"revision": "0" * 40, "verified": when}})


def _fake_gpg(version: str) -> Plant:
    def plant(env: Any, root: Path) -> None:
        script = root / "fake-gpg"
        script.write_text(f"#!/bin/sh\necho 'gpg (GnuPG) {version}'\necho 'cfg:version:{version}'\n")
        script.chmod(0o755)
        os.environ[gpg.PROGRAM_VARIABLE] = str(script)  # restored by the test's monkeypatch
    return plant


FAULTS: dict[str, tuple[Plant, str]] = {
    "seeds:missing": (lambda env, root: (env.state / "seeds" / "gentoo-devs.seeds").unlink(),
                      "gkeys update-seed -C gentoo-devs"),
    "seeds:old": (_old_seeds, "gkeys update-seed -C gentoo-devs"),
    "keys:missing": (lambda env, root: (env.state / "keyrings" / "gentoo-devs" / "pubring.kbx").unlink(),
                     "gkeys install-key -C gentoo-devs"),
    "keys:stale": (_old_refresh, "gkeys refresh-key -C gentoo-devs"),
    "repo:unverified": (_unhook, "gkeys setup-portage --eroot {root} --repo test"),
    "repo:not-git": (lambda env, root: (root.parent / "repos/test/profiles").mkdir(parents=True),
                     "mv {root}/../repos/test {root}/../repos/test.old"),
    "repo:shallow": (_shallow, "set clone-depth = 0 and sync-depth = 0 for [test]"),
    "hook:not-executable": (lambda env, root: (root / "etc/portage/postsync.d/gkeys-verify").chmod(0o644),
                            "chmod 755 {root}/etc/portage/postsync.d/gkeys-verify"),
    "hook:interpreter": (lambda env, root: (root / "etc/portage/postsync.d/gkeys-verify").write_text(
        "#!/nonexistent/python3\n"), "gkeys setup-portage --eroot {root}"),
    "fetch:no-wrapper": (lambda env, root: (root / "etc/portage/make.conf/gkeys-fetch.conf").unlink(),
                         "gkeys setup-portage --eroot {root} --fetch-wrapper"),
    "fetch:no-wrapper (not gkeys-fetch)": (lambda env, root: (root / "etc/portage/make.conf/gkeys-fetch.conf")
                                           .write_text('FETCH_WRAPPER="/usr/bin/not-gkeys-fetch-at-all --"\n'),
                                           "gkeys setup-portage --eroot {root} --fetch-wrapper"),
    "fetch:no-wrapper (missing program)": (lambda env, root: (root / "etc/portage/make.conf/gkeys-fetch.conf")
                                           .write_text('FETCH_WRAPPER="/nonexistent/gkeys-fetch --"\n'),
                                           "reinstall gkeys-portage"),
    "gpg:missing": (lambda env, root: os.environ.__setitem__(gpg.PROGRAM_VARIABLE, str(root / "no-such-gpg")),
                    "app-crypt/gnupg"),
    "gpg:engine": (_fake_gpg("2.0.30"), "emerge --update app-crypt/gnupg"),
    "clock:behind": (_clock, "set the clock"),
}
FAULTS["clock:behind (seed signature)"] = (_clock_by_seed_signature, "set the clock")
FAULTS["binpkg:trust-helper"] = (lambda env, root: (root / "etc/portage/binrepos.conf").write_text(
    "[gentoobinhost]\nsync-uri = https://example.org/binpackages\n"), 'PORTAGE_TRUST_HELPER="gkeys-trust-helper"')
FAULTS["binpkg:trust-helper (getuto)"] = (lambda env, root: (
    (root / "etc/portage/binrepos.conf").write_text("[b]\nsync-uri = https://example.org/b\n"),
    (root / "etc/portage/make.conf/binpkg.conf").write_text('PORTAGE_TRUST_HELPER="/usr/bin/getuto"\n')),
    'PORTAGE_TRUST_HELPER="gkeys-trust-helper"')




def _marker(name: str, location: str) -> Plant:
    """A failure marker as the repo.postsync.d hook writes it (gkeys_portage.verify.git.markers)."""
    def plant(env: Any, root: Path) -> None:
        atomic_write_json(env.state / "state" / "tree-failed" / f"{name}.json",
                          {"repo": name, "location": location.format(root=root), "reason": "commit 0123 unsigned",
                           "rolled_back_to": ""})
    return plant


# a configured repository's marker (found by name, or by location under the name its tree gave): emerge --sync fails
FAULTS["tree:failed"] = (_marker("test", "{root}/../repos/test"), "gkeys verify-tree --clear-marker test")
FAULTS["tree:failed (by location)"] = (_marker("renamed", "{root}/../repos/test"),
                                       "emerge --sync test once upstream is fixed")
FAULTS["tree:stale-marker"] = (_marker("gone", "/nonexistent/gone"), "gkeys verify-tree --clear-marker gone")


@pytest.mark.parametrize("code", sorted(FAULTS))
def test_each_planted_fault_is_reported_with_its_fix(env: Any, tmp_path: Path, code: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root = healthy_root(env, tmp_path)
    monkeypatch.setenv(gpg.PROGRAM_VARIABLE, gpg.selected_program())  # restored after the gpg faults
    plant, fix = FAULTS[code]
    plant(env, root)
    document = doctor(env, root)
    assert document["exit"] == 1, document
    assert [f["code"] for f in document["findings"]] == [code.split()[0]], document["findings"]
    assert fix.format(root=root).replace(f"{root}/..", str(root.parent)) in document["findings"][0]["fix"]


def test_key_expiring_within_30_days(env: Any, tmp_path: Path) -> None:
    if "shortlived" not in env.keys.keys:
        env.keys.create("shortlived", expire="20d")
    root = healthy_root(env, tmp_path, ("alice", "shortlived"))
    document = doctor(env, root)
    assert [(f["code"], f["subject"].split()[1]) for f in document["findings"]] == [
        ("keys:expiring", env.keys.keys["shortlived"].fingerprint)], document
    assert "within 30 days" in document["findings"][0]["message"]


def test_keyring_unreadable_by_the_portage_user(env: Any, tmp_path: Path) -> None:
    root = healthy_root(env, tmp_path)
    env.state.chmod(0o700)
    document = doctor(env, root, "--portage-user", "nobody")
    assert [f["code"] for f in document["findings"]] == ["keyring:unreadable"], document
    assert "gkeys install-key -C gentoo-devs" in document["findings"][0]["fix"]


def test_the_portage_user_is_the_one_make_conf_names(env: Any, tmp_path: Path) -> None:
    """Issue 42: doctor checked the keyrings for a user named 'portage' whatever make.conf said; a box whose
    PORTAGE_USERNAME is another user had its readability never checked ("no 'portage' user")."""
    root = healthy_root(env, tmp_path)
    (root / "etc/portage/make.conf/user.conf").write_text('PORTAGE_USERNAME="nobody"\nPORTAGE_GRPNAME="nogroup"\n')
    env.state.chmod(0o700)
    document = doctor(env, root)
    assert [f["code"] for f in document["findings"]] == ["keyring:unreadable"], document
    assert "by the 'nobody' user" in document["findings"][0]["message"]


def test_binary_repositories_with_the_pinned_trust_helper_are_healthy(env: Any, tmp_path: Path) -> None:
    root = healthy_root(env, tmp_path)
    (root / "etc/portage/binrepos.conf").write_text("[gentoobinhost]\nsync-uri = https://example.org/binpackages\n")
    (root / "etc/portage/make.conf/binpkg.conf").write_text('PORTAGE_TRUST_HELPER="gkeys-trust-helper"\n')
    document = doctor(env, root)
    assert document["findings"] == [] and "PORTAGE_TRUST_HELPER = gkeys-trust-helper" in document["checked"]


def test_several_commit_categories_are_each_checked(env: Any, tmp_path: Path) -> None:
    """``sync-gkeys-category`` is a space-separated list (as the sync module reads it): doctor checks
    each category instead of refusing the value as one invalid category name."""
    root = healthy_root(env, tmp_path)
    (root / "etc/portage/repos.conf/zz-more.conf").write_text(
        f"[more]\nlocation = {tmp_path}/repos/more\nsync-type = gkeys\nsync-uri = https://example.org/more.git\n"
        "sync-gkeys-category = gentoo-devs gentoo-infra\n")
    document = doctor(env, root)
    assert "category gentoo-devs" in document["checked"] and "category gentoo-infra" in document["checked"], document
    # gentoo-infra is checked and has no keys installed here: reported with its fix, not an error of the value
    assert [(f["code"], f["subject"]) for f in document["findings"]] == [("keys:missing", "gentoo-infra")], document


def test_make_conf_files_portage_skips_are_skipped(env: Any, tmp_path: Path) -> None:
    """Portage reads no hidden or ``~`` file of a make.conf directory: a FETCH_WRAPPER left only in an editor
    backup is not set, and doctor must say so instead of reporting a healthy set-up."""
    root = healthy_root(env, tmp_path)
    conf = root / "etc/portage/make.conf/gkeys-fetch.conf"
    conf.rename(conf.with_name("gkeys-fetch.conf~"))
    document = doctor(env, root)
    assert [f["code"] for f in document["findings"]] == ["fetch:no-wrapper"], document
    assert "FETCH_WRAPPER: not set" in document["checked"]


def test_the_marker_fix_it_names_clears_the_finding(env: Any, tmp_path: Path) -> None:
    root = healthy_root(env, tmp_path)
    _marker("gone", "/nonexistent/gone")(env, root)
    fix = doctor(env, root)["findings"][0]["fix"]
    assert fix == "gkeys verify-tree --clear-marker gone"
    result = env.run(*fix.split()[1:])
    assert result.code == 0, result.text
    assert doctor(env, root)["findings"] == []


def test_an_expired_key_is_expired_in_status_list_key_and_doctor_alike(env: Any, tmp_path: Path) -> None:
    """Issue 45, item 1: one truth for an expired key: list-key "[expired]", status "(1 expired DATE)" (not
    "next expiry none" alone), doctor keys:expired (not keys:expiring), in text and JSON."""
    root = healthy_root(env, tmp_path, ("alice", "expired"))
    fingerprint = env.keys.keys["expired"].fingerprint
    listed = env.run("list-key", "-C", "gentoo-devs")
    assert f"{fingerprint} " in listed.out and "[expired]" in listed.out, listed.text
    expires = next(k["expires"] for k in json.loads(env.run("--json", "list-key", "-C", "gentoo-devs").out)["keys"]
                   if k.get("fingerprint") == fingerprint)
    day = time.strftime("%Y-%m-%d", time.gmtime(expires))
    status = env.run("status", "--eroot", str(root))
    assert f"(1 expired {day} UTC)" in status.out, status.text
    assert "wkd no refresh yet" in status.out, status.text  # installed, not yet refreshed: not "never" (item 7)
    category = next(c for c in json.loads(env.run("--json", "status", "--eroot", str(root)).out)["categories"]
                    if c["name"] == "gentoo-devs")
    assert category["expired"] == {fingerprint: expires}, category
    document = doctor(env, root)
    assert [(f["code"], f["subject"].split()[1]) for f in document["findings"]] == [("keys:expired", fingerprint)]
    assert "keys:expired: gentoo-devs " in env.run("doctor", "--eroot", str(root)).err
