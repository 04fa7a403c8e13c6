"""The command line: --json everywhere, exit codes, one clear line for bad input, help, the demo."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest
from conftest import PROJECT, GkeysEnv

from gkeys_portage.cli.main import ACTION_TOPICS, TOPICS, action_word, build_parser, main, topics
from gkeys_portage.core import invocation
from gkeys_portage.ui.output import VERDICT_KEYS


def test_every_action_has_a_man_page_quality_help() -> None:
    parser = build_parser()
    actions = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name, sub in actions.items():
        text = sub.format_help()
        assert "common options" in text and "--json" in text, name
        assert sub.description, name


@pytest.mark.parametrize("argv", [
    ["list-cats"], ["list-seed"], ["list-seed", "-C", "gentoo"], ["list-seedfiles"], ["search-key", "gentoo"],
    ["list-key", "-C", "gentoo"],
])
def test_read_actions_print_one_json_document(env: GkeysEnv, argv: list[str]) -> None:
    result = env.run("--json", *argv)
    document = json.loads(result.out)
    assert isinstance(document, dict) and document["exit"] == result.code


def test_json_accepted_after_the_action_too(env: GkeysEnv) -> None:
    result = env.run("list-cats", "--json")
    assert "gentoo" in json.loads(result.out)["categories"]


@pytest.mark.parametrize(("argv", "code", "needle"), [
    (["add-seed", "-C", "x", "-n", "a", "-N", "A", "-K", "0E2548BBC607E5AE"], 2, "invalid fingerprint"),
    (["add-seed", "-C", "../x", "-n", "a", "-N", "A", "-K", "A" * 40], 2, "invalid category"),
    (["list-seed", "-f", "12"], 2, "invalid fingerprint"),
    (["remove-seed", "-C", "gentoo", "-n", "nobody"], 2, "no seed 'nobody'"),
    (["verify", "-F", "/nonexistent/file"], 2, "no such file"),
    (["import-key", "-C", "gentoo", "-n", "weekly", "-F", "/nonexistent.asc"], 2, "cannot read key file"),
    (["convert-seed", "-F", "/nonexistent"], 2, "cannot read seed file"),
    (["sign", "-F", "/etc/hostname"], 2, "no signing key configured"),
])
def test_bad_input_is_one_line_and_the_right_exit(env: GkeysEnv, argv: list[str], code: int, needle: str) -> None:
    result = env.run(*argv)
    assert result.code == code, result.text
    assert needle in result.text
    assert len(result.text.strip().splitlines()) == 1 and "Traceback" not in result.text
    as_json = json.loads(env.run("--json", *argv).out)
    step = as_json["next_step"]  # the text names it after the error: "(next: gkeys sign --help)"
    printed = as_json["error"] + (f" (next: {step})" if step and step not in as_json["error"] else "")
    assert {key: as_json[key] for key in ("ok", "exit")} == {"ok": False, "exit": code}
    assert printed == result.text.strip().removeprefix("* ")
    assert as_json["verified"] is False and as_json["reason"] and set(VERDICT_KEYS) <= set(as_json)  # one shape


def test_broken_seed_file_in_state_is_a_clear_error(env: GkeysEnv) -> None:
    (env.state / "seeds").mkdir(parents=True)
    (env.state / "seeds" / "gentoo-devs.seeds").write_text('{"alice": {"nick": "alice"}}')
    result = env.run("list-seed", "-C", "gentoo-devs")
    assert result.code == 2 and "missing field" in result.text


def test_world_writable_or_symlinked_state_is_refused(env: GkeysEnv, tmp_path: object) -> None:
    env.state.mkdir()
    env.state.chmod(0o777)
    result = env.run("add-seed", "-C", "x", "-n", "a", "-N", "A", "-K", "A" * 40)
    assert result.code == 2 and "world-writable" in result.text
    env.state.chmod(0o755)
    (env.state / "seeds").symlink_to(env.root)
    result = env.run("add-seed", "-C", "x", "-n", "a", "-N", "A", "-K", "A" * 40)
    assert result.code == 2 and "symbolic link" in result.text


def test_add_move_remove_seed_round_trip(env: GkeysEnv) -> None:
    fpr = env.keys.keys["alice"].fingerprint
    assert env.run("add-seed", "-C", "devs", "-n", "alice", "-N", "Alice", "-K", fpr, "-u", "A <a@g.org>").code == 0
    assert env.run("add-seed", "-C", "devs", "-n", "alice", "-N", "Alice", "-K", fpr).code == 2  # duplicate nick
    assert env.run("move-seed", "-C", "devs", "-n", "alice", "-d", "others").code == 0
    moved = json.loads(env.run("--json", "list-seed", "-C", "others").out)["seeds"]
    assert [s["nick"] for s in moved] == ["alice"] and moved[0]["keys"] == [fpr]
    assert env.run("remove-seed", "-C", "others", "-n", "alice").code == 0
    assert env.run("list-seed", "-C", "others").code == 1


def test_sign_and_verify_round_trip(env: GkeysEnv) -> None:
    """[sign] uses a seed's key whose secret key lives in [sign] gnupghome."""
    env.install_devs("alice")
    env.config.write_text(env.config.read_text() + f"[sign]\ncategory = gentoo-devs\nnick = alice\n"
                          f"gnupghome = {env.keys.home}\n")
    target = env.root / "release.txt"
    target.write_text("release\n")
    assert env.run("sign", "-F", str(target)).code == 0
    verified = env.run("--json", "verify", "-F", str(target), "-C", "gentoo-devs")
    assert verified.code == 0
    assert json.loads(verified.out)["signatures"][0]["nick"] == "alice"
    assert env.run("sign", "-F", str(target), "--clearsign", "-o", str(env.root / "release.signed")).code == 0
    assert env.run("verify", "-F", str(env.root / "release.signed"), "-C", "gentoo-devs").code == 0


