"""Issue 26 and issue 23 (items 17, 18, 22): the Portage-side fail-opens of the third red-team pass.

Each test reproduces the attack or the defect with the real parts (real ``emerge --sync`` from the
pip-installed Portage in a temp PORTAGE_CONFIGROOT, real git and gpg) and checks what is on disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tree_helpers import PROJECT, build, install_devs

from gkeys_portage.demo.tree_repo import PortageSandbox, RepoBuilder


def _markers(env: Any) -> list[str]:
    return sorted(p.name for p in (env.state / "state" / "tree-failed").glob("*.json"))


EVIL = "dev-test/EVIL/EVIL-1.ebuild"


@pytest.mark.slow
def test_a_refused_first_clone_that_renames_itself_keeps_failing_emerge(env: Any, tmp_path: Path,
                                                                        portage_root: PortageSandbox) -> None:
    """Issue 26 item 1: the unsigned first clone says ``repo_name = bar`` and ``aliases = foo``; Portage then
    names the repository from the tree, and the hooks must neither drop its marker nor leave it usable."""
    install_devs(env, ("alice",))
    up = RepoBuilder(tmp_path / "upstream", env.keys, name="bar")
    up.commit(None, files={"profiles/repo_name": "bar\n", "metadata/layout.conf": "masters =\naliases = foo\n",
                           EVIL: "EAPI=8\nSLOT=0\nKEYWORDS=\"*\"\n"})
    portage_root.install_hooks(PROJECT / "hooks")
    location = portage_root.add_repo("foo", f"file://{up.path}", "git", clone_depth="0", sync_depth="0")
    for attempt in range(2):
        result = portage_root.sync()
        assert result.returncode != 0, (attempt, result.stdout)
        assert "NOT verified" in result.stdout, (attempt, result.stdout)
        assert not (location / EVIL).exists(), (attempt, result.stdout)  # the unverified tree is not usable
        assert _markers(env), (attempt, result.stdout)


def test_a_tree_that_calls_itself_gentoo_is_still_verified_by_the_repo_hook(env: Any, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26 item 1, variant: ``profiles/repo_name = gentoo`` makes Portage hand the hook the name
    ``gentoo``, which repos.conf syncs with ``sync-type = gkeys`` elsewhere; the hook must decide by
    location, verify, refuse and mark, and the postsync hook must keep failing."""
    from gkeys_portage.portage.hooks import postsync_main, repo_postsync_main

    monkeypatch.setenv("GKEYS_CONFIG", str(env.config))
    install_devs(env, ("alice",))
    repo = build(tmp_path / "foo", env.keys, [None])
    monkeypatch.setenv("PORTAGE_REPOSITORIES",
                       f"[gentoo]\nlocation = {tmp_path / 'gentoo'}\nsync-type = gkeys\n"
                       f"[foo]\nlocation = {repo.path}\nsync-type = git\n")
    assert repo_postsync_main(["gentoo", "file:///up", str(repo.path)]) == 1
    assert _markers(env) == ["gentoo.json"]
    assert postsync_main() == 1  # its location is configured: the marker stays, whatever its name
    # moved aside: Portage finds no tree at the location, the next sync clones again
    assert not repo.path.exists() and (tmp_path / ".foo.gkeys-unverified" / ".git").is_dir()


@pytest.mark.parametrize("where", ["[DEFAULT]", "[test]"])
def test_doctor_names_sync_hooks_only_on_change_on_every_hooked_repository(env: Any, tmp_path: Path,
                                                                           where: str) -> None:
    """Issue 26 item 2: with ``sync-hooks-only-on-change = true`` Portage skips the hooks when a merge fails
    half-way; doctor must say so for each repository the hooks protect (also when set in [DEFAULT])."""
    from test_doctor import doctor, healthy_root

    root = healthy_root(env, tmp_path)
    (root / "etc/portage/repos.conf/zz-gkeys.conf").unlink()  # back to sync-type = git, hooks installed
    (root / "etc/portage/repos.conf/other.conf").write_text(
        f"[other]\nlocation = {tmp_path}/repos/other\nsync-type = git\nsync-uri = https://example.org/o.git\n"
        "clone-depth = 0\nsync-depth = 0\n")
    (root / "etc/portage/repos.conf/z-hooks.conf").write_text(f"{where}\nsync-hooks-only-on-change = true\n")
    document = doctor(env, root)
    found = {f["subject"]: f for f in document["findings"] if f["code"] == "repo:hooks-on-change"}
    assert set(found) == ({"test", "other"} if where == "[DEFAULT]" else {"test"}), document
    assert "set sync-hooks-only-on-change = false for [test]" in found["test"]["fix_note"], found
    assert document["exit"] == 1


