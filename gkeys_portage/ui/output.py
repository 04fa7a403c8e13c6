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

from gkeys_portage.core.invocation import for_this_user
from gkeys_portage.core.text import neutralise as neutralise  # the door (in core: verifiers below ui use it)

INFO, GOOD, WARN, ERROR, PLAIN = "info", "good", "warn", "error", "plain"


@dataclass
class Message:
    """One line of human output."""

    level: str
    text: str
    verbatim: bool = False  # a text of our own making (a file we write, a diff): its commands are not for this user


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
        """Add a line printed as-is (tables), but for its control characters (:func:`neutralise`)."""
        self.messages.append(Message(PLAIN, text))
        return self

    def text_block(self, text: str) -> Report:
        """Add a text of our own making (a diff, a file we wrote) as plain lines, one per line of ``text``."""
        for line in text.rstrip("\n").split("\n"):
            self.messages.append(Message(PLAIN, line, verbatim=True))
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
    return _isatty(stream)


def star_line(level: str, text: str, stream: TextIO) -> str:
    """One `` * text`` line as Portage's ``einfo``/``ewarn``/``eerror`` print it, coloured only if allowed."""
    text = neutralise(for_this_user(text))
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
            document = for_this_user_json(dict(report.data))
            document.setdefault("exit", report.exit_code)
            self.stdout.write(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")
            self.stdout.flush()
            return
        for message in report.messages:
            self.message(message.level, message.text, verbatim=message.verbatim)

    def message(self, level: str, text: str, *, verbatim: bool = False) -> None:
        """Print one line in Portage style (`` * text``); warnings and errors go to stderr.

        Nothing is printed in JSON mode (the JSON document is the whole output).  Every ``gkeys ACTION`` command
        in ``text`` gets this run's ``-c``/``--root`` (:func:`~gkeys_portage.core.invocation.for_this_user`), but
        in a ``verbatim`` line (a file gkeys writes, for another user or machine).
        """
        if self.json_mode or (self.quiet and level in (INFO, GOOD, PLAIN)):
            return
        if level == PLAIN:
            self.stdout.write(neutralise(text if verbatim else for_this_user(text)) + "\n")
            self.stdout.flush()
            return
        say(level, text, stdout=self.stdout, stderr=self.stderr)

    def step(self, text: str) -> None:
        """Say at once, on stderr, which step a long action is at (nothing in quiet or JSON mode)."""
        if self.quiet or self.json_mode:
            return
        self.stderr.write(star_line(INFO, text, self.stderr))
        self.stderr.flush()

    def waiting(self, text: str) -> None:
        """Say on stderr that a download or connection is still waiting ("waiting for HOST, attempt 2 of 4"):
        in JSON mode too (stdout keeps the one document), not in quiet mode.  Called from timer threads."""
        if self.quiet:
            return
        self.stderr.write(star_line(INFO, neutralise(text), self.stderr))
        self.stderr.flush()

    def fail(self, text: str, exit_code: int, *, reason: str = "error", file: str | None = None,
             signer: str | None = None, next_step: str | None = None) -> None:
        """Print a one-line failure; JSON: the keys of :data:`VERDICT_KEYS` plus ``error`` (docs/exit-codes.md)."""
        text, next_step = for_this_user(text), for_this_user(next_step or "")
        if self.json_mode:
            document = {"ok": False, "verified": False, "error": text, "exit": exit_code, "reason": reason,
                        "file": file, "signer": signer, "next_step": next_step or None}
            self.stdout.write(json.dumps(document, sort_keys=True) + "\n")
            self.stdout.flush()
        else:
            self.message(ERROR, text + (f" (next: {next_step})" if next_step and next_step not in text else ""))

    def progress(self, label: str, unit: str = "", *, minimum: int = 6) -> Callable[[int, int], None]:
        """A progress callback ``(done, total)`` on stderr.

        On a terminal: one line redrawn at most ~10 times a second, Portage/wget style (a bar, percent,
        ``done/total unit``, rate and ETA).  Otherwise: one final line when the work is done (no
        noise in logs).  Nothing is shown for fewer than ``minimum`` items, in quiet mode or in JSON mode;
        but where bytes flow (``unit`` MiB: a download, a pass over a file) it is shown under ``--json`` too (on
        stderr: stdout keeps its one document), and a log gets a line every :data:`LOG_EVERY` seconds.
        ``done``/``total`` count items (keys, commits, MiB, stages), never a percentage.
        """
        tty = _isatty(self.stderr)
        started = time.monotonic()
        shown = {"final": False, "logged": started}
        flowing = unit == "MiB"

        def callback(done: int, total: int) -> None:
            if self.quiet or (self.json_mode and not flowing) or total < minimum or shown["final"]:
                return
            now = time.monotonic()
            finished = done >= total
            if tty:
                if not finished and now - self._last_progress < 0.1:
                    return
                self._last_progress = now
                line = progress_line(label, done, total, now - started, unit=unit, width=_columns(self.stderr))
                self.stderr.write(f"\r{line}" + ("\n" if finished else ""))
            elif finished:
                self.stderr.write(final_line(label, total, now - started, unit=unit) + "\n")
            elif flowing and now - shown["logged"] >= LOG_EVERY:
                shown["logged"] = now
                self.stderr.write(f" * {neutralise(label)}: {done}/{total} {unit} after {_duration(now - started)}\n")
            else:
                return
            shown["final"] = finished
            self.stderr.flush()

        return callback


#: Seconds between the progress lines of a download or file pass when stderr is no terminal (a log).
LOG_EVERY = 10.0


#: the ``--json`` keys whose text names commands for this user to run (never a diff, a file or a seed's fields)
COMMAND_KEYS = frozenset(("next_step", "fix", "fix_note", "error", "notes", "message"))


def for_this_user_json(document: Any, key: str = "") -> Any:
    """``document`` with :func:`~gkeys_portage.core.invocation.for_this_user` applied to the strings under the
    keys of :data:`COMMAND_KEYS`, at any depth (a doctor finding's ``fix``, a refusal's ``next_step``)."""
    if isinstance(document, dict):
        return {k: for_this_user_json(v, k) for k, v in document.items()}
    if isinstance(document, list):
        return [for_this_user_json(item, key) for item in document]
    return for_this_user(document) if isinstance(document, str) and key in COMMAND_KEYS else document


def _isatty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


def _columns(stream: TextIO) -> int:
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 80
    return columns if columns >= 40 else 80  # a terminal that reports no size (a fresh pty) gets 80


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds + 0.5))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def progress_line(label: str, done: int, total: int, elapsed: float, *, unit: str = "", width: int = 80) -> str:
    """`` * label [=====>    ]  45%  123/270 MiB  12.3 MiB/s  ETA 0:12`` fitted to ``width`` columns."""
    done, label = min(done, total), neutralise(label)
    fraction = done / total if total else 1.0
    suffix = f" {unit}" if unit else ""
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = "--:--" if rate <= 0 else _duration((total - done) / rate)
    tail = (f" {fraction * 100:3.0f}%  {done}/{total}{suffix}  {rate:.1f}{suffix or ' items'}/s  "
            + (f"in {_duration(elapsed)}" if done >= total else f"ETA {eta}"))
    head = f" * {label} "
    room = width - len(head) - len(tail) - 3
    if room < 5:  # a long label: no room for a bar, the numbers matter more
        return (head.rstrip() + tail)[: max(width - 1, 20)]
    filled = int(room * fraction)
    bar = "=" * filled + (">" if filled < room else "") + " " * max(room - filled - 1, 0)
    return f"{head}[{bar}]{tail}"


