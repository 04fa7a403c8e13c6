#!/usr/bin/env python3
"""Benchmark: install the keys of 164 seeds from a keyserver on 127.0.0.1 (100 ms per request).

Compares, in the same run and against the same server:
  * gkeys install-key (concurrent fetch, one quarantine import, fingerprint filter, atomic commit), and
  * the way gentoo-keys did it: one ``gpg --recv-keys <fpr>`` process per key, sequentially.

Rounds alternate A and B (``--rounds``, default 3); each round's ratio and their median are printed.

Usage: python3 bench/keys.py [--keys 164] [--latency 0.1] [--rounds 3] [--workers N] [--gpg PATH]
  --workers: gkeys' ``[sources] workers`` (requests in parallel; default: gkeys' own default).
  --gpg: the OpenPGP engine of gkeys ($GKEYS_GPG) and of the ``gpg --recv-keys`` baseline alike (keys are
         generated with gpg from PATH).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._engine import add_option, describe, select  # noqa: E402
from gkeys_portage.cli.main import main as gkeys_main  # noqa: E402
from gkeys_portage.core.types import Nick  # noqa: E402
from gkeys_portage.demo.world import KeyFactory, LoopbackServer  # noqa: E402
from gkeys_portage.keys.seeds import Seed, dump_seeds  # noqa: E402
from gkeys_portage.openpgp.gnupg import GnuPG  # noqa: E402
from gkeys_portage.openpgp.process import minimal_environment


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=164)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds, alternating (medians reported)")
    parser.add_argument("--workers", type=int, help="gkeys' [sources] workers (default: gkeys' default)")
    add_option(parser)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gkeys-bench-keys-"))
    print(f"generating {args.keys} ed25519 keys ...", flush=True)
    factory = KeyFactory(work / "secret")
    keys = [factory.create(f"dev{i:03d}") for i in range(args.keys)]
    server = LoopbackServer(latency=args.latency)
    for key in keys:
        server.hkp[key.fingerprint] = factory.gpg.export_keys([key.fingerprint])
    factory.close()
    program = select(args.gpg)  # after key generation: both sides import with it
    print(describe(program), flush=True)

    seeds = {Nick(f"dev{i:03d}"): Seed(Nick(f"dev{i:03d}"), k.name, f"dev{i:03d}", [k.fingerprint],
                                       [k.fingerprint], [k.uid]) for i, k in enumerate(keys)}
    ours: list[float] = []
    baseline: list[float] = []
    for round_ in range(args.rounds):
        state = work / f"state-{round_}"
        (state / "seeds").mkdir(parents=True)
        (state / "seeds" / "gentoo-devs.seeds").write_bytes(dump_seeds(seeds))
        config = work / "gkeys.conf"
        config.write_text(f"[base]\ngkeysdir = {state}\n[sources]\nkeyservers = {server.url}\nwkd = no\n"
                          "timeout = 10\nretries = 1\n" + (f"workers = {args.workers}\n" if args.workers else ""))

        print(f"round {round_ + 1}/{args.rounds}: gkeys install-key ({args.latency * 1000:.0f} ms per request) ...",
              flush=True)
        started = time.perf_counter()
        status = gkeys_main(["-c", str(config), "-q", "install-key", "-C", "gentoo-devs"])
        ours.append(time.perf_counter() - started)
        installed = len(GnuPG(state / "keyrings" / "gentoo-devs").list_keys())
        assert status == 0 and installed == args.keys, (status, installed)

        print(f"round {round_ + 1}/{args.rounds}: one gpg --recv-keys per key, sequentially ...", flush=True)
        home = work / f"baseline-home-{round_}"
        home.mkdir(mode=0o700)
        keyserver = server.url.replace("http://", "hkp://")
        env = minimal_environment(home)
        started = time.perf_counter()
        for key in keys:
            subprocess.run([program, "--homedir", str(home), "--batch", "--keyserver", keyserver,
                            "--recv-keys", key.fingerprint], env=env, check=True, capture_output=True)
        baseline.append(time.perf_counter() - started)
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], env=env, check=False)
    server.close()
    ratios = sorted(b / o for b, o in zip(baseline, ours, strict=True))

    print(f"\nkeys: {args.keys}, latency {args.latency * 1000:.0f} ms/request, workers {args.workers or 'default'}; "
          f"load {os.getloadavg()[0]:.2f}; "
          f"{describe(program)}")
    print(f"gkeys install-key:           median {statistics.median(ours):7.2f} s  "
          f"({', '.join(f'{t:.2f}' for t in ours)})")
    print(f"sequential gpg --recv-keys:  median {statistics.median(baseline):7.2f} s  "
          f"({', '.join(f'{t:.2f}' for t in baseline)})")
    print(f"speed-up per round: {', '.join(f'{r:.1f}x' for r in ratios)}; median {statistics.median(ratios):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