def test_setup_portage_turns_sync_hooks_only_on_change_off_for_its_repositories(env: Any, tmp_path: Path) -> None:
    """Issue 26 item 2: ``setup-portage --repo`` writes ``sync-hooks-only-on-change = false`` where it was on."""
    root = tmp_path / "root"
    (root / "etc/portage/repos.conf").mkdir(parents=True)
    (root / "etc/portage/repos.conf/test.conf").write_text(
        f"[DEFAULT]\nsync-hooks-only-on-change = yes\n[test]\nlocation = {tmp_path}/repos/test\nsync-type = git\n"
        "sync-uri = https://example.org/test.git\n[plain]\nlocation = /x\nsync-type = git\nsync-uri = https://x/p\n")
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs")
    assert result.code == 0, result.text
    fragment = (root / "etc/portage/repos.conf/zz-gkeys.conf").read_text()
    assert "[test]\nsync-type = gkeys\nsync-hooks-only-on-change = false\n" in fragment, fragment
    assert "[plain] sets sync-hooks-only-on-change = yes" in result.text, result.text  # the hooks protect it


def _overlay_root(env: Any, tmp_path: Path) -> Path:
    """A root with the overlay guru, whose committers category gkeys knows (its seeds installed)."""
    (env.state / "seeds").mkdir(parents=True, exist_ok=True)
    (env.state / "seeds" / "guru.seeds").write_bytes(env.seed_bytes("alice"))
    root = tmp_path / "root"
    (root / "etc/portage/repos.conf").mkdir(parents=True)
    (root / "etc/portage/repos.conf/guru.conf").write_text(
        f"[guru]\nlocation = {tmp_path}/repos/guru\nsync-type = git\nsync-uri = https://example.org/guru.git\n")
    return root


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_setup_portage_asks_for_the_category_of_an_overlay(env: Any, tmp_path: Path) -> None:
    """Issue 23 item 22: ``--repo guru`` alone would verify guru's commits against gentoo-devs and refuse
    every sync (its contributors are not Gentoo developers): refused with the reason; ``--category`` works."""
    root = _overlay_root(env, tmp_path)
    before = _files(root)
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "guru")
    assert result.code == 2 and "needs a category" in result.err and "--category CAT" in result.err, result.text
    assert _files(root) == before
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "guru", "--category", "guru")
    assert result.code == 0, result.text
    fragment = (root / "etc/portage/repos.conf/zz-gkeys.conf").read_text()
    assert "[guru]\nsync-type = gkeys\nsync-gkeys-category = guru\n" in fragment, fragment


def test_setup_portage_writes_nothing_when_one_file_is_in_the_way(env: Any, tmp_path: Path) -> None:
    """Issue 23 item 22: a conflicting existing file stops the whole install (no hook, no repos.conf)."""
    root = _overlay_root(env, tmp_path)
    (root / "etc/portage/postsync.d").mkdir()
    (root / "etc/portage/postsync.d/gkeys-verify").write_text("#!/bin/sh\n# the user's own hook\n")
    before = _files(root)
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "guru", "--category", "guru")
    assert result.code == 1 and "exists with other content" in result.err, result.text
    assert _files(root) == before, "setup-portage wrote some files although one was in the way"


@pytest.mark.parametrize("planted", ["etc", "etc/portage", "etc/portage/postsync.d", "etc/portage/repos.conf"])
def test_setup_portage_never_writes_through_a_planted_symlink(env: Any, tmp_path: Path, planted: str) -> None:
    """Issue 26 item 3 / issue 23 item 22: a symlink at any component of EROOT/etc/portage/... is refused
    (it could lead into another system's configuration); nothing is written there or anywhere."""
    root = _overlay_root(env, tmp_path)
    elsewhere = tmp_path / "other-system" / planted
    elsewhere.parent.mkdir(parents=True)
    (root / planted).rename(elsewhere) if (root / planted).exists() else elsewhere.mkdir()
    (root / planted).symlink_to(elsewhere)
    before_other, before_root = _files(tmp_path / "other-system"), _files(root)
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "guru", "--category", "guru")
    assert result.code == 2 and "is a symlink" in result.err and "Traceback" not in result.text, result.text
    assert len(result.err.strip().splitlines()) == 1, result.text
    assert _files(tmp_path / "other-system") == before_other and _files(root) == before_root


