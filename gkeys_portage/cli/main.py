"""``gkeys``: the command line entry point.

Argument parsing and presentation only; every action is a function ``(Gkeys, Namespace) -> Report``
in a topic module, registered with its sub-parser through ``set_defaults(func=...)``.  A command that
names an action imports only that action's topic module (:data:`ACTION_TOPICS`): ``verify-tree`` inside
``emerge --sync`` does not load the doctor, the downloader and the authority chain first.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from gkeys_portage import __version__
from gkeys_portage.cli.common import add_common_options, unknown_word
from gkeys_portage.core import invocation
from gkeys_portage.core.config import KeyRef, load_config
from gkeys_portage.core.errors import GkeysError
from gkeys_portage.core.types import parse_category, parse_nick
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.ui.output import Console, Report
from gkeys_portage.ui.runner import JsonUsageParser, closed_pipe, flushed, run_report
from gkeys_portage.verify import spool

#: The topic modules under ``gkeys_portage.cli``, in the order of ``gkeys --help``.
TOPICS = ("seeds", "keys", "signing", "publish", "media", "overlays", "tree", "checks", "portage_actions",
          "binpkg", "demo")

#: The topic that registers each action (``tests/test_cli.py`` checks it against the registrations).
ACTION_TOPICS = {
    **dict.fromkeys(("add-seed", "convert-seed", "fetch-seed", "list-cats", "list-seed", "list-seedfiles",
                     "move-seed", "remove-seed", "search-key", "update-seed"), "seeds"),
    **dict.fromkeys(("export-keyring", "import-key", "install-key", "list-key", "refresh-key", "remove-key"),
                    "keys"),
    "sign": "signing", "verify": "signing",
    "build-keyring": "publish", "export-wkd": "publish", "send-key": "publish",
    "fetch-media": "media", "verify-media": "media", "verify-overlays": "overlays",
    "verify-snapshot": "tree", "verify-tree": "tree", "check-key": "checks", "spec-check": "checks",
    "doctor": "portage_actions", "setup-portage": "portage_actions", "status": "portage_actions",
    "binpkg-keyring": "binpkg", "demo": "demo", "history": "keys", "audit": "keys", "journal": "keys",
}

VALUE_OPTIONS = ("-c", "--config", "--root")  # the common options that take the next word as their value

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
A command gkeys prints for you to run next (a next step, a fix) carries the -c FILE and
--root DIR you gave; $GKEYS_CONFIG is not repeated (your environment carries it).

exit status (one per cause; --json reason codes: /usr/share/doc/gkeys-portage/exit-codes.md):
  0  verified / done      1  not verified (no signature, bad signature, ...), or a check failed
  2  usage or bad input   3  network failure after retries, or not found on the server (404)

Run 'gkeys ACTION --help' for the options of one action; 'gkeys demo' shows it all working
offline in a temporary directory.
"""


def action_word(words: Sequence[str]) -> str | None:
    """The first word of a command line that is neither an option nor a common option's value."""
    value_next = False
    for word in words:
        if value_next:
            value_next = False
        elif word in VALUE_OPTIONS:
            value_next = True
        elif not word.startswith("-"):
            return word
    return None


def topics(words: Sequence[str] | None = None) -> list[ModuleType]:
    """The topic modules a command line needs: the named action's alone, else all of them."""
    topic = ACTION_TOPICS.get(action_word(words) or "") if words is not None else None
    return [importlib.import_module(f"gkeys_portage.cli.{name}") for name in ([topic] if topic else TOPICS)]


def build_parser(*, json_errors: bool = False, words: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``gkeys`` argument parser (``json_errors``: usage errors as one JSON document, for ``--json``).

    With ``words`` (the command line) only the named action's topic is registered; without, every action."""
    parser = (JsonUsageParser if json_errors else argparse.ArgumentParser)(
        prog="gkeys", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gkeys-portage {__version__}")
    add_common_options(parser, suppress=False)
    sub = parser.add_subparsers(title="actions", metavar="ACTION")
    sub.required = True
    for topic in topics(words):
        topic.register(sub)
    return parser


def _seed_added(args: argparse.Namespace) -> KeyRef | None:
    """The seed ``add-seed`` adds: a ``[purposes]`` line naming it before it exists must not block adding it."""
    if not getattr(args, "adds_seed", False):
        return None
    try:
        return KeyRef(parse_category(args.category), parse_nick(args.nick))
    except GkeysError:  # add-seed itself says what is wrong with them
        return None


def subparser(parser: argparse.ArgumentParser, action: str) -> argparse.ArgumentParser | None:
    """The sub-parser of ``action`` in ``parser`` (None if it registers no such action)."""
    for item in parser._actions:  # argparse keeps its sub-parsers there; no public accessor exists
        if isinstance(item, argparse._SubParsersAction):
            found: argparse.ArgumentParser | None = item.choices.get(action)
            return found
    return None


def parse_words(parser: argparse.ArgumentParser, words: list[str]) -> argparse.Namespace:
    """Parse a command line; a mistyped action or option is a usage error with "did you mean".

    An unknown action names the closest action; an unknown ``--option`` is reported by the action's own
    sub-parser (its usage, its ``--help``) with the closest of its options, before a missing required one.
    """
    action = action_word(words)
    if action is not None and action not in ACTION_TOPICS:
        parser.error(unknown_word("action", action, ACTION_TOPICS, "'gkeys --help' lists them"))
    target = (subparser(parser, action) if action else None) or parser
    options = [option for option in target._option_string_actions if option.startswith("--")]
    for word in words[:words.index("--") if "--" in words else len(words)]:
        name = word.split("=", 1)[0]
        if name.startswith("--") and not any(option.startswith(name) for option in options):
            target.error(unknown_word("option", name, options, f"'{target.prog} --help' lists them"))
    return parser.parse_args(words)


def _run_action(args: argparse.Namespace, console: Console) -> Report:
    config = load_config(Path(args.config) if args.config else None,
                         Path(args.root) if args.root else None)
    ctx = Gkeys(config, adding=_seed_added(args))
    ctx.waiting = console.waiting
    args.console = console
    if getattr(args, "command", None) != "ingest" and spool.pending(ctx.layout):  # what builds verified
        from gkeys_portage.portage.makeconf import portage_distdir
        from gkeys_portage.verify.ingest import ingest_quietly  # the verifiers: only when a build left records

        ingest_quietly(ctx, portage_distdir)
    if getattr(args, "needs_lock", False):
        ctx.ensure_layout()
        with ctx.lock:
            report: Report = args.func(ctx, args)
            return report
    report = args.func(ctx, args)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gkeys``; return the exit status (also used by the console script).

    A closed stdout (``gkeys --help | head -1``) ends the run quietly, without a traceback."""
    try:
        return _main(argv)
    except BrokenPipeError:
        return closed_pipe(0)
    except SystemExit:  # argparse after --help: its text leaves now, where a closed pipe is still caught
        flushed(0)
        raise


def _main(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(json_errors="--json" in words, words=words)
    if isinstance(parser, JsonUsageParser):
        parser.words = tuple(words)
    args = parse_words(parser, words)
    args.gkeys_main = main  # the demo runs its steps through this same entry point
    eroot = getattr(args, "eroot", None)  # next steps act on the root the user chose, not the host's
    with invocation.recorded(config=args.config, root=args.root, eroot=str(eroot) if eroot else None):
        return run_report(args, _run_action)


def entry() -> None:
    """Console-script wrapper."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
