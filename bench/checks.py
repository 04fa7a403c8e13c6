#!/usr/bin/env python3
"""Benchmark: spec-check over a category of 164 developer keys, and one pathological key.

Compares, in the same run and on the same keyring:
  * ``gkeys spec-check -C gentoo-devs`` (one ``gpg --list-sigs`` for the whole category), and
  * one gpg listing per key (how gentoo-keys' spec-check asked GnuPG), same checks afterwards.

Then times the checks on a constructed listing of one key with 3,000 user ids, 63,000 signatures
and 500 subkeys, and reports the peak memory (findings stay bounded).

Usage: python3 bench/checks.py [--keys 164]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from checks_helpers import T0, Part, build_key, signature, uid  # noqa: E402

from bench._category import developer_category  # noqa: E402
from gkeys_portage.checks.glep63 import check_key  # noqa: E402
from gkeys_portage.cli.main import main as gkeys_main  # noqa: E402
from gkeys_portage.core.types import Category  # noqa: E402
from gkeys_portage.keys.keyring import Keyring  # noqa: E402
from gkeys_portage.openpgp.gnupg import GnuPG  # noqa: E402


def category_benchmark(count: int) -> None:
    """spec-check of a whole category vs one gpg listing per key."""
    work = Path(tempfile.mkdtemp(prefix="gkeys-bench-checks-"))
    print(f"generating {count} ed25519 keys ...", flush=True)
    layout, keys, config = developer_category(work, count)
    keyring = Keyring(layout, Category("gentoo-devs"))

    print("gkeys spec-check -C gentoo-devs ...", flush=True)
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()) as output:
        status = gkeys_main(["-c", str(config), "--json", "spec-check", "-C", "gentoo-devs", "--spec", "glep63-2"])
    ours = time.perf_counter() - started
    assert status == 0 and output.getvalue().count('"ok": true') == count + 1, status

    print("baseline: one gpg listing per key ...", flush=True)
    gpg = GnuPG(keyring.home)
    started = time.perf_counter()
    for key in keys:
        (listed,) = gpg.list_keys([key.fingerprint], sigs=True)
        assert check_key(listed, "glep63-2") == []
    baseline = time.perf_counter() - started
    print(f"spec-check of {count} keys: {ours:.2f} s vs {baseline:.2f} s one listing per key: "
          f"{baseline / ours:.1f}x")


def pathological_benchmark() -> None:
    """Checks on one key with thousands of user ids, signatures and subkeys."""
    at = datetime.fromtimestamp(T0 + 10 * 86400, UTC)
    many = tuple(signature("10x", 8, issuer=f"{n:040X}") for n in range(20))
    uids = [uid(f"Someone {n} <s{n}@example.org>", sig_hash=2, extra=many) for n in range(3000)]
    subkeys = [Part("s", sig_hash=2) for _ in range(500)]
    started = time.perf_counter()
    key = build_key(Part("cSC"), subkeys, uids)
    parsed = time.perf_counter() - started
    started = time.perf_counter()
    issues = check_key(key, "glep63-2.2", at)
    checked = time.perf_counter() - started
    tracemalloc.start()
    check_key(build_key(Part("cSC"), subkeys, uids), "glep63-2.2", at)
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    normal = build_key(Part("cSC"), [Part("s")], [uid("L <l@gentoo.org>")])
    started = time.perf_counter()
    for _ in range(100):
        check_key(normal, "glep63-2.2", at)
    one = (time.perf_counter() - started) / 100
    print(f"3,000 uids / 63,000 sigs / 500 subkeys: parse {parsed:.2f} s, check {checked * 1000:.0f} ms "
          f"({checked / one:.0f}x one ordinary key), {len(issues)} findings, peak {peak / 2**20:.0f} MiB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=164)
    args = parser.parse_args()
    category_benchmark(args.keys)
    pathological_benchmark()
    return 0


if __name__ == "__main__":
    sys.exit(main())