def test_setup_portage_keeps_its_record_in_gkeys_state_and_undo_never_follows_a_symlink(env: Any,
                                                                                        tmp_path: Path) -> None:
    """Issue 26 item 3: the record of created files is in gkeys' state (not in EROOT, which another user may
    write); ``--undo`` after a directory was swapped for a symlink removes nothing outside EROOT."""
    root = _overlay_root(env, tmp_path)
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "guru", "--category", "guru")
    assert result.code == 0, result.text
    assert not (root / "etc/portage/.gkeys-setup-portage.json").exists()
    assert list((env.state / "state" / "setup-portage").glob("*.json"))
    hooks = root / "etc/portage/postsync.d"
    victim_dir = tmp_path / "victim"
    hooks.rename(victim_dir)  # the same file (same checksum) now lies outside EROOT ...
    hooks.symlink_to(victim_dir)  # ... and the planted symlink leads there
    result = env.run("setup-portage", "--eroot", str(root), "--undo")
    assert (victim_dir / "gkeys-verify").is_file(), result.text
    assert result.code == 1 and "left alone" in result.err, result.text
    assert not (root / "etc/portage/repos.conf/zz-gkeys.conf").exists()  # what is really inside EROOT went


@pytest.mark.parametrize("fault", ["group-writable", "world-writable", "another user's"])
def test_setup_portage_refuses_a_root_whose_directories_others_control(env: Any, tmp_path: Path, fault: str) -> None:
    """Issue 26 item 3: a directory down to etc/portage owned by another user, or group/world-writable, is
    refused before anything is written (another user could swap a component for a symlink at any time)."""
    import os

    root = _overlay_root(env, tmp_path)
    target = root / "etc"
    if fault == "another user's":
        if os.geteuid() != 0:
            pytest.skip("giving a directory to another user needs root")
        os.chown(target, 65534, 65534)
    else:
        target.chmod(0o775 if fault == "group-writable" else 0o777)
    before = _files(root)
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "guru", "--category", "guru")
    assert result.code == 2 and str(target) in result.err, result.text
    assert ("belongs to" if fault == "another user's" else fault) in result.err, result.text
    assert _files(root) == before


def _portage_tree(base: Path) -> Path:
    """A repos.conf directory with every shape Portage's lister treats specially."""
    conf = base / "etc/portage/repos.conf"
    (conf / "zzz").mkdir(parents=True)
    (conf / "gentoo.conf").write_text("[gentoo]\nlocation = /var/db/repos/gentoo\nsync-type = git\n"
                                      "sync-uri = https://example.org/gentoo.git\n")
    (conf / "zzz/local.conf").write_text("[gentoo]\nsync-type = git\n")  # read after zz-gkeys.conf
    (conf / "a/b").mkdir(parents=True)
    (conf / "a/b/deep.conf").write_text("[deep]\nlocation = /x\n")
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "linked.conf").write_text("[linked]\nlocation = /y\n")
    (conf / "m-linked").symlink_to(elsewhere)  # a directory symlink: Portage follows it
    for skipped in (".git", "CVS", ".hidden"):
        (conf / skipped).mkdir()
        (conf / skipped / "skipped.conf").write_text("[skipped]\nlocation = /z\n")
    (conf / "backup.conf~").write_text("[skipped]\n")
    (conf / ".dot.conf").write_text("[skipped]\n")
    return conf


def test_repos_conf_files_are_listed_as_portage_lists_them(tmp_path: Path) -> None:
    """Issue 26 item 4, differential: gkeys' own lister gives exactly Portage's ``_recursive_file_list``
    (any depth, directory symlinks followed, VCS and hidden names skipped, the same order)."""
    util = pytest.importorskip("portage.util")
    from gkeys_portage.portage.reposconf import file_or_directory, list_config_files

    conf = _portage_tree(tmp_path)
    portage_order = [Path(p) for p in util._recursive_file_list(str(conf))]
    assert list_config_files(conf) == portage_order
    assert file_or_directory(conf) == portage_order
    names = [p.relative_to(conf).as_posix() for p in portage_order]
    assert names == ["a/b/deep.conf", "gentoo.conf", "m-linked/linked.conf", "zzz/local.conf"], names


