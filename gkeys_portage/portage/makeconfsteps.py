"""The make.conf steps around ``setup-portage``: the one line the user adds, and the one a removal must take out.

setup-portage never edits make.conf (a file of the user's, often hand-kept): when make.conf is a file, the
``FETCH_WRAPPER`` fragment it writes (``etc/portage/gkeys-fetch.conf``) counts only once make.conf ``source``s
it, so that line is printed as *the* step left, as a command to run (:func:`source_command`), by setup-portage
and by ``gkeys doctor`` alike, until make.conf has it.  ``--undo`` refuses while make.conf still sources a file
it would remove (Portage would then fail on every command), naming the line and the command that takes it out
(:func:`unsource_command`); doctor reports a ``source`` line whose file is gone, and every error Portage prints
reading make.conf, as findings.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from gkeys_portage.portage.makeconf import SOURCE_LINE, make_conf_lines
from gkeys_portage.portage.setup import ETC

#: the fragment setup-portage writes beside a make.conf *file*
FETCH_FRAGMENT = ETC / "gkeys-fetch.conf"
MAKE_CONF = ETC / "make.conf"


def _target(file: Path, line: str) -> Path | None:
    """The file a ``source`` line of ``file`` reads (None if it is no ``source`` line)."""
    match = SOURCE_LINE.match(line)
    if match is None:
        return None
    target = Path(match.group(1))
    return target if target.is_absolute() else file.parent / target


def sourcing_lines(eroot: Path, path: Path) -> list[tuple[Path, str]]:
    """The make.conf lines (file, line) that ``source`` ``path``."""
    wanted = os.path.realpath(path)
    return [(file, line) for file, line in make_conf_lines(eroot)
            if (target := _target(file, line)) is not None and os.path.realpath(target) == wanted]


def missing_sources(eroot: Path) -> list[tuple[Path, str, Path]]:
    """The make.conf lines (file, line, target) that ``source`` a file that does not exist."""
    found = []
    for file, line in make_conf_lines(eroot):
        target = _target(file, line)
        if target is not None and not target.exists():
            found.append((file, line, target))
    return found


def source_command(eroot: Path) -> str:
    """The command that adds ``source EROOT/etc/portage/gkeys-fetch.conf`` to make.conf (a file)."""
    return f"echo {shlex.quote(f'source {eroot / FETCH_FRAGMENT}')} >> {shlex.quote(str(eroot / MAKE_CONF))}"


def fetch_step(eroot: Path) -> str | None:
    """The command still needed for the fetch wrapper to count: :func:`source_command` while make.conf is a file
    (or absent) that does not source the fragment; None when make.conf is a directory or already sources it."""
    if (eroot / MAKE_CONF).is_dir() or sourcing_lines(eroot, eroot / FETCH_FRAGMENT):
        return None
    return source_command(eroot)


def unsource_command(file: Path, line: str) -> str:
    """A command that deletes exactly ``line`` from ``file`` (sed, the line matched whole and literally)."""
    script = "\\#^" + re.sub(r"([\\.*\[\]^$#])", r"\\\1", line) + "$#d"
    return f"sed -i {shlex.quote(script)} {shlex.quote(str(file))}"
