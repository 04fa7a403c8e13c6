#!/usr/bin/env python3
"""Benchmark: seeds from authority certifications (``update-seed`` of an [authority-seeds] category).

A generated L1 -> L2-developers -> N developers chain (default 250, Gentoo's active-devs.gpg size);
the developers' keyring (and the L2 key, on an HKP endpoint) is served from 127.0.0.1 with 100 ms
latency per request; nothing leaves 127.0.0.1.  Compares, in the
same run and on the same keyring:

  * ``gkeys update-seed -C devs``: one download into a quarantine home, one ``gpg --check-sigs``
    listing decided in Python, then seeds and keyring written; and
  * Gentoo's own way (sec-keys/openpgp-keys-gentoo-developers): the same download imported into a
    GnuPG home with L1 set to ultimate trust (L2 as a full introducer), ``--check-trustdb``, then
    one ``--check-sigs`` listing under ``--trust-model pgp`` to keep each key whose validity is full
    and that carries an L2 signature (the fastest form of that check: one listing, not one per key).

Both must keep the same keys.  Usage: python3 bench/authority.py [--keys 250] [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gkeys_portage.cli.main import main as gkeys_main  # noqa: E402
from gkeys_portage.core.http import HttpClient  # noqa: E402
from gkeys_portage.demo.world import KeyFactory, LoopbackServer  # noqa: E402
from gkeys_portage.openpgp.colons import parse_colons  # noqa: E402
from gkeys_portage.openpgp.gnupg import GnuPG  # noqa: E402


def build_world(work: Path, count: int) -> tuple[KeyFactory, list[str]]:
    """L1, L2-dev and ``count`` developers certified by L2 (one-year certifications)."""
    factory = KeyFactory(work / "secret")
    factory.create("l1", email="openpgp-auth+l1@gentoo.org")
    factory.create("l2-dev", email="openpgp-auth+l2-dev@gentoo.org")
    factory.certify("l1", "l2-dev")
    nicks = [f"dev{i:03d}" for i in range(count)]
    for i, nick in enumerate(nicks):
        factory.create(nick)
        factory.certify("l2-dev", nick, expire="1y")
        if (i + 1) % 50 == 0:
            print(f"  {i + 1}/{count} developer keys", flush=True)
    return factory, nicks


def run_gkeys(work: Path, factory: KeyFactory, url: str) -> tuple[float, float, set[str]]:
    """``gkeys update-seed -C devs`` twice in a fresh state dir whose 'auth' keyring holds L1 and L2."""
    state = work / f"state-{time.monotonic_ns()}"
    config = work / "gkeys.conf"
    keyserver = url.split("/output/", 1)[0]  # the loopback server: no request leaves 127.0.0.1
    config.write_text(f"[base]\ngkeysdir = {state}\n[authority-seeds]\ndevs = {url} auth/l2-dev\n"
                      f"[authority]\nroots = auth/l1\nmax-shrink = 100\n[sources]\nkeyservers = {keyserver}\n"
                      "wkd = no\n")
    keyfile = work / "auth.asc"
    keyfile.write_bytes(factory.public("l1", "l2-dev"))
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        for nick in ("l1", "l2-dev"):
            fpr = factory.keys[nick].fingerprint
            assert gkeys_main(["-c", str(config), "add-seed", "-C", "auth", "-n", nick, "-N", nick, "-K", fpr]) == 0
            assert gkeys_main(["-c", str(config), "import-key", "-C", "auth", "-n", nick, "-F", str(keyfile)]) == 0
    times, kept = [], set()
    for _ in range(2):  # the first update, then the same keyring again (a refresh with nothing new)
        out = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = gkeys_main(["-c", str(config), "--json", "update-seed", "-C", "devs"])
        times.append(time.perf_counter() - start)
        assert code == 0, out.getvalue()
        kept = {v["fingerprint"] for v in json.loads(out.getvalue())["updated"][0]["kept"]}
    shutil.rmtree(state, ignore_errors=True)
    return times[0], times[1], kept


def run_gentoo_way(work: Path, factory: KeyFactory, url: str) -> tuple[float, set[str]]:
    """Download, import, L1 ultimate (L2 full introducer), check-trustdb, one listing, decide."""
    home = work / f"gentoo-{time.monotonic_ns()}"
    l1, l2 = factory.keys["l1"].fingerprint, factory.keys["l2-dev"].fingerprint
    auth = factory.public("l1", "l2-dev", armor=False)
    start = time.perf_counter()
    data = HttpClient(timeout=30, retries=1).get(url, max_bytes=64 * 1024 * 1024)
    gpg = GnuPG(home)
    pgp = ["--trust-model", "pgp"]
    gpg.run([*pgp, "--import"], auth + data)
    gpg.run([*pgp, "--import-ownertrust"], f"{l1}:6:\n{l2}:5:\n".encode())
    gpg.run([*pgp, "--check-trustdb"])
    listing = gpg.run([*pgp, "--with-colons", "--fixed-list-mode", "--with-fingerprint", "--with-fingerprint",
                       "--check-sigs"]).stdout.decode("latin-1")
    kept: set[str] = set()
    for key in parse_colons(listing):
        if key.fingerprint in (l1, l2) or key.primary.validity != "f":
            continue
        if any(s.good and s.issuer_fingerprint == l2 for u in key.uids for s in u.signatures):
            kept.add(key.fingerprint)
    elapsed = time.perf_counter() - start
    gpg.close()
    shutil.rmtree(home, ignore_errors=True)
    return elapsed, kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=250)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gkeys-bench-authority-"))
    print(f"generating L1, L2-dev and {args.keys} certified developer keys ...", flush=True)
    factory, nicks = build_world(work, args.keys)
    server = LoopbackServer()
    server.latency = 0.1
    url = server.publish("output/active-devs.gpg", factory.public(*nicks, armor=False))
    server.hkp[factory.keys["l2-dev"].fingerprint] = factory.public("l2-dev")  # the published certifier
    expected = {factory.keys[n].fingerprint for n in nicks}
    ours, again, theirs = [], [], []
    try:
        for run in range(args.runs):
            t_ours, t_again, kept_ours = run_gkeys(work, factory, url)
            t_theirs, kept_theirs = run_gentoo_way(work, factory, url)
            assert kept_ours == kept_theirs == expected, (len(kept_ours), len(kept_theirs))
            ours.append(t_ours)
            again.append(t_again)
            theirs.append(t_theirs)
            print(f"run {run + 1}: gkeys update-seed {t_ours:.2f} s (same keyring again {t_again:.2f} s), "
                  f"Gentoo's way {t_theirs:.2f} s", flush=True)
    finally:
        server.close()
        factory.close()
        shutil.rmtree(work, ignore_errors=True)
    a, r, b = statistics.median(ours), statistics.median(again), statistics.median(theirs)
    print(f"\n{args.keys} keys, median of {args.runs}: Gentoo's way {b:.2f} s (download, import, trustdb, listing); "
          f"gkeys update-seed {a:.2f} s (download, check, seeds, keyring, records): {b / a:.2f}x; "
          f"the same keyring again (a refresh) {r:.2f} s: {b / r:.2f}x")


if __name__ == "__main__":
    main()