def test_each_action_is_registered_by_the_topic_the_table_names() -> None:
    """A command imports only its action's topic (ACTION_TOPICS): the table must be the registrations."""
    registered = {}
    for name, module in zip(TOPICS, topics(), strict=True):
        parser = argparse.ArgumentParser()
        module.register(parser.add_subparsers())
        registered.update(dict.fromkeys(parser._subparsers._group_actions[0].choices, name))  # type: ignore[union-attr]
    assert registered == ACTION_TOPICS
    assert set(registered) == invocation.ACTIONS  # the actions a printed next step may name


@pytest.mark.parametrize(("words", "action"), [
    (["verify-tree", "/repo"], "verify-tree"), (["-c", "verify-tree", "doctor"], "doctor"),
    (["--root", "/x", "-q", "status", "--json"], "status"), (["--json"], None), (["--config=/c", "demo"], "demo"),
])
def test_the_action_word_skips_options_and_their_values(words: list[str], action: str | None) -> None:
    assert action_word(words) == action


def test_a_command_parses_alike_with_its_topic_alone_or_all() -> None:
    words = ["-c", "/etc/gkeys/gkeys.conf", "verify-tree", "/var/db/repos/gentoo", "--policy", "all", "--json"]
    alone, everything = build_parser(words=words).parse_args(words), build_parser().parse_args(words)
    assert vars(alone) == vars(everything)
    assert "doctor" not in build_parser(words=words).format_help() and "doctor" in build_parser().format_help()


def test_console_script_runs_outside_pytest() -> None:
    completed = subprocess.run([sys.executable, "-m", "gkeys_portage.cli.main", "--version"], cwd=PROJECT,
                               capture_output=True, text=True, check=False)
    assert completed.returncode == 0 and "gkeys-portage" in completed.stdout


