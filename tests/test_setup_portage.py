"""``gkeys setup-portage`` (issue 14, item 3): new files only, idempotent, ``--undo`` restores the root
byte for byte, and a real ``emerge --sync`` on the set-up root verifies with ``sync-type = gkeys``."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import head, install_devs, records

from gkeys_portage.demo.tree_repo import PortageSandbox, RepoBuilder, sync_module_missing
from gkeys_portage.portage.setup import REPOS_FRAGMENT, record_path


def record(env: Any, root: Path) -> Path:
    """Where gkeys records what setup-portage created under ``root`` (its own state, never ``root``)."""
    return record_path(env.state / "state", root)


def snapshot(root: Path) -> dict[str, tuple[int, bytes | str | None]]:
    """Every path under ``root``: its mode and its content (file bytes, link target, None for a directory)."""
    found: dict[str, tuple[int, bytes | str | None]] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        content: bytes | str | None = None
        if stat.S_ISLNK(info.st_mode):
            content = os.readlink(path)
        elif stat.S_ISREG(info.st_mode):
            content = path.read_bytes()
        found[str(path.relative_to(root))] = (info.st_mode, content)
    return found


def git_repo_root(tmp_path: Path) -> Path:
    """A root whose repos.conf has one git repository 'test' (and a make.conf file)."""
    root = tmp_path / "root"
    (root / "etc/portage/repos.conf").mkdir(parents=True)
    (root / "etc/portage/repos.conf/test.conf").write_text(
        f"[test]\nlocation = {tmp_path}/repos/test\nsync-type = git\nsync-uri = https://example.org/test.git\n")
    (root / "etc/portage/make.conf").write_text('FEATURES="-news"\n')
    return root


@pytest.mark.slow
def test_setup_then_emerge_sync_verifies_and_undo_restores(env: Any, tmp_path: Path) -> None:
    missing = sync_module_missing()
    if missing:
        pytest.skip(missing)
    install_devs(env, ("alice", "bob"))
    up = RepoBuilder(tmp_path / "upstream", env.keys)
    up.commit("alice")
    up.commit("bob")
    sandbox = PortageSandbox(tmp_path / "portage", env.config)
    location = sandbox.add_repo("test", f"file://{up.path}", "git", clone_depth="0", sync_depth="0")
    eroot = str(sandbox.config_root)
    before = snapshot(sandbox.config_root)

    result = env.run("setup-portage", "--eroot", eroot, "--repo", "test", "--category", "gentoo-devs", "--dry-run")
    assert result.code == 0, result.text
    assert "+[test]\n+sync-type = gkeys" in result.out and "would create" in result.out
    assert snapshot(sandbox.config_root) == before

    result = env.run("setup-portage", "--eroot", eroot, "--repo", "test", "--category", "gentoo-devs")
    assert result.code == 0, result.text
    for hook in ("repo.postsync.d/gkeys-verify", "postsync.d/gkeys-verify"):
        path = sandbox.etc / hook
        assert path.read_text().splitlines()[0] == f"#!{sys.executable}"
        assert os.access(path, os.X_OK)
    after = snapshot(sandbox.config_root)
    result = env.run("setup-portage", "--eroot", eroot, "--repo", "test", "--category", "gentoo-devs")
    assert result.code == 0 and "nothing to do" in result.out, result.text
    assert snapshot(sandbox.config_root) == after  # idempotent

    result = sandbox.sync("test")
    assert result.returncode == 0, result.stdout
    verified = head(location)
    assert verified == up.head() and records(env)[str(location.resolve())]["revision"] == verified
    bad = up.commit(None)
    up.commit("alice")
    result = sandbox.sync("test")
    assert result.returncode != 0 and bad[:12] in result.stdout, result.stdout
    assert head(location) == verified
    # refused by the sync module before the tree moved: with sync-type = git the hook would have merged,
    # rolled back and left a failure marker
    assert not list((env.state / "state" / "tree-failed").glob("*.json")), result.stdout
    assert "git pull" not in result.stdout, result.stdout

    result = env.run("setup-portage", "--eroot", eroot, "--undo")
    assert result.code == 0, result.text
    assert snapshot(sandbox.config_root) == before


def test_existing_different_file_is_left_alone_and_reported(env: Any, tmp_path: Path) -> None:
    root = git_repo_root(tmp_path)
    mine = root / REPOS_FRAGMENT
    mine.write_text("[test]\nsync-type = git\n")
    before = snapshot(root)
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs")
    assert result.code == 1, result.text
    assert f"{mine} exists with other content; left alone" in result.err
    assert mine.read_text() == "[test]\nsync-type = git\n"
    assert not (root / "etc/portage/postsync.d/gkeys-verify").exists()  # all or nothing (issue 23 item 22)
    assert "nothing was written" in result.text, result.text
    result = env.run("setup-portage", "--eroot", str(root), "--undo")
    assert result.code == 0, result.text
    assert snapshot(root) == before  # undo never removes the user's file


def test_undo_keeps_a_file_changed_after_setup(env: Any, tmp_path: Path) -> None:
    root = git_repo_root(tmp_path)
    assert env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs").code == 0
    hook = root / "etc/portage/postsync.d/gkeys-verify"
    hook.write_text(hook.read_text() + "# local change\n")
    result = env.run("setup-portage", "--eroot", str(root), "--undo")
    assert result.code == 1 and "changed since setup-portage wrote it" in result.err, result.text
    assert hook.is_file() and not (root / REPOS_FRAGMENT).exists() and record(env, root).is_file()
    hook.unlink()
    assert env.run("setup-portage", "--eroot", str(root), "--undo").code == 0
    assert not record(env, root).exists() and not (root / "etc/portage/postsync.d").exists()


@pytest.mark.parametrize(("conf", "repo", "expected"), [
    ("[test]\nsync-type = rsync\nsync-uri = rsync://example.org/test\n", "test", "syncs with 'rsync'"),
    ("", "nosuch", "repository 'nosuch' is not configured"),
])
def test_repository_that_cannot_be_switched_writes_nothing(env: Any, tmp_path: Path, conf: str, repo: str,
                                                           expected: str) -> None:
    root = git_repo_root(tmp_path)
    if conf:
        (root / "etc/portage/repos.conf/test.conf").write_text(conf)
    before = snapshot(root)
    result = env.run("setup-portage", "--eroot", str(root), "--repo", repo)
    assert result.code == 2 and expected in result.err, result.text
    assert snapshot(root) == before


def test_gentoo_gets_the_mirror_settings_and_fetch_wrapper_a_fragment(env: Any, tmp_path: Path) -> None:
    root = git_repo_root(tmp_path)
    (root / "etc/portage/make.conf").unlink()
    (root / "etc/portage/make.conf").mkdir()
    result = env.run("setup-portage", "--eroot", str(root), "--fetch-wrapper", "--overlays")
    assert result.code == 0, result.text
    fragment = (root / REPOS_FRAGMENT).read_text()
    assert "[gentoo]\nsync-type = gkeys\nsync-uri = https://github.com/gentoo-mirror/gentoo.git\n" in fragment
    assert "sync-gkeys-top-category = gentoo-infra" in fragment
    wrapper = (root / "etc/portage/make.conf/gkeys-fetch.conf").read_text()
    assert wrapper.startswith('FETCH_WRAPPER="') and '--uri \\"\\${URI}\\"' in wrapper
    assert (root / "etc/portage/postsync.d/gkeys-overlays").read_text().startswith(f"#!{sys.executable}\n")


def test_fetch_wrapper_beside_a_make_conf_file_is_a_fragment_to_source(env: Any, tmp_path: Path) -> None:
    root = git_repo_root(tmp_path)
    make_conf = (root / "etc/portage/make.conf").read_bytes()
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs",
                     "--fetch-wrapper")
    assert result.code == 0, result.text
    assert f"source {root}/etc/portage/gkeys-fetch.conf" in result.err
    assert (root / "etc/portage/make.conf").read_bytes() == make_conf  # never edited


def test_a_repos_conf_file_read_after_ours_that_would_win_is_refused(env: Any, tmp_path: Path) -> None:
    root = git_repo_root(tmp_path)
    (root / "etc/portage/repos.conf/zzz-local.conf").write_text("[test]\nsync-type = git\n")
    before = snapshot(root)
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs")
    assert result.code == 2 and "zzz-local.conf sets sync-type of [test]" in result.err, result.text
    assert snapshot(root) == before


@pytest.mark.parametrize("action", [["setup-portage"], ["setup-portage", "--undo"], ["doctor"]])
def test_missing_eroot_is_one_line_and_exit_2(env: Any, tmp_path: Path, action: list[str]) -> None:
    result = env.run(*action, "--eroot", str(tmp_path / "nowhere"))
    assert result.code == 2 and "is not a directory: give --eroot" in result.err, result.text
    assert len(result.text.strip().splitlines()) == 1 and not (tmp_path / "nowhere").exists()


def test_bad_repository_name_and_symlinked_target_are_refused(env: Any, tmp_path: Path) -> None:
    root = git_repo_root(tmp_path)
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "test]\nsync-type = git\n[x")
    assert result.code == 2 and "invalid repository name" in result.err, result.text
    hooks = root / "etc/portage/postsync.d"
    hooks.mkdir()
    (hooks / "gkeys-verify").symlink_to(tmp_path / "dangling")
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs")
    assert result.code == 1 and "is not a regular file (a symlink)" in result.err, result.text
    assert (hooks / "gkeys-verify").is_symlink() and not (tmp_path / "dangling").exists()


def test_undo_refuses_a_manifest_naming_paths_outside_etc_portage(env: Any, tmp_path: Path) -> None:
    root = git_repo_root(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    record(env, root).parent.mkdir(parents=True, exist_ok=True)
    record(env, root).write_text('{"files": {"../victim": "x"}, "dirs": []}')
    result = env.run("setup-portage", "--eroot", str(root), "--undo")
    assert result.code == 2 and "is damaged" in result.err, result.text
    assert victim.read_text() == "keep me\n"


def test_setup_into_an_empty_root_and_undo_leave_it_empty(env: Any, tmp_path: Path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    result = env.run("setup-portage", "--eroot", str(root), "--overlays", "--fetch-wrapper")
    assert result.code == 0, result.text
    assert (root / "etc/portage/repos.conf/zz-gkeys.conf").is_file()
    result = env.run("setup-portage", "--eroot", str(root), "--undo")
    assert result.code == 0, result.text
    assert list(root.iterdir()) == []


def test_an_rsync_tree_at_the_location_is_reported_not_moved(env: Any, tmp_path: Path) -> None:
    root = git_repo_root(tmp_path)
    tree = tmp_path / "repos/test"
    (tree / "profiles").mkdir(parents=True)
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs")
    assert result.code == 0, result.text
    assert f"mv {tree} {tree}.old" in result.err and (tree / "profiles").is_dir()


def test_gentoo_accepts_the_mirror_key_on_every_commit(env: Any, tmp_path: Path) -> None:
    """The Gentoo sync repository has mirror (gentoo-infra) commits between two syncs, not only on top: the
    repos.conf setup-portage writes for ::gentoo must admit gentoo-infra for every commit (as docs/portage.md
    shows), or each sync after two mirror pushes is refused."""
    from gkeys_portage.core.config import load_config
    from gkeys_portage.keys.context import Gkeys
    from gkeys_portage.portage.reposconf import read_files
    from gkeys_portage.verify.git.tree import TreeOptions

    root = git_repo_root(tmp_path)
    assert env.run("setup-portage", "--eroot", str(root)).code == 0
    gentoo = read_files([root / REPOS_FRAGMENT])["gentoo"]
    options = TreeOptions.from_config(Gkeys(load_config(env.config)), category=gentoo.get("sync-gkeys-category"),
                                      top_category=gentoo.get("sync-gkeys-top-category") or None,
                                      policy=gentoo.get("sync-gkeys-policy"))
    assert set(options.categories) == {"gentoo-devs", "gentoo-infra"}, options


def systemd_root(tmp_path: Path) -> Path:
    """A git-repository root with systemd: etc/systemd/system and the ebuild's gkeys-refresh.timer."""
    root = git_repo_root(tmp_path)
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "usr/lib/systemd/system").mkdir(parents=True)
    (root / "usr/lib/systemd/system/gkeys-refresh.timer").write_text("[Install]\nWantedBy=timers.target\n")
    return root


