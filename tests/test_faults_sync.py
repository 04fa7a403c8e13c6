"""SIGKILL at several points of a verified sync (first clone and update).

Invariant after every kill: the repository location holds either nothing, or a work tree at a
revision whose whole history was verified — never an unverified commit — and the next normal
sync succeeds.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import PROJECT, GkeysEnv
from kill_helpers import kill_group_during
from tree_helpers import build, head, install_devs

SYNC_SCRIPT = """
import sys
import time
from collections.abc import Callable
from pathlib import Path
from gkeys_portage.core.config import load_config
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.demo.tree_repo import git_environment
from gkeys_portage.portage.treesync import SyncRequest, clone_verified, update_verified
from gkeys_portage.verify.git.tree import TreeOptions

config, location, uri = sys.argv[1:4]
ctx = Gkeys(load_config(Path(config)))
request = SyncRequest(Path(location), uri, TreeOptions(policy="all", jobs=1), git_env=git_environment())
action = update_verified if (Path(location) / ".git").exists() else clone_verified
outcome = action(ctx, request, lambda level, text: print(level, text, flush=True))
sys.exit(0 if outcome.ok else 1)
"""


def _sync(env: GkeysEnv, location: Path, upstream: Path) -> subprocess.Popen[bytes]:
    """A sync in a process group of its own."""
    return subprocess.Popen([sys.executable, "-c", SYNC_SCRIPT, str(env.config), str(location), str(upstream)],
                            cwd=PROJECT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _new_staging(location: Path) -> Callable[[], bool]:
    """True once a sync of ``location`` made a staging directory (one a killed run left does not count): the run
    is past start-up, in its work."""
    before = set(location.parent.glob(f".{location.name}.gkeys-*"))
    return lambda: bool(set(location.parent.glob(f".{location.name}.gkeys-*")) - before)


def _timed_sync(env: GkeysEnv, location: Path, upstream: Path) -> tuple[int, float]:
    """A whole sync of ``location``: its exit status and how long it worked past making its staging directory."""
    started = _new_staging(location)
    process = _sync(env, location, upstream)
    while not started() and process.poll() is None:
        time.sleep(0.005)
    began = time.monotonic()
    code = process.wait(timeout=120)
    return code, time.monotonic() - began


def _killed_sync(env: GkeysEnv, location: Path, twin: Path, upstream: Path, fraction: float) -> int:
    """Sync ``twin`` (the same state as ``location``) to the end and time it, then kill a sync of ``location`` (its
    whole group) at ``fraction`` of that time past its staging directory, provably mid-run: the kill lands at the
    same share of the work on a fast machine and a slow one.  Returns the twin's exit status."""
    code, took = _timed_sync(env, twin, upstream)
    process = _sync(env, location, upstream)
    kill_group_during(process, fraction * took, _new_staging(location))
    return code


def _history_is_verified(location: Path, verified: set[str]) -> bool:
    return not (location / ".git").exists() or head(location) in verified


@pytest.mark.parametrize("fraction", [0.05, 0.25, 0.5])
def test_sigkill_during_first_clone_and_update(env: GkeysEnv, tmp_path: Path, fraction: float) -> None:
    """Each kill lands at a share of the work (past the staging directory) that a twin location's whole sync of
    the same step took just before: 100 commits to clone, 120 to fetch, then 1.  A fixed delay missed on a faster
    machine (the verification got faster; the run ended before the kill); the share holds on any machine, and a
    run that ends first still fails (``kill_group_during``)."""
    install_devs(env, ("alice", "bob"))
    upstream = build(tmp_path / "upstream", env.keys, ["alice", "bob"] * 50)
    first_tip = upstream.head()
    location = tmp_path / "repos" / "gentoo"
    twin = tmp_path / "twins" / "gentoo"

    assert _killed_sync(env, location, twin, upstream.path, fraction) == 0
    assert _history_is_verified(location, {first_tip})
    assert _sync(env, location, upstream.path).wait(timeout=120) == 0
    assert head(location) == first_tip == head(twin)
    assert not list(location.parent.glob(".gentoo.gkeys-*"))  # a killed clone's staging does not stay

    for _ in range(120):
        upstream.commit("alice")
    upstream.commit("mallory")  # unpinned: the update must never land
    bad_tip = upstream.head()
    assert _killed_sync(env, location, twin, upstream.path, fraction) == 1  # the twin refuses mallory's commit
    assert head(location) == first_tip  # killed or refused: still at the last verified revision
    assert _sync(env, location, upstream.path).wait(timeout=120) == 1  # mallory's commit is refused
    assert head(location) == first_tip != bad_tip

    upstream.force(upstream.commit("alice", parents=[first_tip]))  # upstream drops mallory's line
    good_tip = upstream.head()
    assert _killed_sync(env, location, twin, upstream.path, fraction) == 0
    assert head(location) in {first_tip, good_tip}
    assert _sync(env, location, upstream.path).wait(timeout=120) == 0
    assert head(location) == good_tip
