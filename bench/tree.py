#!/usr/bin/env python3
"""Benchmark: verify >= 2,000 signed commits from ~50 developer keys (``verify-tree --policy all``).

Compares, in the same run, over the same commits and the same GnuPG keyring:
  * ``gkeys verify-tree --policy all`` (one ``git cat-file --batch``, a few ``gpg --verify --multifile``
    processes in parallel, pinning decided per commit), and
  * ``git log --format=%G?`` over the same range (git runs one gpg process per commit).

The repository is built quickly: commit objects are made in Python (all commits share one tree),
signed by ``--keys`` ed25519 keys round-robin on ``--branches`` branches in parallel, joined by one
signed octopus merge, and written as loose objects.

Rounds alternate A and B (``--rounds``, default 3); the ratio of each round and their median are printed.
``--work DIR`` keeps the keys and repository in DIR and reuses them on the next run.

Usage: python3 bench/tree.py [--commits 2000] [--keys 50] [--branches 4] [--rounds 3] [--work DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gkeys_portage.cli.main import main as gkeys_main  # noqa: E402
from gkeys_portage.core.gpg import GnuPG  # noqa: E402
from gkeys_portage.core.seeds import Seed, dump_seeds  # noqa: E402
from gkeys_portage.core.types import Nick  # noqa: E402
from gkeys_portage.demo.world import DemoKey, KeyFactory  # noqa: E402
from gkeys_portage.verify.gitobjects import git_environment  # noqa: E402


def git(repo: Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    """Run git in ``repo`` with the explicit environment."""
    return subprocess.run(["git", "-C", str(repo), "-c", f"safe.directory={repo}", *args], input=stdin,
                          capture_output=True, check=True, env=env or git_environment()).stdout


def write_object(repo: Path, raw: bytes) -> str:
    """Store a commit as a loose object; return its hash."""
    data = b"commit %d\0" % len(raw) + raw
    name = hashlib.sha1(data).hexdigest()
    path = repo / ".git" / "objects" / name[:2] / name[2:]
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(zlib.compress(data, 1))
    return name


def signed_commit(gpg: GnuPG, key: DemoKey, nick: str, tree: str, parents: list[str], stamp: int,
                  message: str, scratch: Path) -> bytes:
    """A raw signed commit object."""
    who = f"{nick} <{nick}@gentoo.org> {stamp} +0000"
    headers = [f"tree {tree}", *[f"parent {p}" for p in parents], f"author {who}", f"committer {who}"]
    payload = ("\n".join(headers) + "\n\n" + message + "\n").encode()
    scratch.write_bytes(payload)
    signature = gpg.sign(scratch, key.fingerprint).decode().rstrip("\n")
    return ("\n".join([*headers, "gpgsig " + "\n ".join(signature.split("\n"))]) + "\n\n" + message + "\n").encode()


def build_repo(repo: Path, factory: KeyFactory, nicks: list[str], commits: int, branches: int) -> str:
    """``commits`` signed commits on ``branches`` parallel branches plus one signed merge; return the tip."""
    git(repo.parent, "init", "-q", "-b", "master", str(repo))
    tree = git(repo, "mktree", stdin=b"").decode().strip()
    start = int(time.time()) - commits - 10

    def branch(index: int) -> str:
        gpg = GnuPG(factory.home)
        parent: list[str] = []
        scratch = repo.parent / f"payload-{index}"
        for i in range(index, commits, branches):
            nick = nicks[i % len(nicks)]
            raw = signed_commit(gpg, factory.keys[nick], nick, tree, parent, start + i, f"commit {i}", scratch)
            parent = [write_object(repo, raw)]
        return parent[0]

    with ThreadPoolExecutor(max_workers=branches) as pool:
        tips = list(pool.map(branch, range(branches)))
    merge = signed_commit(GnuPG(factory.home), factory.keys[nicks[0]], nicks[0], tree, tips, start + commits,
                          "octopus merge", repo.parent / "payload-merge")
    tip = write_object(repo, merge)
    git(repo, "update-ref", "refs/heads/master", tip)
    return tip


def cpu_seconds() -> float:
    """CPU time of this process and its waited-for children so far (user + system)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def prepare(work: Path, keys: int, commits: int, branches: int) -> tuple[Path, Path, Path, str]:
    """Keys, seeds, keyring and the repository under ``work`` (reused if already built there)."""
    state = work / "state"
    repo = work / "repo"
    home = state / "keyrings" / "gentoo-devs"
    config = work / "gkeys.conf"
    if (work / "built").exists():
        return config, home, repo, (work / "built").read_text().strip()
    print(f"generating {keys} ed25519 keys ...", flush=True)
    factory = KeyFactory(work / "secret")
    nicks = [f"dev{i:02d}" for i in range(keys)]
    made = [factory.create(n) for n in nicks]
    (state / "seeds").mkdir(parents=True)
    seeds = {Nick(n): Seed(Nick(n), k.name, n, [k.fingerprint], [k.fingerprint, k.signing_subkey], [k.uid])
             for n, k in zip(nicks, made, strict=True)}
    (state / "seeds" / "gentoo-devs.seeds").write_bytes(dump_seeds(seeds))
    GnuPG(home).import_keys(factory.public(*nicks))
    config.write_text(f"[base]\ngkeysdir = {state}\n")
    print(f"building {commits} signed commits (+1 merge) on {branches} branches ...", flush=True)
    started = time.perf_counter()
    tip = build_repo(repo, factory, nicks, commits, branches)
    factory.close()
    print(f"  built in {time.perf_counter() - started:.1f} s", flush=True)
    (work / "built").write_text(tip + "\n")
    return config, home, repo, tip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--branches", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds, alternating (medians reported)")
    parser.add_argument("--work", type=Path, help="build (or reuse) the keys and repository here; kept")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="gkeys-bench-tree-"))
    work.mkdir(parents=True, exist_ok=True)
    config, home, repo, tip = prepare(work, args.keys, args.commits, args.branches)
    total = int(git(repo, "rev-list", "--count", tip))
    env = {**git_environment(), "GNUPGHOME": str(home)}
    ours: list[float] = []
    baseline: list[float] = []
    cpu_ours: list[float] = []
    cpu_baseline: list[float] = []
    for round_ in range(args.rounds):
        print(f"round {round_ + 1}/{args.rounds}: gkeys verify-tree --policy all ...", flush=True)
        started, cpu = time.perf_counter(), cpu_seconds()
        status = gkeys_main(["-c", str(config), "-q", "verify-tree", str(repo), "--policy", "all", "--no-record"])
        ours.append(time.perf_counter() - started)
        cpu_ours.append(cpu_seconds() - cpu)
        assert status == 0, status
        print(f"round {round_ + 1}/{args.rounds}: git log --format=%G? (one gpg per commit) ...", flush=True)
        started, cpu = time.perf_counter(), cpu_seconds()
        marks = git(repo, "-c", "log.showSignature=false", "log", "--format=%G?", tip, env=env).decode().split()
        baseline.append(time.perf_counter() - started)
        cpu_baseline.append(cpu_seconds() - cpu)
        good = sum(1 for m in marks if m in ("G", "U"))
        assert good == total, (good, total, sorted(set(marks)))
    ratios = sorted(b / o for b, o in zip(baseline, ours, strict=True))
    mine, theirs = statistics.median(ours), statistics.median(baseline)
    print(f"\ncommits: {total} signed by {args.keys} keys; cpus: {os.cpu_count()}; rounds: {args.rounds}")
    print(f"gkeys verify-tree --policy all: median {mine:6.2f} s  ({total / mine:7.0f} commits/s)")
    print(f"git log --format=%G?:           median {theirs:6.2f} s  ({total / theirs:7.0f} commits/s)")
    print(f"ratio per round: {', '.join(f'{r:.1f}x' for r in ratios)}; median {statistics.median(ratios):.1f}x")
    print(f"CPU (this process + children): gkeys median {statistics.median(cpu_ours):.2f} s "
          f"({1000 * statistics.median(cpu_ours) / total:.2f} ms/commit), git log median "
          f"{statistics.median(cpu_baseline):.2f} s ({1000 * statistics.median(cpu_baseline) / total:.2f} ms/commit); "
          f"CPU ratio {statistics.median(cpu_baseline) / statistics.median(cpu_ours):.1f}x "
          "(independent of other load; wall time on 2 cores can at best halve gkeys' CPU)")
    if args.work is None:
        subprocess.run(["rm", "-rf", str(work)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