def test_refresh_timer_is_enabled_by_its_link_and_undo_removes_it(env: Any, tmp_path: Path) -> None:
    root = systemd_root(tmp_path)
    before = snapshot(root)
    link = root / "etc/systemd/system/timers.target.wants/gkeys-refresh.timer"
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs")
    assert result.code == 0, result.text
    assert os.readlink(link) == "/usr/lib/systemd/system/gkeys-refresh.timer"
    assert "gkeys-refresh.timer" in result.out
    again = env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs")
    assert again.code == 0 and f"already in place: {link}" in again.out, again.text
    result = env.run("setup-portage", "--eroot", str(root), "--undo")
    assert result.code == 0, result.text
    assert snapshot(root) == before


def test_a_foreign_timer_link_stops_the_install(env: Any, tmp_path: Path) -> None:
    root = systemd_root(tmp_path)
    link = root / "etc/systemd/system/timers.target.wants/gkeys-refresh.timer"
    link.parent.mkdir()
    link.symlink_to("/elsewhere/gkeys-refresh.timer")
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs")
    assert result.code == 1 and "is not the link to /usr/lib/systemd/system/gkeys-refresh.timer" in result.err, \
        result.text
    assert not (root / REPOS_FRAGMENT).exists() and os.readlink(link) == "/elsewhere/gkeys-refresh.timer"


