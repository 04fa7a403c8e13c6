"""What ``make.conf`` says: its lines as Portage reads them (``source`` followed, directories in order) and
the value it finally gives a variable (Portage's own reader where Portage is importable)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from pathlib import Path

from gkeys_portage.core.config import eprefix
from gkeys_portage.portage.reposconf import file_or_directory
from gkeys_portage.portage.setup import ETC

SOURCE_LINE = re.compile(r"^\s*source\s+[\"']?([^\"'\s]+)")

#: the make.conf files Portage reads, in order (the legacy ``etc/make.conf`` first)
MAKE_CONF = (Path("etc/make.conf"), ETC / "make.conf")


def make_conf_lines(eroot: Path) -> list[tuple[Path, str]]:
    """The lines of make.conf (each a file, or a directory's files in Portage's order), each ``source``d file's
    lines spliced in at its ``source`` line, as the shell (and Portage's reader) reads them."""
    lines: list[tuple[Path, str]] = []

    def read(path: Path, sourcing: frozenset[Path]) -> None:
        if path in sourcing or not path.is_file():
            return  # (a file that sources itself would never end)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        for line in text.splitlines():
            lines.append((path, line))
            sourced = SOURCE_LINE.match(line)
            if sourced:
                target = Path(sourced.group(1))
                read(target if target.is_absolute() else path.parent / target, sourcing | {path})

    for name in MAKE_CONF:
        for path in file_or_directory(eroot / name):  # hidden and editor backup (~) files skipped, as Portage does
            read(path, frozenset())
    return lines


def make_conf_value(eroot: Path, name: str) -> str | None:
    """The value make.conf finally gives ``name`` (None if unset): Portage's own reader
    (``portage.util.getconfig``) where Portage is importable, else :func:`own_make_conf_value`."""
    values = portage_make_conf(eroot)[0]
    return own_make_conf_value(eroot, name) if values is None else values.get(name)


def portage_make_conf(eroot: Path) -> tuple[dict[str, str] | None, list[str]]:
    """make.conf as Portage reads it, and the errors Portage prints reading it (each line it writes, captured
    rather than let through: ``gkeys doctor`` reports them as findings); ``None`` for the values when Portage is
    not importable or cannot parse it (a ``ValueError`` is then one of the errors)."""
    try:
        from portage.util import getconfig
    except Exception:  # no Portage here: the same reading, by hand
        return None, []
    values: dict[str, str] = {}
    errors = io.StringIO()
    for path in MAKE_CONF:
        try:
            with contextlib.redirect_stderr(errors):
                found = getconfig(str(eroot / path), tolerant=True, allow_sourcing=True, expand=dict(values),
                                  recursive=True)
        except Exception as exc:  # a make.conf Portage cannot parse: read it the simple way rather than not at all
            return None, [*errors.getvalue().splitlines(), f"{eroot / path}: {exc}"]
        values.update(found or {})
    return values, [line for line in errors.getvalue().splitlines() if line.strip()]


def own_make_conf_value(eroot: Path, name: str) -> str | None:
    """The last assignment to ``name`` in :func:`make_conf_lines`, its shell quoting removed (None if unset)."""
    pattern = re.compile(rf"^\s*(?:export\s+)?{re.escape(name)}=(.*)$")
    value = None
    for _, line in make_conf_lines(eroot):
        match = pattern.match(line)
        if match:
            raw = match.group(1).strip()
            try:  # shlex keeps the backslash of \$ and \` inside double quotes, which the shell drops
                value = " ".join(shlex.split(raw, comments=True)).replace("\\$", "$").replace("\\`", "`")
            except ValueError:
                value = raw
    return value


def fetch_wrapper(eroot: Path) -> str | None:
    """The ``FETCH_WRAPPER`` value make.conf sets, or None."""
    return make_conf_value(eroot, "FETCH_WRAPPER")


def trust_helper(eroot: Path) -> str | None:
    """The ``PORTAGE_TRUST_HELPER`` value make.conf sets, or None (Portage's default: getuto)."""
    return make_conf_value(eroot, "PORTAGE_TRUST_HELPER")


#: Portage's default DISTDIR (below EPREFIX)
DEFAULT_DISTDIR = "var/cache/distfiles"


def portage_distdir() -> Path | None:
    """Portage's DISTDIR as root's Portage sees it: ``$DISTDIR`` of this environment (Portage lets it override
    make.conf), else make.conf's, else ``${EPREFIX}/var/cache/distfiles``; None when it is not an absolute path
    (the journal spool's claims are then left unconfirmed, :mod:`gkeys_portage.verify.claimed`)."""
    eroot = Path(eprefix() or "/")
    named = os.environ.get("DISTDIR") or make_conf_value(eroot, "DISTDIR") or str(eroot / DEFAULT_DISTDIR)
    return Path(named) if named.startswith("/") else None
