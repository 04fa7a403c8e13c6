"""The README and docs/*.md name only actions and options that exist (checked against the argparse parsers).

Every command line in code (fenced blocks and `inline` spans) that starts with one of the console scripts, or
with a ``gkeys`` action (the README's command table), is split into commands at ``&&``, ``||``, ``|``,
``;`` and ``#``; the action must be one of ``gkeys``'s and each option must be accepted by that action (or the
program).  An option in code that starts with no command at all (``--policy all``) must exist somewhere in the
parsers, unless it belongs to another tool and is listed in ``FOREIGN``.  Commands of other tools (gpg, git,
emerge, wget) are not checked.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tree_helpers import PROJECT

from gkeys_portage.cli.docgen import vocabulary

VOCABULARY = vocabulary()
ACTIONS = VOCABULARY["gkeys"]
EVERY_OPTION = frozenset().union(*(options for program in VOCABULARY.values() for options in program.values()))
#: Options of other tools that the docs name on their own, in prose code spans.
FOREIGN = frozenset({"--status-fd", "--list-config", "--verify", "--list-sigs", "--multifile", "--recv-keys", "--sync",  # gpg, emerge
                     "--quick-generate-key", "--quick-add-key", "--upload-pack", "--check-trustdb",  # gpg, git
                     "--check-sigs",  # gpg
                     "--decrypt", "--import-options", "--trust-model", "--lock-never", "--export-filter",  # gpg
                     "--pinentry-mode", "--show-keys", "--faked-system-time",  # gpg (docs/engines.md)
                     "--rounds", "--cold", "--compare-with", "--algo", "--gpg",  # bench/*.py (scripts, not gkeys)
                     "--lone-asc", "--no-tools",  # bench/media.py
                     "--topo-order",  # git rev-list
                     "--link-dest", "--itemize-changes", "--checksum"})  # rsync
OPTION = re.compile(r"^--?[A-Za-z][A-Za-z0-9-]*")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_.]*$")  # ACTION, OPTIONS, CAT...


def documents() -> list[Path]:
    """README.md and every docs/*.md."""
    return [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]


def code_texts(markdown: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every fenced code line and every inline code span outside fences."""
    fenced = False
    for number, line in enumerate(markdown.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            yield number, line
        else:
            for span in re.findall(r"`([^`]+)`", line):
                yield number, span


def commands(text: str) -> Iterator[list[str]]:
    """The words of each command in a code text (markdown's ``\\|`` table escape is an alternative, too)."""
    text = re.sub(r"(^|\s)#.*", "", text.replace("\\|", "|"))
    for part in re.split(r"&&|\|\||\||;|\$\(", text):
        words = [word.strip("[](){}'\",\\") for word in part.split()]
        words = [assignment(word) for word in words if word and word != "$"]
        words = [word for word in words if word]
        if words:
            yield words


def assignment(word: str) -> str:
    """``VAR=value`` is dropped, unless the value starts one of the programs (``FETCHCOMMAND="gkeys-fetch``)."""
    match = re.match(r"^[A-Z_]+=[\"']?(.*)$", word)
    if match is None:
        return word
    return match.group(1) if match.group(1) in VOCABULARY else ""


def problems(words: list[str]) -> Iterator[str]:
    """What is wrong with one command: an unknown action, or an option its program/action does not accept."""
    first, rest = words[0], words[1:]
    if first in VOCABULARY:
        program, actions = first, VOCABULARY[first]
        options = actions[""]
        if len(actions) > 1:  # gkeys, gkeys-ldap: the first word that is no option or path is the action
            action = next((word for word in rest if not word.startswith(("-", "/", "~", "."))
                           and not PLACEHOLDER.match(word)), None)
            if action is not None:
                if action not in actions:
                    yield f"{program} has no action {action!r}"
                    return
                options = actions[action]
    elif first in ACTIONS:  # the README's command table: `list-seed [-C CAT] ...`
        program, options = f"gkeys {first}", ACTIONS[first]
    elif OPTION.match(first):  # a bare option: `--policy all`
        for word in words:
            option = OPTION.match(word)
            if option and option.group() not in EVERY_OPTION | FOREIGN:
                yield f"no parser has the option {option.group()!r}"
        return
    else:
        return  # another tool's command line
    for word in rest:
        if word == "--":  # gkeys-fetch -- wget ...: the rest belongs to the wrapped command
            break
        option = OPTION.match(word)
        if option and option.group() not in options:
            yield f"{program} has no option {option.group()!r}"


def test_docs_are_split_out_of_the_readme() -> None:
    names = {path.name for path in documents()}
    assert {"media.md", "overlays.md", "tree.md", "keys.md", "portage.md", "benchmarks.md"} <= names
    readme = (PROJECT / "README.md").read_text()
    assert len(readme.splitlines()) < 200, "the README is the way in, not the manual"
    for path in documents()[1:]:
        assert f"(docs/{path.name})" in readme, f"README does not link docs/{path.name}"


@pytest.mark.parametrize("path", documents(), ids=lambda path: path.name)
def test_every_named_action_and_option_exists(path: Path) -> None:
    found = [f"{path.name}:{number}: {problem}: {text.strip()}"
             for number, text in code_texts(path.read_text())
             for words in commands(text) for problem in problems(words)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("text, expected", [
    ("gkeys verify-tree /r --policy all", []),
    ("gkeys verify-tree /r --polcy all", ["gkeys has no option '--polcy'"]),
    ("gkeys verfy-tree /r", ["gkeys has no action 'verfy-tree'"]),
    ("gkeys -c /etc/gkeys.conf --json update-seed -C gentoo-devs", []),
    ("list-seed [-C CAT] [-n NICK] [-x X]", ["gkeys list-seed has no option '-x'"]),
    ("--no-such-option", ["no parser has the option '--no-such-option'"]),
    ("gpg --verify x.asc && gkeys verify -F x --bogus", ["gkeys has no option '--bogus'"]),
    ("gkeys-fetch -c C -- wget --passive-ftp URL", []),
    ('FETCH_WRAPPER="gkeys-fetch --bogus --"', ["gkeys-fetch has no option '--bogus'"]),
    ("gkeys-ldap update-seeds -C CAT --uri U", []),
    ("gkeys-ldap serch --uri U", ["gkeys-ldap has no action 'serch'"]),
])
def test_the_checker_catches_typos(text: str, expected: list[str]) -> None:
    assert [problem for words in commands(text) for problem in problems(words)] == expected


def _example_table() -> list[tuple[str, str, list[str]]]:
    from gkeys_portage.cli import docgen

    return [(program.name, action, commands) for program in docgen.programs()
            for action, commands in docgen.examples(program.build()).items()
            if action or not docgen._subparsers(program.build())]


def test_every_action_has_examples_that_parse() -> None:
    """Every action (and every program without actions) shows 2-5 examples, and each parses."""
    import shlex

    from gkeys_portage.cli import docgen

    parsers = {program.name: program.build for program in docgen.programs()}
    missing = [f"{program} {action}".strip() for program, action, commands in _example_table()
               if not 2 <= len(commands) <= 5]
    assert missing == [], "give these actions 2-3 examples (add_action(examples=...))"
    for program, action, commands in _example_table():
        for command in commands:
            words = shlex.split(command, comments=True)
            assert words[0] == program, command
            if action:
                assert action in words, command
            try:
                parsers[program]().parse_args(words[1:])
            except SystemExit as exc:  # argparse's way of refusing
                raise AssertionError(f"does not parse: {command}") from exc


def test_man_pages_have_examples_sections() -> None:
    from gkeys_portage.cli import docgen

    for program in docgen.programs():
        page = docgen.man_page(program)
        assert ".SH EXAMPLES" in page, program.name
        for action in docgen._subparsers(program.build()):
            assert f".SS {docgen.roff(action)}" in page.split(".SH EXAMPLES")[1], (program.name, action)
