"""Entry-point plumbing shared by the console scripts (``gkeys``, ``gkeys-gen``, ``gkeys-ldap``).

:func:`run_report` runs one action and renders its report; every failure becomes one line (or one
JSON document) and its exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from gkeys_portage.core import children
from gkeys_portage.core.config import default_config_path, load_config
from gkeys_portage.core.errors import EXIT_BAD_INPUT, EXIT_NOT_VERIFIED, GkeysError
from gkeys_portage.ui.output import WARN, Console, Report, neutralise, with_verdict


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
    target = verified_target(args)
    try:
        report = func(args, console)
    except GkeysError as exc:
        next_step = exc.next_step or (getattr(args, "help_command", "") if exc.reason == "usage" else "")
        status = _fail(console, exc.message, exc.exit_code, reason=exc.reason, file=exc.file or target,
                       signer=exc.signer, next_step=next_step)
        if args.verbose and exc.detail:
            sys.stderr.write("".join(neutralise(line) + "\n" for line in exc.detail.split("\n")))
        _say_where(args, console)
        return status
    except BrokenPipeError:  # stdout closed while the action printed (a JSON refusal, a streamed listing)
        return closed_pipe(EXIT_NOT_VERIFIED)
    except OSError as exc:  # local I/O: disk full, permissions, read-only file system
        where = f" ({exc.filename})" if exc.filename else ""
        return _fail(console, f"cannot read or write local files: {exc.strerror or exc}{where}", EXIT_BAD_INPUT,
                     reason="local-io", file=target)
    except (KeyboardInterrupt, EOFError):
        children.end_all()  # a gpg hashing for a worker thread would hold the exit until it is done
        return _fail(console, "interrupted", 130, reason="interrupted", file=target, shown=EXIT_BAD_INPUT)
    except Exception as exc:  # a bug: still one line
        status = _fail(console, f"internal error: {type(exc).__name__}: {exc} (run with -v for details)",
                       EXIT_NOT_VERIFIED, reason="internal-error", file=target)
        if args.verbose or os.environ.get("GKEYS_DEBUG"):
            traceback.print_exc()
        return status
    if hasattr(args, "verifies"):
        report.data = with_verdict(report.data, report.exit_code, target)
    try:
        console.render(report)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left (``gkeys list-seed | head -1``): the action's own status, quietly
        return closed_pipe(report.exit_code)
    if report.exit_code:
        _say_where(args, console)
    return report.exit_code


def _fail(console: Console, text: str, status: int, *, reason: str, file: str | None, signer: str | None = None,
          next_step: str | None = None, shown: int | None = None) -> int:
    """Print the one-line failure (``--json``: its document on stdout) and return ``status``, also when stdout
    is a pipe whose reader left: a refusal never turns into exit 0 on its way out.  ``shown``: the exit status
    the line names, when it is not ``status``."""
    try:
        console.fail(text, status if shown is None else shown, reason=reason, file=file, signer=signer,
                     next_step=next_step)
    except BrokenPipeError:
        return closed_pipe(status)
    return status


def flushed(status: int) -> int:
    """Flush stdout and return ``status``; a reader that has gone is :func:`closed_pipe` (no error at exit)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return closed_pipe(status)
    return status


def closed_pipe(status: int) -> int:
    """Point stdout at /dev/null after a closed pipe and return ``status``: no traceback, no flush error at exit.

    What Python's documentation recommends for SIGPIPE (``signal`` module, "Note on SIGPIPE"): the interpreter
    would otherwise fail again flushing stdout on its way out and print "Exception ignored ...".
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (a test's StringIO): nothing to redirect
        pass
    finally:
        os.close(devnull)
    return status


def verified_target(args: argparse.Namespace) -> str | None:
    """What a verifying action verifies (the option its ``add_action(verifies=...)`` names), else None."""
    name = getattr(args, "verifies", None)
    value = getattr(args, name, None) if name else None
    return str(value) if value is not None else None


class JsonUsageParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one JSON document on stdout (for ``--json``), exit 2."""

    #: the command line being parsed (set by the entry point), to name the action's ``--help``
    words: tuple[str, ...] = ()

    def error(self, message: str) -> NoReturn:
        """Print the usage error as JSON (the keys of every refusal) and exit 2."""
        document = {"ok": False, "verified": False, "error": f"{self.prog}: {message}", "exit": EXIT_BAD_INPUT,
                    "reason": "usage", "file": None, "signer": None, "next_step": self._help_command()}
        sys.stdout.write(json.dumps(document, sort_keys=True) + "\n")
        sys.stdout.flush()
        raise SystemExit(EXIT_BAD_INPUT)

    def _help_command(self) -> str:
        """``PROG ACTION --help`` when the command line names an action of this parser, else ``PROG --help``."""
        for action in self._actions:
            choices = action.choices if isinstance(action.choices, dict) else {}
            for word in self.words:
                if word in choices:
                    return f"{self.prog} {word} --help"
        return f"{self.prog} --help"


def _say_where(args: argparse.Namespace, console: Console) -> None:
    if args.verbose and not args.json:
        text = where(args)
        if text:
            console.message(WARN, text)