def final_line(label: str, total: int, elapsed: float, *, unit: str = "") -> str:
    """`` * label: 270/270 MiB in 0:22 (12.3 MiB/s)``: what a log gets instead of a bar."""
    suffix, label = (f" {unit}" if unit else ""), neutralise(label)
    rate = f" ({total / elapsed:.1f}{suffix or ' items'}/s)" if elapsed > 0 else ""
    return f" * {label}: {total}/{total}{suffix} in {_duration(elapsed)}{rate}"


#: The keys a verifying action's JSON document carries whether it verified or refused (docs/exit-codes.md).
VERDICT_KEYS = ("ok", "verified", "file", "signer", "reason", "next_step", "exit")


def with_verdict(document: dict[str, Any], exit_code: int, file: str | None) -> dict[str, Any]:
    """``document`` (a verifying action's report) with every key of :data:`VERDICT_KEYS`, for ``--json``.

    Keys the action set stay; the signer is read from the first good signature when the action names one.
    """
    signatures = document.get("signatures")
    first = signatures[0] if isinstance(signatures, list) and signatures and isinstance(signatures[0], dict) else {}
    signer = f"{first['category']}/{first['nick']}" if "category" in first and "nick" in first else None
    defaults = {"ok": exit_code == 0, "verified": exit_code == 0, "file": file, "signer": signer,
                "reason": None if exit_code == 0 else "not-verified", "next_step": None, "exit": exit_code}
    return {**defaults, **document}


def printable(text: object) -> str:
    """``text`` safe for a terminal line: control characters (escape sequences, new lines) as ``\\xNN``.

    Every string that came from a key, a seed, a tree, the network or the trust journal passes here: the output
    door, :func:`neutralise`, for any object."""
    return neutralise(str(text))
