"""One option of ``gkeys.conf`` set in place: the line of that key replaced (or added to its section, or the section
appended), every other line, comment and blank kept byte for byte; written atomically with the file's mode.

Used where a command gives something a setting that lives in the config (``add-seed --purpose``), so the file
stays the one place that says it.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

from gkeys_portage.core.errors import ConfigError
from gkeys_portage.core.state import atomic_write

_SECTION = re.compile(r"^\s*\[([^\]]+)\]\s*$")


def set_option(path: Path, section: str, key: str, value: str) -> None:
    """Make ``[section] key = value`` in the config file ``path`` (which must exist)."""
    try:
        text = path.read_text(encoding="utf-8")
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    line = f"{key} = {value}\n"
    key_line = re.compile(rf"^{re.escape(key)}\s*[=:]", re.IGNORECASE)
    current, start, end, found = None, None, None, None
    for number, text_line in enumerate(lines):
        header = _SECTION.match(text_line)
        if header:
            current = header.group(1).strip()
            if current == section:
                start = number
            continue
        if current == section:
            if text_line.strip():
                end = number
            if key_line.match(text_line):
                found = number
    if found is not None:
        stop = found + 1
        while stop < len(lines) and lines[stop][:1] in (" ", "\t") and lines[stop].strip():  # continuation lines
            stop += 1
        lines[found:stop] = [line]
    elif start is not None:
        lines.insert((end if end is not None else start) + 1, line)
    else:
        lines += (["\n"] if lines and lines[-1].strip() else []) + [f"[{section}]\n", line]
    atomic_write(path, "".join(lines).encode("utf-8"), mode)