def test_demo_runs_offline_and_every_step_ends_as_expected(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--json", "demo"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0, [s for s in document["steps"] if not s["as_expected"]]
    assert document["as_expected"] == document["total"] >= 11
    assert any(step["expected"] != 0 for step in document["steps"])  # refusals are part of the demo


@pytest.mark.slow
def test_the_demo_shows_the_journal_fits_a_terminal_and_says_what_to_try_when_kept(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 45, item 6: the trust journal's answers are shown, no line is over 120 characters, the overlay
    scene does not warn about the key it then verifies with, and --keep names commands for the kept directory."""
    import shutil
    from pathlib import Path

    code = main(["demo", "--keep"])
    out = capsys.readouterr().out
    assert code == 0, out
    over = [line for line in out.splitlines() if len(line) > 120]
    assert not over, over
    for command in ("$ gkeys history", "$ gkeys audit --key", "$ gkeys journal verify"):
        assert command in out, command
    assert "acceptance(s) of" in out and "every link holds" in out
    assert "no verifier of release media, Manifests, mirror commits or the overlay list accepts" not in out
    kept = next(line for line in out.splitlines() if line.startswith(" * demo files kept in "))
    workdir = Path(kept.removeprefix(" * demo files kept in ").split(";")[0])
    try:
        assert f"  gkeys -c {workdir}/gkeys.conf history" in out.splitlines()
        assert code == main(["-c", str(workdir / "gkeys.conf"), "journal", "verify"])  # what it says works
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_verify_a_url_with_its_signature_beside_it(env: GkeysEnv) -> None:
    env.install_devs("alice")
    data = b"remote file\n"
    url = env.server.publish("files/remote.txt", data)
    env.server.publish("files/remote.txt.asc", env.keys.sign_bytes("alice", data, env.root))
    assert env.run("verify", "-F", url, "-C", "gentoo-devs").code == 0
    env.server.publish("files/remote.txt", data + b"tampered")
    assert env.run("verify", "-F", url, "-C", "gentoo-devs").code == 1
    missing = env.run("verify", "-F", env.server.url + "/files/none.txt")
    assert missing.code == 3 and "not found" in missing.text


def test_progress_is_shown_for_more_than_five_keys(env: GkeysEnv) -> None:
    nicks = ("alice", "bob", "carol", "mallory", "releng", "gkeys")
    env.bootstrap()
    env.publish_seeds("gentoo-devs", nicks)
    for nick in nicks:
        env.server.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick)
    result = env.run("update-seed", "-C", "gentoo-devs")
    assert result.code == 0, result.text
    assert "gentoo-devs keys: 6/6" in result.err
    quiet = env.run("-q", "refresh-key", "-C", "gentoo-devs", "--force")
    assert quiet.code == 0 and "6/6" not in quiet.err


@pytest.mark.parametrize(("argv", "usage", "needle", "help_step"), [
    (["histroy"], "usage: gkeys [-h]", "unknown action 'histroy' (did you mean 'history'?)", "gkeys --help"),
    (["history", "--sinse", "2026-01-01"], "usage: gkeys history ",
     "unknown option '--sinse' (did you mean '--since'?)", "gkeys history --help"),
    (["audit", "--kye", "x"], "usage: gkeys audit ", "unknown option '--kye' (did you mean '--key'?)",
     "gkeys audit --help"),
])
def test_a_mistyped_action_or_option_gets_did_you_mean_and_the_actions_usage(
        capsys: pytest.CaptureFixture[str], argv: list[str], usage: str, needle: str, help_step: str) -> None:
    """Issue 45, item 4: the closest action or option is named; an action's option is reported by its own usage."""
    with pytest.raises(SystemExit) as raised:
        main(argv)
    err = capsys.readouterr().err
    assert raised.value.code == 2 and err.startswith(usage) and needle in err, err
    assert "choose from" not in err  # not the 36 actions on one line
    with pytest.raises(SystemExit):
        main(["--json", *argv])
    document = json.loads(capsys.readouterr().out)
    assert document["reason"] == "usage" and needle in document["error"] and document["next_step"] == help_step
