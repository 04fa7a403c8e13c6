"""The README in one screen per part (issue 45, item 8): its commands table names every action ``gkeys --help``
lists, "N more programs" counts the console scripts it names, and no line outside tables and code blocks is wider
than 120 characters."""

from __future__ import annotations

import re
import tomllib

from conftest import PROJECT

from gkeys_portage.cli.main import build_parser

README = (PROJECT / "README.md").read_text(encoding="utf-8")
NUMBERS = {"One": 1, "Two": 2, "Three": 3, "Four": 4, "Five": 5, "Six": 6}


def _section(title: str) -> str:
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_commands_table_names_every_action_of_gkeys_help() -> None:
    listed = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    rows = [line for line in _section("Commands").splitlines() if line.startswith("| `")]
    first_cells = [re.split(r"(?<!\\)\|", row)[1] for row in rows]
    named = {name for cell in first_cells for name in re.findall(r"`([a-z][a-z-]*)", cell)}
    assert set(listed) - named == set(), "actions missing from the README's table"
    assert named - set(listed) == set(), "the README's table names actions gkeys does not have"


def test_more_programs_counts_the_console_scripts_it_names() -> None:
    scripts = set(tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]["scripts"]) - {"gkeys"}
    match = re.search(r"^(\w+) more programs: (.*?)\n\n", _section("Commands"), re.M | re.S)
    assert match, "no 'N more programs:' paragraph"
    named = set(re.findall(r"`(gkeys-[a-z-]+)`", match.group(2)))
    assert named == scripts and NUMBERS[match.group(1)] == len(scripts), (match.group(1), named, scripts)


def test_no_prose_line_is_wider_than_120_characters() -> None:
    wide, code = [], False
    for number, line in enumerate(README.splitlines(), 1):
        if line.startswith("```"):
            code = not code
        elif not code and not line.startswith("|") and len(line) > 120:
            wide.append((number, len(line)))
    assert not wide, wide


def test_the_speed_section_is_a_table_of_current_ratios_each_with_baseline_and_engine() -> None:
    speed = _section("Speed")
    rows = [line for line in speed.splitlines() if line.startswith("| ") and not line.startswith("| what")]
    assert rows and all(len(re.split(r"(?<!\\)\|", row)) == 6 for row in rows), rows
    assert not re.search(r"\bwas \d|issue \d|since fixed", speed), "the history belongs in docs/benchmarks.md"
