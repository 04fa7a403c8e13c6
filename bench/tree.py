#!/usr/bin/env python3
"""Benchmark: verify >= 2,000 signed commits from ~50 developer keys (``verify-tree --policy all``).

Compares, in the same run, over the same commits and the same GnuPG keyring:
  * ``gkeys verify-tree --policy all``, run as a command (Python start-up and imports included): one
    ``git cat-file --batch``, a few ``gpg --verify --multifile`` processes in parallel, pinning decided
    per commit), and
  * ``git log --format=%G?`` over the same range (git runs one gpg process per commit).

Then it measures where gkeys' time goes (one in-process run, phase by phase) and GnuPG's floor: the same
signatures handed to ``gpg --verify --multifile`` directly, one process per core, nothing else.

The repository is built quickly: commit objects are made in Python (all commits share one tree),
signed by ``--keys`` keys (``--algo``: ed25519, rsa2048, rsa4096, or a mix alternating the two, as Gentoo's
developers have both) round-robin on ``--branches`` branches in parallel, joined by one signed octopus
merge, written as loose objects and then packed (as a clone is).

Rounds alternate A and B (``--rounds``, default 3); the ratio of each round and their median are printed.
``--work DIR`` keeps the keys and repository in DIR and reuses them on the next run.

Usage: python3 bench/tree.py [--commits 2000] [--keys 50] [--algo ed25519|rsa2048|rsa4096|mix] [--branches 4]
                             [--rounds 3] [--work DIR] [--gpg PATH]
  --gpg: the OpenPGP engine of both sides (gkeys' $GKEYS_GPG, git's gpg.program, the floor's gpg); keys
         and commits are made with gpg from PATH.  An engine without --multifile verdicts (gpg-sq) gets a
         floor of one ``gpg --verify`` per signature, one per core at once, as gkeys' fallback does.
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

from bench._engine import add_option, describe, git_options, multifile_verdicts, select  # noqa: E402
from gkeys_portage.core.config import load_config  # noqa: E402
from gkeys_portage.core.types import Nick  # noqa: E402
from gkeys_portage.demo.world import DemoKey, KeyFactory  # noqa: E402
from gkeys_portage.keys.context import Gkeys  # noqa: E402
from gkeys_portage.keys.seeds import Seed, dump_seeds  # noqa: E402
from gkeys_portage.openpgp.gnupg import GnuPG  # noqa: E402
from gkeys_portage.openpgp.packets import detached_signature_packets  # noqa: E402
from gkeys_portage.openpgp.process import BASE_OPTIONS, minimal_environment, selected_program
from gkeys_portage.verify.git.objects import git_environment  # noqa: E402
from gkeys_portage.verify.git.revisions import Revisions  # noqa: E402
from gkeys_portage.verify.git.tree import TreeVerifier, open_repo  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ALGORITHMS = {"ed25519": ("ed25519",), "rsa2048": ("rsa2048",), "rsa4096": ("rsa4096",),
              "mix": ("ed25519", "rsa4096")}


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
    git(repo, "repack", "-adq")  # one packfile, as a real clone has
    git(repo, "prune-packed")
    return tip


def cpu_seconds() -> float:
    """CPU time of this process and its waited-for children so far (user + system)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def prepare(work: Path, keys: int, commits: int, branches: int, algo: str) -> tuple[Path, Path, Path, str]:
    """Keys, seeds, keyring and the repository under ``work`` (reused if already built there)."""
    state = work / "state"
    repo = work / "repo"
    home = state / "keyrings" / "gentoo-devs"
    config = work / "gkeys.conf"
    if (work / "built").exists():
        built_algo = (work / "algo").read_text().strip() if (work / "algo").exists() else "ed25519"
        if built_algo != algo:
            raise SystemExit(f"{work} holds {built_algo} keys, not {algo}: use another --work")
        return config, home, repo, (work / "built").read_text().strip()
    kinds = ALGORITHMS[algo]
    print(f"generating {keys} {algo} keys ...", flush=True)
    factory = KeyFactory(work / "secret")
    nicks = [f"dev{i:02d}" for i in range(keys)]
    made = [factory.create(n, algorithm=kinds[i % len(kinds)]) for i, n in enumerate(nicks)]
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
    (work / "algo").write_text(algo + "\n")
    return config, home, repo, tip