def test_without_systemd_the_cron_way_is_printed_and_no_link_is_made(env: Any, tmp_path: Path) -> None:
    root = git_repo_root(tmp_path)
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs")
    assert result.code == 0 and "cron.daily script gkeys-refresh" in result.text, result.text
    assert not (root / "etc/systemd").exists()
    (root / "etc/systemd/system").mkdir(parents=True)  # systemd, but the units are not installed
    result = env.run("setup-portage", "--eroot", str(root), "--repo", "test", "--category", "gentoo-devs")
    assert "gkeys-refresh.timer is not installed under" in result.text, result.text
    assert not (root / "etc/systemd/system/timers.target.wants").exists()


def webrsync_root(tmp_path: Path) -> Path:
    """A root whose ::gentoo syncs with emerge-webrsync."""
    root = tmp_path / "webrsync-root"
    (root / "etc/portage/repos.conf").mkdir(parents=True)
    (root / "etc/portage/repos.conf/gentoo.conf").write_text(
        f"[gentoo]\nlocation = {tmp_path}/repos/gentoo\nsync-type = webrsync\n")
    return root


def _keyring_fingerprints(path: Path, home: Path) -> set[str]:
    """The primary fingerprints in an armored keyring file, listed by a throwaway gpg home."""
    return set(_key_states(path, home))


