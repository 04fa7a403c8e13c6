"""rsync repositories through gkeys: a real ``rsync --daemon`` on 127.0.0.1 serving Manifest trees signed
with gemato, synced by :func:`gkeys_portage.portage.rsyncsync.sync_rsync` and by real ``emerge --sync``.

Every refusal must leave the live tree exactly as it was (same files, same inodes), name the mirror, and
say what to do next.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rsync_helpers import CATEGORY, PURPOSES, RsyncDaemon, make_tree, pin_repository_keys, stop_rsync_processes

from gkeys_portage.core.config import load_config
from gkeys_portage.demo.tree_repo import PortageSandbox, sync_module_missing
from gkeys_portage.demo.world import past
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.portage.rsyncsync import RsyncRequest, mark_key, sync_rsync
from gkeys_portage.verify.manifest.purpose import purpose_keyring, repository_pins
from gkeys_portage.verify.manifest.marks import last_mark
from gkeys_portage.verify.manifest.tree import verify_tree

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/rsync") and
                                not any(os.access(os.path.join(p, "rsync"), os.X_OK)
                                        for p in os.environ.get("PATH", "").split(os.pathsep)),
                                reason="rsync is not installed")



@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[RsyncDaemon]:
    served = RsyncDaemon(tmp_path / "rsyncd")
    yield served
    served.close()


@pytest.fixture
def pinned(env: Any) -> Any:
    """A gkeys root whose CATEGORY pins ``infra`` as the repository key and ``alice`` as a developer."""
    return pin_repository_keys(env)


def _state(location: Path) -> dict[str, tuple[int, bytes]]:
    """Every file of a tree: (inode, content), for "nothing changed" assertions."""
    if not location.exists():
        return {}
    return {str(p.relative_to(location)): (p.stat().st_ino, p.read_bytes())
            for p in sorted(location.rglob("*")) if p.is_file()}


class Syncer:
    """Runs :func:`sync_rsync` for one location and keeps what it logged."""

    def __init__(self, env: Any, location: Path, uri: str, **options: Any) -> None:
        self.ctx = Gkeys(load_config(env.config))
        self.request = RsyncRequest(location=location, uri=uri, category=CATEGORY, quiet=True, **options)
        self.lines: list[str] = []

    def __call__(self) -> Any:
        self.lines = []
        return sync_rsync(self.ctx, self.request, lambda level, text: self.lines.append(f"{level}: {text}"))


def test_first_sync_then_update_hard_links_unchanged_files(pinned: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    location = tmp_path / "repos" / "gentoo"
    (location / "distfiles").mkdir(parents=True)
    (location / "distfiles" / "big.tar").write_text("user data")
    daemon.serve(make_tree(tmp_path / "day1", pinned.keys, "infra", when=past(0.1)))
    sync = Syncer(pinned, location, daemon.url)
    outcome = sync()
    assert outcome.ok and outcome.changed, sync.lines
    assert (location / "dev-test/pkg/pkg-1.ebuild").is_file()
    assert (location / "distfiles" / "big.tar").read_text() == "user data"  # never synced, never dropped
    first = last_mark(sync.ctx, mark_key(location))
    assert first is not None and first.source == daemon.url
    ebuild_inode = (location / "dev-test/pkg/pkg-1.ebuild").stat().st_ino

    shutil.copytree(tmp_path / "day1", tmp_path / "day2")  # the mirror's next tree: same files, same times
    daemon.serve(make_tree(tmp_path / "day2", pinned.keys, "infra", files={"dev-test/pkg/pkg-2.ebuild": "EAPI=8\n"}))
    outcome = sync()
    assert outcome.ok and outcome.changed, sync.lines
    assert (location / "dev-test/pkg/pkg-2.ebuild").is_file()
    assert (location / "distfiles" / "big.tar").read_text() == "user data"
    mark = last_mark(sync.ctx, mark_key(location))
    assert mark is not None and mark.timestamp > first.timestamp
    # the unchanged ebuild is a hard link to the old tree's file (rsync --link-dest), not a new copy
    assert (location / "dev-test/pkg/pkg-1.ebuild").stat().st_ino == ebuild_inode
    assert not [p for p in location.parent.iterdir() if p.name != "gentoo"], "staging left behind"

    outcome = sync()  # nothing new: still verified, not changed
    assert outcome.ok and not outcome.changed, sync.lines


def _entries(location: Path) -> dict[str, tuple[int, int, int, int, int, bytes | None]]:
    """Every live entry's inode, mode, owner, group, modification time and content (files).  Not the change
    time: rsync --link-dest links live files, which changes their link count and so their change time."""
    if not location.exists():
        return {}
    return {str(p.relative_to(location)): (st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns,
                                           p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(location.rglob("*")) for st in [p.lstat()]}


def _refused(sync: Syncer, location: Path, *words: str) -> str:
    before = _entries(location)
    mark = last_mark(sync.ctx, mark_key(location))
    outcome = sync()
    assert not outcome.ok, sync.lines
    assert _entries(location) == before, "the live tree changed"
    assert last_mark(sync.ctx, mark_key(location)) == mark, "the high-water mark moved"
    assert not [p for p in location.parent.iterdir() if p.name != location.name], "staging left behind"
    for word in words:
        assert word in outcome.reason, (word, outcome.reason)
    return str(outcome.reason)


def test_yesterdays_tree_is_refused_naming_mirror_and_both_timestamps(pinned: Any, daemon: RsyncDaemon,
                                                                      tmp_path: Path) -> None:
    location = tmp_path / "repos" / "gentoo"
    today = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    yesterday = today - timedelta(hours=20)
    daemon.serve(make_tree(tmp_path / "today", pinned.keys, "infra", when=today))
    sync = Syncer(pinned, location, daemon.url)
    assert sync().ok, sync.lines
    daemon.serve(make_tree(tmp_path / "yesterday", pinned.keys, "infra", when=yesterday,
                           files={"dev-test/pkg/pkg-0.ebuild": "EAPI=8\n"}))
    _refused(sync, location, daemon.url, f"{yesterday:%Y-%m-%d %H:%M:%S}", f"{today:%Y-%m-%d %H:%M:%S}",
             "another mirror")


def test_equal_timestamp_with_other_content_is_refused(pinned: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    location = tmp_path / "repos" / "gentoo"
    when = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    daemon.serve(make_tree(tmp_path / "a", pinned.keys, "infra", when=when))
    sync = Syncer(pinned, location, daemon.url)
    assert sync().ok, sync.lines
    daemon.serve(make_tree(tmp_path / "b", pinned.keys, "infra", when=when, files={"dev-test/pkg/pkg-9.ebuild": "x"}))
    _refused(sync, location, daemon.url, "other content")


@pytest.mark.parametrize("case", ["developer-key", "release-key", "unsigned", "never-pinned",
                                  "changed-after-signing", "stray-file"])
def test_refusals_leave_the_tree_as_it_was(pinned: Any, daemon: RsyncDaemon, tmp_path: Path, case: str) -> None:
    location = tmp_path / "repos" / "gentoo"
    daemon.serve(make_tree(tmp_path / "good", pinned.keys, "infra", when=past(0.05)))
    sync = Syncer(pinned, location, daemon.url)
    assert sync().ok, sync.lines
    if case == "release-key":
        pinned.pin_key(CATEGORY, "releng", "releng")
    signer = {"developer-key": "alice", "release-key": "releng", "unsigned": None, "never-pinned": "mallory"}
    bad = make_tree(tmp_path / "bad", pinned.keys, signer.get(case, "infra"),
                    files={"dev-test/pkg/pkg-3.ebuild": "EAPI=8\n"})
    if case == "changed-after-signing":
        (bad / "dev-test/pkg/pkg-3.ebuild").write_text("EAPI=8\nsrc_install() { evil; }\n")
    if case == "stray-file":
        (bad / "dev-test/pkg/pkg-4.ebuild").write_text("EAPI=8\n")
    daemon.serve(bad)
    expected = {"developer-key": ["not a pinned repository key"], "release-key": ["not a pinned repository key"],
                "never-pinned": ["not a pinned repository key"], "unsigned": ["not OpenPGP-signed"],
                "changed-after-signing": ["pkg-3.ebuild", "does not match"],
                "stray-file": ["pkg-4.ebuild", "in no Manifest"]}[case]
    _refused(sync, location, *expected)


def test_first_sync_refused_installs_nothing(pinned: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    location = tmp_path / "repos" / "gentoo"
    daemon.serve(make_tree(tmp_path / "old", pinned.keys, "infra", when=past(3)))
    sync = Syncer(pinned, location, daemon.url)
    outcome = sync()
    assert not outcome.ok, sync.lines
    for words in ("72 h ago", "more than the maximum of 24 h", "sync-gkeys-max-age", daemon.url, "another mirror"):
        assert words in outcome.reason, (words, outcome.reason)
    assert not location.exists() or not any(location.iterdir())
    assert last_mark(sync.ctx, mark_key(location)) is None


def test_a_category_without_a_repository_key_signs_no_tree(pinned: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    pinned.write_config()  # no [purposes] line: no seed of CATEGORY has the repository purpose
    location = tmp_path / "repos" / "gentoo"
    daemon.serve(make_tree(tmp_path / "good", pinned.keys, "alice"))  # a developer key of the category
    sync = Syncer(pinned, location, daemon.url)
    outcome = sync()
    assert not outcome.ok and "pins no repository key" in outcome.reason, outcome.reason
    assert f"[purposes] repository = {CATEGORY}/NICK" in outcome.reason and not location.exists()


def test_a_git_work_tree_is_not_replaced_and_a_symlinked_location_stays_a_link(pinned: Any, daemon: RsyncDaemon,
                                                                                tmp_path: Path) -> None:
    daemon.serve(make_tree(tmp_path / "good", pinned.keys, "infra"))
    work = tmp_path / "repos" / "work"
    (work / ".git").mkdir(parents=True)
    (work / "mine").write_text("a developer's checkout")
    sync = Syncer(pinned, work, daemon.url)
    outcome = sync()
    assert not outcome.ok and "git work tree" in outcome.reason and (work / "mine").is_file(), outcome.reason
    real = tmp_path / "data" / "gentoo"
    real.mkdir(parents=True)
    link = tmp_path / "repos" / "gentoo"
    link.symlink_to(real)
    sync = Syncer(pinned, link, daemon.url)
    assert sync().ok, sync.lines
    assert link.is_symlink() and (real / "Manifest").is_file()
    assert [p.name for p in real.parent.iterdir()] == ["gentoo"], "staging left beside the real tree"


def test_a_rollback_is_refused_before_the_files_are_hashed(pinned: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    location = tmp_path / "repos" / "gentoo"
    daemon.serve(make_tree(tmp_path / "today", pinned.keys, "infra"))
    sync = Syncer(pinned, location, daemon.url)
    assert sync().ok, sync.lines
    old = make_tree(tmp_path / "old", pinned.keys, "infra", when=past(0.5))
    (old / "dev-test/pkg/pkg-1.ebuild").write_text("tampered as well\n")
    daemon.serve(old)
    reason = _refused(sync, location, "older than")  # the time stamp decides; no file was hashed
    assert "does not match" not in reason and not any("fetching again" in line for line in sync.lines)


def test_a_file_over_the_fetch_cap_is_not_fetched(pinned: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    pinned.write_config(PURPOSES + "[tree]\nmax-fetch-mib = 0.004\n")  # about 4 KiB
    location = tmp_path / "repos" / "gentoo"
    daemon.serve(make_tree(tmp_path / "big", pinned.keys, "infra", files={"dev-test/pkg/files/big": "x" * 16384}))
    sync = Syncer(pinned, location, daemon.url)
    outcome = sync()
    assert not outcome.ok and "files/big is missing" in outcome.reason, outcome.reason
    assert not location.exists() or not any(location.iterdir())


def test_max_age_override(pinned: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    location = tmp_path / "repos" / "gentoo"
    daemon.serve(make_tree(tmp_path / "old", pinned.keys, "infra", when=past(3)))
    sync = Syncer(pinned, location, daemon.url, max_age_hours=100)
    assert sync().ok, sync.lines


_KILLED_SYNC = """\
import sys
from pathlib import Path
from gkeys_portage.core.config import load_config
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.portage.rsyncsync import RsyncRequest, sync_rsync
config, location, uri, category = sys.argv[1:5]
request = RsyncRequest(location=Path(location), uri=uri, category=category, quiet=True)
outcome = sync_rsync(Gkeys(load_config(Path(config))), request, lambda level, text: None)
sys.exit(0 if outcome.ok else 1)
"""


@pytest.mark.slow
def test_sigkill_at_any_moment_leaves_old_or_new_tree(pinned: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    location = tmp_path / "repos" / "gentoo"
    old = make_tree(tmp_path / "old", pinned.keys, "infra", when=past(0.1),
                    files={f"dev-test/pkg/files/old-{n}": "o" * 4096 for n in range(300)})
    new = make_tree(tmp_path / "new", pinned.keys, "infra",
                    files={f"dev-test/pkg/files/new-{n}": "n" * 4096 for n in range(300)})
    daemon.serve(old)
    sync = Syncer(pinned, location, daemon.url)
    assert sync().ok, sync.lines
    old_state = {k: v for k, (_, v) in _state(location).items()}
    new_state = {k: v for k, (_, v) in _state(new).items()}
    daemon.serve(new)
    command = [sys.executable, "-c", _KILLED_SYNC, str(pinned.config), str(location), daemon.url, CATEGORY]
    scratch = tmp_path / "child-tmp"  # gemato's homes of killed children land here, their agents stopped below
    scratch.mkdir()
    seen = set()
    for delay in [0.05 * n for n in range(1, 40)]:
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env={**os.environ, "TMPDIR": str(scratch)})
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
        now = {k: v for k, (_, v) in _state(location).items()}
        assert now in (old_state, new_state), f"a mix after a kill at {delay:.2f} s"
        seen.add("new" if now == new_state else "old")
        if now == new_state:
            break  # this kill landed after the exchange
    for home in scratch.glob("gemato.*"):
        GnuPG(home).close()  # a killed child's gpg-agent outlives it
    stop_rsync_processes(location.parent)  # and so does its rsync's forked receiver (kept alive by keepalives)
    assert "old" in seen, "no kill landed before the swap"
    outcome = sync()  # the next sync cleans up whatever a kill left and ends at the new tree
    assert outcome.ok, sync.lines
    assert {k: v for k, (_, v) in _state(location).items()} == new_state
    assert not [p for p in location.parent.iterdir() if p.name != "gentoo"], "staging left behind"


def test_keyserver_down_does_not_delay_the_sync(pinned: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)  # accepts connections and never answers: a keyserver behind a firewall that drops
    try:
        pinned.write_config(keyservers=f"hkp://127.0.0.1:{hole.getsockname()[1]}",
                            extra=PURPOSES + "[policy]\nrefresh-interval = 0\n")
        text = pinned.config.read_text().replace("timeout = 2\nretries = 1", "timeout = 30\nretries = 3")
        pinned.config.write_text(text)
        location = tmp_path / "repos" / "gentoo"
        daemon.serve(make_tree(tmp_path / "good", pinned.keys, "infra"))
        sync = Syncer(pinned, location, daemon.url)
        started = time.monotonic()
        assert sync().ok, sync.lines
        assert time.monotonic() - started < 20, "the sync waited on the keyserver"
    finally:
        hole.close()


_MISSING = sync_module_missing()


@pytest.mark.slow
def test_emerge_sync_rsync_through_gkeys(pinned: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    if _MISSING:
        pytest.skip(_MISSING)
    portage = PortageSandbox(tmp_path / "portage", pinned.config)
    location = portage.add_repo("gentoo", daemon.url, "gkeys", sync_gkeys_category=CATEGORY)
    daemon.serve(make_tree(tmp_path / "day1", pinned.keys, "infra", when=past(0.2)))
    result = portage.sync("gentoo")
    assert result.returncode == 0, result.stdout
    assert (location / "dev-test/pkg/pkg-1.ebuild").is_file()
    daemon.serve(make_tree(tmp_path / "day2", pinned.keys, "infra", files={"dev-test/pkg/pkg-2.ebuild": "EAPI=8\n"}))
    result = portage.sync("gentoo")
    assert result.returncode == 0, result.stdout
    assert (location / "dev-test/pkg/pkg-2.ebuild").is_file()
    before = _state(location)
    daemon.serve(make_tree(tmp_path / "day0", pinned.keys, "infra", when=past(0.5),
                           files={"dev-test/pkg/pkg-0.ebuild": "EAPI=8\n"}))
    result = portage.sync("gentoo")
    assert result.returncode != 0, result.stdout
    assert "older than" in result.stdout and daemon.url in result.stdout, result.stdout
    assert _state(location) == before


@pytest.mark.slow
def test_emerge_sync_max_age_from_repos_conf(pinned: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    if _MISSING:
        pytest.skip(_MISSING)
    portage = PortageSandbox(tmp_path / "portage", pinned.config)
    daemon.serve(make_tree(tmp_path / "old", pinned.keys, "infra", when=past(3)))
    location = portage.add_repo("gentoo", daemon.url, "gkeys", sync_gkeys_category=CATEGORY)
    result = portage.sync("gentoo")
    assert result.returncode != 0 and "sync-gkeys-max-age" in result.stdout and daemon.url in result.stdout
    assert not (location / "Manifest").exists()
    portage.add_repo("gentoo", daemon.url, "gkeys", sync_gkeys_category=CATEGORY, sync_gkeys_max_age="three days")
    result = portage.sync("gentoo")
    assert result.returncode != 0 and "sync-gkeys-max-age = 'three days': expected hours" in result.stdout
    portage.add_repo("gentoo", daemon.url, "gkeys", sync_gkeys_category=CATEGORY, sync_gkeys_max_age="100")
    result = portage.sync("gentoo")
    assert result.returncode == 0, result.stdout
    assert (location / "dev-test/pkg/pkg-1.ebuild").is_file()


_KILLED_IN_GEMATO = """
import sys, time
from pathlib import Path
from gkeys_portage.core.config import load_config
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.verify.manifest.purpose import purpose_keyring, repository_pins
from gkeys_portage.verify.manifest.tree import verify_tree
ctx = Gkeys(load_config(Path(sys.argv[1])))
pins, _ = repository_pins(ctx, sys.argv[3])
def hold(stamp, digest):  # inside gemato's environment: its home is made and its gpg-agent started
    Path(sys.argv[4]).write_text("ready")
    time.sleep(600)
