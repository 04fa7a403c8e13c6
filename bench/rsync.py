"""rsync through gkeys (issue 24, "Speed"): ratios against rsync's and gemato's own times, in the same run.

Builds a ``::gentoo``-shaped tree (``--packages`` package directories, default 30,000, each with a thin
Manifest; BLAKE2B + SHA512), signs it with ``gemato create -p ebuild`` and a throwaway key, serves it from a
real ``rsync --daemon`` on 127.0.0.1 and measures:

* first sync: ``rsync`` alone into an empty directory, and gkeys' sync (rsync + gemato + swap);
* a sync that changes nothing: ``rsync`` alone into the synced tree (what Portage's rsync module runs) and
  ``rsync --link-dest`` into a new directory (what a staged sync would cost), and gkeys' (goal: < 0.5 s more
  than rsync's own time); ``--rounds N`` alternates gkeys and rsync in place and reports medians;
* full verification: ``gemato verify -K`` on the tree, and gkeys' ``verify_tree`` (goal: <= 1.1x gemato).

Run by hand (``python bench/rsync.py --packages 30000 [--rounds 5]``); nothing here runs in the test suite.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rsync_helpers import RsyncDaemon  # noqa: E402  (tests/rsync_helpers.py: the real daemon)

from gkeys_portage.core.config import load_config  # noqa: E402
from gkeys_portage.core.types import Category, Nick  # noqa: E402
from gkeys_portage.demo.world import KeyFactory  # noqa: E402
from gkeys_portage.keys.context import Gkeys  # noqa: E402
from gkeys_portage.keys.keyring import Keyring  # noqa: E402
from gkeys_portage.keys.seeds import Seed, SeedStore  # noqa: E402
from gkeys_portage.portage.rsyncsync import RsyncRequest, sync_rsync  # noqa: E402
from gkeys_portage.verify.manifest.purpose import purpose_keyring, repository_pins  # noqa: E402
from gkeys_portage.verify.manifest.tree import verify_tree  # noqa: E402

CATEGORY = "bench-repo"


def build_tree(root: Path, packages: int) -> None:
    """A ::gentoo-shaped tree: categories of 100 packages, an ebuild and metadata.xml each."""
    (root / "profiles").mkdir(parents=True)
    (root / "metadata").mkdir()
    (root / "profiles/repo_name").write_text("gentoo\n")
    (root / "metadata/layout.conf").write_text("masters =\nthin-manifests = true\nsign-manifests = false\n"
                                                "manifest-hashes = BLAKE2B SHA512\n")
    categories = []
    for n in range(packages):
        cat = f"cat-{n // 100:03d}"
        if not categories or categories[-1] != cat:
            categories.append(cat)
        pkg = root / cat / f"pkg{n % 100:02d}"
        pkg.mkdir(parents=True)
        (pkg / f"pkg{n % 100:02d}-1.ebuild").write_text(f'EAPI=8\nDESCRIPTION="package {n}"\nSLOT=0\n')
        (pkg / "metadata.xml").write_text("<pkgmetadata/>\n")
    (root / "profiles/categories").write_text("\n".join(categories) + "\n")


def timed(label: str, action: object) -> float:
    """Run ``action()`` once; print and return its wall time."""
    start = time.perf_counter()
    action()  # type: ignore[operator]
    took = time.perf_counter() - start
    print(f"{label:<44} {took:8.2f} s")
    return took


def main() -> int:
    """Build, serve, measure, print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", type=int, default=30000)
    parser.add_argument("--rounds", type=int, default=3, help="no-change rounds, gkeys and rsync alternating")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gkeys-bench-rsync-") as tmp:
        work = Path(tmp)
        factory = KeyFactory(work / "secret")
        key = factory.create("infra")
        tree = work / "tree"
        build_tree(tree, args.packages)
        subprocess.run(["gemato", "create", "-q", "-p", "ebuild", "-k", key.fingerprint, "-s", "-t", str(tree)],
                       env={"GNUPGHOME": str(work / "secret"), "PATH": "/usr/bin:/bin:" + str(Path(sys.executable)
                                                                                            .parent)}, check=True)
        public = work / "infra.asc"
        public.write_bytes(factory.public("infra"))
        config = work / "gkeys.conf"
        config.write_text(f"[base]\ngkeysdir = {work / 'state'}\n[purposes]\nrepository = {CATEGORY}/snapshot\n")
        ctx = Gkeys(load_config(config))
        ctx.ensure_layout()
        SeedStore(ctx.layout).save(Category(CATEGORY), {Nick("snapshot"): Seed(
            Nick("snapshot"), key.name, "snapshot", [key.fingerprint], [key.fingerprint], [key.uid])})
        with Keyring(ctx.layout, Category(CATEGORY)).update() as staging:
            staging.import_keys(public.read_bytes())
        daemon = RsyncDaemon(work / "rsyncd")
        daemon.serve(tree)
        try:
            plain = work / "plain"
            rsync = ["rsync", "--recursive", "--links", "--perms", "--times", "--delete", "--whole-file", "--quiet"]
            first_rsync = timed("rsync alone, first sync", lambda: subprocess.run(
                [*rsync, daemon.url + "/", f"{plain}/"], check=True))
            again = work / "again"
            same_linkdest = timed("rsync alone, nothing changed (--link-dest)", lambda: subprocess.run(
                [*rsync, f"--link-dest={plain}", daemon.url + "/", f"{again}/"], check=True))
            location = work / "repos" / "gentoo"
            request = RsyncRequest(location, daemon.url, CATEGORY, quiet=True)
            said: list[str] = []

            def sync() -> None:
                outcome = sync_rsync(ctx, request, lambda level, text: said.append(text))
                if not outcome.ok:
                    raise SystemExit(f"the bench tree did not sync: {outcome.reason}")

            first = timed("gkeys sync, first", sync)
            ours_same, rsync_same = [], []
            for _ in range(args.rounds):
                said.clear()
                ours_same.append(timed("gkeys sync, nothing changed", sync))
                if not any("not hashed again" in line for line in said):
                    print("note: the no-change sync hashed the tree (its fast path was not taken)")
                rsync_same.append(timed("rsync alone, nothing changed (in place)", lambda: subprocess.run(
                    [*rsync, daemon.url + "/", f"{plain}/"], check=True)))
            refetched = [line for line in said if "fetching again" in line]
            if refetched:
                print(f"note: {len(refetched)} sync(s) fetched again comparing contents")
            gemato = timed("gemato verify -K", lambda: subprocess.run(
                ["gemato", "verify", "-q", "-R", "-W", "-K", str(public), str(plain)], check=True))
            pins, _ = repository_pins(ctx, CATEGORY)
            keyring = purpose_keyring(ctx, CATEGORY, pins)
            ours = timed("gkeys verify_tree", lambda: verify_tree(plain, keyring, pins))
        finally:
            daemon.close()
            factory.close()
        print(f"first sync: {first / first_rsync:.2f}x rsync alone")
        same, same_rsync = statistics.median(ours_same), statistics.median(rsync_same)
        added = [f"{o - r:+.2f}" for o, r in zip(ours_same, rsync_same, strict=True)]
        print(f"nothing changed: {same:.2f} s vs {same_rsync:.2f} s rsync in place (medians of {args.rounds}): "
              f"{same - same_rsync:+.2f} s (per round {', '.join(added)}; goal < 0.5 s); "
              f"rsync --link-dest alone {same_linkdest:.2f} s")
        print(f"full verification: {ours / gemato:.2f}x gemato verify (goal <= 1.1x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
