"""Man pages, bash completion and the shipped gkeys.conf, generated from the argparse definitions and the
config schema (:mod:`gkeys_portage.core.configschema`).

The generated files are kept in the source tree (``docs/man/``, ``packaging/bash-completion/``,
``packaging/gkeys.conf``) so a build needs no dependency; ``tests/test_install_files.py`` fails when they
differ from what this module generates now.  Regenerate after changing an option::

    python3 -m gkeys_portage.cli.docgen            # writes into the source checkout
    python3 -m gkeys_portage.cli.docgen --check    # exit 1 if anything is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from gkeys_portage import __version__, installfiles
from gkeys_portage.cli.common import split_examples
from gkeys_portage.core import configschema

SOURCE = f"gkeys-portage {__version__}"


@dataclass(frozen=True)
class Program:
    """One command: its name, man section and parser."""

    name: str
    build: Callable[[], argparse.ArgumentParser]


def programs() -> tuple[Program, ...]:
    """The console scripts, in man-page order."""
    from gkeys_portage.cli import gen, ldap, main
    from gkeys_portage.portage import binpkg, fetch

    return (Program("gkeys", main.build_parser), Program("gkeys-gen", gen.build_parser),
            Program("gkeys-ldap", ldap.build_parser), Program("gkeys-fetch", fetch.build_parser),
            Program("gkeys-trust-helper", binpkg.build_parser))


# ---- argparse introspection -------------------------------------------------------------------------

def _subparsers(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """Action name -> (sub-parser, one-line summary); empty for a parser without actions."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return {name: (sub, summaries.get(name, "")) for name, sub in action.choices.items()}
    return {}


