"""Keyrings: one GnuPG home per category, updated atomically (design.md §3 rule 6, §4).

Readers use the live home.  Writers get a staging copy of the keybox; only when the whole
update succeeded is the new ``pubring.kbx`` fsynced and renamed over the live one.  A crash (even SIGKILL) in
the middle of an update leaves the previous keyring in place and working.

Two views, changed together.  The owner reads the keybox; Portage's unprivileged user and
``GKEYS_READ_ONLY_KEYRINGS`` readers read the exported ``keyrings/<category>.asc``.  Two files cannot be
renamed in one step, so the export goes first and names the keybox it was made from (an armor header
``Comment: gkeys keybox sha256 HEX``); an owner whose keybox is not that one (a run killed between the two
renames) reads the export too.  So from the export's rename on every reader sees the new keys (a revocation
included) and before it every reader sees the old ones; the next update starts from the export's keys.  (A first
install killed there leaves the owner without a keybox: it has no keys and refuses everything until a rerun.)
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from gkeys_portage.core import journal
from gkeys_portage.core.errors import GkeysError, StateError
from gkeys_portage.core.faultpoint import checkpoint
from gkeys_portage.core.scratch import make_dir, private_dir, sweep_once
from gkeys_portage.core.state import (
    TEMP_PREFIX,
    Layout,
    atomic_write,
    check_safe_directory,
    fsync_directory,
    staging_directory,
)
from gkeys_portage.core.types import Category, Fingerprint, parse_category
from gkeys_portage.openpgp.colons import PublicKey, SubKey
from gkeys_portage.openpgp.engine import Capability, probe
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.history.store import HISTORY_FILE, KeyHistory, merge, parse_history
from gkeys_portage.openpgp.keyblocks import (
    Selection,
    armor_public_keys,
    dearmor_public_keys,
    split_keyblocks,
    without_subkeys,
)
from gkeys_portage.openpgp.revocations import apply_revocation_rule
from gkeys_portage.openpgp.signatures import export_all

KEYBOX = "pubring.kbx"
#: Set to ``1`` to verify from the exported keyrings even as the owner (see :meth:`Keyring.owned`).
READ_ONLY_VARIABLE = "GKEYS_READ_ONLY_KEYRINGS"
#: the scratch homes of key operations in ``keyrings/`` (named with their owner; a killed run's are swept)
SCRATCH_PREFIXES = (".staging-", ".quarantine-", ".authority-", TEMP_PREFIX)
#: the scratch homes under $TMPDIR where revocations an engine did not apply are checked (gkeys' revocation rule)
REVOCATIONS_PREFIX = "gkeys-revocations-"
#: the throwaway reader homes under ``$TMPDIR`` (see :meth:`Keyring.gpg`)
READER_PREFIX = "gkeys-reader-"
#: the armor header of the export naming the keybox it was made from (see the module docstring)
GENERATION_HEADER = b"Comment: gkeys keybox sha256 "


def keybox_digest(path: Path) -> str | None:
    """The hex SHA-256 of a keybox file (None if there is none)."""
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except FileNotFoundError:
        return None


def export_generation(exported: bytes) -> str | None:
    """The keybox digest an export names in its armor headers (None: an empty export, or one made before
    gkeys named it)."""
    for line in exported.split(b"\n", 8)[1:8]:
        if not line.strip():
            break
        if line.startswith(GENERATION_HEADER):
            return line[len(GENERATION_HEADER):].strip().decode("ascii", "replace")
    return None


class Keyring:
    """The keyring of one category."""

    def __init__(self, layout: Layout, category: Category, *, timeout: float = 300.0) -> None:
        self.layout = layout
        self.category = parse_category(category)
        self.home = layout.keyrings_dir / self.category
        self.export_path = layout.keyrings_dir / f"{self.category}.asc"
        self.timeout = timeout
        self._keys: dict[Fingerprint, PublicKey] | None = None
        self._reader: Path | None = None
        # python-gnupg runs ``gpg --list-config`` whenever a GPG object is made: make one per clock.
        self._readers: dict[datetime | None, GnuPG] = {}
        self._opening = threading.RLock()  # threads share one reader home and one listing (verify-tree)
        self._export_view: bool | None = None  # the owner reads the export (see the module docstring)
        self._incoming: list[bytes] = []  # key data as sources sent it, for the history (see note_history)
        self._history: dict[Fingerprint, bytes] | None = None
        self._parsed: dict[Fingerprint, KeyHistory | None] = {}  # the time rule asks once per signature
        for prefix in SCRATCH_PREFIXES:  # the staging and quarantine homes of killed key operations
            sweep_once(layout.keyrings_dir, prefix)

    def exists(self) -> bool:
        """True if the keyring has a keybox (or, for a reader that does not own it or whose keybox the export
        is not from, a non-empty export)."""
        if not self.owned() or self.reads_export():
            return self.export_path.is_file() and self.export_path.stat().st_size > 0
        return (self.home / KEYBOX).is_file()

    def reads_export(self) -> bool:
        """True when the owner must read the export: it names a keybox other than the live one (a run was
        killed between renaming the export and the keybox in).  Decided once per object and update.  A missing
        keybox is not read from the export: removed by hand, the keyring is missing (``gkeys doctor`` says so);
        a first install killed in that window leaves the owner with no keys, refusing everything."""
        with self._opening:
            if self._export_view is None:
                try:
                    with open(self.export_path, "rb") as handle:
                        named = export_generation(handle.read(512))
                except OSError:
                    named = None
                live = keybox_digest(self.home / KEYBOX) if named is not None else None
                self._export_view = live is not None and named != live
            return self._export_view

    def owned(self) -> bool:
        """True unless the live home exists and belongs to another user, or ``$GKEYS_READ_ONLY_KEYRINGS``
        is ``1``.

        Portage fetches (``FEATURES=userfetch``) and builds (``userpriv``) as the unprivileged ``portage``
        user, who can neither open root's 0700 GnuPG home nor let gpg lock it; such readers verify
        against the exported ``keyrings/<category>.asc`` instead (see :meth:`gpg`).  The eclass and the
        bashrc hook set the variable so that an ebuild phase never writes into the live home (gpg's
        lock files there would be sandbox violations when a build runs as root).
        """
        if os.environ.get(READ_ONLY_VARIABLE) == "1":
            return False
        try:
            return self.home.stat().st_uid == os.geteuid()
        except FileNotFoundError:
            return True

    def gpg(self, faked_time: datetime | None = None) -> GnuPG:
        """GnuPG on the live home, for reading and verifying (refused if the home is a symlink).

        A process that does not own the home gets a private throwaway home holding the exported
        keyring (the same pinned keys, revocations included), removed when this object goes away; so does
        an engine that writes into a home it only verifies with (gpg-sq's verification cache:
        :mod:`gkeys_portage.openpgp.engine`), so the live home is never written.
        """
        with self._opening:
            owner = self.owned()
            if owner:  # a home planted as a symlink is refused, whichever view the owner then reads
                check_safe_directory(self.home)
            if not owner or self.reads_export():
                home, read_only = self._reader_home(), False
            elif not probe().has(Capability.READ_ONLY):
                home, read_only = self._copied_home(), False
            else:
                check_safe_directory(self.home)
                home, read_only = self.home, True
            cached = self._readers.get(faked_time)
            if cached is None or cached.homedir != home:
                cached = GnuPG(home, faked_time=faked_time, timeout=self.timeout, read_only=read_only)
                self._readers[faked_time] = cached
            return cached

    def _copied_home(self) -> Path:
        """A private copy of the live home (its files, not an import) for an engine that writes into homes
        it verifies with; removed when this object goes away."""
        if self._reader is None:
            home = make_dir(None, f"{READER_PREFIX}{self.category}-", sweep=READER_PREFIX)
            weakref.finalize(self, shutil.rmtree, home, True)
            if self.home.exists():  # no home yet: an empty keyring, as the live path would see
                check_safe_directory(self.home)
                shutil.copytree(self.home, home, dirs_exist_ok=True, symlinks=True,
                                ignore=shutil.ignore_patterns("S.*", "*.lock", ".#lk*"))
            self._reader = home
        return self._reader

    def _reader_home(self) -> Path:
        """The throwaway home of a non-owner (created on first use from the export)."""
        if self._reader is None:
            try:
                exported = self.export_path.read_bytes()
            except OSError as exc:
                raise StateError(f"cannot read the exported keyring {self.export_path} as uid {os.geteuid()}: "
                                 f"{exc.strerror} (run as the keyring's owner, or run 'gkeys install-key "
                                 f"-C {self.category}' to write it)") from exc
            home = make_dir(None, f"{READER_PREFIX}{self.category}-", sweep=READER_PREFIX)
            weakref.finalize(self, shutil.rmtree, home, True)
            gpg = GnuPG(home, timeout=self.timeout)
            if exported:
                gpg.import_keys(exported)
                # the export carries the keys' history, which the keybox drops (openpgp/keyhistory.py)
                with contextlib.suppress(GkeysError):
                    (home / HISTORY_FILE).write_bytes(dearmor_public_keys(exported))
            self._reader = home
        return self._reader

    def installed(self) -> dict[Fingerprint, PublicKey]:
        """The keys of this keyring by primary fingerprint (cached for this object), every key and subkey
        revoked under gkeys' rule marked revoked, whatever the engine says
        (:mod:`gkeys_portage.openpgp.revocations`)."""
        with self._opening:
            if self._keys is None:
                keys: list[PublicKey] = []
                if self.exists():
                    gpg = self.gpg()
                    keys = apply_revocation_rule(gpg.list_keys(sigs=True), self._checked_signatures)
                for key in keys:  # the time rule reads each signer's history when it judges a signature
                    key.history = functools.partial(self.history, key.fingerprint)
                self._keys = {key.fingerprint: key for key in keys}
            return self._keys

    def history(self, fingerprint: Fingerprint) -> KeyHistory | None:
        """The dated history of one key of this keyring (:mod:`~gkeys_portage.openpgp.history.store`): the keybox's
        copy merged with the history the home this process reads keeps, exactly what Sequoia reads
        (:func:`~gkeys_portage.openpgp.signatures.export_all`; a keyring written before gkeys kept history has
        its keybox's packets only, until the next install or refresh); None when neither holds the key."""
        with self._opening:
            if self._history is None:
                self._parsed = {}
                blocks: dict[Fingerprint, bytes] = {}
                with contextlib.suppress(OSError, GkeysError):
                    data = export_all(self.gpg())
                    blocks = {block.primary: block.data for block in split_keyblocks(data)}
                self._history = blocks
            if fingerprint not in self._parsed:
                block = self._history.get(fingerprint)
                try:
                    self._parsed[fingerprint] = parse_history(block) if block is not None else None
                except GkeysError:
                    self._parsed[fingerprint] = None
            return self._parsed[fingerprint]

    def note_history(self, data: bytes) -> None:
        """Key data as a source sent it (binary, or one armored block), for the keys' history: GnuPG's import
        keeps only a subkey's newest binding, so what a keyserver merged is read from its answer, not from the
        keybox.  Only the keys the next update commits, with their own signatures, are kept
        (:func:`~gkeys_portage.openpgp.history.store.merge`); data that is not key packets adds nothing."""
        with contextlib.suppress(GkeysError):
            binary = data if data[:1] and data[0] & 0x80 else dearmor_public_keys(data)
            split_keyblocks(binary)
            self._incoming.append(binary)

    def _checked_signatures(self, revokers: Sequence[Fingerprint], key: Fingerprint) -> PublicKey | None:
        """``key`` listed with its signatures checked (``--check-sigs``), in a scratch home that holds its
        designated ``revokers`` first (:func:`~gkeys_portage.openpgp.revocations.apply_revocation_rule`)."""
        source = self.gpg()
        options = ("no-self-sigs-only",) if probe().has(Capability.SAFE_IMPORT) else ()
        with private_dir(REVOCATIONS_PREFIX) as scratch:  # owned: a killed run's is removed by the next
            gpg = GnuPG(scratch / "home", timeout=self.timeout)
            for fingerprint in [*revokers, key]:
                gpg.import_report(source.export_keys([fingerprint], armor=False, clean=False), options=options)
            return next((listed for listed in gpg.check_sigs() if listed.fingerprint == key), None)

    def export_for_verifier(self, fingerprints: Sequence[Fingerprint]) -> bytes:
        """The named keys, armored, for a verifier that takes its engine's word on revocations (gemato for an
        rsync tree, Portage's gpg for webrsync snapshots): without a key or subkey that gkeys' rule revokes and
        the engine does not (:mod:`gkeys_portage.openpgp.revocations`), so no engine there can accept it."""
        gpg = self.gpg()
        engine = {key.fingerprint: key for key in gpg.list_keys(fingerprints)}
        ruled = self.installed()

        def ruled_only(fpr: Fingerprint, part: SubKey) -> bool:  # revoked by the rule, not by the engine
            theirs = engine[fpr].find(part.fingerprint) if fpr in engine else None
            return part.revoked and theirs is not None and not theirs.revoked

        keys = [fpr for fpr in fingerprints if not ruled_only(fpr, ruled[fpr].primary)]
        subkeys = {sub.fingerprint for fpr in keys for sub in ruled[fpr].subkeys if ruled_only(fpr, sub)}
        data = gpg.export_keys(keys, armor=False) if keys else b""
        return armor_public_keys(without_subkeys(data, subkeys)) if data else b""

    @contextlib.contextmanager
    def update(self) -> Iterator[GnuPG]:
        """Yield GnuPG on a staging home; commit it atomically if the block succeeds.

        The staging home is rebuilt from the live keyring's exact export through the safe import path
        (:data:`~gkeys_portage.openpgp.gnupg.SAFE_IMPORT_OPTIONS`), not copied: third-party certifications an
        older version stored, and keyblocks that carry another key's primary as a subkey, do not survive
        the next update; every self-signature, binding and revocation does (the key's history: neither the
        export nor the import cleans), and what the block imports is merged into it, so a source that sends
        only a key's newest self-signature never erases an older one.  The caller must hold the state lock.
        """
        check_safe_directory(self.home)
        with staging_directory(self.layout.keyrings_dir, f".staging-{self.category}-", SCRATCH_PREFIXES) as staging:
            gpg = GnuPG(staging, timeout=self.timeout)
            before: set[Fingerprint] = set()
            if self.exists() and self.installed():  # the keys every reader sees (the export's, if it leads)
                live = self.gpg().export_exact()
                before = live.primaries
                if live.kept:
                    gpg.import_keys(live.data)
            yield gpg
            if (staging / KEYBOX).exists():
                lost = before - {key.fingerprint for key in gpg.list_keys()}
                if lost:
                    raise StateError(f"keyring {self.category}: the update lost {len(lost)} key(s) "
                                     f"(disk full or gpg failure?); the previous keyring is kept")
            self._commit(gpg, staging)

    def adopt(self, gpg: GnuPG, exported: Selection | None = None) -> None:
        """Make the keybox of another home (on the same filesystem) this keyring, atomically.

        Used when a fresh keyring would be an exact copy of it (saves a second import).  ``exported``
        is that home's :meth:`GnuPG.export_exact` of *every* key it holds, if the caller already made
        it (it becomes the armored export; saves a second export and check).
        """
        self._commit(gpg, gpg.homedir, exported)

    def _commit(self, gpg: GnuPG, staging: Path, selection: Selection | None = None) -> None:
        new = staging / KEYBOX
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not new.exists():
            # gpg creates the keybox lazily: an update that imported nothing leaves none.
            atomic_write(self.export_path, b"")
            return
        if selection is None:
            selection = gpg.export_exact()
        with open(new, "rb") as handle:
            os.fsync(handle.fileno())
            digest = hashlib.file_digest(handle, "sha256").hexdigest()
        header = GENERATION_HEADER + digest.encode("ascii")
        history = self._merged_history(selection)
        # the history first (it only ever grows, and only the keys of this update are in it), then the export
        # (the keybox's keys with their history: a reader's home gets both from it), then the keybox
        atomic_write(self.home / HISTORY_FILE, history)
        exported = armor_public_keys(merge([history], base=selection.data), [header]) if selection.data else b""
        atomic_write(self.export_path, exported)  # first: from here on every reader sees the new keys
        checkpoint("keyring-between-export-and-keybox")
        os.replace(new, self.home / KEYBOX)
        fsync_directory(self.home)
        self._keys = None
        self._export_view = None
        self._history = None

    def _merged_history(self, selection: Selection) -> bytes:
        """The history of the keys ``selection`` holds: what the live home kept (and its export, which a reader
        may lead with), what sources sent since (:meth:`note_history`) and the new keybox's own packets."""
        kept: list[bytes] = []
        with contextlib.suppress(OSError):
            kept.append((self.home / HISTORY_FILE).read_bytes())
        with contextlib.suppress(OSError, GkeysError):
            kept.append(dearmor_public_keys(self.export_path.read_bytes()))
        incoming, self._incoming = self._incoming, []
        return merge([*kept, *incoming, selection.data], keep=selection.primaries)

    def remove_keys(self, fingerprints: set[Fingerprint]) -> list[Fingerprint]:
        """Remove keys by rebuilding the keyring without them (no gpg-agent needed); atomic."""
        installed = self.installed()
        removed = sorted(f for f in fingerprints if f in installed)
        if not removed:
            return []
        kept = sorted(f for f in installed if f not in fingerprints)
        data = self.gpg().export_keys(kept, armor=False) if kept else b""
        with staging_directory(self.layout.keyrings_dir, f".staging-{self.category}-", SCRATCH_PREFIXES) as staging:
            gpg = GnuPG(staging, timeout=self.timeout)
            if data:
                gpg.import_keys(data)
            else:
                gpg.list_keys()  # creates an empty keybox; raises if gpg cannot
            self._commit(gpg, staging)
        journal.record(self.layout, "keys-changed", {"category": self.category, "keys": [
            {"fingerprint": f, "change": "removed", "subkeys": [k.fingerprint for k in installed[f].subkeys]}
            for f in removed]})
        return removed

    def remove(self) -> None:
        """Delete the whole keyring of this category (home and export)."""
        journal.record(self.layout, "keyring-removed", {"category": self.category})
        shutil.rmtree(self.home, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            self.export_path.unlink()
        self._keys = None
        self._export_view = None
        self._history = None


def journal_keys(keyring: Keyring, before: Mapping[Fingerprint, PublicKey], after: Mapping[Fingerprint, PublicKey],
                 outcomes: Iterable[Any]) -> None:
    """Journal what an install or refresh changed in ``keyring`` (``outcomes``: its :class:`KeyOutcome`\\ s):
    keys added, refreshed or found revoked (and which sources answered), keys a source answered wrongly."""
    changes = []
    for out in outcomes:
        status, new, old = out.status.value, after.get(out.fingerprint), before.get(out.fingerprint)
        if status in ("added", "updated") and new is not None:
            revoked = [k.fingerprint for k in new.all_keys()
                       if k.revoked and not (old is not None and (o := old.find(k.fingerprint)) and o.revoked)]
            change = "revoked" if revoked else "added" if status == "added" else "refreshed"
            changes.append({"nick": out.nick, "fingerprint": out.fingerprint, "change": change, "revoked": revoked,
                            "subkeys": [k.fingerprint for k in new.subkeys], "source": out.source,
                            "sources": out.answered})
        elif status in ("mismatch", "refused"):
            changes.append({"nick": out.nick, "fingerprint": out.fingerprint, "change": f"key-{status}",
                            "errors": out.errors[:4], "dropped": out.dropped[:8], "sources": out.answered})
    if changes:
        journal.record(keyring.layout, "keys-changed", {"category": keyring.category, "keys": changes})
