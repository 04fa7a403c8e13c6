"""Kill a real gkeys run with SIGKILL at an exact step, whatever version of gkeys runs.

:func:`run_killed` starts ``gkeys`` in a child process (its own process group) with one ``os`` function
wrapped: the first call whose path argument has the base name ``match`` (``PREFIX*``: starting with it) kills
the whole group with SIGKILL, ``before`` or ``after`` the real call.  Nothing of gkeys itself is patched, so the
same kill lands at the same step on the code before and after a change (the targeted tests of issue 36 fail on
the code before it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from conftest import PROJECT

SCRIPT = r"""
import json, os, signal, sys
spec = json.loads(sys.argv[1])
real = getattr(os, spec["function"])

def killing(*args, **kwargs):
    names = [os.path.basename(os.fsdecode(a)) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
    hit = any(name.startswith(spec["match"][:-1]) if spec["match"].endswith("*") else name == spec["match"]
              for name in names)
    if hit and spec["when"] == "before":
        os.killpg(0, signal.SIGKILL)
    result = real(*args, **kwargs)
    if hit and spec["when"] == "after":
        os.killpg(0, signal.SIGKILL)
    return result

setattr(os, spec["function"], killing)
if spec.get("code"):
    exec(spec["code"])
    sys.exit(0)
from gkeys_portage.cli.main import main
sys.exit(main(spec["argv"]))
"""


def run_killed(config: Path | None, argv: list[str], *, function: str, match: str, when: str = "after",
               env: dict[str, str] | None = None, timeout: float = 120, code: str = "") -> int:
    """Run ``gkeys -c CONFIG argv`` (or the Python ``code``) killed at the first ``os.<function>`` on a path
    named ``match``; returns the exit status (-9 when the kill happened, else what the child returned)."""
    spec = {"function": function, "match": match, "when": when, "code": code,
            "argv": ["-c", str(config), *argv] if config is not None else argv}
    child_env = dict(os.environ if env is None else env)
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT), child_env.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(spec)], cwd=PROJECT, env=child_env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                          timeout=timeout, check=False)
    return done.returncode


def kill_group_during(process: subprocess.Popen[bytes], delay: float, started: Callable[[], bool], *,
                      timeout: float = 120) -> None:
    """SIGKILL ``process``'s whole process group (started with ``start_new_session=True``) ``delay`` seconds after
    ``started()`` first holds (the run is past interpreter start-up, in its work: a request reached the loopback
    server, a progress line was written), and prove the kill landed: the run was still going right before it
    (``poll() is None``) and ended by the signal.  A run that finished first fails the test instead of passing
    while exercising nothing."""
    deadline = time.monotonic() + timeout
    while not started():
        assert process.poll() is None, f"the run ended (exit {process.returncode}) before it started its work"
        assert time.monotonic() < deadline, "the run never started its work"
        time.sleep(0.01)
    time.sleep(delay)
    assert process.poll() is None, (f"the run had ended (exit {process.returncode}) before the kill {delay} s into "
                                    "its work: the kill would exercise nothing (make the run longer)")
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(timeout=timeout) == -signal.SIGKILL
