#!/usr/bin/env python3
"""Benchmark: what the second opinion (Sequoia confirming GnuPG, issue 34 item 10) costs, with and without it
in the same run, per engine.  Budget: at most 10 % on each of

* ``gkeys verify-tree --policy all`` over ``--commits`` signed commits (bench/tree.py's repository) by ``--keys``
  developer keys of ``--algo`` (ed25519, rsa2048, rsa4096: Gentoo's developers mostly sign with RSA),
* ``gkeys verify-tree --policy all`` over a real GitHub-signed history (``../shared/fixtures/real/github/``:
  pypa/sampleproject, 197 commits, GitHub's RSA-4096 web-flow keys, whose MPIs are normalised for Sequoia),
* ``gkeys verify-media`` of a ``--size-mib`` release file with .asc, .DIGESTS and .sha256,
* an rsync sync that changes nothing (``sync_rsync``, a real ``rsync --daemon``, ``--packages`` packages).

Each command runs alternately with ``[gpg] second-opinion = yes`` and ``= no`` (the same state, the same files),
``--rounds`` times; the medians of wall time and of CPU time (user + system, children included: on a machine
shared with other jobs it is the load-independent measure) are printed with their ratio.

Usage: python3 bench/second_opinion.py [--commits 2000] [--keys 50] [--algo ed25519|rsa2048|rsa4096]
                                       [--size-mib 512] [--packages 3000] [--rounds 5]
                                       [--only tree|github|media|rsync] [--work DIR] [--shared DIR]
                                       [--gpg PATH]
  --work: build (or reuse) the tree's keys and repository in DIR (RSA keys take minutes to make); kept.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "tests"))
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from bench._engine import add_option, describe, select  # noqa: E402
from gkeys_portage.openpgp.sequoia import use_second_opinion  # noqa: E402

OFF = "[gpg]\nsecond-opinion = no\n"


def cpu() -> float:
    """CPU seconds of this process and its finished children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(action: Callable[[], object]) -> tuple[float, float]:
    """(wall, CPU) seconds of ``action``."""
    started, used = time.perf_counter(), cpu()
    action()
    return time.perf_counter() - started, cpu() - used


def compare(label: str, on: Callable[[], object], off: Callable[[], object], rounds: int) -> None:
    """Alternate ``on`` and ``off``; print medians and the ratio on/off."""
    on(), off()  # warm-up (page cache, byte-compiled modules, the engine probe)
    times: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
    for _ in range(rounds):
        times["on"].append(measure(on))
        times["off"].append(measure(off))
    wall = {k: statistics.median(w for w, _ in v) for k, v in times.items()}
    used = {k: statistics.median(c for _, c in v) for k, v in times.items()}
    print(f"{label}: second opinion on {wall['on']:.2f} s wall / {used['on']:.2f} s CPU, off {wall['off']:.2f} s / "
          f"{used['off']:.2f} s (medians of {rounds}): x{wall['on'] / wall['off']:.3f} wall, "
          f"x{used['on'] / used['off']:.3f} CPU", flush=True)


def run(command: list[str], env: dict[str, str]) -> None:
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)


def child_env(work: Path) -> dict[str, str]:
    compiled = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return dict(compiled, PYTHONPYCACHEPREFIX=str(work / "pycache"), PYTHONPATH=str(BENCH.parent))


def with_off(config: Path) -> Path:
    off = config.with_name("gkeys-off.conf")
    off.write_text(config.read_text() + OFF)
    return off


def bench_tree(work: Path, commits: int, keys: int, algo: str, rounds: int, engine: str | None) -> None:
    import tree

    config, _, repo, _ = tree.prepare(work, keys, commits, 4, algo)
    select(engine)  # after the keys were made and imported with gpg from PATH
    env = child_env(work)
    off = with_off(config)
    compare(f"verify-tree --policy all, {commits} commits by {keys} {algo} keys",
            lambda: run(tree.gkeys_command(config, repo), env), lambda: run(tree.gkeys_command(off, repo), env),
            rounds)


#: GitHub's web-flow keys (both are in web-flow.gpg), as tests/test_realworld_signers.py seeds them.
WEB_FLOW = ("5DE3E0509C47EA3CF04A42D34AEE18F83AFDEB23", "968479A1AFF927E37D1A566BB5690EEEBB952194")


