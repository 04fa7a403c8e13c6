"""One output door (design.md §10 "Output"): no control character from a key, a seed, a file name or a bundle
reaches the terminal as itself, in text or in ``--json``.

A key whose user id carries an OSC title sequence, a line eraser, a bidi override and a newline is pinned by a
seed whose name carries the same; every listing, and a refusal naming a hostile file name, is read back.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import SIGNER_PROGRAM, GkeysEnv, keys_installed_by_gnupg

from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.ui.output import Console, Report, neutralise

HOSTILE = "Eve\x1b]0;owned\x07\x1b[2K\r\u202eXX\u2066 \x9b31m\nverified"
#: what must never be printed as itself
RAW = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def raw_controls(text: str) -> list[str]:
    """The control characters in ``text``, line breaks between lines excepted."""
    return [c for line in text.split("\n") for c in RAW.findall(line)]


@pytest.mark.parametrize(("text", "shown"), [
    ("\x1b[2J", "\\x1b[2J"), ("a\nb", "a\\x0ab"), ("\x9b", "\\x9b"), ("\u202e", "\\u202e"), ("\u2069", "\\u2069"),
    ("\x7f", "\\x7f"), ("tab\tkept", "tab\tkept"), ("Zoë ✓", "Zoë ✓"),
])
def test_neutralise_shows_controls_as_escapes(text: str, shown: str) -> None:
    assert neutralise(text) == shown


def test_every_console_door_neutralises(tmp_path: Path) -> None:
    import io

    out, err = io.StringIO(), io.StringIO()
    console = Console(stdout=out, stderr=err)
    console.render(Report().info(HOSTILE).good(HOSTILE).warn(HOSTILE).error(HOSTILE).plain(HOSTILE))
    console.step(HOSTILE)
    console.fail(HOSTILE, 1)
    console.progress(HOSTILE)(10, 10)
    assert raw_controls(out.getvalue() + err.getvalue()) == []
    assert out.getvalue().count("\n") == 3  # one line per message: the newline inside is escaped


@pytest.fixture(scope="module")
def hostile_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[KeyFactory, str]:
    factory = KeyFactory(tmp_path_factory.mktemp("hostile-keys"), program=SIGNER_PROGRAM)
    factory.create("eve", name="Eve\x1b]0;owned\x07\x1b[2K\u202eXX")
    yield factory, "eve"
    factory.close()


def test_hostile_uid_name_and_file_name_never_reach_the_terminal(env: GkeysEnv,
                                                                  hostile_key: tuple[KeyFactory, str]) -> None:
    factory, nick = hostile_key
    key = factory.keys[nick]
    assert env.run("add-seed", "-C", "gentoo", "-n", nick, "-N", HOSTILE, "-K", key.fingerprint).code == 0
    keyfile = env.root / "eve.asc"
    keyfile.write_bytes(factory.public(nick))
    with keys_installed_by_gnupg():
        result = env.run("import-key", "-C", "gentoo", "-n", nick, "-F", str(keyfile))
    assert result.code == 0, result.text
    hostile_file = env.root / f"stage3{HOSTILE.replace(chr(10), '')}.tar.xz"
    runs = [("list-seed",), ("list-seed", "-C", "gentoo"), ("list-key", "-C", "gentoo"), ("status",),
            ("verify", "-F", str(hostile_file), "-C", "gentoo")]
    for argv in runs:
        for json_flag in ((), ("--json",)):
            result = env.run(*argv, *json_flag)
            assert raw_controls(result.out + result.err) == [], (argv, json_flag, result.text)
            if json_flag and result.out.strip():
                json.loads(result.out)  # still one document, with the characters escaped
    shown = env.run("list-key", "-C", "gentoo").text
    assert "\\x1b]0;owned\\x07" in shown


def test_hostile_commit_author_and_subject_never_reach_the_terminal(env: GkeysEnv, tmp_path: Path) -> None:
    from tree_helpers import build, install_devs

    install_devs(env, ("alice",))
    repo = build(tmp_path / "repo", env.keys, ["alice"])
    repo.commit(None, author="Mal\x1b]0;owned\x07\u202elory <m@example.org>", message="fix\x1b[2K\rverified\n")
    repo.commit("alice")
    for json_flag in ((), ("--json",)):
        result = env.run(*json_flag, "verify-tree", str(repo.path), "--policy", "all", "--no-record")
        assert result.code == 1 and raw_controls(result.out + result.err) == [], result.text
    assert "owned" in result.text, result.text  # the author is shown, escaped (tree's own reader escapes it too)
