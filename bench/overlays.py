#!/usr/bin/env python3
"""Benchmark: verify the real overlay list (458 repos, 270 KB) — signature + safe parse + all checks.

Compares, in the same run, on the same signed list and keyring:
  * baseline: one ``gpg --verify`` of the detached signature alone (through the GnuPG door), and a
    plain, unchecked ``xml.etree.ElementTree.fromstring`` of the list (what an unverified consumer does);
  * ``verify_overlay_list`` (pinned signature + defusedxml parse + DTD/XSD and source-URL rules),
    with its own breakdown; and
  * ``gkeys verify-overlays LIST -o OUT`` in-process (config, loading, reporting, atomic write).

Each figure is the median of a few runs (not a loop of hundreds: the machine is shared).

Usage: python3 bench/overlays.py [--list PATH] [--runs 5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree  # noqa: S405 - the unsafe baseline, on purpose
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gkeys_portage.cli.main import main as gkeys_main  # noqa: E402
from gkeys_portage.core.config import load_config  # noqa: E402
from gkeys_portage.demo.world import KeyFactory  # noqa: E402
from gkeys_portage.keys.context import Gkeys  # noqa: E402
from gkeys_portage.verify.overlays.verifier import load_list, verify_overlay_list  # noqa: E402

REAL = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "real" / "overlays" / "repositories.xml"


def median_time(func: Callable[[], object], runs: int) -> float:
    """Median wall time of ``runs`` calls."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def quiet(argv: list[str]) -> int:
    """Run the CLI in-process with its output swallowed."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return gkeys_main(argv)


def main() -> None:
    """Set up a pinned infra key, sign the list, time the three ways."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", type=Path, default=REAL, help="the overlay list (default: the real one)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    data = args.list.read_bytes()

    work = Path(tempfile.mkdtemp(prefix="gkeys-bench-overlays-"))
    keys = KeyFactory(work / "secret")
    infra = keys.create("infra")
    (work / "infra.asc").write_bytes(keys.public("infra"))
    listing = work / "repositories.xml"
    listing.write_bytes(data)
    (work / "repositories.xml.asc").write_bytes(keys.sign("infra", listing))
    keys.close()
    config = work / "gkeys.conf"
    config.write_text(f"[base]\ngkeysdir = {work / 'state'}\n[purposes]\noverlay-list = gentoo-infra/infra\n"
                      "[overlays]\ncategory = gentoo-infra\n")
    base = ["-c", str(config)]
    assert quiet([*base, "add-seed", "-C", "gentoo-infra", "-n", "infra", "-N", "Infra", "-K", infra.fingerprint]) == 0
    assert quiet([*base, "import-key", "-C", "gentoo-infra", "-n", "infra", "-F", str(work / "infra.asc")]) == 0

    ctx = Gkeys(load_config(config, None))
    signed = load_list(ctx, str(listing), None)
    keyring = ctx.keyring("gentoo-infra")
    print(f"list: {args.list} ({len(data)} bytes); median of {args.runs} runs", flush=True)

    gpg_only = median_time(lambda: keyring.gpg().verify_detached(signed.signature, signed.data), args.runs)
    etree_only = median_time(lambda: ElementTree.fromstring(data), args.runs)
    results = []

    def library() -> None:
        results.append(verify_overlay_list(Gkeys(load_config(config, None)), signed, "gentoo-infra"))

    full = median_time(library, args.runs)
    last = results[-1]
    out = work / "out" / "repositories.xml"
    cli = median_time(lambda: quiet([*base, "verify-overlays", str(listing), "-o", str(out)]), args.runs)
    assert last.ok and out.read_bytes() == data

    print(f"baseline  gpg --verify of the signature alone          {gpg_only * 1000:7.1f} ms")
    print(f"baseline  ElementTree.fromstring (unsafe, no checks)   {etree_only * 1000:7.1f} ms")
    parts = ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in last.seconds.items() if k != "total")
    print(f"verify_overlay_list (signature + parse + checks)       {full * 1000:7.1f} ms   ({parts})")
    print(f"gkeys verify-overlays LIST -o OUT (in-process)         {cli * 1000:7.1f} ms")
    print(f"ratio: verify_overlay_list / gpg alone = {full / gpg_only:.1f}x; "
          f"CLI / gpg alone = {cli / gpg_only:.1f}x")
    print(f"repos {len(last.overlays.repos)}, errors {len(last.overlays.errors)}, "
          f"findings {len(last.overlays.findings)}; goal: well under 1 s -> "
          f"{'met' if cli < 1.0 else 'NOT met'}")


if __name__ == "__main__":
    main()
