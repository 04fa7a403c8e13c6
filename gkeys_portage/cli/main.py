"""``gkeys``: the command line entry point.

Argument parsing and presentation only; every action is a function ``(Gkeys, Namespace) -> Report``
in a topic module, registered with its sub-parser through ``set_defaults(func=...)``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from gkeys_portage import __version__
from gkeys_portage.cli import (
    binpkg,
    checks,
    demo,
    keys,
    media,
    overlays,
    portage_actions,
    publish,
    seeds,
    signing,
    tree,
)
from gkeys_portage.cli.common import add_common_options
from gkeys_portage.core.config import load_config
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.ui.output import Console, Report
from gkeys_portage.ui.runner import JsonUsageParser, run_report

TOPICS = (seeds, keys, signing, publish, media, overlays, tree, checks, portage_actions, binpkg, demo)

DESCRIPTION = """\
Manage the OpenPGP keys that Gentoo trusts, and verify what Portage downloads with them.

Trust flows from pinned fingerprints: signed *seed files* list the people and the full
fingerprints trusted for each category (release, infra, developers, ...); keys are fetched
from keyservers, WKD, a URL or a file and accepted only if their fingerprint is in a seed;
signatures count only when they come from a pinned key.
"""

EPILOG = """\
files:
  ${EPREFIX}/etc/gkeys/gkeys.conf   configuration (or -c FILE, or $GKEYS_CONFIG)
  ${EPREFIX}/var/lib/gkeys/         state: seeds/, keyrings/, state/ (or --root DIR)

exit status (one per cause; the table with the --json reason codes is docs/exit-codes.md):
  0  verified / done      1  not verified (no signature, bad signature, ...), or a check failed
  2  usage or bad input   3  network failure after retries, or not found on the server (404)

Run 'gkeys ACTION --help' for the options of one action; 'gkeys demo' shows it all working
offline in a temporary directory.
"""


def build_parser(*, json_errors: bool = False) -> argparse.ArgumentParser:
    """The full ``gkeys`` argument parser (``json_errors``: usage errors as one JSON document, for ``--json``)."""
    parser = (JsonUsageParser if json_errors else argparse.ArgumentParser)(
        prog="gkeys", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gkeys-portage {__version__}")
    add_common_options(parser, suppress=False)
    sub = parser.add_subparsers(title="actions", metavar="ACTION")
    sub.required = True
    for topic in TOPICS:
        topic.register(sub)
    return parser


def _run_action(args: argparse.Namespace, console: Console) -> Report:
    config = load_config(Path(args.config) if args.config else None,
                         Path(args.root) if args.root else None)
    ctx = Gkeys(config)
    args.console = console
    if getattr(args, "needs_lock", False):
        ctx.ensure_layout()
        with ctx.lock:
            report: Report = args.func(ctx, args)
            return report
    report = args.func(ctx, args)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gkeys``; return the exit status (also used by the console script)."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(json_errors="--json" in words)
    if isinstance(parser, JsonUsageParser):
        parser.words = tuple(words)
    args = parser.parse_args(words)
    args.gkeys_main = main  # the demo runs its steps through this same entry point
    return run_report(args, _run_action)


def entry() -> None:
    """Console-script wrapper."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
