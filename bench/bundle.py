#!/usr/bin/env python3
"""Benchmark: ``gkeys build-keyring`` of a 164-key category (one gpg export) against one export per key.

Compares, in the same run and on the same keyring:
  * ``gkeys build-keyring -C gentoo-devs -o DIR`` (one ``export_exact`` of every pinned primary), and
  * one ``export_exact`` per key (the shape of gentoo-keys' per-key loops), concatenated the same way,
and checks that both give the same bytes.  Also times ``gkeys export-wkd`` on the same keyring.

Usage: python3 bench/bundle.py [--keys 164]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._category import developer_category  # noqa: E402
from gkeys_portage.cli.main import main as gkeys_main  # noqa: E402
from gkeys_portage.core.types import Category  # noqa: E402
from gkeys_portage.keys.keyring import Keyring  # noqa: E402


def _gkeys(config: Path, *argv: str) -> float:
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = gkeys_main(["-c", str(config), "-q", *argv])
    if code != 0:
        raise SystemExit(f"gkeys {' '.join(argv)} failed with exit {code}")
    return time.perf_counter() - start


def main() -> None:
    """Run the benchmark and print the times and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=164)
    count = parser.parse_args().keys
    os.environ["SOURCE_DATE_EPOCH"] = "1700000000"
    work = Path(tempfile.mkdtemp(prefix="gkeys-bench-bundle-"))
    print(f"generating {count} ed25519 keys in {work} ...", flush=True)
    layout, keys, config = developer_category(work, count, pin_subkeys=True)

    print("gkeys build-keyring -C gentoo-devs ...", flush=True)
    bundle_time = _gkeys(config, "build-keyring", "-C", "gentoo-devs", "-o", str(work / "bundle"))

    print("baseline: one export per key ...", flush=True)
    gpg = Keyring(layout, Category("gentoo-devs")).gpg()
    start = time.perf_counter()
    per_key = b"".join(gpg.export_exact([fpr]).data for fpr in sorted(k.fingerprint for k in keys))
    baseline_time = time.perf_counter() - start
    same = per_key == (work / "bundle" / "gentoo-devs.gpg").read_bytes()

    print("gkeys export-wkd -C gentoo-devs ...", flush=True)
    wkd_time = _gkeys(config, "export-wkd", "-C", "gentoo-devs", "-o", str(work / "wkd"))

    print(f"\n{count} keys, {len(per_key)} bytes of keyblocks (identical bytes: {same})")
    print(f"  build-keyring (one export):   {bundle_time:8.2f} s")
    print(f"  one export per key:           {baseline_time:8.2f} s")
    print(f"  ratio per-key / build-keyring: {baseline_time / bundle_time:7.1f}x")
    print(f"  export-wkd (one export):      {wkd_time:8.2f} s")


if __name__ == "__main__":
    main()