def bench_github(work: Path, shared: Path, rounds: int, engine: str | None) -> None:
    import tree

    github = shared / "fixtures" / "real" / "github"
    if not github.is_dir():
        print(f"github: {github} is absent, skipped", flush=True)
        return
    repo = work / "sampleproject"
    subprocess.run(["git", "clone", "-q", str(github / "sampleproject.bundle"), str(repo)], check=True)
    config = work / "gkeys.conf"
    config.write_text(f"[base]\ngkeysdir = {work / 'state'}\n")
    env = child_env(work)
    gkeys = [sys.executable, "-m", "gkeys_portage.cli.main", "-c", str(config), "-q"]
    for number, fingerprint in enumerate(WEB_FLOW):
        run([*gkeys, "add-seed", "-C", "github", "-n", f"web-flow{number}", "-N", "GitHub", "-K", fingerprint], env)
        run([*gkeys, "import-key", "-C", "github", "-n", f"web-flow{number}", "-F", str(github / "web-flow.gpg")],
            env)
    select(engine)
    off = with_off(config)

    def verify(conf: Path) -> None:  # its unsigned and unknown-key commits are refused: exit status 1
        command = [*tree.gkeys_command(conf, repo)[:-1], "-C", "github", "--no-record"]
        subprocess.run(command, env=env, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    compare("verify-tree --policy all, GitHub's web-flow history (197 commits, RSA-4096)", lambda: verify(config),
            lambda: verify(off), rounds)


def bench_media(work: Path, size_mib: int, rounds: int, engine: str | None) -> None:
    import media

    media.bench(work, size_mib, gkeys_only=True, engine=engine)  # the file, its siblings, the keyring
    config = work / "gkeys.conf"
    target = work / "media" / media.NAME
    env = child_env(work)
    off = with_off(config)

    def verify(conf: Path) -> None:
        run([sys.executable, "-m", "gkeys_portage.cli.main", "-c", str(conf), "-q", "verify-media", str(target)], env)

    compare(f"verify-media, {size_mib} MiB", lambda: verify(config), lambda: verify(off), rounds)


def bench_rsync(work: Path, packages: int, rounds: int, engine: str | None) -> None:
    from rsync import CATEGORY, build_tree
    from rsync_helpers import RsyncDaemon

    from gkeys_portage.core.config import load_config
    from gkeys_portage.core.types import Category, Nick
    from gkeys_portage.demo.world import KeyFactory
    from gkeys_portage.keys.context import Gkeys
    from gkeys_portage.keys.keyring import Keyring
    from gkeys_portage.keys.seeds import Seed, SeedStore
    from gkeys_portage.portage.rsyncsync import RsyncRequest, sync_rsync

    factory = KeyFactory(work / "secret")
    key = factory.create("infra")
    tree_dir = work / "tree"
    build_tree(tree_dir, packages)
    subprocess.run(["gemato", "create", "-q", "-p", "ebuild", "-k", key.fingerprint, "-s", "-t", str(tree_dir)],
                   env={"GNUPGHOME": str(work / "secret"), "PATH": "/usr/bin:/bin:" + str(Path(sys.executable).parent)},
                   check=True)
    config = work / "gkeys.conf"
    config.write_text(f"[base]\ngkeysdir = {work / 'state'}\n[purposes]\nrepository = {CATEGORY}/snapshot\n")
    ctx = Gkeys(load_config(config))
    ctx.ensure_layout()
    SeedStore(ctx.layout).save(Category(CATEGORY), {Nick("snapshot"): Seed(
        Nick("snapshot"), key.name, "snapshot", [key.fingerprint], [key.fingerprint], [key.uid])})
    with Keyring(ctx.layout, Category(CATEGORY)).update() as staging:
        staging.import_keys(factory.public("infra"))
    factory.close()
    select(engine)
    daemon = RsyncDaemon(work / "rsyncd")
    daemon.serve(tree_dir)
    request = RsyncRequest(work / "repos" / "gentoo", daemon.url, CATEGORY, quiet=True)

    def sync(second: bool) -> None:
        use_second_opinion(second)
        outcome = sync_rsync(ctx, request, lambda level, text: None)
        if not outcome.ok:
            raise SystemExit(f"the bench tree did not sync: {outcome.reason}")

    try:
        sync(True)  # the first sync
        compare(f"rsync sync, nothing changed, {packages} packages", lambda: sync(True), lambda: sync(False),
                rounds)
    finally:
        use_second_opinion(True)
        daemon.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--algo", choices=("ed25519", "rsa2048", "rsa4096"), default="ed25519")
    parser.add_argument("--work", type=Path, help="build (or reuse) the tree's keys and repository here; kept")
    parser.add_argument("--shared", type=Path, default=BENCH.parent.parent / "shared",
                        help="the shared reference data (the GitHub fixture's home)")
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--packages", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=("tree", "github", "media", "rsync"))
    add_option(parser)
    args = parser.parse_args()
    print(describe(args.gpg or "gpg"), f"; load average {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="gkeys-bench-second-") as tmp:
        work = Path(tmp)
        tree_work = args.work or work / "tree"
        for name, job in (("tree", lambda: bench_tree(tree_work, args.commits, args.keys, args.algo, args.rounds,
                                                      args.gpg)),
                          ("github", lambda: bench_github(work / "github", args.shared, args.rounds, args.gpg)),
                          ("media", lambda: bench_media(work / "media", args.size_mib, args.rounds, args.gpg)),
                          ("rsync", lambda: bench_rsync(work / "rsync", args.packages, args.rounds, args.gpg))):
            if args.only in (None, name):
                (tree_work if name == "tree" else work / name).mkdir(parents=True, exist_ok=True)
                job()
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
