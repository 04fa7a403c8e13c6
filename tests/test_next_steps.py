"""Printed next steps act where the run acted (issue 37, "no step needs knowledge the output did not give"): a
user's ``-c FILE`` and ``--root DIR`` are inserted after ``gkeys`` in every ``gkeys ACTION`` command gkeys prints
as the next thing to run (refusals' next steps, doctor's fixes, hints), in text and in ``--json``; a default run
prints plain ``gkeys ACTION``; ``gkeys-fetch``, paths, prose and the files gkeys writes are left as they are.

Each next step is run exactly as printed (``shlex.split``), with no options added by the test.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from conftest import CliResult, GkeysEnv, keys_installed_by_gnupg

from gkeys_portage.cli.main import main as gkeys_main
from gkeys_portage.core import invocation


def run(env: GkeysEnv, *argv: str) -> CliResult:
    """``gkeys argv...`` in-process, exactly these words (no ``-c`` added)."""
    env.capsys.readouterr()
    with keys_installed_by_gnupg():
        code = gkeys_main(list(argv))
    captured = env.capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


def run_as_printed(env: GkeysEnv, command: str) -> CliResult:
    """A printed next step, run as the user would paste it."""
    with keys_installed_by_gnupg():
        return env.run_printed(command)


def elsewhere(env: GkeysEnv, tmp_path: Path) -> tuple[str, ...]:
    """``-c CONFIG --root DIR``: a state directory that is not the config's (gkeysdir), with the seed-signing key
    pinned in it and gentoo-devs' seeds (alice) and key served."""
    words = ("-c", str(env.config), "--root", str(tmp_path / "other state"))
    fingerprint = env.keys.keys["gkeys"].fingerprint
    assert run(env, *words, "add-seed", "-C", "seed-signers", "-n", "gkeys", "-N", "Seeds", "-K", fingerprint).code == 0
    keyfile = tmp_path / "gkeys.asc"
    keyfile.write_bytes(env.keys.public("gkeys"))
    assert run(env, *words, "import-key", "-C", "seed-signers", "-n", "gkeys", "-F", str(keyfile)).code == 0
    env.publish_seeds("gentoo-devs", ("alice",))
    env.server.hkp[env.keys.keys["alice"].fingerprint] = env.keys.public("alice")
    return words


def signed_file(env: GkeysEnv, tmp_path: Path) -> Path:
    """A file and its detached signature by alice (gentoo-devs)."""
    path = tmp_path / "file.txt"
    path.write_bytes(b"hello\n")
    path.with_name("file.txt.asc").write_bytes(env.keys.sign_bytes("alice", b"hello\n", env.root))
    return path


def portage_root(tmp_path: Path) -> Path:
    """A root whose one repository is verified with gentoo-devs' keys."""
    root = tmp_path / "portage root"
    (root / "etc/portage/repos.conf").mkdir(parents=True)
    (root / "etc/portage/repos.conf/test.conf").write_text(
        f"[test]\nlocation = {tmp_path}/repos/test\nsync-type = gkeys\nsync-uri = https://example.org/test.git\n"
        "sync-gkeys-category = gentoo-devs\n")
    return root


def key_findings(env: GkeysEnv, words: tuple[str, ...], root: Path) -> dict[str, str]:
    """doctor's seeds:/keys: findings for this config and state: code -> fix, as printed in --json."""
    result = run(env, *words, "--json", "doctor", "--eroot", str(root))
    findings = json.loads(result.out)["findings"]
    return {f["code"]: f["fix_note"] or f["fix"] for f in findings if f["code"].startswith(("seeds:", "keys:"))}


