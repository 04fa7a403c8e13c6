"""Keep the webrsync keyrings that ``setup-portage`` wrote in step with gkeys' keys, after every key refresh.

``setup-portage`` points ``sync-openpgp-key-path`` of a ``sync-type = webrsync`` repository at
``${EPREFIX}/etc/portage/gkeys/<repo>.asc``, a copy of the pinned repository keys of one category.  A copy made
once would keep a revoked or replaced key for ever; so ``gkeys refresh-key`` (run daily by gkeys-refresh.timer)
calls :func:`refresh_webrsync_keyrings`, which rewrites every such keyring that setup recorded (with its
category) and that nobody changed since, from the keys as they are after the refresh.  A keyring changed by hand
is left alone and reported, as setup-portage itself does; one whose category no longer pins a repository key is
an error naming the fix: the old copy would go on accepting keys that gkeys no longer trusts.
"""

from __future__ import annotations

import enum
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from gkeys_portage.core.config import eprefix
from gkeys_portage.core.errors import GkeysError
from gkeys_portage.core.faultpoint import checkpoint
from gkeys_portage.core.state import read_json
from gkeys_portage.portage.confined import ConfinedRoot
from gkeys_portage.portage.setup import KeyringSource
from gkeys_portage.portage.setuprecord import (
    RECORDS,
    Pending,
    SetupRecord,
    read_record,
    settle,
    sha256,
    temp_name,
    write_record,
)


class KeyringState(enum.Enum):
    """What a refresh did to one webrsync keyring."""

    UPDATED = "updated"
    UNCHANGED = "unchanged"
    EDITED = "edited"  # changed by hand since setup wrote it: left alone
    MISSING = "missing"  # removed by hand: left alone (setup-portage writes it again)
    FAILED = "failed"  # the keys could not be exported, or the root could not be reached safely


@dataclass(frozen=True)
class KeyringRefresh:
    """One webrsync keyring after a refresh: where, of which category, and what happened (``detail``: why)."""

    path: Path  # absolute: EROOT / etc/portage/gkeys/<repo>.asc
    category: str
    state: KeyringState
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        """The facts, for ``--json``."""
        return {"path": str(self.path), "category": self.category, "state": self.state.value, "detail": self.detail}


def _records(state_dir: Path) -> list[tuple[Path, Path]]:
    """Every setup-portage record under ``state_dir`` with the EROOT it names: ``(record, eroot)``."""
    found = []
    for record in sorted((state_dir / RECORDS).glob("*.json")):
        data = read_json(record, {})
        eroot = data.get("eroot") if isinstance(data, dict) else None
        if isinstance(eroot, str) and os.path.isabs(eroot):
            found.append((record, Path(eroot)))
    return found


def refresh_webrsync_keyrings(state_dir: Path, keyrings: KeyringSource) -> list[KeyringRefresh]:
    """Rewrite each webrsync keyring setup-portage recorded in ``state_dir`` from ``keyrings(category)``, when its
    content is still what setup wrote; one :class:`KeyringRefresh` per keyring, records without one say nothing."""
    results: list[KeyringRefresh] = []
    for record, eroot in _records(state_dir):
        try:
            content = read_record(record, eroot)
            if not content.keyrings and not content.pending:
                continue
            with ConfinedRoot(eroot) as root:
                if settle(root, content):  # a keyring (or a setup) a killed run was writing
                    write_record(record, eroot, content)
                for name, category in sorted(content.keyrings.items()):
                    results.append(_refresh_one(root, record, eroot, content, Path(name), category, keyrings))
        except (GkeysError, OSError) as exc:  # a damaged record, an EROOT that is gone or no longer safe to write
            why = exc.message if isinstance(exc, GkeysError) else exc.strerror or str(exc)
            results.append(KeyringRefresh(eroot / "etc/portage/gkeys", "", KeyringState.FAILED,
                                          f"cannot bring setup-portage's webrsync keyrings in {eroot} up to "
                                          f"date: {why}"))
    return results


def _setup(eroot: Path, *options: str) -> str:
    """The setup-portage command line for ``eroot`` (``--eroot`` only where it is not the default)."""
    where = () if str(eroot) in ("/", eprefix() or "/") else ("--eroot", shlex.quote(str(eroot)))
    return " ".join(("gkeys setup-portage", *where, *options))


def _refresh_one(root: ConfinedRoot, record: Path, eroot: Path, content: SetupRecord, name: Path, category: str,
                 keyrings: KeyringSource) -> KeyringRefresh:
    """One keyring of :func:`refresh_webrsync_keyrings` (``name``: its path below ``eroot``)."""
    path = eroot / name
    current = root.read(name)
    if current is None:
        return KeyringRefresh(path, category, KeyringState.MISSING,
                              f"removed since setup-portage wrote it: run '{_setup(eroot)}' again to restore it")
    if sha256(current) != content.files.get(name.as_posix()):
        return KeyringRefresh(path, category, KeyringState.EDITED,
                              "changed since setup-portage wrote it: left alone; compare with "
                              f"'{_setup(eroot, '--dry-run')}' and merge it by hand")
    try:
        fresh = keyrings(category)
    except GkeysError as exc:
        return KeyringRefresh(path, category, KeyringState.FAILED,
                              f"{exc.message}; it still holds the keys of the last refresh, which emerge-webrsync "
                              f"accepts: pin a repository key again, or stop using it with '{_setup(eroot, '--undo')}'")
    if fresh == current:
        return KeyringRefresh(path, category, KeyringState.UNCHANGED)
    entry = content.pending[name.as_posix()] = Pending(sha256(fresh), temp_name(name))
    write_record(record, eroot, content)  # intent first: a kill before the record is settled by the next run
    try:
        root.write(name, fresh, 0o644, temp=entry.temp)
    except OSError as exc:  # a read-only /etc (a service sandbox without ReadWritePaths), a full disk
        content.pending.pop(name.as_posix())  # not written: the next record write drops the intent
        return KeyringRefresh(path, category, KeyringState.FAILED,
                              f"cannot be rewritten ({exc.strerror}); it still holds the keys of the last refresh: "
                              "run 'gkeys refresh-key' where it can write there (as root, outside a sandbox)")
    checkpoint("webrsync-between-keyring-and-record")
    content.files[name.as_posix()] = content.pending.pop(name.as_posix()).recorded
    write_record(record, eroot, content)
    return KeyringRefresh(path, category, KeyringState.UPDATED)
