#!/usr/bin/env python3
"""Benchmark: a ``sync-type = gkeys`` git update (staging copy, verify, checkout, exchange) vs plain git.

A tree of ``--files`` files (in directories of 10, as ``::gentoo``'s packages) signed by one developer key is
cloned twice from a local upstream: once by gkeys (``clone_verified``), once by ``git clone``.  Then, in
alternating rounds (``--rounds``), the upstream gets one signed commit changing ``--changed`` files and both
copies are brought to it: gkeys with ``update_verified`` (in-process, as inside ``emerge --sync``: the live
``.git`` copied beside the tree with its objects hard-linked, the fetch and the verification there, the live
work tree hard-linked in, ``reset --hard`` + ``clean -ffdx`` there, checked clean, exchanged, the old tree
moved to the trash and removed by a detached child: the bench waits for that child before the next
timed step and reports its time apart, as "background removal") and plain git with ``git fetch`` +
``git reset --hard`` in place (what Portage's git module runs for a repository that is not volatile).
A round with nothing new upstream follows each (gkeys: copy, fetch, verify the top again, a status of the
live tree; git: ``fetch`` + ``reset --hard``).

Wall and CPU seconds (this process and the children it waited for) are printed per step; on a shared machine the
CPU figures are the load-independent ones.

Usage: python3 bench/gitsync.py [--files 50000] [--changed 20] [--rounds 5] [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gkeys_portage.core.config import load_config  # noqa: E402
from gkeys_portage.core.state import Layout  # noqa: E402
from gkeys_portage.core.fs.trash import trash_path  # noqa: E402
from gkeys_portage.core.types import Category, Nick  # noqa: E402
from gkeys_portage.demo.tree_repo import RepoBuilder  # noqa: E402
from gkeys_portage.demo.world import KeyFactory  # noqa: E402
from gkeys_portage.keys.context import Gkeys  # noqa: E402
from gkeys_portage.keys.keyring import Keyring  # noqa: E402
from gkeys_portage.keys.seeds import Seed, SeedStore  # noqa: E402
from gkeys_portage.portage.treesync import SyncRequest, clone_verified, update_verified  # noqa: E402
from gkeys_portage.verify.git.objects import git_environment  # noqa: E402
from gkeys_portage.verify.git.tree import TreeOptions  # noqa: E402


def setup(work: Path) -> tuple[Gkeys, KeyFactory]:
    """One developer key, pinned in gentoo-devs and installed; the context and the signing factory."""
    factory = KeyFactory(work / "secret")
    key = factory.create(Nick("dev000"))
    layout = Layout(work / "state").ensure()
    SeedStore(layout).save(Category("gentoo-devs"), {
        Nick("dev000"): Seed(Nick("dev000"), key.name, Nick("dev000"), [key.fingerprint], [key.fingerprint],
                             [key.uid])})
    with Keyring(layout, Category("gentoo-devs")).update() as staging:
        staging.import_keys(factory.gpg.export_keys([key.fingerprint]))
    config = work / "gkeys.conf"
    config.write_text(f"[base]\ngkeysdir = {layout.root}\n")
    return Gkeys(load_config(config)), factory


def cpu_seconds() -> float:
    """CPU seconds of this process and its waited-for children (user + system)."""
    now = os.times()
    return now.user + now.system + now.children_user + now.children_system


def timed(action: Callable[[], object], cpu: list[float] | None = None) -> float:
    """Wall seconds of one call; its CPU seconds (children included) appended to ``cpu``."""
    start, used = time.perf_counter(), cpu_seconds()
    action()
    if cpu is not None:
        cpu.append(cpu_seconds() - used)
    return time.perf_counter() - start


def git(path: Path, *args: str) -> None:
    """Plain git in ``path`` (the explicit environment), failing loudly."""
    subprocess.run(["git", "-C", str(path), "-c", f"safe.directory={path}", *args], env=git_environment(),
                   check=True, capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=50000)
    parser.add_argument("--changed", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", type=Path)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="gkeys-bench-gitsync-"))
    ctx, factory = setup(work)
    up = RepoBuilder(work / "upstream", factory)
    print(f"building a tree of {args.files} files ...", flush=True)
    up.commit("dev000", files={f"cat-{i // 1000}/pkg-{i // 10}/file{i}": f"{i}\n" for i in range(args.files)})
    live, plain = work / "repos" / "gentoo", work / "plain" / "gentoo"
    request = SyncRequest(live, f"file://{up.path}", TreeOptions(policy="all", jobs=1), git_env=git_environment())

    def log(level: str, text: str) -> None:
        if level == "error":
            print(text, file=sys.stderr)

    assert clone_verified(ctx, request, log).ok
    plain.parent.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", f"file://{up.path}", str(plain)], env=git_environment(), check=True)

    def plain_update() -> None:
        git(plain, "fetch", "-q", "origin")
        git(plain, "reset", "-q", "--hard", "refs/remotes/origin/master")

    def gkeys_update() -> None:
        assert update_verified(ctx, request, log).ok

    def wait_for_trash() -> float:
        """Seconds until the detached removal of the old tree is done (not part of the update's time)."""
        start = time.perf_counter()
        while trash_path(live).exists():
            time.sleep(0.05)
        return time.perf_counter() - start

    results: dict[str, list[float]] = {"gkeys update": [], "git update": [], "gkeys no-change": [],
                                       "git no-change": [], "background removal": []}
    cpu: dict[str, list[float]] = {key: [] for key in results}
    for round_ in range(args.rounds):
        up.commit("dev000", files={f"cat-0/pkg-{i}/file{i * 10}": f"{i} round {round_}\n"
                                   for i in range(args.changed)})
        order = [("gkeys", gkeys_update), ("git", plain_update)]
        for name, action in order if round_ % 2 == 0 else order[::-1]:
            results[f"{name} update"].append(timed(action, cpu[f"{name} update"]))
            if name == "gkeys":
                results["background removal"].append(wait_for_trash())
        for name, action in order if round_ % 2 == 0 else order[::-1]:
            results[f"{name} no-change"].append(timed(action, cpu[f"{name} no-change"]))
        steps = [f"{k} {v[-1]:.2f} s" + (f" ({cpu[k][-1]:.2f} CPU-s)" if cpu[k] else "") for k, v in results.items()]
        print(f"round {round_ + 1}: " + ", ".join(steps), flush=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    medians = {key: statistics.median(values) for key, values in results.items()}
    print(f"background removal of the old tree (after the update returned): {medians['background removal']:.2f} s")
    for kind in ("update", "no-change"):
        ours, theirs = medians[f"gkeys {kind}"], medians[f"git {kind}"]
        ours_cpu, theirs_cpu = statistics.median(cpu[f"gkeys {kind}"]), statistics.median(cpu[f"git {kind}"])
        print(f"{kind}: gkeys {ours:.2f} s vs plain git {theirs:.2f} s: +{ours - theirs:.2f} s "
              f"({ours / theirs:.1f}x), medians of {args.rounds}; CPU (children included) {ours_cpu:.2f} s vs "
              f"{theirs_cpu:.2f} s ({ours_cpu / theirs_cpu:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