def test_setup_portage_refuses_when_a_deeper_file_read_later_would_switch_gentoo_back(env: Any,
                                                                                     tmp_path: Path) -> None:
    """Issue 26 item 4: ``repos.conf/zzz/local.conf`` is read after ``zz-gkeys.conf`` and sets ``sync-type``
    of [gentoo]; setup-portage must not say "verifies from now on", and write nothing."""
    root = tmp_path / "root"
    conf = _portage_tree(root)
    before = _files(root)
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "gentoo")
    assert result.code == 2 and f"{conf / 'zzz/local.conf'} sets sync-type of [gentoo]" in result.err, result.text
    assert _files(root) == before


def _make_conf_cases(root: Path) -> dict[str, str]:
    etc = root / "etc/portage"
    return {
        "source then unset": f'source {etc}/gkeys-fetch.conf\nFETCH_WRAPPER=""\n',
        "unset then source": 'FETCH_WRAPPER=""\nsource gkeys-fetch.conf\n',
        "relative source, then another value": 'source gkeys-fetch.conf\nFETCH_WRAPPER="/usr/bin/other --"\n',
    }


@pytest.mark.parametrize("case", ["source then unset", "unset then source", "relative source, then another value"])
def test_doctor_reads_a_sourced_make_conf_at_the_source_line(env: Any, tmp_path: Path, case: str) -> None:
    """Issue 26 item 4: ``source gkeys-fetch.conf`` followed by ``FETCH_WRAPPER=""`` turns the wrapper off;
    doctor must read the sourced file where the ``source`` line is (differential against Portage's
    ``getconfig``), not at the end."""
    from test_doctor import doctor, healthy_root

    from gkeys_portage.portage.makeconf import fetch_wrapper, own_make_conf_value

    root = healthy_root(env, tmp_path)
    etc = root / "etc/portage"
    wrapper = (etc / "make.conf/gkeys-fetch.conf").read_text()
    (etc / "make.conf/gkeys-fetch.conf").unlink()
    (etc / "make.conf").rmdir()
    (etc / "gkeys-fetch.conf").write_text(wrapper)
    (etc / "make.conf").write_text(_make_conf_cases(root)[case])
    expected = {"source then unset": "", "unset then source": None,
                "relative source, then another value": "/usr/bin/other --"}[case]
    own = own_make_conf_value(root, "FETCH_WRAPPER")
    util = pytest.importorskip("portage.util")
    portage_value = (util.getconfig(str(etc / "make.conf"), tolerant=True, allow_sourcing=True) or {}) \
        .get("FETCH_WRAPPER")
    assert own == portage_value == fetch_wrapper(root), (own, portage_value)
    codes = [f["code"] for f in doctor(env, root)["findings"]]
    if expected is None:
        assert "gkeys-fetch" in (own or "") and "fetch:no-wrapper" not in codes, codes
    else:
        assert own == expected and "fetch:no-wrapper" in codes, (own, codes)


def _into_prefix(env: Any, eprefix: Path) -> None:
    """The test's gkeys state and configuration moved to their default places under ``eprefix`` (no gkeysdir,
    no GKEYS_CONFIG: the defaults must come from Portage's EPREFIX)."""
    import shutil

    config = eprefix / "etc/gkeys/gkeys.conf"
    config.parent.mkdir(parents=True)
    config.write_text("\n".join(line for line in env.config.read_text().splitlines()
                                if not line.startswith("gkeysdir")) + "\n")
    shutil.copytree(env.state, eprefix / "var/lib/gkeys", symlinks=True, ignore=shutil.ignore_patterns("S.*"))


