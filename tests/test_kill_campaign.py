"""The kill campaign (issue 36, item 5): every operation that changes state, killed with SIGKILL (its whole process
group) at random moments and at the known windows, then checked, then run again unkilled.

Seeded and time-bounded: ``GKEYS_KILL_CAMPAIGN`` seconds in all (default 100, shared by the operations),
``GKEYS_KILL_MIN`` kills at least per operation (default 3), ``GKEYS_KILL_SEED`` (default 36).  By hand::

    GKEYS_KILL_CAMPAIGN=1800 GKEYS_KILL_MIN=40 GKEYS_KILL_REPORT=/tmp/kills.json pytest tests/test_kill_campaign.py

Each named window is killed at first, then a third of the kills land at one: the run is started with
``GKEYS_TEST_PAUSE_AT`` (see ``gkeys_portage/core/faultpoint.py``), waits there, and is killed; every named window
must have been hit (a renamed checkpoint fails the campaign), and the kills must reach ``GKEYS_KILL_MIN`` within
a bounded number of runs past the budget.  The others land after a random delay up to the
duration of the last unkilled run.  After each kill: every state file parses; the keyring holds the old or the new
key set and its two views (the owner's keybox, the export Portage's user reads) agree; a tree is exactly one
verified revision; after the next (unkilled) run, which must succeed, no scratch entry of a killed run is left.
"""

from __future__ import annotations

import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import PROJECT, GkeysEnv
from test_setup_portage import _serve_revoked, snapshot

from gkeys_portage.core.fs import trash
from gkeys_portage.core.state import Layout
from gkeys_portage.core.types import Category
from gkeys_portage.keys.keyring import READ_ONLY_VARIABLE, Keyring

pytestmark = pytest.mark.slow

BUDGET = float(os.environ.get("GKEYS_KILL_CAMPAIGN", "100"))
MIN_KILLS = int(os.environ.get("GKEYS_KILL_MIN", "3"))
SEED = int(os.environ.get("GKEYS_KILL_SEED", "36"))
OPERATIONS = ("update-seed", "fetch-seed+install-key", "refresh-key", "verify-tree", "emerge-sync-git",
              "emerge-sync-rsync", "binpkg-keyring", "setup-portage")
#: scratch prefixes under the children's $TMPDIR and in keyrings/ that a killed run may leave
SCRATCH = ("gkeys-", "gemato.")


@dataclass
class Tally:
    """What the campaign did to one operation."""

    kills: int = 0
    windows: int = 0
    finished: int = 0  # the run ended before the kill (counted apart)
    hit: dict[str, int] = field(default_factory=dict)  # kills that landed at each named window


@dataclass
class Operation:
    """One operation of the campaign: how to bring the world to its old state, run it, and check it."""

    name: str
    reset: Callable[[], None]
    argv: Callable[[], list[str]]
    check: Callable[[], None]
    done: Callable[[], None]
    points: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    watch: tuple[str, ...] = ()  # glob patterns: kill the moment one matches (git's index.lock: the checkout)
    at_once: float = 0.0  # the share of kills followed at once by the next run (no check in between)
    tally: Tally = field(default_factory=Tally)

    def windows(self) -> list[str]:
        """The named windows: each checkpoint, and the watched moment (git's index.lock: the checkout)."""
        return [*self.points, *(["checkout"] if self.watch else [])]


def gkeys(env: GkeysEnv, *argv: str) -> list[str]:
    """The command line of a gkeys child."""
    return [sys.executable, "-m", "gkeys_portage.cli.main", "-c", str(env.config), *argv]


