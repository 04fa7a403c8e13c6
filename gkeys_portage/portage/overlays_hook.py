"""Entry point of the ``postsync.d/gkeys-overlays`` hook: refresh and verify the overlay list.

Portage runs ``postsync.d`` hooks once after ``emerge --sync`` (no arguments) and fails the sync if
one exits non-zero.  This hook downloads ``[overlays] url`` and ``[overlays] signature-url``,
verifies them (signature by an overlay-list key of ``[overlays] category``, safe parsing, format and
source-URL rules) and replaces ``[overlays] output`` atomically only if everything passed.  On any failure it
prints one clear line, leaves the previous verified copy in place and exits non-zero.

It runs what ``gkeys verify-overlays --install`` runs (:mod:`gkeys_portage.ui.overlays`), so the hook
and the command cannot drift apart; only its warnings are counted (``-v`` lists them), since it
prints on every sync.
The configuration comes from ``$GKEYS_CONFIG`` or ``${EPREFIX}/etc/gkeys/gkeys.conf``; options
given to the hook (``-c FILE``, ``--root DIR``, ``-q``, ``-v``, ``--json``) are passed on.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from gkeys_portage.core.config import load_config
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.ui.output import Console, Report
from gkeys_portage.ui.overlays import OverlayRequest, overlay_report
from gkeys_portage.ui.runner import add_output_options, run_report


def build_parser() -> argparse.ArgumentParser:
    """The hook's options: ``-c FILE``, ``--root DIR``, ``--json``, ``-q``, ``-v``."""
    parser = argparse.ArgumentParser(prog="gkeys-overlays",
                                     description="postsync.d hook: refresh and verify the overlay list")
    parser.add_argument("-c", "--config", metavar="FILE", help="configuration file (default: $GKEYS_CONFIG or "
                                                                "${EPREFIX}/etc/gkeys/gkeys.conf)")
    parser.add_argument("--root", metavar="DIR", help="keep all state under DIR")
    add_output_options(parser)
    return parser


def _run(args: argparse.Namespace, console: Console) -> Report:
    ctx = Gkeys(load_config(Path(args.config) if args.config else None, Path(args.root) if args.root else None))
    return overlay_report(ctx, OverlayRequest(install=True, verbose=args.verbose, list_warnings=False))


def main(argv: Sequence[str] | None = None) -> int:
    """Verify ``[overlays] url`` and install it to ``[overlays] output``; return the exit status."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    return run_report(args, _run)


if __name__ == "__main__":
    sys.exit(main())
