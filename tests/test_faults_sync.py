"""SIGKILL at several points of a verified sync (first clone and update).

Invariant after every kill: the repository location holds either nothing, or a work tree at a
revision whose whole history was verified — never an unverified commit — and the next normal
sync succeeds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROJECT, GkeysEnv
from kill_helpers import kill_group_during
from tree_helpers import build, head, install_devs

SYNC_SCRIPT = """
import sys
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


def _killed_sync(env: GkeysEnv, location: Path, upstream: Path, delay: float) -> None:
    """A sync killed (its whole group) ``delay`` seconds after it made a new staging directory (one a killed run
    left does not count: past start-up, fetching), provably mid-run."""
    before = set(location.parent.glob(f".{location.name}.gkeys-*"))
    process = _sync(env, location, upstream)
    kill_group_during(process, delay, lambda: bool(set(location.parent.glob(f".{location.name}.gkeys-*")) - before))


def _history_is_verified(location: Path, verified: set[str]) -> bool:
    return not (location / ".git").exists() or head(location) in verified


@pytest.mark.parametrize("delay", [0.03, 0.15, 0.3])
def test_sigkill_during_first_clone_and_update(env: GkeysEnv, tmp_path: Path, delay: float) -> None:
    """Each kill lands a fixed time after the sync made its staging directory: 50 commits to clone, 60 to
    fetch, then 1 (each about 0.5 s or more of work past that, on an idle machine), so that each run outlasts its
    kill (checked: ``kill_group_during``)."""
    install_devs(env, ("alice", "bob"))
    upstream = build(tmp_path / "upstream", env.keys, ["alice", "bob"] * 25)
    first_tip = upstream.head()
    location = tmp_path / "repos" / "gentoo"

    _killed_sync(env, location, upstream.path, delay)
    assert _history_is_verified(location, {first_tip})
    assert _sync(env, location, upstream.path).wait(timeout=120) == 0
    assert head(location) == first_tip
    assert not list(location.parent.glob(".gentoo.gkeys-*"))  # a killed clone's staging does not stay

    for _ in range(60):
        upstream.commit("alice")
    upstream.commit("mallory")  # unpinned: the update must never land
    bad_tip = upstream.head()
    _killed_sync(env, location, upstream.path, delay)
    assert head(location) == first_tip  # killed or refused: still at the last verified revision
    assert _sync(env, location, upstream.path).wait(timeout=120) == 1  # mallory's commit is refused
    assert head(location) == first_tip != bad_tip

    upstream.force(upstream.commit("alice", parents=[first_tip]))  # upstream drops mallory's line
    good_tip = upstream.head()
    _killed_sync(env, location, upstream.path, delay / 2)
    assert head(location) in {first_tip, good_tip}
    assert _sync(env, location, upstream.path).wait(timeout=120) == 0
    assert head(location) == good_tip
