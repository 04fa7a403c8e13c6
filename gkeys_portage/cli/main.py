"""``gkeys``: the command line entry point.

Argument parsing and presentation only; every action is a function ``(Gkeys, Namespace) -> Report``
in a topic module, registered with its sub-parser through ``set_defaults(func=...)``.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from gkeys_portage import __version__
from gkeys_portage.cli import checks, demo, keys, media, overlays, seeds, signing, tree
from gkeys_portage.cli.common import add_common_options
from gkeys_portage.cli.output import Console
from gkeys_portage.core.config import load_config
from gkeys_portage.core.context import Gkeys
from gkeys_portage.core.errors import EXIT_BAD_INPUT, EXIT_NOT_VERIFIED, GkeysError

TOPICS = (seeds, keys, signing, media, overlays, tree, checks, demo)

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

exit status:
  0  verified / done      1  not verified, or a check failed
  2  usage or bad input   3  network failure after retries

Run 'gkeys ACTION --help' for the options of one action; 'gkeys demo' shows it all working
offline in a temporary directory.
"""


def build_parser() -> argparse.ArgumentParser:
    """The full ``gkeys`` argument parser."""
    parser = argparse.ArgumentParser(
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gkeys``; return the exit status (also used by the console script)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console(json_mode=args.json, quiet=args.quiet, verbose=args.verbose)
    try:
        config = load_config(Path(args.config) if args.config else None,
                             Path(args.root) if args.root else None)
        ctx = Gkeys(config)
        args.console = console
        if getattr(args, "needs_lock", False):
            ctx.ensure_layout()
            with ctx.lock:
                report = args.func(ctx, args)
        else:
            report = args.func(ctx, args)
    except GkeysError as exc:
        console.fail(exc.message, exc.exit_code)
        if args.verbose and exc.detail:
            sys.stderr.write(exc.detail + "\n")
        return exc.exit_code
    except KeyboardInterrupt:
        console.fail("interrupted", EXIT_BAD_INPUT)
        return 130
    except Exception as exc:  # a bug: still one line, still "not verified"
        console.fail(f"internal error: {type(exc).__name__}: {exc} (run with -v for details)", EXIT_NOT_VERIFIED)
        if args.verbose or os.environ.get("GKEYS_DEBUG"):
            traceback.print_exc()
        return EXIT_NOT_VERIFIED
    console.render(report)
    return report.exit_code


def entry() -> None:
    """Console-script wrapper."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