verify_tree(Path(sys.argv[2]), purpose_keyring(ctx, sys.argv[3], pins), pins, before_files=hold)
"""


def _agents_under(directory: Path) -> list[int]:
    """The pids of the gpg-agents whose home lies under ``directory``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            words = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # any word: an engine run through its own loader (ld.so ... /usr/bin/gpg-agent) names the agent later
        if any(w.endswith(b"gpg-agent") for w in words) and any(str(directory).encode() in w for w in words):
            found.append(int(proc.name))
    return found


def test_a_killed_verification_leaves_no_gemato_home_or_agent_after_the_next(pinned: Any, tmp_path: Path) -> None:
    """gemato's GnuPG home starts a gpg-agent; a SIGKILLed sync closes neither.  The next verification removes
    the homes of gkeys runs that are gone (and so ends their agents), never a home of a live run or of Portage's."""
    tree = make_tree(tmp_path / "tree", pinned.keys, "infra")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    ready = tmp_path / "ready"
    foreign = scratch / "gemato.portage"  # Portage's own rsync module runs gemato too: not gkeys' to remove
    foreign.mkdir(mode=0o700)
    child = subprocess.Popen([sys.executable, "-c", _KILLED_IN_GEMATO, str(pinned.config), str(tree), CATEGORY,
                              str(ready)], env={**os.environ, "TMPDIR": str(scratch)})
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the child never reached gemato's verification"
        assert _agents_under(scratch), "gemato's import started no gpg-agent: the test proves nothing"
        child.send_signal(signal.SIGKILL)
        child.wait()
        homes = [home for home in scratch.glob("gemato.*") if home != foreign]
        assert len(homes) == 1 and (homes[0] / "gkeys-owner").is_file(), homes
        ctx = Gkeys(load_config(pinned.config))
        pins, _ = repository_pins(ctx, CATEGORY)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(tempfile, "tempdir", str(scratch))  # the next verification's gemato home lands there too
            verify_tree(tree, purpose_keyring(ctx, CATEGORY, pins), pins)
        deadline = time.monotonic() + 10  # gpg-agent exits when it sees its home removed (inotify)
        while _agents_under(scratch) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _agents_under(scratch), "the killed verification's gpg-agent outlived the next one"
        assert sorted(scratch.iterdir()) == [foreign], "a killed run's gemato home was left, or Portage's removed"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for home in scratch.glob("gemato.*"):
            GnuPG(home).close()