def test_a_refusals_next_step_run_as_printed_installs_the_keys_in_the_users_root(env: GkeysEnv,
                                                                                  tmp_path: Path) -> None:
    words = elsewhere(env, tmp_path)
    assert run(env, *words, "fetch-seed", "-C", "gentoo-devs").code == 0  # seeds, no keys yet
    signed = signed_file(env, tmp_path)
    refused = run(env, *words, "verify", "-F", str(signed), "-C", "gentoo-devs")
    assert refused.code == 1
    step = refused.err.strip().split("install the pinned keys with: ", 1)[1]
    assert step == f"gkeys {shlex.join(words)} install-key -C gentoo-devs", refused.err
    as_json = json.loads(run(env, *words, "--json", "verify", "-F", str(signed), "-C", "gentoo-devs").out)
    assert as_json["error"].endswith(step), as_json
    assert run_as_printed(env, step).code == 0
    assert run(env, *words, "verify", "-F", str(signed), "-C", "gentoo-devs").code == 0
    assert run(env, "-c", str(env.config), "verify", "-F", str(signed), "-C", "gentoo-devs").code != 0  # not gkeysdir


def test_doctor_fixes_run_as_printed_act_on_the_users_config_and_root(env: GkeysEnv, tmp_path: Path) -> None:
    words = elsewhere(env, tmp_path)
    root = portage_root(tmp_path)
    fix = key_findings(env, words, root)["seeds:missing"]
    assert fix == f"gkeys {shlex.join(words)} update-seed -C gentoo-devs"
    text = run(env, *words, "doctor", "--eroot", str(root))
    assert f"fix: {fix}" in text.err and f"then 'gkeys {shlex.join(words)} doctor --eroot" in text.err, text.err
    result = run_as_printed(env, fix)
    assert result.code == 0, result.text
    assert key_findings(env, words, root) == {}  # seeds and keys are now in DIR
    assert "seeds:missing" in key_findings(env, ("-c", str(env.config)), root)  # and not in the config's gkeysdir


