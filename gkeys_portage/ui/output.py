"""Presentation: Portage-style `` * `` lines (coloured through ``portage.output`` when importable),
``--json``, and progress on stderr.

Colour follows one rule (:func:`use_colour`): only on a terminal, never with ``NOCOLOR`` (Portage's
variable) or ``NO_COLOR`` (no-color.org) set, never without Portage.

Actions never print.  They return a :class:`Report` (messages plus a JSON document); the
entry point renders it once, as text or as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

INFO, GOOD, WARN, ERROR, PLAIN = "info", "good", "warn", "error", "plain"


@dataclass
class Message:
    """One line of human output."""

    level: str
    text: str


@dataclass
class Report:
    """What an action has to say: human lines, a JSON document and an exit status."""

    data: dict[str, Any] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)
    exit_code: int = 0

    def info(self, text: str) -> Report:
        """Add an informational `` * `` line."""
        self.messages.append(Message(INFO, text))
        return self

    def good(self, text: str) -> Report:
        """Add a success line."""
        self.messages.append(Message(GOOD, text))
        return self

    def warn(self, text: str) -> Report:
        """Add a warning line."""
        self.messages.append(Message(WARN, text))
        return self

    def error(self, text: str) -> Report:
        """Add an error line (does not change the exit status by itself)."""
        self.messages.append(Message(ERROR, text))
        return self

    def plain(self, text: str) -> Report:
        """Add a line printed as-is (tables)."""
        self.messages.append(Message(PLAIN, text))
        return self


_STYLES = {INFO: "INFO", GOOD: "GOOD", WARN: "WARN", ERROR: "ERR"}
_NOCOLOR_OFF = ("", "no", "false", "0")


def _portage_output() -> Any:
    try:
        import portage.output as portage_output
    except Exception:  # portage is optional for the core; any import failure means plain output
        return None
    return portage_output


def colour_wanted(stream: TextIO, environ: Any = None) -> bool:
    """Whether lines written to ``stream`` may carry ANSI colour.

    No when ``NO_COLOR`` is set to anything non-empty, when Portage's ``NOCOLOR`` is set to
    anything but ``no``/``false``/``0``, when ``TERM`` is ``dumb``, or when the stream is not a tty.
    """
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR") or env.get("NOCOLOR", "").strip().lower() not in _NOCOLOR_OFF:
        return False
    if env.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):  # a closed or detached stream
        return False


def star_line(level: str, text: str, stream: TextIO) -> str:
    """One `` * text`` line as Portage's ``einfo``/``ewarn``/``eerror`` print it, coloured only if allowed."""
    star = " * "
    portage_output = _portage_output() if colour_wanted(stream) else None
    if portage_output is not None:
        star = portage_output.colorize(_STYLES.get(level, "INFO"), star)
    return f"{star}{text}\n"


def say(level: str, text: str, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> None:
    """Print one `` * `` line at once: warnings and errors on stderr, the rest on stdout."""
    stream = (stderr or sys.stderr) if level in (WARN, ERROR) else (stdout or sys.stdout)
    stream.write(star_line(level, text, stream))
    stream.flush()


class Console:
    """Renders reports and progress in Portage's `` * `` style (see :func:`star_line`)."""

    def __init__(self, *, json_mode: bool = False, quiet: bool = False, verbose: bool = False,
                 stdout: TextIO | None = None, stderr: TextIO | None = None) -> None:
        self.json_mode = json_mode
        self.quiet = quiet
        self.verbose = verbose
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self._last_progress = 0.0

    def render(self, report: Report) -> None:
        """Print a report: JSON document, or its lines."""
        if self.json_mode:
            document = dict(report.data)
            document.setdefault("exit", report.exit_code)
            self.stdout.write(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")
            self.stdout.flush()
            return
        for message in report.messages:
            self.message(message.level, message.text)

    def message(self, level: str, text: str) -> None:
        """Print one line in Portage style (`` * text``); warnings and errors go to stderr.

        Nothing is printed in JSON mode (the JSON document is the whole output).
        """
        if self.json_mode or (self.quiet and level in (INFO, GOOD, PLAIN)):
            return
        if level == PLAIN:
            self.stdout.write(text + "\n")
            self.stdout.flush()
            return
        say(level, text, stdout=self.stdout, stderr=self.stderr)

    def fail(self, text: str, exit_code: int) -> None:
        """Print a one-line failure (JSON: ``{"ok": false, "error": ...}``)."""
        if self.json_mode:
            self.stdout.write(json.dumps({"ok": False, "error": text, "exit": exit_code}, sort_keys=True) + "\n")
            self.stdout.flush()
        else:
            self.message(ERROR, text)

    def progress(self, label: str) -> Callable[[int, int], None]:
        """A progress callback ``(done, total)`` that redraws at most ~10 times a second on stderr.

        On a terminal it rewrites one line; otherwise it prints a `` * `` line every 10 %.
        Nothing is shown for five items or fewer, in quiet mode or in JSON mode.
        """
        tty = hasattr(self.stderr, "isatty") and self.stderr.isatty()
        shown = {"decile": -1}

        def callback(done: int, total: int) -> None:
            if self.quiet or self.json_mode or total <= 5:
                return
            if tty:
                now = time.monotonic()
                if done < total and now - self._last_progress < 0.1:
                    return
                self._last_progress = now
                end = "\n" if done >= total else ""
                self.stderr.write(f"\r * {label}: {done}/{total}{end}")
            else:
                decile = done * 10 // total
                if decile == shown["decile"]:
                    return
                shown["decile"] = decile
                self.stderr.write(f" * {label}: {done}/{total}\n")
            self.stderr.flush()

        return callback
