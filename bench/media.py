#!/usr/bin/env python3
"""Benchmark: verify a >= 512 MiB release file with .asc, .DIGESTS (SHA512 + BLAKE2B) and .sha256.

Compares, in the same run, on the same (page-cached, or with --cold uncached) file:
  * ``gkeys verify-media FILE`` (gpg reads the file itself through ``/dev/fd/N`` while every digest is
    computed, in parallel, from a second read of the same descriptor that the page cache serves; a read
    lease holds the file still meanwhile: :mod:`gkeys_portage.verify.media.pinned`),
  * the handbook's procedure in sequence: ``gpg --verify`` of the .asc, of the .DIGESTS and of the
    .sha256, then ``sha512sum -c``, ``b2sum -c`` and ``sha256sum -c``,
  * and, as the floor, the slowest single pass over the file alone (``gpg --verify FILE.asc``).

Both gkeys and the baseline run as separate processes (start-up included).  gkeys runs byte-compiled
(``PYTHONPYCACHEPREFIX`` in the bench's temporary directory, one warm-up run first), as an installed
package does, whatever ``PYTHONDONTWRITEBYTECODE`` says.  Besides wall time, the CPU time of every
command (user + system, its children included) is reported: on a machine shared with other jobs it is
the load-independent measure.  The peak RSS of the gkeys process is reported too (the issue asks for
< 100 MiB on a 2 GiB file; it does not grow with size).  A breakdown of what each part costs (Python
start-up, gkeys' imports, each digest over the file) closes the report.

With a signed statement listing the file, gkeys reads it once (the digests of the statements; the .asc is
compared on its digest prefix, not verified); ``--lone-asc`` serves only the ``.asc`` (gkeys run with
``--allow-unnamed``): then gpg and Sequoia read it side by side, Sequoia's read hashing the journal's digest.

Usage: python3 bench/media.py [--size-mib 512] [--rounds 5] [--cold] [--gkeys-only] [--gpg PATH] [--lone-asc]
  --gpg:    the OpenPGP engine of gkeys ($GKEYS_GPG) and of the handbook's gpg commands alike (the key is
            made, signs and is imported into gkeys' keyring with gpg from PATH).
  --rounds: alternate gkeys and the baselines this many times; medians and ranges are printed.
  --cold:   evict the release file and its siblings from the page cache before every command
            (``posix_fadvise(POSIX_FADV_DONTNEED)``: the file is read from disk, while the cache of other
            processes on a shared machine stays untouched, unlike ``echo 3 > /proc/sys/vm/drop_caches``).
  --gkeys-only: time and RSS of gkeys alone (e.g. for a 2 GiB RSS check).
  --lone-asc: only FILE.asc beside the file (no statements; the handbook's commands are then gpg's pass).
  --no-tools: skip timing sha512sum, b2sum and sha256sum alone each round.
  --compare-with DIR: also time the gkeys of another source tree (e.g. an older commit unpacked by
              ``git archive``) in the same alternating rounds.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._engine import add_option, describe, select  # noqa: E402
from gkeys_portage.cli.main import main as gkeys_main  # noqa: E402
from gkeys_portage.core.types import Nick  # noqa: E402
from gkeys_portage.demo.world import KeyFactory  # noqa: E402
from gkeys_portage.keys.seeds import Seed, dump_seeds  # noqa: E402
from gkeys_portage.openpgp.process import minimal_environment  # noqa: E402

NAME = "stage3-amd64-openrc-20260101T170000Z.tar.xz"


def make_file(path: Path, size_mib: int) -> dict[str, str]:
    """Write ``size_mib`` MiB of incompressible data; return its SHA512, BLAKE2B and SHA256."""
    block = os.urandom(1 << 20)
    digests = {name: hashlib.new(name) for name in ("sha512", "blake2b", "sha256")}
    with open(path, "wb") as out:
        for index in range(size_mib):
            chunk = index.to_bytes(8, "big") + block[8:]
            out.write(chunk)
            for digest in digests.values():
                digest.update(chunk)
    return {name: digest.hexdigest() for name, digest in digests.items()}


def evict(folder: Path) -> None:
    """Drop the files of ``folder`` from the page cache, so that the next command reads them from disk."""
    os.sync()
    for path in folder.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def span(values: list[float], unit: str) -> str:
    """``median (min-max)`` of ``values``."""
    return f"{statistics.median(values):7.2f}{unit} ({min(values):.2f}-{max(values):.2f})"


def timed(label: str, action: Callable[[], float], cold: Path | None = None) -> tuple[float, float]:
    """Wall seconds and CPU seconds (what ``action`` returns) of one command (``cold``: evict that folder first)."""
    if cold is not None:
        evict(cold)
    print(f"{label} ...", flush=True)
    started = time.perf_counter()
    cpu = action()
    return time.perf_counter() - started, cpu


def run(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """Run ``argv``; return its CPU seconds (user + system, its waited-for children included)."""
    return spawn(argv, env, cwd)[0]


def spawn(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int]:
    """Run ``argv`` to success; return its CPU seconds and peak RSS (KiB)."""
    process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(process.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"{argv[0]} failed"
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def breakdown(work: Path, target: Path, env: dict[str, str]) -> list[tuple[str, float]]:
    """CPU seconds (median of 3) of the parts of a verify-media run that do not overlap gpg's pass."""
    probes = {
        "Python start-up (python3 -c pass)": "pass",
        "Python start-up + import gkeys_portage.cli.main": "import gkeys_portage.cli.main",
        **{f"{name} over the file (hashlib)": (f"import hashlib\nd = hashlib.new({name!r})\n"
                                               f"with open({str(target)!r}, 'rb') as f:\n"
                                               f"    while b := f.read(1 << 20): d.update(b)")
           for name in ("sha512", "sha256", "blake2b")},
    }
    return [(label, statistics.median(run([sys.executable, "-c", code], env, work) for _ in range(3)))
            for label, code in probes.items()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--gkeys-only", action="store_true", help="skip the baseline (e.g. for a 2 GiB RSS check)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--compare-with", type=Path, help="another gkeys source tree to time alongside")
    parser.add_argument("--cold", action="store_true", help="evict the file from the page cache before every command")
    parser.add_argument("--lone-asc", action="store_true", help="only FILE.asc beside the file")
    parser.add_argument("--no-tools", action="store_true", help="do not time sha512sum, b2sum, sha256sum alone")
    add_option(parser)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gkeys-bench-media-", dir="/var/tmp" if args.cold else None))
    try:
        return bench(work, args.size_mib, args.gkeys_only, args.rounds, args.cold, args.compare_with, args.gpg,
                     lone_asc=args.lone_asc, tools=not args.no_tools)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench(work: Path, size_mib: int, gkeys_only: bool, rounds: int = 1, cold: bool = False,
          other: Path | None = None, engine: str | None = None, *, lone_asc: bool = False, tools: bool = True) -> int:
    media = work / "media"
    media.mkdir()
    target = media / NAME
    print(f"generating a {size_mib} MiB file and its signed siblings ...", flush=True)
    sums = make_file(target, size_mib)
    keys = KeyFactory(work / "secret")
    releng = keys.create("releng")
    digests = (f"# BLAKE2B HASH\n{sums['blake2b']}  {NAME}\n# SHA512 HASH\n{sums['sha512']}  {NAME}\n").encode()
    (media / f"{NAME}.asc").write_bytes(keys.sign("releng", target))
    if not lone_asc:
        (media / f"{NAME}.DIGESTS").write_bytes(keys.sign_bytes("releng", digests, work, clearsign=True))
        (media / f"{NAME}.sha256").write_bytes(
            keys.sign_bytes("releng", f"# SHA256 HASH\n{sums['sha256']}  {NAME}\n".encode(), work, clearsign=True))
    for algo, tool in (("sha512", "sha512sum"), ("blake2b", "b2sum"), ("sha256", "sha256sum")):
        (work / f"check.{tool}").write_text(f"{sums[algo]}  {NAME}\n")
    public = keys.public("releng")
    keys.close()

    # gkeys: a gentoo seed pinning releng, and its key imported.
    state = work / "state"
    (state / "seeds").mkdir(parents=True)
    seed = Seed(Nick("releng"), releng.name, "releng", [releng.fingerprint], [releng.fingerprint], [releng.uid])
    (state / "seeds" / "gentoo.seeds").write_bytes(dump_seeds({Nick("releng"): seed}))
    config = work / "gkeys.conf"
    config.write_text(f"[base]\ngkeysdir = {state}\n")
    (work / "releng.asc").write_bytes(public)
    assert gkeys_main(["-c", str(config), "-q", "import-key", "-C", "gentoo", "-n", "releng",
                       "-F", str(work / "releng.asc")]) == 0
    program = select(engine)  # after the signing and gkeys' import (gpg-sq refuses it): both sides verify with it
    print(describe(program), flush=True)

    # The handbook's GnuPG home: the release key imported.
    home = work / "handbook-gnupg"
    home.mkdir(mode=0o700)
    env = minimal_environment(home)
    subprocess.run([program, "--homedir", str(home), "--batch", "--import"], input=public, env=env, check=True,
                   capture_output=True)
    gpg = [program, "--homedir", str(home), "--batch", "--verify"]

    subprocess.run(["cat", str(target)], stdout=subprocess.DEVNULL, check=True)  # page cache warm for all

    gkeys = [sys.executable, "-m", "gkeys_portage.cli.main", "-c", str(config), "-q", "verify-media",
             *(["--allow-unnamed"] if lone_asc else []), str(target)]
    compiled = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    compiled["PYTHONPYCACHEPREFIX"] = str(work / "pycache")  # byte-compiled, as installed; the tree stays clean
    child_env = dict(compiled, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    rss = {"kib": 0}

    def ours(tree: Path | None = None) -> float:
        environ = child_env if tree is None else dict(compiled, PYTHONPATH=str(tree.resolve()))
        cpu, rss["kib"] = spawn(gkeys, environ, work)
        return cpu

    def handbook() -> float:
        cpu = run([*gpg, f"{NAME}.asc", NAME], env, media)  # --batch does not guess the data file; name it
        if lone_asc:
            return cpu
        for suffix in (".DIGESTS", ".sha256"):
            cpu += run([*gpg, f"{NAME}{suffix}"], env, media)
        for tool in ("sha512sum", "b2sum", "sha256sum"):
            cpu += run([tool, "-c", str(work / f"check.{tool}")], env, media)
        return cpu

    ours()  # warm-up: writes the byte-compiled modules
    if other is not None:
        ours(other)
    if gkeys_only:
        seconds, cpu = timed("gkeys verify-media", ours, media if cold else None)
        print(f"\nfile: {size_mib} MiB: gkeys verify-media {seconds:.2f} s ({cpu:.2f} CPU-s), "
              f"peak RSS {rss['kib'] / 1024:.1f} MiB")
        return 0
    commands: dict[str, Callable[[], float]] = {
        "gkeys verify-media": ours,
        "handbook, six commands": handbook,
        "gpg --verify FILE.asc alone": lambda: run([*gpg, f"{NAME}.asc", NAME], env, media),
    }
    if other is not None:
        commands[f"gkeys of {other.name}"] = lambda: ours(other)
    for tool in ("sha512sum", "b2sum", "sha256sum") if tools else ():
        commands[f"{tool} alone"] = lambda t=tool: run([t, str(target)], env, media)  # type: ignore[misc]
    results: dict[str, list[float]] = {label: [] for label in commands}
    cpus: dict[str, list[float]] = {label: [] for label in commands}
    ratios: list[float] = []
    for number in range(rounds):
        order = list(commands) if number % 2 == 0 else [*reversed(commands)]  # alternate the order
        for label in order:
            seconds, cpu = timed(f"round {number + 1}: {label}", commands[label], media if cold else None)
            results[label].append(seconds)
            cpus[label].append(cpu)
        ratios.append(results["gkeys verify-media"][-1] / results["gpg --verify FILE.asc alone"][-1])
    parts = breakdown(work, target, child_env)
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], env=env, check=False)

    state = "cold: evicted from the page cache before each command" if cold else "page-cached"
    print(f"\nfile: {size_mib} MiB ({state}), "
          f"{os.cpu_count()} CPUs, {rounds} round(s), load {os.getloadavg()[0]:.2f}: median (min-max); "
          f"{describe(program)}")
    for label, times in results.items():
        print(f"{label:32s} {span(times, ' s')}   CPU {span(cpus[label], ' s')}")
    speedups = [h / o for h, o in zip(results["handbook, six commands"], results["gkeys verify-media"], strict=True)]
    print(f"speed-up vs handbook:            {span(speedups, 'x')}")
    print(f"gkeys / slowest single pass:     {span(ratios, 'x')}")
    cpu_ratios = [o / g for o, g in zip(cpus["gkeys verify-media"], cpus["gpg --verify FILE.asc alone"], strict=True)]
    print(f"CPU, gkeys / gpg's pass:         {span(cpu_ratios, 'x')}")
    if other is not None:
        theirs = [t / g for t, g in zip(results[f"gkeys of {other.name}"], results["gpg --verify FILE.asc alone"],
                                        strict=True)]
        print(f"{other.name} / slowest single pass: {span(theirs, 'x')}")
    print(f"gkeys peak RSS:                  {rss['kib'] / 1024:7.1f} MiB")
    print("breakdown, CPU seconds (median of 3):")
    for label, cpu in parts:
        print(f"  {label:40s} {cpu:5.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