def _key_states(path: Path, home: Path) -> dict[str, str]:
    """Primary fingerprint -> gpg's validity letter ('r' revoked) for the keys of an armored keyring file."""
    import subprocess

    home.mkdir(mode=0o700, exist_ok=True)
    out = subprocess.run(["gpg", "--homedir", str(home), "--batch", "--with-colons", "--show-keys", str(path)],
                         capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    return {lines[i + 1].split(":")[9]: line.split(":")[1] for i, line in enumerate(lines) if line.startswith("pub:")}


def test_webrsync_is_pointed_at_a_keyring_of_exactly_the_repository_keys(env: Any, tmp_path: Path) -> None:
    from media_helpers import install_release_key

    install_release_key(env)                      # gentoo/releng: a release-media key, never for a tree
    env.pin_key("gentoo", "snapshot", "bob")      # gentoo/snapshot: the repository key
    root = webrsync_root(tmp_path)
    before = snapshot(root)
    result = env.run("setup-portage", "--eroot", str(root))
    assert result.code == 0, result.text
    fragment = (root / REPOS_FRAGMENT).read_text()
    assert "[gentoo]\nsync-webrsync-verify-signature = yes\nsync-openpgp-key-path = /etc/portage/gkeys/gentoo.asc\n" \
        in fragment and "sync-type" not in fragment, fragment
    assert _keyring_fingerprints(root / "etc/portage/gkeys/gentoo.asc", tmp_path / "gpg") == \
        {env.keys.keys["bob"].fingerprint}
    assert f"{env.gkeys} verify-snapshot" in result.text
    assert env.run("setup-portage", "--eroot", str(root)).code == 0  # idempotent
    result = env.run("setup-portage", "--eroot", str(root), "--undo")
    assert result.code == 0 and snapshot(root) == before, result.text


def test_webrsync_without_a_repository_key_writes_nothing(env: Any, tmp_path: Path) -> None:
    from media_helpers import install_release_key

    install_release_key(env)
    root = webrsync_root(tmp_path)
    before = snapshot(root)
    result = env.run("setup-portage", "--eroot", str(root))
    assert result.code == 1 and "pins no repository key" in result.err and "Traceback" not in result.text, \
        result.text
    assert snapshot(root) == before


def test_setup_again_updates_its_own_unchanged_keyring_but_not_an_edited_one(env: Any, tmp_path: Path) -> None:
    from media_helpers import install_release_key

    install_release_key(env)
    env.pin_key("gentoo", "snapshot", "bob")
    root = webrsync_root(tmp_path)
    assert env.run("setup-portage", "--eroot", str(root)).code == 0
    keyring = root / "etc/portage/gkeys/gentoo.asc"
    assert env.run("remove-seed", "-C", "gentoo", "-n", "snapshot").code == 0
    env.pin_key("gentoo", "snapshot", "alice")    # the repository key changed (a new key, a refresh)
    result = env.run("setup-portage", "--eroot", str(root))
    assert result.code == 0, result.text
    assert _keyring_fingerprints(keyring, tmp_path / "gpg") == {env.keys.keys["alice"].fingerprint}
    keyring.write_text("edited by the admin\n")
    result = env.run("setup-portage", "--eroot", str(root))
    assert result.code == 1 and "exists with other content" in result.err, result.text
    assert keyring.read_text() == "edited by the admin\n"


def _webrsync_set_up(env: Any, tmp_path: Path) -> Path:
    """Pin bob as gentoo/snapshot (and the release key beside it), set up a webrsync root; its keyring path."""
    from media_helpers import install_release_key

    install_release_key(env)
    env.pin_key("gentoo", "snapshot", "bob")
    root = webrsync_root(tmp_path)
    result = env.run("setup-portage", "--eroot", str(root))
    assert result.code == 0, result.text
    return root / "etc/portage/gkeys/gentoo.asc"


def _serve_revoked(env: Any, tmp_path: Path, nick: str) -> None:
    """The test keyserver now answers with ``nick``'s key carrying its revocation."""
    from gkeys_portage.openpgp.gnupg import GnuPG

    fingerprint = env.keys.keys[nick].fingerprint
    scratch = GnuPG(tmp_path / f"revoked-{nick}")
    scratch.import_keys(env.keys.public(nick))
    scratch.import_keys(env.keys.revocation(nick))
    env.server.hkp[fingerprint] = scratch.export_keys([fingerprint])


def test_webrsync_key_path_names_the_keyring_below_eprefix(env: Any, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Portage takes sync-openpgp-key-path as it is: in a Gentoo Prefix the keyring lies below EPREFIX."""
    from media_helpers import install_release_key

    install_release_key(env)
    env.pin_key("gentoo", "snapshot", "bob")
    root = webrsync_root(tmp_path)
    monkeypatch.setenv("EPREFIX", "/home/larry/gentoo/")
    result = env.run("setup-portage", "--eroot", str(root))
    assert result.code == 0, result.text
    fragment = (root / REPOS_FRAGMENT).read_text()
    assert "sync-openpgp-key-path = /home/larry/gentoo/etc/portage/gkeys/gentoo.asc\n" in fragment, fragment
    assert (root / "etc/portage/gkeys/gentoo.asc").is_file()


def test_refresh_key_carries_a_revocation_into_the_webrsync_keyring(env: Any, tmp_path: Path) -> None:
    """A copy made once would keep a revoked snapshot key for emerge-webrsync for ever: refresh-key (the daily
    timer) rewrites the keyring setup-portage wrote, from the keys as refreshed."""
    keyring = _webrsync_set_up(env, tmp_path)
    bob = env.keys.keys["bob"].fingerprint
    assert _key_states(keyring, tmp_path / "gpg") == {bob: "-"}
    _serve_revoked(env, tmp_path, "bob")
    result = env.run("refresh-key", "-C", "gentoo", "--force", "--json")
    assert result.code == 0, result.text
    assert _key_states(keyring, tmp_path / "gpg") == {bob: "r"}
    import json

    entries = json.loads(result.out)["webrsync_keyrings"]
    assert entries == [{"path": str(keyring), "category": "gentoo", "state": "updated", "detail": ""}], entries
    result = env.run("refresh-key", "-C", "gentoo", "--force")  # nothing new: the keyring stays as it is
    assert result.code == 0 and "webrsync keyring" not in result.text, result.text
    # the record follows the rewritten keyring: undo still removes it, and leaves the root as it was
    result = env.run("setup-portage", "--eroot", str(keyring.parents[3]), "--undo")
    assert result.code == 0 and not keyring.exists(), result.text


def test_refresh_key_leaves_an_edited_webrsync_keyring_alone(env: Any, tmp_path: Path) -> None:
    keyring = _webrsync_set_up(env, tmp_path)
    keyring.write_text("edited by the admin\n")
    result = env.run("refresh-key", "-C", "gentoo", "--force")
    assert result.code == 0, result.text
    assert f"webrsync keyring {keyring}: changed since setup-portage wrote it: left alone" in result.text, result.text
    assert keyring.read_text() == "edited by the admin\n"


def test_refresh_key_fails_when_the_webrsync_keyring_can_no_longer_be_made(env: Any, tmp_path: Path) -> None:
    """The snapshot seed removed: the old copy would go on accepting a key gkeys no longer pins; an error (exit 1)
    naming both ways out, never a silent success."""
    _webrsync_set_up(env, tmp_path)
    assert env.run("remove-seed", "-C", "gentoo", "-n", "snapshot").code == 0
    result = env.run("refresh-key", "-C", "gentoo", "--force")
    assert result.code == 1, result.text
    root = tmp_path / "webrsync-root"  # not the default root: the next step names it
    assert ("pins no repository key" in result.err
            and f"{env.gkeys} setup-portage --eroot {root} --undo" in result.err), result.text
    assert "Traceback" not in result.text


def test_refresh_key_names_a_webrsync_keyring_it_cannot_write(env: Any, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only /etc (a service sandbox without ReadWritePaths): one error line naming the keyring and the
    next step, exit 1, never a traceback; the old keyring stays as it was."""
    import errno

    from gkeys_portage.portage.confined import ConfinedRoot

    keyring = _webrsync_set_up(env, tmp_path)
    before = keyring.read_bytes()
    _serve_revoked(env, tmp_path, "bob")

    def read_only(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(ConfinedRoot, "write", read_only)
    result = env.run("refresh-key", "-C", "gentoo", "--force")
    assert result.code == 1, result.text
    assert f"webrsync keyring {keyring}: cannot be rewritten (Read-only file system)" in result.err, result.text
    assert "Traceback" not in result.text and keyring.read_bytes() == before


def test_setup_again_lets_the_refresh_keep_a_keyring_of_an_older_record(env: Any, tmp_path: Path) -> None:
    """A record written before setup kept the keyrings' categories: running setup-portage again (the keyring
    unchanged) adds the category, so from then on every refresh-key keeps that keyring up to date."""
    import json

    keyring = _webrsync_set_up(env, tmp_path)
    root = keyring.parents[3]
    path = record(env, root)
    data = json.loads(path.read_text())
    del data["keyrings"]                            # as setup-portage wrote records before 2026-12
    path.write_text(json.dumps(data))
    result = env.run("setup-portage", "--eroot", str(root))  # every file as it should be: nothing to write
    assert result.code == 0 and "nothing to do" in result.text, result.text
    assert json.loads(path.read_text())["keyrings"] == {"etc/portage/gkeys/gentoo.asc": "gentoo"}
    bob = env.keys.keys["bob"].fingerprint
    _serve_revoked(env, tmp_path, "bob")
    result = env.run("refresh-key", "-C", "gentoo", "--force")
    assert result.code == 0 and "brought up to date" in result.text, result.text
    assert _key_states(keyring, tmp_path / "gpg") == {bob: "r"}


def test_a_rerun_that_changes_a_file_it_wrote_says_update_not_create(env: Any, tmp_path: Path) -> None:
    """Issue 45, item 7: a file setup-portage wrote before and brings up to date is "updated" (text and JSON)."""
    root = git_repo_root(tmp_path)
    eroot = str(root)
    first = env.run("--json", "setup-portage", "--eroot", eroot, "--repo", "test", "--category", "gentoo-devs")
    assert first.code == 0, first.text
    written = json.loads(first.out)["created"]
    again = env.run("setup-portage", "--eroot", eroot, "--repo", "test", "--category", "gentoo-infra")
    assert again.code == 0, again.text
    assert " * update " in again.out and " * create " not in again.out, again.out
    document = json.loads(env.run("--json", "setup-portage", "--eroot", eroot, "--repo", "test", "--category",
                                  "gentoo-devs").out)
    assert document["updated"] and set(document["updated"]) <= set(written) and document["created"] == [], document
