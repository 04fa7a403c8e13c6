#!/usr/bin/env python3
"""Benchmark: what gkeys-fetch adds to Portage's download of a stage3.

Serves a signed release file (.asc, .DIGESTS, .sha256, .CONTENTS.gz) from a loopback mirror with a
realistic 100 ms per request, and times, in the same run, the same download command
  * alone (the baseline: what Portage does without the wrapper), and
  * wrapped by gkeys-fetch exactly as FETCH_WRAPPER runs it (the command as one shell-quoted word),
    which adds the sibling requests and the verify-media pass over the downloaded file.
Both run as separate processes, start-up included.

Usage: python3 bench/fetch.py [--size-mib 256] [--runs 2]
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from gkeys_portage.cli.main import main as gkeys_main  # noqa: E402
from gkeys_portage.core.types import Nick  # noqa: E402
from gkeys_portage.demo.media_steps import STAGE3, make_media  # noqa: E402
from gkeys_portage.demo.world import KeyFactory, LoopbackServer  # noqa: E402
from gkeys_portage.keys.seeds import Seed, dump_seeds  # noqa: E402

DOWNLOAD = "import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])"


def install_releng(work: Path, keys: KeyFactory) -> Path:
    """A gkeys root whose gentoo category pins only releng; return its config."""
    state = work / "state"
    config = work / "gkeys.conf"
    config.write_text(f"[base]\ngkeysdir = {state}\n")
    key = keys.keys["releng"]
    seed = Seed(Nick("releng"), key.name, "releng", [key.fingerprint], [key.fingerprint, key.signing_subkey],
                [key.uid])
    (state / "seeds").mkdir(parents=True)
    (state / "seeds" / "gentoo.seeds").write_bytes(dump_seeds({Nick("releng"): seed}))
    (work / "releng.asc").write_bytes(keys.public("releng"))
    assert gkeys_main(["-q", "-c", str(config), "import-key", "-C", "gentoo", "-n", "releng",
                       "-F", str(work / "releng.asc")]) == 0
    return config


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gkeys-bench-fetch-") as tmp:
        work = Path(tmp)
        keys = KeyFactory(work / "secret-keys")
        keys.create("releng")
        config = install_releng(work, keys)
        data = os.urandom(args.size_mib << 20)
        media = make_media(keys, work / "mirror", STAGE3, data)
        server = LoopbackServer(latency=0.1)
        try:
            url = media.publish(server)
            env = {**os.environ, "PYTHONPATH": str(PROJECT)}
            distdir = work / "distfiles"
            distdir.mkdir()
            print(f"{STAGE3}: {args.size_mib} MiB from 127.0.0.1 with 100 ms per request")
            for run in range(1, args.runs + 1):
                target = distdir / (STAGE3 + ".__download__")
                command = [sys.executable, "-c", DOWNLOAD, url, str(target)]
                plain = timed(command, env)
                target.unlink()
                wrapped = timed([sys.executable, "-m", "gkeys_portage.portage.fetch", "-c", str(config),
                                 "--uri", url, "--file", str(target), "--", shlex.join(command)], env)
                assert target.read_bytes() == data, "the wrapper did not keep the verified file"
                target.unlink()
                print(f"run {run}: download alone {plain:.2f} s; with gkeys-fetch {wrapped:.2f} s "
                      f"(+{wrapped - plain:.2f} s, ratio {wrapped / plain:.2f})")
        finally:
            server.close()
            keys.close()


if __name__ == "__main__":
    main()
