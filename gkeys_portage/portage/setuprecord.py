"""The record of what ``setup-portage`` created under one EROOT, and of what it is about to create.

The record lives in gkeys' own state (``state/setup-portage/<EROOT digest>.json``), never in EROOT.  Every
multi-file change writes its intent first: before a file is written, the record names it as *pending*, with
its SHA-256 (or ``symlink:TARGET``) and the temporary name it is written under; only then is the temporary file
made and renamed in, and the record moves it from pending to done.  A run killed anywhere in between leaves a
pending entry, and the next ``setup-portage``, ``--undo`` or key refresh settles it first (:func:`settle`): a
file that holds exactly the pending content is setup's (recorded, so ``--undo`` removes it), the temporary file
is removed, and the entry is dropped.  So no file setup made survives ``--undo``, temp files included.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.core.errors import BadInputError
from gkeys_portage.core.state import atomic_write_json, read_json
from gkeys_portage.portage.confined import ConfinedRoot

ETC = Path("etc/portage")
RECORDS = "setup-portage"
REFRESH_TIMER = "gkeys-refresh.timer"
SYSTEMD_ETC = Path("etc/systemd/system")
#: the link ``systemctl enable gkeys-refresh.timer`` makes (its [Install] section: WantedBy=timers.target)
TIMER_LINK = SYSTEMD_ETC / "timers.target.wants" / REFRESH_TIMER
LINK = "symlink:"  # record value of a link setup made: "symlink:" + its target (files record their SHA-256)
#: a temporary name setup writes a file under, beside it (:func:`temp_name`)
_TEMP = re.compile(r"\.[^/]{1,255}\.[0-9a-f]{12}\.tmp")


def sha256(data: bytes) -> str:
    """Hex SHA-256 (how the record recognises an unchanged file)."""
    return hashlib.sha256(data).hexdigest()


def temp_name(path: Path) -> str:
    """A new temporary name for writing ``path`` (in its directory): ``.NAME.<12 hex>.tmp``."""
    return f".{path.name}.{secrets.token_hex(6)}.tmp"


@dataclass
class Pending:
    """A file setup is about to write: what it will hold (SHA-256 or ``symlink:TARGET``) and its temp name."""

    recorded: str
    temp: str = ""


@dataclass
class SetupRecord:
    """What setup created under one EROOT: files (path: SHA-256, or ``symlink:TARGET``), the directories it made,
    the category of each webrsync keyring (so that a key refresh can bring the keyring up to date), and the
    files it is about to write (``pending``: the intent, settled by the next run)."""

    files: dict[str, str] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)
    keyrings: dict[str, str] = field(default_factory=dict)
    pending: dict[str, Pending] = field(default_factory=dict)


def _own_path(name: str, *, directory: bool = False) -> bool:
    """A path setup may have created: below ``etc/portage`` (or, for a directory, ``etc`` and ``etc/portage``),
    and the timer link (and its ``timers.target.wants``)."""
    path = Path(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        return False
    if path == TIMER_LINK or (directory and path == TIMER_LINK.parent):
        return True
    inside = path.parts[:len(ETC.parts)] == ETC.parts and len(path.parts) > len(ETC.parts)
    return inside or (directory and path.parts == ETC.parts[:len(path.parts)])


def _pending(value: object) -> dict[str, Pending] | None:
    """The pending entries of a record as read (None if damaged)."""
    if not isinstance(value, dict):
        return None
    found = {}
    for name, entry in value.items():
        if not isinstance(name, str) or not _own_path(name) or not isinstance(entry, dict):
            return None
        recorded, temp = entry.get("recorded"), entry.get("temp", "")
        if not isinstance(recorded, str) or not isinstance(temp, str) or (temp and not _TEMP.fullmatch(temp)):
            return None
        found[name] = Pending(recorded, temp)
    return found


def read_record(record: Path, eroot: Path) -> SetupRecord:
    """The record of what setup created; only relative paths below ``etc/portage`` are accepted."""
    data = read_json(record, {})
    files = data.get("files", {}) if isinstance(data, dict) else None
    dirs = data.get("dirs", []) if isinstance(data, dict) else None
    keyrings = data.get("keyrings", {}) if isinstance(data, dict) else None  # absent in records before 2026-12
    pending = _pending(data.get("pending", {})) if isinstance(data, dict) else None  # absent before issue 36
    damaged = BadInputError(f"{record} (the record of what setup-portage created in {eroot}) is damaged: remove "
                            "the files it lists by hand, then remove it")
    if not isinstance(files, dict) or not isinstance(dirs, list) or not isinstance(keyrings, dict) or pending is None:
        raise damaged
    if data and data.get("eroot") != os.path.realpath(eroot):
        raise damaged
    if not all(isinstance(n, str) and _own_path(n) for n in files) \
            or not all(isinstance(n, str) and _own_path(n, directory=True) for n in dirs) \
            or not all(isinstance(d, str) for d in files.values()) \
            or not all((n in files or n in pending) and isinstance(c, str) for n, c in keyrings.items()):
        raise damaged
    return SetupRecord(dict(files), list(dirs), dict(keyrings), pending)


def write_record(record: Path, eroot: Path, content: SetupRecord) -> None:
    """Replace the record of what setup created under ``eroot`` (atomically)."""
    keyrings = {name: category for name, category in content.keyrings.items()
                if name in content.files or name in content.pending}
    value: dict[str, object] = {"eroot": os.path.realpath(eroot), "files": content.files, "dirs": content.dirs,
                                "keyrings": keyrings}
    if content.pending:
        value["pending"] = {name: {"recorded": entry.recorded, "temp": entry.temp}
                            for name, entry in content.pending.items()}
    atomic_write_json(record, value)


def settle(root: ConfinedRoot, content: SetupRecord, *, apply: bool = True) -> bool:
    """Finish what a killed run started: each pending file that holds exactly its pending content becomes
    recorded, its temporary file is removed (with ``apply``; a dry run only looks), and the intent is dropped.
    True if ``content`` changed (the caller writes the record)."""
    if not content.pending:
        return False
    for name, entry in content.pending.items():
        path = Path(name)
        if entry.temp and apply:
            temp = path.parent / entry.temp
            if root.kind(temp) in ("file", "symlink"):
                root.unlink(temp)
        if entry.recorded.startswith(LINK):
            done = root.readlink(path) == entry.recorded[len(LINK):]
        else:
            try:
                data = root.read(path)
            except BadInputError:
                data = None  # not a regular file: not setup's
            done = data is not None and sha256(data) == entry.recorded
        if done:
            content.files[name] = entry.recorded
    content.pending = {}
    return True
