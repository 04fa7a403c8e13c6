"""Entry-point plumbing shared by the console scripts (``gkeys``, ``gkeys-gen``, ``gkeys-ldap``).

:func:`run_report` runs one action and renders its report; every failure becomes one line (or one
JSON document) and its exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from gkeys_portage.core.config import default_config_path, load_config
from gkeys_portage.core.errors import EXIT_BAD_INPUT, EXIT_NOT_VERIFIED, GkeysError
from gkeys_portage.ui.output import WARN, Console, Report


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """``--json``, ``-q`` and ``-v`` as ``gkeys`` has them."""
    group = parser.add_argument_group("output")
    group.add_argument("--json", action="store_true", help="print one JSON document with the same facts as the text")
    group.add_argument("-q", "--quiet", action="store_true", help="print only warnings and errors")
    group.add_argument("-v", "--verbose", action="store_true", help="print more detail on failure")


def where(args: argparse.Namespace) -> str | None:
    """``using config FILE and state directory DIR`` for the options in ``args`` (None if it has none)."""
    if not hasattr(args, "config"):
        return None
    try:
        config = load_config(Path(args.config) if args.config else None, Path(args.root) if args.root else None)
    except GkeysError as exc:
        return f"the configuration cannot be read: {exc.message}"
    used = str(config.path) if config.path else f"none ({default_config_path()} does not exist: built-in defaults)"
    return f"config file: {used}; state directory: {config.gkeysdir}"


def run_report(args: argparse.Namespace, func: Callable[[argparse.Namespace, Console], Report]) -> int:
    """Run ``func``, render its report (or its one-line failure) and return the exit status.

    With ``-v`` a failure is followed by the config file and state directory in use.
    """
    console = Console(json_mode=args.json, quiet=args.quiet, verbose=args.verbose)
    try:
        report = func(args, console)
    except GkeysError as exc:
        console.fail(exc.message, exc.exit_code)
        if args.verbose and exc.detail:
            sys.stderr.write(exc.detail + "\n")
        _say_where(args, console)
        return exc.exit_code
    except OSError as exc:  # local I/O: disk full, permissions, read-only file system
        where = f" ({exc.filename})" if exc.filename else ""
        console.fail(f"cannot read or write local files: {exc.strerror or exc}{where}", EXIT_BAD_INPUT)
        return EXIT_BAD_INPUT
    except (KeyboardInterrupt, EOFError):
        console.fail("interrupted", EXIT_BAD_INPUT)
        return 130
    except Exception as exc:  # a bug: still one line
        console.fail(f"internal error: {type(exc).__name__}: {exc} (run with -v for details)", EXIT_NOT_VERIFIED)
        if args.verbose or os.environ.get("GKEYS_DEBUG"):
            traceback.print_exc()
        return EXIT_NOT_VERIFIED
    console.render(report)
    if report.exit_code:
        _say_where(args, console)
    return report.exit_code


def _say_where(args: argparse.Namespace, console: Console) -> None:
    if args.verbose and not args.json:
        text = where(args)
        if text:
            console.message(WARN, text)
