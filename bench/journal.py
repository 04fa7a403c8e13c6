#!/usr/bin/env python3
"""The trust journal's cost (issue 38 item 7): time with and without it in the same run, and a year's size.

* ``verify-tree --policy all`` over bench/tree.py's 2,000-commit repository, run as a command, rounds
  alternating ``GKEYS_JOURNAL=off`` and on (wall and CPU medians, and their ratio);
* a no-change rsync sync (bench/rsync.py's ::gentoo-shaped tree served by a real rsync daemon), in process,
  rounds alternating the journal off and on;
* one append on its own (median of 200, fsync included): the cost each journaled sync adds, whatever the noise
  of the two measurements above;
* a simulated year: 365 daily ``::gentoo`` git syncs (``--commits`` a day by ``--signers`` developers), 52 weekly
  key refreshes (``--changed`` keys changed each), a weekly certifier update, 12 seed file updates, a daily
  release-file check; the journal's size at the end, and ``journal verify``'s time over it.

Usage: python3 bench/journal.py [--rounds 5] [--packages 3000] [--work DIR] [--skip-tree] [--skip-rsync]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.rsync import CATEGORY, build_tree  # noqa: E402
from bench.tree import gkeys_command, prepare, timed  # noqa: E402
from gkeys_portage.core import journal  # noqa: E402
from gkeys_portage.core.state import Layout  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _median_pair(label: str, off: list[float], on: list[float]) -> None:
    a, b = statistics.median(off), statistics.median(on)
    print(f"{label}: without {a:7.3f} s, with {b:7.3f} s (medians of {len(off)}): {b / a:.3f}x "
          f"({(b - a) * 1000:+.1f} ms; per round {', '.join(f'{y / x:.3f}' for x, y in zip(off, on, strict=True))})")


def bench_tree(work: Path, rounds: int) -> None:
    """verify-tree --policy all, 2,000 commits, journal off and on alternating."""
    config, _home, repo, _tip = prepare(work / "tree", 50, 2000, 4, "ed25519")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(ROOT), PYTHONPYCACHEPREFIX=str(work / "pycache"))
    walls: dict[str, list[float]] = {"off": [], "on": []}
    cpus: dict[str, list[float]] = {"off": [], "on": []}
    timed(gkeys_command(config, repo), env=env, cwd=ROOT)  # warm the caches and byte-compile once
    for round_ in range(rounds):
        for mode in ("off", "on") if round_ % 2 == 0 else ("on", "off"):
            wall, used, _ = timed(gkeys_command(config, repo), env={**env, "GKEYS_JOURNAL": mode}, cwd=ROOT)
            walls[mode].append(wall)
            cpus[mode].append(used)
    _median_pair("verify-tree --policy all, 2,000 commits (wall)", walls["off"], walls["on"])
    _median_pair("verify-tree --policy all, 2,000 commits (CPU) ", cpus["off"], cpus["on"])
    own_share(config, repo)


def own_share(config: Path, repo: Path) -> None:
    """The journal's own time inside one in-process verify-tree run (what the A/B medians measure under noise):
    the time spent in :func:`journal.record` and :func:`journal.note_config`, against the whole run."""
    import cProfile
    import pstats

    from gkeys_portage.cli.main import main as gkeys

    args = ["-c", str(config), "-q", "verify-tree", str(repo), "--policy", "all", "--no-record"]
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    gkeys(args)
    profile.disable()
    whole = time.perf_counter() - started
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    own = sum(v[3] for (path, _line, name), v in stats.items()
              if path.endswith("core/journal.py") and name in ("record", "note_config"))
    print(f"the journal's own time in one verify-tree run: {own * 1000:.1f} ms of {whole:.2f} s "
          f"({own / whole * 100:.2f} %)")


def bench_rsync(work: Path, rounds: int, packages: int) -> None:
    """A no-change rsync sync, in process, journal off and on alternating."""
    from rsync_helpers import RsyncDaemon

    from gkeys_portage.core.config import load_config
    from gkeys_portage.core.types import Category, Nick
    from gkeys_portage.demo.world import KeyFactory
    from gkeys_portage.keys.context import Gkeys
    from gkeys_portage.keys.seeds import Seed, SeedStore
    from gkeys_portage.portage.rsyncsync import RsyncRequest, sync_rsync

    factory = KeyFactory(work / "secret")
    key = factory.create("infra")
    tree = work / "rsync-tree"
    build_tree(tree, packages)
    subprocess.run(["gemato", "create", "-q", "-p", "ebuild", "-k", key.fingerprint, "-s", "-t", str(tree)],
                   env={"GNUPGHOME": str(work / "secret"), "PATH": "/usr/bin:/bin:" + str(Path(sys.executable).parent)},
                   check=True)
    config = work / "rsync.conf"
    config.write_text(f"[base]\ngkeysdir = {work / 'rsync-state'}\n[purposes]\nrepository = {CATEGORY}/snapshot\n")
    ctx = Gkeys(load_config(config))
    ctx.ensure_layout()
    SeedStore(ctx.layout).save(Category(CATEGORY), {Nick("snapshot"): Seed(
        Nick("snapshot"), key.name, "snapshot", [key.fingerprint], [key.fingerprint], [key.uid])})
    with ctx.keyring(CATEGORY).update() as staging:
        staging.import_keys(factory.public("infra"))
    daemon = RsyncDaemon(work / "rsyncd")
    daemon.serve(tree)
    try:
        request = RsyncRequest(work / "repos" / "gentoo", daemon.url, CATEGORY, quiet=True)

        def sync() -> float:
            started = time.perf_counter()
            if not sync_rsync(ctx, request, lambda level, text: None).ok:
                raise SystemExit("the bench tree did not sync")
            return time.perf_counter() - started

        sync()
        times: dict[str, list[float]] = {"off": [], "on": []}
        spent = _time_journal()
        for round_ in range(rounds):
            for mode in ("off", "on") if round_ % 2 == 0 else ("on", "off"):
                os.environ["GKEYS_JOURNAL"] = mode
                times[mode].append(sync())
        os.environ.pop("GKEYS_JOURNAL", None)
        own, whole = spent[0] / rounds, statistics.median(times["on"])
        print(f"the journal's own time in a no-change sync: {own * 1000:.1f} ms of {whole:.2f} s "
              f"({own / whole * 100:.2f} %)")
    finally:
        daemon.close()
        factory.close()
    _median_pair(f"no-change rsync sync, {packages} packages", times["off"], times["on"])


def _time_journal() -> list[float]:
    """Count the time spent in :func:`journal.record` and :func:`journal.note_config` from now on (the
    outermost call only); returns the running total (a one-item list)."""
    spent = [0.0]
    depth = [0]
    for name in ("record", "note_config"):
        original = getattr(journal, name)

        def timed_call(*args: object, _original: object = original, **kwargs: object) -> object:
            depth[0] += 1
            started = time.perf_counter()
            try:
                return _original(*args, **kwargs)  # type: ignore[operator]
            finally:
                depth[0] -= 1
                if not depth[0]:
                    spent[0] += time.perf_counter() - started

        setattr(journal, name, timed_call)
    return spent


def _fpr(rng: random.Random) -> str:
    return "".join(rng.choice("0123456789ABCDEF") for _ in range(40))


def bench_appends(work: Path) -> None:
    """One append on its own (fsync, head rewrite), the median of 200."""
    layout = Layout(work / "appends")
    rng = random.Random(1)
    data = {"repo": "/var/db/repos/gentoo", "base": "a" * 40, "tip": "b" * 40, "checked": 250,
            "signers": {_fpr(rng): rng.randint(1, 20) for _ in range(60)}, "categories": ["gentoo-devs"]}
    took = []
    for _ in range(200):
        started = time.perf_counter()
        journal.record(layout, "tree-accepted", data)
        took.append(time.perf_counter() - started)
    print(f"one append (tree entry, 60 signers): median {statistics.median(took) * 1000:.2f} ms, "
          f"max {max(took) * 1000:.2f} ms")


def bench_year(work: Path, commits: int, signers: int, changed: int) -> None:
    """A simulated year of daily ::gentoo syncs with weekly refreshes: the journal's size."""
    layout = Layout(work / "year")
    rng = random.Random(38)
    devs = [_fpr(rng) for _ in range(400)]
    start = time.time() - 365 * 86400
    tip = "0" * 40
    for day in range(365):
        journal.clock = lambda day=day: start + day * 86400  # type: ignore[misc]
        today = rng.sample(devs, signers)
        counts: dict[str, int] = {}
        for _ in range(commits):
            who = rng.choice(today)
            counts[who] = counts.get(who, 0) + 1
        base, tip = tip, f"{rng.getrandbits(160):040x}"
        journal.record(layout, "tree-accepted", {"repo": "/var/db/repos/gentoo", "base": base, "tip": tip,
                                                 "checked": commits, "signers": counts,
                                                 "categories": ["gentoo-devs", "gentoo-infra"], "top_category": None})
        journal.record(layout, "media-accepted", {
            "file": "/var/cache/distfiles/stage3-amd64-openrc-20261201T170411Z.tar.xz", "size": 270_000_000,
            "digests": {"sha512": f"{rng.getrandbits(512):0128x}"}, "category": "gentoo", "signatures": [
                {"source": "stage3.tar.xz.DIGESTS", "kind": "clearsigned", "category": "gentoo", "nick": "releng",
                 "fingerprint": devs[0], "signing_key": devs[1], "created": "2026-12-01T17:04:11+00:00"}]})
        if day % 7 == 0:
            keys = [{"nick": f"dev{i}", "fingerprint": f, "change": "refreshed", "revoked": [],
                     "subkeys": [_fpr(rng), _fpr(rng)], "source": "wkd gentoo.org",
                     "sources": ["wkd gentoo.org", "hkps://keys.gentoo.org"]}
                    for i, f in enumerate(rng.sample(devs, changed))]
            journal.record(layout, "keys-changed", {"category": "gentoo-devs", "keys": keys})
            journal.record(layout, "authority-updated", {
                "category": "gentoo-devs", "source": "https://qa-reports.gentoo.org/output/active-devs.gpg",
                "seeds": 400, "changes": {"added": ["newdev"], "updated": [], "removed": []},
                "certifiers": {devs[2]: "rooted"}, "removed_keys": [], "kept": 400, "dropped": []})
        if day % 30 == 0:
            journal.record(layout, "seed-installed", {
                "category": "gentoo", "url": "https://api.gentoo.org/gentoo.seeds",
                "sha256": f"{rng.getrandbits(256):064x}", "signed": start,
                "signer": {"category": "gentoo-infra", "nick": "seeds", "fingerprint": devs[3],
                           "signing_key": devs[4], "created": "2026-12-01T00:00:00+00:00"}})
    journal.clock = time.time
    files = journal.JournalPaths.of(layout).files()
    size = sum(p.stat().st_size for p in files)
    entries = sum(1 for _ in journal.read_entries(layout))
    started = time.perf_counter()
    chain = journal.verify_chain(layout)
    verdict = "ok" if chain.ok else chain.broken
    print(f"a year ({commits} commits/day by {signers} signers, daily release check, weekly refresh of {changed} "
          f"changed keys and certifier update, monthly seed file): {entries} entries, {size / 1024 / 1024:.2f} MiB "
          f"in {len(files)} file(s); journal verify {time.perf_counter() - started:.2f} s ({verdict})")


def main() -> int:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--packages", type=int, default=3000)
    parser.add_argument("--commits", type=int, default=250, help="commits a day in the simulated year")
    parser.add_argument("--signers", type=int, default=60, help="distinct signers a day")
    parser.add_argument("--changed", type=int, default=20, help="keys changed by each weekly refresh")
    parser.add_argument("--work", type=Path, help="keep the repository here (reused by the next run)")
    parser.add_argument("--skip-tree", action="store_true")
    parser.add_argument("--skip-rsync", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gkeys-bench-journal-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        scratch = Path(tmp)
        bench_year(scratch, args.commits, args.signers, args.changed)
        bench_appends(scratch)
        if not args.skip_rsync:
            bench_rsync(scratch, args.rounds, args.packages)
        if not args.skip_tree:
            bench_tree(work, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
