"""gpg and every other child end with gkeys, whoever signals it (issue 45, item 3).

A terminal's Ctrl-C reaches the whole process group; a supervisor signals gkeys' PID alone.  ``verify-media`` of
a large file (a sparse 16 GiB image: seconds of hashing for gpg) is signalled by PID once its gpg child runs:
SIGINT (gkeys says "interrupted"), SIGTERM and SIGKILL (nothing of gkeys runs after it: only the kernel's
``PR_SET_PDEATHSIG`` can end the child).  Every child gkeys had must be gone within a few seconds, where
gpg alone would hash on for many more.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PROJECT, GkeysEnv
from media_helpers import install_release_key, make_media

from gkeys_portage.demo.world import KeyFactory

LARGE = 16 << 30  # sparse: no disk used; gpg alone needs well over BOUND seconds to hash it
BOUND = 5.0  # seconds for the children to end after the signal (they end in well under one)


def _stat(pid: int) -> tuple[str, str, int] | None:
    """(name, state, parent) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
    return name, rest[0], int(rest[1])


def _children(parent: int) -> dict[int, str]:
    """The running children of ``parent`` (zombies are gone)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None and stat[2] == parent and stat[1] != "Z":
                found[int(entry)] = stat[0]
    return found


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[1] != "Z"


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_the_gpg_child_ends_when_gkeys_is_signalled_by_pid(env: GkeysEnv, keys: KeyFactory, tmp_path: Path,
                                                            signum: signal.Signals) -> None:
    install_release_key(env)
    media = make_media(keys, tmp_path / "m", siblings=(".asc",))
    with open(media.path, "r+b") as image:  # the signature no longer matches: gpg hashes it all, then says so
        image.truncate(LARGE)
    child_env = dict(os.environ, PYTHONPATH=str(PROJECT))
    gkeys = subprocess.Popen([sys.executable, "-m", "gkeys_portage.cli.main", "-c", str(env.config), "verify-media",
                              "--bind-by-date", str(media.path)], cwd=PROJECT, env=child_env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        children: dict[int, str] = {}
        while not any(name.startswith("gpg") for name in children.values()):
            assert gkeys.poll() is None and time.monotonic() < deadline, "gkeys never started gpg on the image"
            time.sleep(0.05)
            children = _children(gkeys.pid)
        time.sleep(0.5)  # gpg is hashing
        children = _children(gkeys.pid)
        os.kill(gkeys.pid, signum)
        signalled = time.monotonic()
        while any(_alive(pid) for pid in children) and time.monotonic() - signalled < BOUND:
            time.sleep(0.05)
        left = {pid: name for pid, name in children.items() if _alive(pid)}
        status = gkeys.wait(timeout=60)
    finally:
        for pid in _children(gkeys.pid) if gkeys.poll() is None else {}:
            os.kill(pid, signal.SIGKILL)
        if gkeys.poll() is None:
            gkeys.kill()
            gkeys.wait()
    for pid in [pid for pid in children if _alive(pid)]:  # the old code's orphans: do not leave them hashing
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running {BOUND:.0f}s after {signum.name} to gkeys: {left}"
    err = gkeys.stderr.read().decode() if gkeys.stderr else ""
    assert status == (130 if signum == signal.SIGINT else -signum), (status, err)
    if signum == signal.SIGINT:
        assert "interrupted" in err


PARENT = """
import subprocess, sys
from gkeys_portage.core import children
if sys.argv[1] == "setpriv":  # what every start site runs: setpriv --pdeathsig where it has it, else the prctl
    child = subprocess.Popen(children.tied(["sleep", "60"]), preexec_fn=children.preexec_for())
else:  # the prctl in the forked child, as where setpriv is missing
    child = subprocess.Popen(["sleep", "60"], preexec_fn=children.preexec())
print(child.pid, flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("how", ["setpriv", "prctl"])
def test_a_child_started_through_core_children_ends_when_its_parent_is_killed(how: str) -> None:
    """The tie itself, in a second: a ``sleep`` started as gkeys starts its children ends once the process that
    started it is killed by SIGKILL (nothing of that process runs after it: only the kernel ends the child)."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env=dict(os.environ, PYTHONPATH=str(PROJECT)))
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    deadline = time.monotonic() + 30
    while (_stat(child) or ("",))[0] != "sleep":  # past setpriv's prctl: it runs sleep now
        assert _alive(child) and time.monotonic() < deadline, _stat(child)
        time.sleep(0.01)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + BOUND
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    left = _alive(child)
    if left:
        os.kill(child, signal.SIGKILL)
    assert not left, f"the child outlived its parent by {BOUND:.0f}s ({how})"