def child_env(scratch: Path, extra: dict[str, str]) -> dict[str, str]:
    """The children's environment: this worktree's gkeys, a $TMPDIR of their own."""
    found = dict(os.environ, TMPDIR=str(scratch), **extra)
    found["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT), os.environ.get("PYTHONPATH", "")]))
    return found


def run_ok(argv: list[str], env: dict[str, str], cwd: Path = PROJECT) -> float:
    """Run a child to its end; it must succeed.  Returns how long it took."""
    started = time.monotonic()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"the next (unkilled) run failed: {' '.join(argv)}\n{done.stdout}{done.stderr}"
    return time.monotonic() - started


def kill_once(argv: list[str], env: dict[str, str], cwd: Path, *, point: str | None, delay: float,
              marker: Path, watch: tuple[str, ...] = ()) -> tuple[bool, bool]:
    """Start ``argv`` in its own process group and SIGKILL the group at ``point``, the moment a ``watch``
    pattern matches, or after ``delay``: (it was still running when killed, the kill landed at the named window:
    the run waited at ``point``, or a ``watch`` pattern matched)."""
    if point:
        marker.unlink(missing_ok=True)
        env = dict(env, GKEYS_TEST_PAUSE_AT=f"{point}={marker}")
    process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    deadline = time.monotonic() + (120 if point or watch else delay)
    reached = False
    while time.monotonic() < deadline and process.poll() is None:
        if (point and marker.exists()) or (watch and any(glob.glob(pattern) for pattern in watch)):
            reached = True
            break
        time.sleep(0.001 if watch else 0.01)
    running = process.poll() is None
    if running:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    with _suppress_gone():
        os.killpg(process.pid, signal.SIGKILL)  # gpg-agents and other children left in the group
    _wait_group_gone(process.pid)
    return running, running and reached


def _wait_group_gone(group: int) -> None:
    """Wait until every process of ``group`` is dead (SIGKILL lands late on one in uninterruptible sleep): the
    next run comes after the killed one, as it would on a real system."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = False
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_bytes().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 2 and fields[2] == str(group).encode() and fields[0] not in (b"Z", b"X"):
                alive = True
                break
        if not alive:
            return
        time.sleep(0.02)


class _suppress_gone:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, value: object, traceback: object) -> bool:
        return isinstance(value, ProcessLookupError | PermissionError)


def parse_state(state: Path) -> None:
    """Every JSON state file parses; every installed seed file loads."""
    from gkeys_portage.keys.seeds import SeedStore

    for path in state.rglob("*.json"):
        json.loads(path.read_text(encoding="utf-8"))
    store = SeedStore(Layout(state))
    for seeds in (state / "seeds").glob("*.seeds"):
        store.load(Category(seeds.stem))


def key_view(state: Path, category: str, *, export: bool) -> frozenset[tuple[str, bool]]:
    """(fingerprint, revoked) of each key of ``category`` as the owner (keybox) or a read-only reader (export)."""
    saved = os.environ.get(READ_ONLY_VARIABLE)
    os.environ[READ_ONLY_VARIABLE] = "1" if export else "0"
    try:
        keyring = Keyring(Layout(state), Category(category))
        return frozenset((str(fpr), key.primary.revoked) for fpr, key in keyring.installed().items())
    finally:
        if saved is None:
            os.environ.pop(READ_ONLY_VARIABLE, None)
        else:
            os.environ[READ_ONLY_VARIABLE] = saved


def keyring_is_one_of(state: Path, category: str, *sets: frozenset[tuple[str, bool]]) -> None:
    """The keyring holds one of ``sets`` and both its views agree."""
    owner, reader = key_view(state, category, export=False), key_view(state, category, export=True)
    assert owner == reader, f"{category}: the keybox holds {sorted(owner)}, the export {sorted(reader)}"
    assert owner in sets, f"{category}: neither the old nor the new key set: {sorted(owner)}"


def leftovers(*places: Path) -> list[str]:
    """Scratch entries of gkeys runs (all ended) still in ``places`` (children's $TMPDIR, keyrings/)."""
    found = []
    for place in places:
        if place.is_dir():
            found += [str(p) for p in place.iterdir()
                      if p.name.startswith(SCRATCH) or (place.name == "keyrings" and p.name.startswith("."))]
    return found


def restore(saved: Path, target: Path) -> None:
    """Put the copy ``saved`` back at ``target`` (whatever a killed run left there)."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(saved, target, symlinks=True, ignore=shutil.ignore_patterns("S.*"))


def save(source: Path, saved: Path) -> None:
    """Keep a copy of ``source`` at ``saved``."""
    shutil.rmtree(saved, ignore_errors=True)
    shutil.copytree(source, saved, symlinks=True, ignore=shutil.ignore_patterns("S.*"))


def campaign(operation: Operation, tmp_path: Path, budget: float) -> Tally:
    """Kill ``operation`` again and again until ``budget`` seconds passed and MIN_KILLS kills were made."""
    rng = random.Random(f"{SEED}-{operation.name}")
    with tempfile.TemporaryDirectory(prefix="gkc-", dir="/tmp") as short:  # gpg-agent sockets need a short path
        return _campaign(operation, tmp_path, budget, rng, Path(short))


def _campaign(operation: Operation, tmp_path: Path, budget: float, rng: random.Random, scratch: Path) -> Tally:
    env = child_env(scratch, operation.env)
    tally = operation.tally
    operation.reset()
    duration = run_ok(operation.argv(), env)  # how long an unkilled run takes (the range of random delays)
    deadline = time.monotonic() + budget
    first = operation.windows()  # each named window once first, then random windows and delays
    late = 0  # runs past the deadline: bounded, so too few kills fails the test instead of looping on
    while first or tally.kills < MIN_KILLS or time.monotonic() < deadline:
        if time.monotonic() >= deadline:
            late += 1
            if late > 4 * MIN_KILLS + len(operation.windows()):
                break
        operation.reset()
        if first:
            named = first.pop(0)
            window, point = True, (None if named == "checkout" else named)
        else:
            window = rng.random() < 1 / 3
            point = rng.choice(operation.points) if operation.points and window else None
        watch = operation.watch if window and not point else ()
        delay = rng.uniform(0.02, duration * 1.1)
        running, reached = kill_once(operation.argv(), env, PROJECT, point=point, delay=delay,
                                     marker=tmp_path / "paused", watch=watch)
        if running:
            tally.kills += 1
        else:
            tally.finished += 1
        if reached:
            tally.windows += 1
            name = point or "checkout"
            tally.hit[name] = tally.hit.get(name, 0) + 1
        where = f"{operation.name}, seed {SEED}, " + (f"window {point or watch}" if point or watch
                                                      else f"after {delay:.2f}s")
        at_once = operation.at_once and rng.random() < operation.at_once
        try:
            if not at_once:  # else the next run starts while what the killed one started may still run
                operation.check()
            duration = run_ok(operation.argv(), env)
            operation.done()
        except AssertionError as exc:
            raise AssertionError(f"{where}: {exc}") from exc
        assert not leftovers(scratch), f"{where}: left after the next run: {leftovers(scratch)}"
    return tally


def report(name: str, tally: Tally, broken: int = 0) -> None:
    """Add the tally to ``$GKEYS_KILL_REPORT`` (JSON), for docs/benchmarks.md."""
    path = os.environ.get("GKEYS_KILL_REPORT")
    if not path:
        return
    data = json.loads(Path(path).read_text()) if os.path.exists(path) else {}
    data[name] = {"kills": tally.kills, "windows": tally.windows, "finished": tally.finished, "broken": broken}
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


# -- the operations -------------------------------------------------------------------------------------------


def _keys(env: GkeysEnv, *nicks: str, revoked: tuple[str, ...] = ()) -> frozenset[tuple[str, bool]]:
    return frozenset((env.keys.keys[n].fingerprint, n in revoked) for n in nicks)


def _key_operation(env: GkeysEnv, tmp_path: Path, name: str) -> Operation:
    """update-seed, fetch-seed + install-key, refresh-key with a revocation arriving (gentoo-devs)."""
    state, saved = env.state, tmp_path / "saved-state"
    env.install_devs("alice", "bob")
    old = _keys(env, "alice", "bob")
    if name == "refresh-key":
        new = _keys(env, "alice", "bob", revoked=("bob",))
        _serve_revoked(env, tmp_path, "bob")
        argv = gkeys(env, "refresh-key", "-C", "gentoo-devs", "--force")
    else:
        new = _keys(env, "alice", "bob", "carol")
        env.publish_seeds("gentoo-devs", ("alice", "bob", "carol"))
        env.server.hkp[env.keys.keys["carol"].fingerprint] = env.keys.public("carol")
        argv = gkeys(env, "update-seed", "-C", "gentoo-devs")
        if name == "fetch-seed+install-key":
            argv = ["sh", "-c", f"{' '.join(gkeys(env, 'fetch-seed', '-C', 'gentoo-devs'))} && "
                                f"{' '.join(gkeys(env, 'install-key', '-C', 'gentoo-devs', '-n', 'carol'))}"]
    save(state, saved)

    def check() -> None:
        parse_state(state)
        keyring_is_one_of(state, "gentoo-devs", old, new)

    def done() -> None:
        keyring_is_one_of(state, "gentoo-devs", new)
        assert not leftovers(state / "keyrings"), leftovers(state / "keyrings")

    return Operation(name, lambda: restore(saved, state), lambda: argv, check, done,
                     points=("keyring-between-export-and-keybox",))


def _verify_tree(env: GkeysEnv, tmp_path: Path) -> Operation:
    from tree_helpers import build, install_devs, records

    install_devs(env, ("alice", "bob"))
    repo = build(tmp_path / "repo", env.keys, ["alice", "bob"] * 5)
    old = repo.head()
    assert env.run("verify-tree", str(repo.path), "--policy", "all").code == 0
    for _ in range(40):
        repo.commit("alice")
    new = repo.head()
    saved = tmp_path / "saved-state"
    save(env.state, saved)
    key = str(repo.path.resolve())

    def check() -> None:
        parse_state(env.state)
        assert records(env)[key]["revision"] in (old, new)

    def done() -> None:
        assert records(env)[key]["revision"] == new

    return Operation("verify-tree", lambda: restore(saved, env.state),
                     lambda: gkeys(env, "verify-tree", str(repo.path), "--policy", "all"), check, done)


def _git_is_one_verified_revision(location: Path, revisions: tuple[str, ...]) -> None:
    from tree_helpers import head

    mixed = (location / ".git" / "index.lock").exists()
    if not mixed:
        status = subprocess.run(["git", "-C", str(location), "status", "--porcelain", "--untracked-files=all"],
                                capture_output=True, text=True, check=False)
        mixed = status.returncode != 0 or bool(status.stdout.strip())
    assert not mixed, f"{location}: a mixed tree (a lock, or files that are not HEAD's)"
    assert head(location) in revisions


def _emerge_git(env: GkeysEnv, tmp_path: Path, sandbox: Any) -> Operation:
    from tree_helpers import head, install_devs

    from gkeys_portage.demo.tree_repo import RepoBuilder

    install_devs(env, ("alice", "bob"))
    upstream = RepoBuilder(tmp_path / "upstream", env.keys)
    for _ in range(3):
        upstream.commit("alice")
    location = sandbox.add_repo("test", f"file://{upstream.path}", "gkeys", sync_gkeys_policy="all")
    assert sandbox.sync("test").returncode == 0
    old = head(location)
    for index in range(30):
        upstream.commit("bob" if index % 2 else "alice")
    # a checkout long enough to be killed in (the mixed trees came from kills during git reset --hard)
    upstream.commit("alice", files={f"dev-test/pkg{i // 100}/file{i}": f"{i}\n" * 20 for i in range(3000)})
    new = upstream.head()
    saved_state, saved_tree = tmp_path / "saved-state", tmp_path / "saved-tree"
    save(env.state, saved_state)
    save(location, saved_tree)
    # a leftover trash big enough that a kill may land in its removal at the start of the sync
    saved_trash = tmp_path / "saved-trash"
    for number in range(3000):
        (saved_trash / f"d{number // 100}").mkdir(parents=True, exist_ok=True)
        (saved_trash / f"d{number // 100}" / f"f{number}").write_text(f"{number}\n")
    spare, leftover = trash.spare_path(location), trash.trash_path(location)
    trials = iter(range(1 << 30))

    def reset() -> None:
        """The trials cycle through: no spare, a spare (the tree the last update replaced), a spare and a trash
        an earlier sync left (removed at the start of the sync)."""
        restore(saved_state, env.state)
        restore(saved_tree, location)
        mode = next(trials) % 3
        for extra in (spare, leftover):
            _wait_removed(extra)  # a detached removal of an earlier trial may still run
        if mode >= 1:
            shutil.copytree(saved_tree, spare, symlinks=True)
        if mode == 2:
            shutil.copytree(saved_trash, leftover)

    def check() -> None:
        parse_state(env.state)
        _git_is_one_verified_revision(location, (old, new))

    def done() -> None:
        _git_is_one_verified_revision(location, (new,))
        # the spare (the tree the update replaced, nothing in it trusted) and a trash a detached child is still
        # removing are by design, one of each at most; any other sibling is a staging tree left behind
        kept = {trash.spare_path(location).name, trash.trash_path(location).name}
        left = [p.name for p in location.parent.glob(".test.*") if p.name not in kept]
        assert not left, f"a staging tree was left: {left}"

    operation = Operation("emerge-sync-git", reset, lambda: ["emerge", "--sync", "test"], check, done,
                          env=dict(sandbox.env), watch=(f"{location}/.git/index.lock",
                                                        f"{location.parent}/.test.*/.git/index.lock",
                                                        f"{location.parent}/.test.*/git/index.lock"),
                          at_once=0.25)
    return operation


def _wait_removed(path: Path) -> None:
    """Remove ``path`` (a directory) once no other process is removing it (up to 30 s)."""
    deadline = time.monotonic() + 30
    while os.path.lexists(path) and time.monotonic() < deadline:
        shutil.rmtree(path, ignore_errors=True)
        time.sleep(0.05)
    assert not os.path.lexists(path), f"{path} could not be removed"


def _emerge_rsync(env: GkeysEnv, tmp_path: Path, sandbox: Any, daemon: Any) -> Operation:
    from datetime import UTC, datetime, timedelta

    from rsync_helpers import CATEGORY, make_tree, pin_repository_keys

    pin_repository_keys(env)
    now = datetime.now(UTC).replace(microsecond=0)
    old_tree = make_tree(tmp_path / "old", env.keys, "infra", when=now - timedelta(hours=3))
    extra = {f"dev-test/pkg{i}/pkg{i}-1.ebuild": "EAPI=8\nSLOT=0\n" for i in range(60)}
    extra["profiles/categories"] = "dev-test\n"
    new_tree = make_tree(tmp_path / "new", env.keys, "infra", when=now - timedelta(hours=1), files=extra)
    location = sandbox.add_repo("gentoo", daemon.url, "gkeys", sync_gkeys_category=CATEGORY)
    daemon.serve(old_tree)
    assert sandbox.sync("gentoo").returncode == 0
    daemon.serve(new_tree)
    saved_state, saved_tree = tmp_path / "saved-state", tmp_path / "saved-tree"
    save(env.state, saved_state)
    save(location, saved_tree)

    def files(tree: Path) -> set[str]:
        return {str(p.relative_to(tree)) for p in tree.rglob("*.ebuild")}

    def reset() -> None:
        restore(saved_state, env.state)
        restore(saved_tree, location)

    def check() -> None:
        parse_state(env.state)
        assert files(location) in (files(old_tree), files(new_tree)), "the tree is neither the old nor the new"

    def done() -> None:
        assert files(location) == files(new_tree)
        assert not [p for p in location.parent.iterdir() if p.name.startswith(".gentoo.")], "a staging tree stays"

    return Operation("emerge-sync-rsync", reset, lambda: ["emerge", "--sync", "gentoo"], check, done, at_once=0.25,
                     env=dict(sandbox.env))


def _binpkg(env: GkeysEnv, tmp_path: Path) -> Operation:
    from binpkg_helpers import install_gentoo

    from gkeys_portage.portage.binpkg import HOME_FILES, STAMP_FILE

    install_gentoo(env)
    parent = tmp_path / "public"
    parent.mkdir(mode=0o755)
    home = parent / "gnupg"
    saved = tmp_path / "saved-state"
    save(env.state, saved)

    def reset() -> None:
        restore(saved, env.state)
        shutil.rmtree(parent)
        parent.mkdir(mode=0o755)

    def check() -> None:
        parse_state(env.state)
        if home.exists() or home.is_symlink():
            assert home.is_symlink() and {p.name for p in home.iterdir()} == HOME_FILES
            assert (home / STAMP_FILE).read_text().strip()

    def done() -> None:
        check()
        assert home.is_symlink()
        assert len([p for p in parent.iterdir() if p.name.startswith(".gnupg.")]) <= 2, list(parent.iterdir())

    return Operation("binpkg-keyring", reset,
                     lambda: gkeys(env, "binpkg-keyring", "--gnupghome", str(home), "--force"), check, done)


def _setup_portage(env: GkeysEnv, tmp_path: Path) -> Operation:
    root = tmp_path / "root"
    root.mkdir()
    saved = tmp_path / "saved-state"
    env.state.mkdir(exist_ok=True)
    save(env.state, saved)
    undoing = [False]

    def reset() -> None:
        restore(saved, env.state)
        shutil.rmtree(root)
        root.mkdir()
        undoing[0] = not undoing[0]
        if undoing[0]:  # every other round kills --undo of a finished setup
            assert env.run("setup-portage", "--eroot", str(root), "--overlays", "--fetch-wrapper").code == 0

    def argv() -> list[str]:
        return gkeys(env, "setup-portage", "--eroot", str(root), *(["--undo"] if undoing[0] else
                                                                   ["--overlays", "--fetch-wrapper"]))

    def check() -> None:
        parse_state(env.state)
        result = env.run("setup-portage", "--eroot", str(root), "--undo")  # --undo after any kill: all gone
        assert result.code == 0 and snapshot(root) == {}, result.text
        if not undoing[0]:
            assert env.run("setup-portage", "--eroot", str(root), "--overlays", "--fetch-wrapper").code == 0

    def done() -> None:
        if undoing[0]:
            assert snapshot(root) == {}
        else:
            assert (root / "etc/portage/repos.conf/zz-gkeys.conf").is_file()

    return Operation("setup-portage", reset, argv, check, done, points=("setup-between-file-and-record",))


# -- the test -------------------------------------------------------------------------------------------------


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Any]:
    from rsync_helpers import RsyncDaemon

    served = RsyncDaemon(tmp_path / "rsyncd")
    yield served
    served.close()


@pytest.mark.parametrize("name", OPERATIONS)
def test_kill_campaign(env: GkeysEnv, tmp_path: Path, name: str, request: pytest.FixtureRequest) -> None:
    """Every kill leaves a state that parses, one keyring view, one verified tree; the next run succeeds and
    leaves no scratch of the killed runs."""
    budget = BUDGET / len(OPERATIONS)
    if name in ("update-seed", "fetch-seed+install-key", "refresh-key"):
        operation = _key_operation(env, tmp_path, name)
    elif name == "verify-tree":
        operation = _verify_tree(env, tmp_path)
    elif name == "emerge-sync-git":
        operation = _emerge_git(env, tmp_path, request.getfixturevalue("portage_root"))
    elif name == "emerge-sync-rsync":
        from gkeys_portage.demo.tree_repo import PortageSandbox, sync_module_missing

        if sync_module_missing():
            pytest.skip(sync_module_missing() or "")
        operation = _emerge_rsync(env, tmp_path, PortageSandbox(tmp_path / "portage", env.config),
                                  request.getfixturevalue("daemon"))
    elif name == "binpkg-keyring":
        operation = _binpkg(env, tmp_path)
    else:
        operation = _setup_portage(env, tmp_path)
    try:
        tally = campaign(operation, tmp_path, budget)
    except AssertionError:
        report(name, operation.tally, broken=1)
        raise
    report(name, tally)
    missed = [window for window in operation.windows() if not tally.hit.get(window)]
    assert not missed, f"{name}: no kill landed at the named window(s) {missed} (a checkpoint renamed?): {tally}"
    assert tally.kills >= MIN_KILLS, f"{name}: {tally.kills} kills, {tally.finished} runs ended first: {tally}"
