"""Helpers shared by the CLI topic modules: common options and sub-parser construction."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from gkeys_portage.keys.context import Gkeys
from gkeys_portage.ui.output import Report

Action = Callable[[Gkeys, argparse.Namespace], Report]
SubParsers = Any  # argparse._SubParsersAction is private; keep the annotation honest but loose


def add_common_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """``-c``, ``--root``, ``--json``, ``-q``, ``-v``: accepted before or after the action name."""
    default: Any = argparse.SUPPRESS if suppress else None
    flag_default: Any = argparse.SUPPRESS if suppress else False
    group = parser.add_argument_group("common options")
    group.add_argument("-c", "--config", metavar="FILE", default=default,
                       help="configuration file (default: $GKEYS_CONFIG or ${EPREFIX}/etc/gkeys/gkeys.conf)")
    group.add_argument("--root", metavar="DIR", default=default,
                       help="keep all state (seeds, keyrings, records) under DIR; wins over [base] gkeysdir")
    group.add_argument("--json", action="store_true", default=flag_default,
                       help="print one JSON document with the same facts as the text output")
    group.add_argument("-q", "--quiet", action="store_true", default=flag_default,
                       help="print only warnings and errors")
    group.add_argument("-v", "--verbose", action="store_true", default=flag_default,
                       help="print more detail (gpg's own messages on failure)")


def add_action(sub: SubParsers, name: str, func: Action, *, summary: str, description: str = "",
               epilog: str = "", needs_lock: bool = False, verifies: str = "") -> argparse.ArgumentParser:
    """Register one action: its sub-parser, its function and whether it writes state (takes the lock).

    ``verifies`` names the argument holding what a verifying action verifies: its ``--json`` document then
    carries the same keys whether it verified or refused (``ui.output.VERDICT_KEYS``, docs/exit-codes.md).
    """
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=summary, description=description or summary, epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common_options(parser, suppress=True)
    parser.set_defaults(func=func, needs_lock=needs_lock)
    if verifies:
        parser.set_defaults(verifies=verifies)
    return parser


def add_category(parser: argparse.ArgumentParser, *, required: bool = False, default: str | None = None,
                 help_text: str = "seed category") -> None:
    """``-C/--category``."""
    parser.add_argument("-C", "--category", required=required, default=default, metavar="CAT",
                        help=help_text + (f" (default: {default})" if default else ""))


def add_nick(parser: argparse.ArgumentParser, *, required: bool = False, help_text: str = "seed nick") -> None:
    """``-n/--nick``."""
    parser.add_argument("-n", "--nick", required=required, metavar="NICK", help=help_text)