def gkeys_command(config: Path, repo: Path) -> list[str]:
    """``gkeys verify-tree --policy all`` as a user runs it: a new Python process (start-up included)."""
    return [sys.executable, "-m", "gkeys_portage.cli.main", "-c", str(config), "-q", "verify-tree", str(repo),
            "--policy", "all", "--no-record"]


def timed(command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, float, bytes]:
    """Run ``command``; its wall time, its CPU time (with its children) and its output."""
    started, cpu = time.perf_counter(), cpu_seconds()
    done = subprocess.run(command, capture_output=True, env=env, cwd=cwd, check=False)
    wall, used = time.perf_counter() - started, cpu_seconds() - cpu
    if done.returncode:
        raise SystemExit(f"{command[:3]} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return wall, used, done.stdout


def phases(config: Path, repo: Path, tip: str, env: dict[str, str]) -> dict[str, float]:
    """One in-process run of verify-tree, phase by phase (wall seconds), plus the Python start-up."""
    times: dict[str, float] = {}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import gkeys_portage.cli.main"], check=True, cwd=ROOT, env=env)
    times["start-up and imports"] = time.perf_counter() - started
    started = time.perf_counter()
    verifier = TreeVerifier(Gkeys(load_config(config, None)))
    verifier.verifiers[0].keys  # noqa: B018 - the keyring listing
    times["config, seeds, key listing"] = time.perf_counter() - started
    started = time.perf_counter()
    git_repo = open_repo(repo)
    hashes = Revisions(git_repo, tip)
    times["git rev-list"] = time.perf_counter() - started
    started = time.perf_counter()
    report = verifier.verify(git_repo, hashes, tip=tip, base=None)
    times["read, write, gpg, judge (pipelined)"] = time.perf_counter() - started
    assert report.ok and report.checked == len(hashes)
    return times


def gpg_floor(home: Path, repo: Path, tip: str, scratch: Path) -> tuple[float, float, int]:
    """GnuPG alone: every commit's signature and payload written once, then ``gpg --verify --multifile``
    over them, one process per core at once.  Wall time, CPU time and signature count."""
    git_repo = open_repo(repo)
    hashes = git_repo.rev_list(tip)
    commits = git_repo.read_commits(hashes)
    names = []
    for index, commit in enumerate(commits.values()):
        (scratch / str(index)).write_bytes(commit.payload)
        (scratch / f"{index}.sig").write_bytes(detached_signature_packets(commit.signature or b""))
        names.append(f"{index}.sig")
    cores = os.cpu_count() or 1
    command = [selected_program(), "--homedir", str(home), *BASE_OPTIONS, "--status-fd", "1", "--verify"]
    multifile = multifile_verdicts(selected_program())
    outputs = [scratch / f"status-{i}" for i in range(cores)]  # files, not pipes: no gpg waits for a reader

    def one_core(i: int) -> None:
        """This core's share: one --multifile process, or (without it) one --verify per signature."""
        with open(outputs[i], "wb") as status:
            calls = [["--multifile", *names[i::cores]]] if multifile else [[n, n[:-4]] for n in names[i::cores]]
            for call in calls:
                subprocess.run([*command, *call], cwd=scratch, stdout=status, stderr=subprocess.DEVNULL,
                               env=minimal_environment(home), check=False)

    started, cpu = time.perf_counter(), cpu_seconds()
    with ThreadPoolExecutor(max_workers=cores) as pool:
        list(pool.map(one_core, range(cores)))
    wall, used = time.perf_counter() - started, cpu_seconds() - cpu
    good = sum(path.read_bytes().count(b"[GNUPG:] GOODSIG ") for path in outputs)
    assert good == len(names), (good, len(names))
    return wall, used, len(names)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--algo", choices=sorted(ALGORITHMS), default="ed25519",
                        help="key algorithm of the developer keys (mix: alternate ed25519 and rsa4096)")
    parser.add_argument("--branches", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds, alternating (medians reported)")
    parser.add_argument("--work", type=Path, help="build (or reuse) the keys and repository here; kept")
    add_option(parser)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="gkeys-bench-tree-"))
    work.mkdir(parents=True, exist_ok=True)
    config, home, repo, tip = prepare(work, args.keys, args.commits, args.branches, args.algo)
    total = int(git(repo, "rev-list", "--count", tip))
    program = select(args.gpg)  # after the keys and commits: both sides verify with it
    print(describe(program), flush=True)
    env = {**git_environment(), "GNUPGHOME": str(home)}
    own_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # byte-compiled, as installed
    own_env.update(PYTHONPATH=str(ROOT), PYTHONPYCACHEPREFIX=str(work / "pycache"))  # the source tree stays clean
    ours: list[float] = []
    baseline: list[float] = []
    cpu_ours: list[float] = []
    cpu_baseline: list[float] = []
    floor: list[float] = []
    cpu_floor: list[float] = []
    for round_ in range(args.rounds):
        print(f"round {round_ + 1}/{args.rounds}: gkeys verify-tree --policy all ...", flush=True)
        wall, used, _ = timed(gkeys_command(config, repo), env=own_env, cwd=ROOT)
        ours.append(wall)
        cpu_ours.append(used)
        print(f"round {round_ + 1}/{args.rounds}: git log --format=%G? (one gpg per commit) ...", flush=True)
        wall, used, out = timed(["git", "-C", str(repo), "-c", f"safe.directory={repo}", *git_options(program), "-c",
                                 "log.showSignature=false", "log", "--format=%G?", tip], env=env)
        baseline.append(wall)
        cpu_baseline.append(used)
        good = sum(1 for m in out.decode().split() if m in ("G", "U"))
        assert good == total, (good, total)
        print(f"round {round_ + 1}/{args.rounds}: gpg alone, one process per core (the floor) ...", flush=True)
        with tempfile.TemporaryDirectory(prefix="gkeys-bench-floor-", dir=work) as scratch:
            wall, used, _ = gpg_floor(home, repo, tip, Path(scratch))
        floor.append(wall)
        cpu_floor.append(used)
    breakdown = phases(config, repo, tip, own_env)
    ratios = sorted(b / o for b, o in zip(baseline, ours, strict=True))
    mine, theirs, gpg_only = statistics.median(ours), statistics.median(baseline), statistics.median(floor)
    per_commit = {name: 1000 * statistics.median(values) / total
                  for name, values in (("gkeys", cpu_ours), ("git log", cpu_baseline), ("gpg alone", cpu_floor))}
    print(f"\ncommits: {total} signed by {args.keys} {args.algo} keys; cpus: {os.cpu_count()}; rounds: {args.rounds}; "
          f"load {os.getloadavg()[0]:.2f}")
    print(describe(program))
    print(f"gkeys verify-tree --policy all (a command): median {mine:6.2f} s  ({total / mine:7.0f} commits/s)")
    print(f"git log --format=%G?:                       median {theirs:6.2f} s  ({total / theirs:7.0f} commits/s)")
    print(f"gpg alone, one process per core (floor):    median {gpg_only:6.2f} s  ({total / gpg_only:7.0f} commits/s)")
    print(f"ratio per round: {', '.join(f'{r:.1f}x' for r in ratios)}; median {statistics.median(ratios):.1f}x; "
          f"git log / floor {theirs / gpg_only:.1f}x (the most any gpg-based verifier gets here); "
          f"gkeys / floor {mine / gpg_only:.2f}x")
    print("CPU per commit (process + children): " + ", ".join(f"{k} {v:.2f} ms" for k, v in per_commit.items()))
    print("where gkeys' time goes (one in-process run, wall): "
          + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in breakdown.items()))
    if args.work is None:
        subprocess.run(["rm", "-rf", str(work)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
