"""Every program gkeys starts ends with gkeys (gpg, gpg-sq, Sequoia's child, git, rsync, cat).

A terminal's Ctrl-C reaches the whole foreground process group, but a supervisor (systemd, a cron wrapper,
``kill PID``) signals gkeys alone: a gpg child hashing a 3 GiB image would be re-parented and go on for
seconds after gkeys said "interrupted".  :func:`preexec` is the ``preexec_fn`` of every child: the kernel
sends the child SIGKILL when the thread that started it ends (``PR_SET_PDEATHSIG``, prctl(2)), whoever
killed gkeys and with whatever signal, SIGKILL included.  Every start site waits for its child in the thread
that started it, so a child never outlives its caller by design, only by gkeys' death.  Where util-linux's
``setpriv`` is installed (Gentoo's @system, Debian's essential set) the child is started through it instead
(:func:`tied` and :func:`preexec_for`): ``setpriv --pdeathsig KILL`` sets the same signal and runs the program,
and Python keeps its fast spawn, where any ``preexec_fn`` makes it fork a copy of gkeys' whole memory map for
every child (measured: 23 ms against 1.5 ms a child from a 300 MiB process).

:func:`end_all` kills the children still running when gkeys is interrupted (SIGINT: ``KeyboardInterrupt``) and
is about to exit: a worker thread waiting for its gpg would otherwise hold the exit until gpg is done.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@cache
def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, resolved in the parent (a forked child only calls it: no loader lock after fork)."""
    try:
        function: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: children end with their pipes instead
        return None
    return function


def preexec(then: Callable[[], None] | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` that ties the child's life to gkeys, then runs ``then`` (another ``preexec_fn``).

    If gkeys already died between the fork and the prctl, the child ends at once (its parent changed)."""
    prctl = _prctl()
    parent = os.getpid()

    def tie() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)
        if then is not None:
            then()

    return tie


@cache
def _setpriv() -> str | None:
    """util-linux's ``setpriv`` (absolute path), or None where it is missing or too old for ``--pdeathsig``."""
    found = shutil.which("setpriv") or next((p for p in ("/usr/bin/setpriv", "/bin/setpriv") if os.access(p, os.X_OK)),
                                            None)
    return found if found is not None and _has_pdeathsig(found) else None


def _has_pdeathsig(program: str) -> bool:
    """True if ``program --help`` offers ``--pdeathsig`` (util-linux 2.33 and later)."""
    import subprocess  # only here: children is imported by modules that never start a program

    try:
        shown = subprocess.run([program, "--help"], capture_output=True, check=False, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"--pdeathsig" in shown


def tied(argv: Sequence[str]) -> list[str]:
    """``argv`` as a child that ends with gkeys: behind ``setpriv --pdeathsig KILL --`` where setpriv is installed,
    else unchanged; pass :func:`preexec_for` as the same call's ``preexec_fn``."""
    setpriv = _setpriv()
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else list(argv)


def preexec_for(then: Callable[[], None] | None = None) -> Callable[[], None] | None:
    """The ``preexec_fn`` beside :func:`tied`: only ``then`` where setpriv ties the child (None keeps Python's fast
    spawn), else :func:`preexec` (the prctl in the forked child) followed by ``then``."""
    return then if _setpriv() else preexec(then)


def running() -> list[int]:
    """The process ids of this process's children still running (Linux: every ``/proc/PID/stat`` naming this
    process as its parent; ``/proc/self/task/*/children`` is not in every kernel)."""
    me, found = os.getpid(), []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == me and fields[0] != "Z":
                    found.append(int(entry.name))
    return found


def end_all() -> None:
    """Kill every child still running (an interrupted run, on its way out); a child already gone, and one
    started in a session of its own (the trash's background remover, meant to finish), is left alone."""
    session = os.getsid(0)
    for pid in running():
        with contextlib.suppress(OSError):
            if os.getsid(pid) == session:
                os.kill(pid, signal.SIGKILL)
