"""A reader that leaves early (``gkeys list-seed | head -1``): no traceback, the action's own exit status.

Each listing action runs with its stdout on a pipe whose reader is already gone (the first write fails with
EPIPE every time, not in half the runs), and ``list-seed`` also runs into a real ``head -1`` several times.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROJECT, GkeysEnv

LISTINGS = (("list-seed",), ("list-seed", "--json"), ("list-key", "-C", "gentoo"), ("list-cats",), ("list-seedfiles",),
            ("status",), ("--help",), ("list-seed", "--help"))


#: stdout block-buffered, as a console script's is (PYTHONUNBUFFERED, if the tests run with it, would write through)
BUFFERED = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


@pytest.fixture
def populated(env: GkeysEnv) -> GkeysEnv:
    """A root with a seed and its key, so every listing has lines to print."""
    env.bootstrap()
    for nick in ("alice", "bob"):
        env.pin_key("gentoo", nick, nick)
    return env


def gkeys_into_closed_pipe(env: GkeysEnv, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``gkeys -c CONFIG argv`` with stdout on a pipe whose read end is closed."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "gkeys_portage.cli.main", "-c", str(env.config), *argv],
                              stdout=write, stderr=subprocess.PIPE, text=True, cwd=PROJECT, timeout=120,
                              env=BUFFERED)
    finally:
        os.close(write)


@pytest.mark.parametrize("argv", LISTINGS, ids=" ".join)
def test_listing_into_a_closed_pipe_ends_quietly(populated: GkeysEnv, argv: tuple[str, ...]) -> None:
    done = gkeys_into_closed_pipe(populated, *argv)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr


def test_list_seed_into_head_never_ends_in_a_traceback(populated: GkeysEnv) -> None:
    command = (f"{sys.executable} -m gkeys_portage.cli.main -c {populated.config} list-seed | head -1; "
               "exit ${PIPESTATUS[0]}")
    for _ in range(6):
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=PROJECT, timeout=120,
                              env=BUFFERED)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert done.stdout.count("\n") == 1


def test_a_refusal_or_a_finding_into_a_closed_pipe_keeps_the_actions_own_status(populated: GkeysEnv,
                                                                                tmp_path: Path) -> None:
    """Issue 47: the status a closed pipe ends with is the action's, as with an open one: a refused ``verify``
    (its ``--json`` refusal is the write that fails) never exits 0 as if verified (before: 0), and ``doctor``'s
    findings (a report rendered into the pipe) keep their 1."""
    root = tmp_path / "empty-root"
    root.mkdir()
    for argv in (("--json", "verify", "-F", str(tmp_path / "missing")), ("doctor", "--eroot", str(root)),
                 ("--json", "doctor", "--eroot", str(root))):
        expected = populated.run(*argv).code
        assert expected != 0, argv
        done = gkeys_into_closed_pipe(populated, *argv)
        assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
        assert done.returncode == expected, (argv, done.returncode, done.stderr)


def test_closed_pipe_leaves_nothing_for_the_exit_flush_to_fail_on() -> None:
    """``closed_pipe``'s own promise (Python's advice for SIGPIPE): what is still buffered for stdout when the
    reader has gone goes to /dev/null at exit, not into a second BrokenPipeError ("Exception ignored", exit 120)."""
    code = ("import sys\nfrom gkeys_portage.ui.runner import closed_pipe\n"
            "sys.stdout.write('still buffered\\n')\nsys.exit(closed_pipe(3))\n")
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-c", code], stdout=write, stderr=subprocess.PIPE, text=True,
                              cwd=PROJECT, timeout=60, env=BUFFERED)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (3, "")