@pytest.mark.slow
def test_emerge_sync_in_a_prefix_uses_the_prefix_gkeys_state(env: Any, tmp_path: Path,
                                                           portage_root: PortageSandbox) -> None:
    """Issue 23 item 17: with ``PORTAGE_OVERRIDE_EPREFIX`` (not ``$EPREFIX``) the sync module must take
    EPREFIX from Portage's settings: ``${EPREFIX}/etc/gkeys/gkeys.conf`` and ``${EPREFIX}/var/lib/gkeys``,
    never the host's; the hooks likewise.  Nothing outside the prefix is created."""
    import os

    install_devs(env, ("alice",))
    up = RepoBuilder(tmp_path / "upstream", env.keys)
    up.commit("alice")
    _into_prefix(env, portage_root.eprefix)
    del portage_root.env["GKEYS_CONFIG"]
    portage_root.env.pop("EPREFIX", None)
    host = [Path("/etc/gkeys"), Path("/var/lib/gkeys")]
    before = {str(p): p.exists() and sorted(os.listdir(p)) for p in host}
    location = portage_root.add_repo("test", f"file://{up.path}", "gkeys")
    portage_root.install_hooks(PROJECT / "hooks")
    plain = portage_root.add_repo("plain", f"file://{up.path}", "git", clone_depth="0", sync_depth="0")
    (portage_root.etc / "repos.conf/plain.conf").write_text(
        (portage_root.etc / "repos.conf/plain.conf").read_text().replace("main-repo = plain", "main-repo = test"))
    result = portage_root.sync()
    assert result.returncode == 0, result.stdout
    assert (location / ".git").is_dir() and (plain / ".git").is_dir()
    records = (portage_root.eprefix / "var/lib/gkeys/state/tree-revisions.json").read_text()
    assert str(location.resolve()) in records and str(plain.resolve()) in records, records
    assert {str(p): p.exists() and sorted(os.listdir(p)) for p in host} == before


@pytest.mark.slow
@pytest.mark.parametrize("missing", ["seeds", "keys"])
def test_emerge_sync_checks_trust_before_downloading(env: Any, tmp_path: Path, portage_root: PortageSandbox,
                                                     missing: str) -> None:
    """Issue 23 item 18: with no seeds (or no keys) for the category nothing could verify a commit;
    ``emerge --sync`` must refuse before cloning (the server sees no request) and name the command."""
    from gkeys_portage.demo.tree_repo import serve_repo

    install_devs(env, ("alice",))
    up = RepoBuilder(tmp_path / "upstream", env.keys)
    up.commit("alice")
    if missing == "seeds":
        (env.state / "seeds" / "gentoo-devs.seeds").unlink()
        command = "gkeys update-seed -C gentoo-devs"
    else:
        import shutil

        shutil.rmtree(env.state / "keyrings" / "gentoo-devs")
        command = "gkeys install-key -C gentoo-devs"
    uri = serve_repo(env.server, up.path, "trust-first.git")
    env.server.log.clear()
    location = portage_root.add_repo("test", uri, "gkeys", sync_gkeys_policy="all")
    result = portage_root.sync("test")
    assert result.returncode != 0, result.stdout
    assert not [path for path in env.server.log if "trust-first.git" in path], env.server.log
    assert command in result.stdout and "nothing was downloaded" in result.stdout, result.stdout
    assert not location.exists() or not any(location.iterdir())


def _can_unshare() -> bool:
    import os
    import shutil
    import subprocess

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=4k tmpfs /dev/shm"],
                           capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare -m (a private, full /dev/shm)")
def test_a_full_dev_shm_does_not_stop_tree_verification(env: Any, tmp_path: Path,
                                                        portage_root: PortageSandbox) -> None:
    """Issue 26 item 5: any local user can fill the world-writable /dev/shm; ``emerge --sync`` must still
    verify (the round redone under $TMPDIR), not fail with ENOSPC.  /dev/shm is a full 4 KiB tmpfs in a
    private mount namespace: the machine's own /dev/shm is never touched."""
    import subprocess

    install_devs(env, ("alice",))
    up = RepoBuilder(tmp_path / "upstream", env.keys)
    for _ in range(5):
        up.commit("alice", files={"big/file": "x" * 20000 + str(up.counter)})
    location = portage_root.add_repo("test", f"file://{up.path}", "gkeys", sync_gkeys_policy="all")
    script = ("mount -t tmpfs -o size=4k tmpfs /dev/shm && (dd if=/dev/zero of=/dev/shm/fill bs=1k 2>/dev/null; "
              "true) && exec emerge --sync test")
    result = subprocess.run(["unshare", "-m", "sh", "-c", script], env=portage_root.env, cwd=portage_root.base,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout
    assert (location / ".git").is_dir() and "No space left" not in result.stdout, result.stdout
