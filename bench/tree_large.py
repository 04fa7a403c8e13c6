#!/usr/bin/env python3
"""Benchmark: ``verify-tree --policy all`` over a large real-world shape (issue 18 goal 4).

The shape (``bench/tree_shape.py``): 20,000 signed commits with one root, ~560 two-parent merges and
octopus merges, 200 ed25519 developer keys (certify-only primary + signing subkey), some expired since
they signed, some whose signing subkey was rotated; packfiles, as a clone has.  Built once into
``--work DIR`` (about 3 minutes on 2 cores) and reused on later runs.

Measured, each in a child process so its peak RSS is its own:
  * ``gkeys verify-tree --policy all``: wall, CPU (process + children), peak RSS of the gkeys process
    and of its largest child (git or gpg), commits/s;
  * ``git log --format=%G?`` (one gpg per commit) over the newest ``--sample`` commits of the same
    repository and keyring, extrapolated to the whole history (said so in the output);
  * then ``--new`` commits (with a merge) are added and ``verify-tree`` runs again: the count it
    checked and its wall time.

Rounds alternate A (gkeys) and B (git log) (``--rounds``); ratios are from the same run.

Usage: python3 bench/tree_large.py [--commits 20000] [--keys 200] [--work DIR] [--sample 2000] [--rounds 1]
                                   [--gpg PATH]
  --gpg: the OpenPGP engine of gkeys ($GKEYS_GPG) and of git log (gpg.program); the shape is built with gpg.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tree import git  # noqa: E402  (bench/tree.py)
from tree_shape import Grower, Shape, build_shape  # noqa: E402

from bench._engine import add_option, describe, git_options, select  # noqa: E402
from gkeys_portage.openpgp.gnupg import GnuPG  # noqa: E402
from gkeys_portage.verify.git.objects import git_environment  # noqa: E402

PROJECT = Path(__file__).resolve().parent.parent


#: The measured child: gkeys in a bare interpreter (nothing of this benchmark imported), then its own
#: peak RSS, wall and CPU as JSON into argv[1].  RUSAGE_CHILDREN's ru_maxrss is no use for the children:
#: a child forked from this process reports the parent's pages it shared before exec, so a thread polls
#: the high-water mark (VmHWM) of each running child program instead, every 20 ms (a lower bound).
MEASURE = """\
import json, os, resource, sys, threading, time
from gkeys_portage.cli.main import main
peak, done = {}, threading.Event()
def poll():
    while not done.wait(0.02):
        for task in os.listdir("/proc/self/task"):
            try:
                kids = open(f"/proc/self/task/{task}/children").read().split()
            except OSError:
                continue
            for pid in kids:
                try:
                    name = open(f"/proc/{pid}/comm").read().strip()
                    status = open(f"/proc/{pid}/status").read()
                except OSError:
                    continue
                hwm = [int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")]
                if hwm and not name.startswith("python"):  # a child not yet exec()ed: the parent's pages
                    peak[name] = max(peak.get(name, 0), hwm[0])
threading.Thread(target=poll, daemon=True).start()
started = time.perf_counter()
status = main(sys.argv[2:])
wall = time.perf_counter() - started
done.set()
own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as out:
    json.dump({"status": status, "wall": wall,
               "cpu": own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime,
               "rss_mib": own.ru_maxrss / 1024,
               "child_rss_mib": max(peak.values(), default=0) / 1024,
               "child": max(peak, key=peak.__getitem__, default="-")}, out)
"""


def gkeys(shape: Shape, *args: str) -> tuple[dict[str, Any], str]:
    """``gkeys -c CONFIG args`` in a measured child process: (measurements, stdout)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # byte-compiled, as installed
        env.update(PYTHONPATH=str(PROJECT), PYTHONPYCACHEPREFIX=str(shape.config.parent / "pycache"))
        run = subprocess.run([sys.executable, "-c", MEASURE, out.name, "-c", str(shape.config), *args],
                             capture_output=True, check=False, env=env)
        text = Path(out.name).read_text()
    if run.returncode != 0 or not text:
        raise SystemExit(f"gkeys failed ({run.returncode}): {run.stderr.decode(errors='replace')[-2000:]}")
    return json.loads(text), run.stdout.decode()


def forget_record(shape: Shape) -> None:
    """Drop the tree-revisions record, so the next run is a first run over the whole history."""
    (shape.work / "state" / "state" / "tree-revisions.json").unlink(missing_ok=True)


def git_log(shape: Shape, tip: str, sample: int, program: str) -> tuple[float, float, int]:
    """``git log --format=%G?`` over the newest ``sample`` commits: (wall, CPU, good marks)."""
    env = {**git_environment(), "GNUPGHOME": str(shape.keyring)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    marks = git(shape.repo, *git_options(program), "-c", "log.showSignature=false", "log", "--format=%G?", "-n",
                str(sample), tip, env=env).decode().split()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    good = sum(1 for m in marks if m in ("G", "U", "Y"))  # Y: good signature by a key expired since
    assert good == len(marks) == sample, (good, len(marks), sorted(set(marks)))
    return wall, cpu, good


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=20000)
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--expired", type=int, default=10, help="keys that expire within the history")
    parser.add_argument("--rotated", type=int, default=10, help="keys whose signing subkey is rotated")
    parser.add_argument("--sample", type=int, default=2000, help="commits timed with git log (extrapolated)")
    parser.add_argument("--new", type=int, default=100, help="commits added for the incremental run")
    parser.add_argument("--rounds", type=int, default=1, help="A/B rounds, alternating (medians reported)")
    parser.add_argument("--work", type=Path, help="build (or reuse) the shape here; kept")
    add_option(parser)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="gkeys-bench-large-"))
    work.mkdir(parents=True, exist_ok=True)
    shape = Shape.load(work)
    if shape is None:
        shape, factory = build_shape(work, commits=args.commits, keys=args.keys, expired=args.expired,
                                     rotated=args.rotated, progress=lambda text: print(text, flush=True))
        factory.close()
    tip = shape.tip
    program = select(args.gpg)  # after the build: gkeys and git log verify with it
    print(describe(program), flush=True)
    git(shape.repo, "update-ref", "refs/heads/master", tip)  # undo an earlier run's incremental commits
    total = int(git(shape.repo, "rev-list", "--count", tip))
    octopus = int(git(shape.repo, "rev-list", "--count", "--min-parents=3", tip))
    merges = int(git(shape.repo, "rev-list", "--count", "--merges", tip))
    packs = len(list((shape.repo / ".git" / "objects" / "pack").glob("*.pack")))
    sample = min(args.sample, total)
    kinds = shape.kinds()
    print(f"shape: {total} commits ({merges} merges, {octopus} octopus), {len(shape.keys)} keys "
          f"({kinds['expired']} expired since signing, {kinds['rotated']} with a rotated signing subkey), "
          f"{packs} pack(s); built in {shape.build_seconds:.0f} s; cpus: {os.cpu_count()}", flush=True)
    ours: list[dict[str, Any]] = []
    theirs: list[tuple[float, float, int]] = []
    for round_ in range(args.rounds):
        print(f"round {round_ + 1}/{args.rounds}: gkeys verify-tree --policy all ...", flush=True)
        forget_record(shape)
        result, _ = gkeys(shape, "-q", "verify-tree", str(shape.repo), "--policy", "all")
        assert result["status"] == 0, result
        ours.append(result)
        print(f"round {round_ + 1}/{args.rounds}: git log --format=%G? over the newest {sample} ...", flush=True)
        theirs.append(git_log(shape, tip, sample, program))
    wall = statistics.median(r["wall"] for r in ours)
    cpu = statistics.median(r["cpu"] for r in ours)
    rss = max(r["rss_mib"] for r in ours)
    child_rss = max(r["child_rss_mib"] for r in ours)
    child = max(ours, key=lambda r: r["child_rss_mib"])["child"]
    scale = total / sample
    ratios = sorted(t[0] * scale / o["wall"] for t, o in zip(theirs, ours, strict=True))
    cpu_ratios = sorted(t[1] * scale / o["cpu"] for t, o in zip(theirs, ours, strict=True))
    log_wall = statistics.median(t[0] for t in theirs)
    print(f"\ngkeys verify-tree --policy all: {wall:7.1f} s wall, {cpu:7.1f} s CPU, {total / wall:6.0f} commits/s; "
          f"peak RSS {rss:.0f} MiB (gkeys), {child_rss:.0f} MiB (largest child program: {child}, polled); "
          f"rounds {', '.join(format(r['wall'], '.1f') for r in ours)} s")
    print(f"git log --format=%G?: {log_wall:6.1f} s for {sample} commits, extrapolated to {total}: "
          f"{log_wall * scale:7.1f} s ({sample / log_wall:5.0f} commits/s)")
    print(f"ratio (git log extrapolated / gkeys) per round: {', '.join(f'{r:.1f}x' for r in ratios)}; "
          f"median {statistics.median(ratios):.1f}x; CPU ratio median {statistics.median(cpu_ratios):.1f}x")
    print(f"adding {args.new} commits (with a merge) ...", flush=True)
    grown = Grower(shape)
    merges_before = shape.merges
    grown.grow(args.new, 3600)
    GnuPG(shape.secret).close()  # the agent that signed them
    result, out = gkeys(shape, "--json", "verify-tree", str(shape.repo))
    data = json.loads(out)
    assert result["status"] == 0 and data["base"] == tip, (result, data)
    print(f"incremental: {data['checked']} commits checked ({shape.merges - merges_before} merge(s)) "
          f"in {result['wall']:.2f} s wall; peak RSS {result['rss_mib']:.0f} MiB")
    git(shape.repo, "update-ref", "refs/heads/master", tip)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
