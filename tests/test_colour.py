"""Issue 15 item 7: colour only on a terminal, never with NOCOLOR (Portage's) or NO_COLOR set.

The repo.postsync.d hook is run as Portage runs it, once with its output piped (as under
``emerge --sync | tee log``) and once on a pseudo-terminal (python's pty module).
"""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys

import pytest
from conftest import PROJECT, GkeysEnv

from gkeys_portage.ui.output import colour_wanted, star_line

HOOK = PROJECT / "hooks" / "repo.postsync.d" / "gkeys-verify"
ESC = b"\x1b["


def _hook_environ(env: GkeysEnv, **extra: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("NOCOLOR", "NO_COLOR")}
    environ.update({"GKEYS_CONFIG": str(env.config), "PYTHONPATH": str(PROJECT), "TERM": "xterm", **extra})
    return environ


def _run_on_pty(argv: list[str], environ: dict[str, str]) -> bytes:
    """Run ``argv`` with stdout and stderr on a pseudo-terminal; return everything it wrote."""
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal, env=environ)
        os.close(terminal)
        chunks = []
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=120) == 0
    finally:
        os.close(controller)
    return b"".join(chunks)


def _hook_argv(env: GkeysEnv) -> list[str]:
    plain = env.root / "not-git"
    plain.mkdir(exist_ok=True)
    return [sys.executable, str(HOOK), "plainrepo", "https://example.invalid/x", str(plain)]


def test_hook_output_piped_has_no_escapes(env: GkeysEnv) -> None:
    result = subprocess.run(_hook_argv(env), env=_hook_environ(env), capture_output=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert b"not a git repository" in result.stdout
    assert ESC not in result.stdout + result.stderr


def test_hook_output_on_a_terminal_is_coloured_unless_nocolor(env: GkeysEnv) -> None:
    pytest.importorskip("portage.output")
    coloured = _run_on_pty(_hook_argv(env), _hook_environ(env))
    assert b"not a git repository" in coloured and ESC in coloured
    for variable, value in (("NOCOLOR", "true"), ("NOCOLOR", "yes"), ("NO_COLOR", "1")):
        plain = _run_on_pty(_hook_argv(env), _hook_environ(env, **{variable: value}))
        assert b"not a git repository" in plain and ESC not in plain, (variable, plain)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("environ", "tty", "wanted"), [
    ({}, True, True),
    ({}, False, False),
    ({"NOCOLOR": "true"}, True, False),
    ({"NOCOLOR": "yes"}, True, False),
    ({"NOCOLOR": "no"}, True, True),
    ({"NOCOLOR": "false"}, True, True),
    ({"NO_COLOR": "1"}, True, False),
    ({"NO_COLOR": ""}, True, True),
    ({"TERM": "dumb"}, True, False),
])
def test_colour_rule(environ: dict[str, str], tty: bool, wanted: bool) -> None:
    stream = _Tty() if tty else io.StringIO()
    assert colour_wanted(stream, environ) is wanted


def test_plain_star_line_without_a_terminal() -> None:
    assert star_line("error", "boom", io.StringIO()) == " * boom\n"
