"""Helpers shared by the CLI topic modules: common options and sub-parser construction."""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable, Iterable, Sequence
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


def unknown_word(kind: str, word: str, known: Iterable[str], listing: str) -> str:
    """``unknown KIND 'word' (did you mean 'x'?)``; ``listing`` (where the valid words are) when none is close."""
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return f"unknown {kind} {word!r} (" + (f"did you mean {close[0]!r}?" if close else listing) + ")"


_EXAMPLES_HEADER = re.compile(r"examples?(?: \([^)]*\))?:")


def examples_block(examples: Sequence[str]) -> str:
    """The ``examples:`` block of an epilog: one indented command a line."""
    return "examples:\n" + "".join(f"  {command}\n" for command in examples)


def split_examples(epilog: str) -> tuple[list[str], str]:
    """The commands of an epilog's ``examples:`` blocks, and the epilog without them.

    The epilog (what ``--help`` prints) is the one source of the examples: ``docgen`` turns them into the
    man pages' EXAMPLES section and ``tests/test_docs.py`` parses each with the real parser.  A block is a
    line ``examples:`` (or ``example:``, ``examples (Portage):``) and the indented lines after it; a line
    ending in `` \\`` continues on the next one.
    """
    commands: list[str] = []
    rest: list[str] = []
    lines = epilog.split("\n")
    i = 0
    while i < len(lines):
        if not _EXAMPLES_HEADER.fullmatch(lines[i].strip()) or lines[i].startswith(" "):
            rest.append(lines[i])
            i += 1
            continue
        i += 1
        while i < len(lines) and lines[i].startswith("  "):
            command = lines[i].strip()
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1].rstrip() + " " + lines[i].strip()
            commands.append(command)
            i += 1
        while rest and not rest[-1].strip():
            rest.pop()
        while i < len(lines) and not lines[i].strip():
            i += 1
        if rest and i < len(lines):
            rest.append("")
    return commands, "\n".join(rest).strip("\n")


def add_action(sub: SubParsers, name: str, func: Action, *, summary: str, description: str = "",
               epilog: str = "", examples: Sequence[str] = (), needs_lock: bool = False,
               verifies: str = "") -> argparse.ArgumentParser:
    """Register one action: its sub-parser, its function and whether it writes state (takes the lock).

    ``examples`` (whole command lines) are appended to the epilog as an ``examples:`` block, unless the
    epilog holds its own (see ``split_examples``).  ``verifies`` names the argument holding what a verifying
    action verifies: its ``--json`` document then carries the same keys whether it verified or refused
    (``ui.output.VERDICT_KEYS``, docs/exit-codes.md).
    """
    if examples:
        epilog = (epilog.rstrip("\n") + "\n\n" if epilog else "") + examples_block(examples)
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=summary, description=description or summary, epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common_options(parser, suppress=True)
    parser.set_defaults(func=func, needs_lock=needs_lock, help_command=f"gkeys {name} --help")
    if verifies:
        parser.set_defaults(verifies=verifies)
    return parser


def bundle_notes(report: Report, category: str, notes: Sequence[str]) -> None:
    """What a ``[keyrings]`` bundle left out (keys no seed pins: as it should be) as information, why it was
    refused as a warning; each line names the category."""
    for note in notes:
        (report.info if note.startswith("dropped from ") else report.warn)(f"{category}: {note}")


def add_category(parser: argparse.ArgumentParser, *, required: bool = False, default: str | None = None,
                 help_text: str = "seed category") -> None:
    """``-C/--category``."""
    parser.add_argument("-C", "--category", required=required, default=default, metavar="CAT",
                        help=help_text + (f" (default: {default})" if default else ""))


def add_nick(parser: argparse.ArgumentParser, *, required: bool = False, help_text: str = "seed nick") -> None:
    """``-n/--nick``."""
    parser.add_argument("-n", "--nick", required=required, metavar="NICK", help=help_text)