def test_a_default_run_prints_plain_gkeys_commands_and_the_environment_carries_the_config(
        env: GkeysEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env.bootstrap()
    env.publish_seeds("gentoo-devs", ("alice",))
    env.server.hkp[env.keys.keys["alice"].fingerprint] = env.keys.public("alice")
    monkeypatch.setenv("GKEYS_CONFIG", str(env.config))  # inherited by the command the user runs next
    root = portage_root(tmp_path)
    fix = key_findings(env, (), root)["seeds:missing"]
    assert fix == "gkeys update-seed -C gentoo-devs"
    assert run_as_printed(env, fix).code == 0
    assert key_findings(env, (), root) == {}


def test_only_gkeys_action_commands_get_the_options_never_the_files_gkeys_writes(env: GkeysEnv, tmp_path: Path) -> None:
    with invocation.recorded(config="/tmp/my gkeys.conf", root="/tmp/state"):
        assert invocation.for_this_user("run 'gkeys update-seed -C gentoo-auth' first") == \
            "run 'gkeys -c '/tmp/my gkeys.conf' --root /tmp/state update-seed -C gentoo-auth' first"
        for untouched in ("gkeys-fetch \\${URI}", "/etc/gkeys/gkeys.conf", "/usr/bin/gkeys verify-tree",
                          "gkeys verifies the Manifest tree", "gkeys sync refuses to clone over it",
                          "gkeys-gen update-seed", "the gkeys git hook",
                          "ask its maintainer to re-sign it with 'gkeys sign --seed-category gentoo-devs'",
                          "ask its publisher to sign it ('gkeys build-keyring -C gentoo-devs --sign')"):
            assert invocation.for_this_user(untouched) == untouched
    assert invocation.for_this_user("gkeys update-seed") == "gkeys update-seed"  # nothing recorded: the defaults
    words = ("-c", str(env.config), "--root", str(tmp_path / "state"))
    root = tmp_path / "portage root"
    (root / "etc/portage/repos.conf").mkdir(parents=True)
    dry = run(env, *words, "setup-portage", "--eroot", str(root), "--dry-run")
    assert dry.code == 0, dry.text
    # the files setup-portage writes are for Portage and root's timer, not for this user's next command
    assert "# Written by 'gkeys setup-portage' (remove with 'gkeys setup-portage --undo')." in dry.out, dry.out
    assert f"gkeys {shlex.join(words)} setup-portage" not in dry.out
    done = run(env, *words, "setup-portage", "--eroot", str(root))
    assert done.code == 0, done.text
    assert f"next: 'gkeys {shlex.join(words)} doctor --eroot {shlex.quote(str(root))}' checks the whole set-up" \
        in done.out, done.out  # and the root it set up (issue 42)
    assert "'17 4 * * * gkeys -q refresh-key'" in done.out  # a line for root's crontab, as root would write it


def test_gkeys_fetch_names_the_next_step_on_its_own_config_and_root(env: GkeysEnv, tmp_path: Path) -> None:
    from media_helpers import make_media

    from gkeys_portage.portage.fetch import main as fetch_main
    media = make_media(env.keys, tmp_path / "media").write()
    url = media.publish(env.server)
    words = ("-c", str(env.config), "--root", str(tmp_path / "other state"))
    env.capsys.readouterr()
    code = fetch_main([*words, "--uri", url, "--file", str(tmp_path / media.name), "--", "cp",
                       str(media.path), str(tmp_path / media.name)])
    out = env.capsys.readouterr().err
    assert code == 1 and out.startswith(" * gkeys-fetch: "), out
    assert out.strip().endswith(f"install the pinned keys with: gkeys {shlex.join(words)} install-key -C gentoo"), out
    assert invocation.options() == ()  # the run's options end with the run


def test_next_steps_carry_the_eroot_and_run_as_printed_act_on_it(env: GkeysEnv, tmp_path: Path) -> None:
    """Issue 42: 'setup-portage --eroot R' ended with "next: 'gkeys -c … --root … doctor'" without --eroot R, and
    doctor run as printed checked / ("checked repos.conf: 0 repositories"): a user who chose --eroot to stay off
    the host was sent back to it.  Now every printed gkeys command of an action that takes --eroot carries it."""
    words = elsewhere(env, tmp_path)
    root = tmp_path / "eroot"
    (root / "etc/portage/repos.conf").mkdir(parents=True)
    (root / "etc/portage/repos.conf/test.conf").write_text(
        f"[test]\nlocation = {tmp_path}/repos/test\nsync-type = gkeys\nsync-uri = https://example.org/test.git\n"
        "sync-gkeys-category = gentoo-devs\n")
    setup = run(env, *words, "setup-portage", "--eroot", str(root), "--repo", "test")
    assert setup.code == 0, setup.text
    step = setup.text.split("next: '", 1)[1].split("' checks the whole set-up", 1)[0]
    assert step == f"gkeys {shlex.join(words)} doctor --eroot {root}", setup.text
    as_json = json.loads(run(env, *words, "--json", "setup-portage", "--eroot", str(root), "--repo", "test").out)
    assert as_json["next_step"] == step
    doctor = run_as_printed(env, step)
    assert f"{root}/etc/portage" in doctor.text and "checked repos.conf: 0 repositories" not in doctor.text, \
        doctor.text
    again = next(line for line in doctor.text.splitlines() if "then 'gkeys" in line)
    assert f"doctor --eroot {root}' again" in again, again
    status = run(env, *words, "status", "--eroot", str(root))
    assert f"run 'gkeys {shlex.join(words)} doctor --eroot {root}'" in status.text, status.text
    with invocation.recorded(config=None, root=None, eroot="/mnt/gentoo"):  # only actions that take --eroot
        assert invocation.for_this_user("'gkeys update-seed' then 'gkeys status'") == \
            "'gkeys update-seed' then 'gkeys status --eroot /mnt/gentoo'"
        assert invocation.for_this_user("gkeys setup-portage --eroot /x") == "gkeys setup-portage --eroot /x"


def test_the_eroot_actions_are_the_parsers_that_take_eroot() -> None:
    from gkeys_portage.cli.main import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    taking = {name for name, sub in subparsers.choices.items()  # type: ignore[union-attr]
              if any("--eroot" in action.option_strings for action in sub._actions)}
    assert taking == invocation.EROOT_ACTIONS