def _own_actions(parser: argparse.ArgumentParser, skip: frozenset[str] = frozenset()) -> Iterator[argparse.Action]:
    """The parser's options and positionals, without sub-parsers and without options named in ``skip``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        if action.option_strings and set(action.option_strings) & skip:
            continue
        yield action


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _metavar(action: argparse.Action) -> str:
    if action.choices is not None and action.metavar is None:
        return "{" + ",".join(str(choice) for choice in action.choices) + "}"
    metavar = action.metavar if action.metavar is not None else (action.dest.upper() if action.option_strings
                                                                 else action.dest)
    return metavar if isinstance(metavar, str) else " ".join(metavar)


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    return parser._get_formatter()._expand_help(action)


def _option_names(parser: argparse.ArgumentParser) -> list[str]:
    return sorted({name for action in _own_actions(parser) for name in action.option_strings})



def vocabulary() -> dict[str, dict[str, frozenset[str]]]:
    """Program -> action (``""``: the program itself) -> every option string accepted there.

    An action accepts its own options and, like argparse, those of its program; ``tests/test_docs.py``
    checks every option and action the README and ``docs/*.md`` name against this.
    """
    table: dict[str, dict[str, frozenset[str]]] = {}
    for program in programs():
        parser = program.build()
        own = frozenset(_option_names(parser))
        table[program.name] = {"": own} | {name: own | frozenset(_option_names(sub))
                                            for name, (sub, _summary) in _subparsers(parser).items()}
    return table

# ---- roff -------------------------------------------------------------------------------------------

def roff(text: str) -> str:
    """Escape text for roff: backslashes, hyphens and control characters at the start of a line."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line for line in text.split("\n"))


def _block(text: str) -> list[str]:
    """Preformatted text (the parsers use RawDescriptionHelpFormatter) as a no-fill block."""
    lines = [line.rstrip() for line in text.strip("\n").split("\n")]
    return [".nf", *(roff(line) if line else ".sp" for line in lines), ".fi"]


def _options(parser: argparse.ArgumentParser, skip: frozenset[str] = frozenset()) -> list[str]:
    out: list[str] = []
    for action in _own_actions(parser, skip):
        if action.option_strings:
            names = ", ".join(f"\\fB{roff(name)}\\fR" for name in action.option_strings)
            term = names + (f" \\fI{roff(_metavar(action))}\\fR" if _takes_value(action) else "")
        else:
            term = f"\\fI{roff(_metavar(action))}\\fR"
        out += [".TP", term, roff(_help(parser, action)) or "\\&"]
    return out


def _usage(parser: argparse.ArgumentParser) -> list[str]:
    usage = parser.format_usage().strip()
    return _block(usage[len("usage: "):] if usage.startswith("usage: ") else usage)


def _split_description(text: str) -> tuple[str, str]:
    """First sentence (for NAME) and the whole text."""
    first = text.strip().split("\n\n")[0].replace("\n", " ")
    return first.split(". ")[0].rstrip(".:"), text


def man_page(program: Program) -> str:
    """The man page (section 1) of one console script."""
    parser = program.build()
    summary, description = _split_description(parser.description or program.name)
    lines = [f'.TH {program.name.upper()} 1 "" "{SOURCE}" "User Commands"', ".SH NAME",
             f"{roff(program.name)} \\- {roff(summary)}", ".SH SYNOPSIS", *_usage(parser),
             ".SH DESCRIPTION", *_block(description), ".SH OPTIONS", *_options(parser)]
    actions = _subparsers(parser)
    if actions:
        common = frozenset(_option_names(parser))
        lines.append(".SH ACTIONS")
        for name, (sub, short) in actions.items():
            lines += [f".SS {roff(name)}", *_usage(sub)]
            text = sub.description or short
            if text and text != short:
                lines += [roff(short), ".PP", *_block(text)]
            else:
                lines.append(roff(short))
            lines += _options(sub, common)
            notes = split_examples(sub.epilog or "")[1]
            if notes:
                lines += [".PP", *_block(notes)]
    own_examples, notes = split_examples(parser.epilog or "")
    if notes:
        lines += [".SH NOTES", *_block(notes)]
    lines += _examples(own_examples, {name: split_examples(sub.epilog or "")[0]
                                      for name, (sub, _short) in actions.items()})
    lines += [".SH SEE ALSO", roff(", ".join(f"{p.name}(1)" for p in programs() if p.name != program.name)
                                   + ", gkeys.conf(5), emerge(1), portage(5)")]
    return "\n".join(lines) + "\n"


def examples(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Action name (``""``: the program itself) -> the example commands of its ``--help`` epilog."""
    table = {"": split_examples(parser.epilog or "")[0]}
    table.update({name: split_examples(sub.epilog or "")[0] for name, (sub, _short) in _subparsers(parser).items()})
    return table


def _examples(own: list[str], per_action: dict[str, list[str]]) -> list[str]:
    """The EXAMPLES section: the program's own examples, then one subsection per action."""
    if not own and not any(per_action.values()):
        return []
    lines = [".SH EXAMPLES"]
    if own:
        lines += _block("\n".join(own))
    for name, commands in per_action.items():
        if commands:
            lines += [f".SS {roff(name)}", *_block("\n".join(commands))]
    return lines


@dataclass
class ConfigSection:
    """One section of the sample config: its comments and its options (name, default, comment)."""

    name: str
    options: list[tuple[str, str, str]]
    comment: str = ""


def parse_sample_config(text: str) -> list[ConfigSection]:
    """The sections of the sample ``gkeys.conf``: each ``# key = default`` line with the comment above it."""
    sections: list[ConfigSection] = []
    pending: list[str] = []
    for line in text.splitlines():
        header = re.fullmatch(r"(?:# )?\[([a-z0-9-]+)\]", line)  # commented: an open section's built-in lines
        option = re.fullmatch(r"# ([a-z0-9-]+) =(?: (.*))?", line)
        if header:
            sections.append(ConfigSection(header.group(1), []))
            pending = []
        elif option and sections:
            sections[-1].options.append((option.group(1), option.group(2) or "", " ".join(pending)))
            pending = []
        elif line.startswith("# ") and sections:
            pending.append(line[2:])
        elif not line.strip():
            pending = []
    return sections


def config_man_page(sample: str) -> str:
    """``gkeys.conf(5)``, generated from the sample configuration."""
    lines = ['.TH GKEYS.CONF 5 "" "' + SOURCE + '" "File Formats"', ".SH NAME",
             "gkeys.conf \\- configuration of gkeys\\-portage", ".SH SYNOPSIS",
             "\\fI${EPREFIX}/etc/gkeys/gkeys.conf\\fR (or \\fB\\-c\\fR \\fIFILE\\fR, or \\fB$GKEYS_CONFIG\\fR)",
             ".SH DESCRIPTION",
             roff("An INI file.  Every option is optional; the defaults below apply when it is absent.  "
                  "Inline comments start with ' ;'.  A world-writable file is refused, and values that "
                  "cannot be parsed are errors.  The installed sample lists every option, commented out."),
             ]
    for section in parse_sample_config(sample):
        lines.append(f".SH [{roff(section.name)}]")
        for name, default, comment in section.options:
            shown = f"\\fB{roff(name)}\\fR = \\fI{roff(default)}\\fR" if default else f"\\fB{roff(name)}\\fR ="
            lines += [".TP", shown, roff(comment) or "\\&"]
    lines += [".SH SEE ALSO", "gkeys(1), gkeys\\-fetch(1)"]
    return "\n".join(lines) + "\n"


# ---- bash completion --------------------------------------------------------------------------------

def _words(names: Sequence[str]) -> str:
    return " ".join(names)


def _value_options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted({name for action in _own_actions(parser) if action.option_strings and _takes_value(action)
                   for name in action.option_strings})


def _choices(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    return [("|".join(action.option_strings), _words([str(c) for c in action.choices]))
            for action in _own_actions(parser) if action.option_strings and action.choices]


def _function_name(program: str) -> str:
    return "_" + program.replace("-", "_")


def _completion_function(program: Program) -> list[str]:
    parser = program.build()
    actions = _subparsers(parser)
    value_opts = set(_value_options(parser))
    choices = _choices(parser)
    for sub, _ in actions.values():
        value_opts.update(_value_options(sub))
        choices += [c for c in _choices(sub) if c not in choices]
    fn = _function_name(program.name)
    out = [f"{fn}() {{", "\tlocal cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}",
           "\tlocal action= i opts"]
    for pattern, words in choices:
        out.append(f'\tcase ${{prev}} in {pattern}) COMPREPLY=($(compgen -W "{words}" -- "${{cur}}")); return ;; esac')
    if value_opts:
        out.append(f"\tcase ${{prev}} in {'|'.join(sorted(value_opts))}) "
                   'COMPREPLY=($(compgen -f -- "${cur}")); return ;; esac')
    top = _words(_option_names(parser))
    if not actions:
        out += [f'\tCOMPREPLY=($(compgen -W "{top}" -- "${{cur}}"))', "}"]
        return out
    names = _words(list(actions))
    out += [f'\tlocal actions="{names}"',
            "\tfor ((i = 1; i < COMP_CWORD; i++)); do",
            '\t\tcase " ${actions} " in *" ${COMP_WORDS[i]} "*) action=${COMP_WORDS[i]}; break ;; esac',
            "\tdone", "\tcase ${action} in",
            '\t\t"") [[ ${cur} == -* ]] || { COMPREPLY=($(compgen -W "${actions}" -- "${cur}")); return; }',
            f'\t\t\topts="{top}" ;;']
    for name, (sub, _) in actions.items():
        out.append(f'\t\t{name}) opts="{_words(_option_names(sub))}" ;;')
    out += ["\tesac", '\tCOMPREPLY=($(compgen -W "${opts}" -- "${cur}"))', "}"]
    return out


def completion(program: Program) -> str:
    """The bash completion script of one command (bash-completion loads it by the command's name)."""
    lines = [f"# bash completion for {program.name}",
             "# Generated from the argparse definitions by gkeys_portage.cli.docgen: do not edit.", ""]
    lines += _completion_function(program)
    lines += [f"complete -o filenames -F {_function_name(program.name)} {program.name}", ""]
    return "\n".join(lines)


# ---- files ------------------------------------------------------------------------------------------

def generated_files(root: Path) -> dict[str, str]:
    """Source-tree path -> content of every generated file."""
    files = {f"docs/man/{program.name}.1": man_page(program) for program in programs()}
    sample = configschema.sample_config()
    files[installfiles.SAMPLE_CONFIG] = sample  # the shipped config: every default, commented out
    files["docs/man/gkeys.conf.5"] = config_man_page(sample)
    files.update({f"{installfiles.COMPLETION_DIR}/{program.name}": completion(program) for program in programs()})
    return files


def stale_files(root: Path) -> list[str]:
    """Generated files under ``root`` that are missing or differ from what would be generated now."""
    stale = []
    for name, content in generated_files(root).items():
        path = root / name
        if not path.is_file() or path.read_text(encoding="utf-8") != content:
            stale.append(name)
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or with ``--check`` compare) the generated files of the source checkout."""
    parser = argparse.ArgumentParser(prog="python3 -m gkeys_portage.cli.docgen", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report files that are out of date")
    parser.add_argument("--root", type=Path, default=installfiles.source_root(), help="the source checkout")
    args = parser.parse_args(argv)
    if args.root is None:
        parser.error("not running from a source checkout: give --root")
    if args.check:
        stale = stale_files(args.root)
        for name in stale:
            print(f"out of date: {name} (run python3 -m gkeys_portage.cli.docgen)")
        return 1 if stale else 0
    for name, content in generated_files(args.root).items():
        (args.root / name).write_text(content, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
