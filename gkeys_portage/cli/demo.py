"""CLI action ``demo`` (the offline demonstration)."""

from __future__ import annotations

import argparse

from gkeys_portage.cli.common import SubParsers, add_action
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.ui.output import Report


def run_demo(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Run the offline demo."""
    from gkeys_portage.demo.runner import run

    return run(args, args.gkeys_main)


def register(sub: SubParsers) -> None:
    """Register demo."""
    p = add_action(sub, "demo", run_demo,
                   examples=("gkeys demo",
                             "gkeys demo --keep"),
                   summary="run an offline demonstration in a temporary directory",
                   description="Build a self-contained world on 127.0.0.1 (keys, signed seeds, a keyserver\n"
                               "and WKD, release media, an overlay list, a git tree) and run the real\n"
                               "commands against it: what verifies, and what is refused and why.")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory and print its path")
