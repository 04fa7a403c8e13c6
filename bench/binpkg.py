#!/usr/bin/env python3
"""Benchmark: ``gkeys-trust-helper`` with nothing to do, as Portage runs it before every remote binary
operation, vs a fresh ``gpg --import`` of the pinned key into an empty home (the least a helper that
rebuilds every time would pay; getuto is not installable here).

Both run as separate processes, as Portage would start them; the helper's time includes the Python
interpreter start-up.  Target (issue 17): under 0.3 s.

Usage: python3 bench/binpkg.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from gkeys_portage.core.config import load_config  # noqa: E402
from gkeys_portage.core.types import Category, Nick  # noqa: E402
from gkeys_portage.demo.world import KeyFactory  # noqa: E402
from gkeys_portage.keys.context import Gkeys  # noqa: E402
from gkeys_portage.keys.refresh import record_refresh  # noqa: E402
from gkeys_portage.keys.seeds import Seed, dump_seeds  # noqa: E402
from gkeys_portage.portage.binpkg import update_home  # noqa: E402


def _timed(command: list[str], env: dict[str, str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    """Set up one pinned key, build the home once, then time no-op helper runs vs fresh imports."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    work = Path(tempfile.mkdtemp(prefix="gkeys-bench-binpkg-"))
    try:
        factory = KeyFactory(work / "secret")
        key = factory.create("weekly", name="Gentoo weekly", email="releng@gentoo.org")
        public = factory.public("weekly", armor=False)
        factory.close()
        state = work / "state"
        config = work / "gkeys.conf"
        config.write_text(f"[base]\ngkeysdir = {state}\n")
        (state / "seeds").mkdir(parents=True)
        (state / "seeds" / "gentoo.seeds").write_bytes(dump_seeds({Nick("weekly"): Seed(
            Nick("weekly"), key.name, "weekly", [key.fingerprint], [key.fingerprint], [key.uid])}))
        ctx = Gkeys(load_config(config))
        with ctx.lock, ctx.keyring("gentoo").update() as gpg:
            gpg.import_keys(public)
        record_refresh(ctx, Category("gentoo"))
        home = work / "etc-portage-gnupg"
        update_home(ctx, home, refresh=True)
        (work / "weekly.gpg").write_bytes(public)

        env = dict(os.environ, GKEYS_CONFIG=str(config), BINPKG_GPG_VERIFY_GPG_HOME=str(home),
                   PYTHONPATH=str(PROJECT))
        helper = [sys.executable, "-c", "import sys; from gkeys_portage.portage.binpkg import main; sys.exit(main())"]
        target = os.readlink(home)
        helper_times = _timed(helper, env, runs)
        assert os.readlink(home) == target, "the no-op run rebuilt the home"

        fresh = work / "fresh"
        import_times = []
        for _ in range(runs):
            shutil.rmtree(fresh, ignore_errors=True)
            fresh.mkdir(mode=0o700)
            start = time.perf_counter()
            subprocess.run(["gpg", "--homedir", str(fresh), "--batch", "--no-autostart", "--import",
                            str(work / "weekly.gpg")], check=True, capture_output=True)
            import_times.append(time.perf_counter() - start)

        h, g = statistics.median(helper_times), statistics.median(import_times)
        print(f"gkeys-trust-helper, nothing to do (median of {runs}): {h * 1000:.0f} ms "
              f"(min {min(helper_times) * 1000:.0f}, max {max(helper_times) * 1000:.0f})")
        print(f"fresh gpg --import of the pinned key   (median of {runs}): {g * 1000:.0f} ms "
              f"(min {min(import_times) * 1000:.0f}, max {max(import_times) * 1000:.0f})")
        print(f"ratio helper / import: {h / g:.2f}x; target < 300 ms: {'met' if h < 0.3 else 'NOT met'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
