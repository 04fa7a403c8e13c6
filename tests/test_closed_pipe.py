"""A reader that leaves early (``gkeys list-seed | head -1``): no traceback, the action's own exit status.

Each listing action runs with its stdout on a pipe whose reader is already gone (the first write fails with
EPIPE every time, not in half the runs), and ``list-seed`` also runs into a real ``head -1`` several times.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import PROJECT, GkeysEnv

LISTINGS = (("list-seed",), ("list-seed", "--json"), ("list-key", "-C", "gentoo"), ("list-cats",), ("list-seedfiles",),
            ("status",), ("--help",), ("list-seed", "--help"))


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
                              stdout=write, stderr=subprocess.PIPE, text=True, cwd=PROJECT, timeout=120)
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
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=PROJECT, timeout=120)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert done.stdout.count("\n") == 1
