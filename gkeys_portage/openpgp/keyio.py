"""Keys in and out of a GnuPG home: listing, import (with what gpg did not import), exact export by primary
fingerprint, owner trust, and the certification-keeping import an authority check needs."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from gkeys_portage.core.errors import GpgError
from gkeys_portage.core.types import Fingerprint, parse_fingerprint
from gkeys_portage.openpgp.colons import PublicKey, parse_colons
from gkeys_portage.openpgp.engine import KEEP_CERTIFICATIONS, SAFE_IMPORT, Capability, probe
from gkeys_portage.openpgp.keyblocks import (
    Selection,
    armor_public_keys,
    dearmor_public_keys,
    designated_revocations,
    select_keyblocks,
    split_keyblocks,
)
from gkeys_portage.openpgp.process import (
    GpgProcess,
    GpgResult,
    last_error_line,
    status_lines,
)

#: ``--import-options`` for key data from sources and for rebuilding keyrings (see :meth:`GnuPG.import_report`).
SAFE_IMPORT_OPTIONS = SAFE_IMPORT
#: Field of ``IMPORT_RES`` counting keys GnuPG did not import (doc/DETAILS).
IMPORT_RES_NOT_IMPORTED = 13
_IMPORT_ERROR_WORDS = re.compile(r"\b(?:error|fail\w*|invalid|too large|not imported|unknown|bad|can't|cannot|fatal)\b",
                                 re.IGNORECASE)
_AGENT_TROUBLE = re.compile(r"agent", re.IGNORECASE)
#: What gpg's messages quote and may contain any word: file names, user ids ("..."), key ids and fingerprints
#: (hex: a key id like F1A466ECBBADBCC1 holds "BAD").
_QUOTED_OR_NAMES = re.compile(r'"[^"]*"|\S*/\S*|\b[0-9A-Fa-f]{8,}\b')



@dataclass
class ImportReport:
    """What one ``gpg --import`` did: primaries imported (IMPORT_OK) and why anything was not."""

    imported: list[Fingerprint]
    problem: str  # "" when every key was imported and gpg exited 0
    stderr: str = ""



@dataclass
class EarlyExport:
    """The export of the pinned keys a quarantine home holds, made beside its listing
    (:meth:`KeyIO.list_keys_exporting`), used only when exactly the keys it names are found and nothing was
    imported since (:meth:`clear`)."""

    wanted: set[Fingerprint]
    names: list[str] = field(default_factory=list)
    selection: Selection | None = None
    before: set[Fingerprint] = field(default_factory=set)  # pinned keys the home held before this round

    def clear(self) -> None:
        """Forget the export: the home is about to change."""
        self.names, self.selection = [], None

    def known(self, present: Collection[Fingerprint]) -> EarlyExport:
        """This, with the pinned keys of ``present`` (the home's last listing) expected again."""
        self.before = self.wanted & set(present)
        return self

    def take(self, found: set[Fingerprint]) -> Selection | None:
        """The export if it is that of exactly ``found``, else None (the caller exports them itself)."""
        return self.selection if self.selection is not None and self.names == sorted(found) else None

    @staticmethod
    def listing(early: EarlyExport | None, home: KeyIO, imported: set[Fingerprint]) -> dict[Fingerprint, PublicKey]:
        """The keys of ``home`` by primary fingerprint; with ``early``, those of its keys gpg ``imported`` (or the
        home held before) that it wants are exported meanwhile, into it."""
        if early is None:
            return {k.fingerprint: k for k in home.list_keys()}
        keys, early.selection, early.names = home.list_keys_exporting(early.wanted & (imported | early.before))
        return {k.fingerprint: k for k in keys}


class KeyIO(GpgProcess):
    """Key listing, import and export in one GnuPG home."""

    def list_keys(self, fingerprints: Iterable[str] = (), *, sigs: bool = False,
                  secret: bool = False) -> list[PublicKey]:
        """Keys in this home (all, or those whose *primary* fingerprint is named) as parsed colon records."""
        command = "--list-secret-keys" if secret else ("--list-sigs" if sigs else "--list-keys")
        names = list(fingerprints)
        args = ["--with-colons", "--fixed-list-mode", "--with-fingerprint", "--with-fingerprint", command, *names]
        result = self.run(args)
        if result.timed_out:
            raise GpgError("listing keys: gpg timed out")
        # gpg exits 2 when a named key is absent (the listing of the others is still complete); listing
        # everything must succeed, or the keybox is unreadable.
        if not names and result.returncode != 0:
            raise GpgError(f"listing keys failed: {last_error_line(result.stderr)}", detail=result.stderr)
        keys = parse_colons(result.stdout.decode("latin-1"))
        # gpg's selectors match subkeys too: a key carrying a named fingerprint as a subkey is not the key.
        wanted = {name.upper() for name in names}
        return [key for key in keys if key.fingerprint in wanted] if names else keys

    def import_report(self, data: bytes | IO[bytes], *,
                      options: Sequence[str] = SAFE_IMPORT_OPTIONS) -> ImportReport:
        """Import OpenPGP key data (bytes, or a binary stream read to its end) and report what GnuPG
        did (never raises for what the data holds).

        ``options`` are gpg's ``--import-options``: by default third-party certifications are not
        stored (``self-sigs-only``) — trust comes from pins, and a flood of certifications must neither grow a
        keyblock to GnuPG's 5 MiB keybox limit (after which a revocation can no longer be merged) nor cost
        minutes of CPU per refresh — and nothing is cleaned (``no-import-clean``): every self-signature, subkey
        binding and revocation is merged into what the home holds, the key's history (issue 41).
        """
        # An import needs no agent; the trust model is the engine's import workaround (engine.py).
        engine = probe(self.program)
        args = ["--no-autostart", *engine.import_trust_options()]
        if options:
            if tuple(options) == SAFE_IMPORT:
                engine.require(Capability.SAFE_IMPORT, "import keys without third-party certifications")
            args += ["--import-options", ",".join(options)]
        args.append("--import")
        result = self.run(args, data)
        if result.timed_out:
            raise GpgError("importing keys: gpg timed out")
        return _import_report(result)

    def import_keys(self, data: bytes, *, options: Sequence[str] = SAFE_IMPORT_OPTIONS) -> list[Fingerprint]:
        """Import key data that must import completely; return the primary fingerprints (IMPORT_OK).

        Any key GnuPG did not import, any ``IMPORT_PROBLEM`` and a non-zero exit are a :class:`GpgError`:
        a refresh whose revocation was not merged is a failed refresh, never "refreshed".
        """
        report = self.import_report(data, options=options)
        if report.problem:
            raise GpgError(f"importing keys failed: {report.problem}", detail=report.stderr)
        if tuple(options) == SAFE_IMPORT:
            self.import_designated_revocations(data)
        return report.imported

    def import_designated_revocations(self, data: bytes, present: Collection[Fingerprint] = (), *,
                                      strict: bool = True) -> None:
        """Import the revocations in ``data`` made by a designated revoker of the key they revoke whose key is in
        this home, in ``data`` or in ``present`` (the keyring's), and nothing else of it
        (:func:`~gkeys_portage.openpgp.keyblocks.designated_revocations`): a ``self-sigs-only`` import drops
        them with every other signature by another key, and a key its pinned revoker revoked must stay revoked.
        Key data gkeys cannot split (several armored blocks) adds none.  With ``strict`` one that does not land
        is a :class:`GpgError`; without (a quarantine reading network answers, where a forged revocation is
        refused by the engine and must not fail the whole import) it is left out."""
        try:
            binary = data if data[:1] and data[0] & 0x80 else dearmor_public_keys(data)
            revocations = designated_revocations(
                binary, lambda: {*present, *(key.fingerprint for key in self.list_keys())})
        except GpgError:
            return
        if not revocations:
            return
        # GnuPG 2.4 also tries each one as a revocation of the revoker's own key ("Bad signature - rejected")
        # and exits 2, so what counts is whether the revocations are there afterwards.
        report = self.import_report(revocations, options=("no-self-sigs-only",))
        wanted = {block.primary for block in split_keyblocks(revocations)}
        listed = {key.fingerprint: key for key in self.list_keys(wanted, sigs=True)}
        missing = [fpr for fpr in wanted if fpr not in listed or not any(
            sig.kind == "rev" and sig.issuer_fingerprint != fpr for part in listed[fpr].all_keys()
            for sig in part.signatures)]
        if missing and strict:
            raise GpgError(f"importing keys failed: the revocation of {', '.join(sorted(missing))} by its designated "
                           f"revoker did not import ({report.problem or 'gpg dropped it'})", detail=report.stderr)

    def export_exact(self, fingerprints: Sequence[str] = (), *, clean: bool = False) -> Selection:
        """Export exactly the keyblocks whose *primary* fingerprint is named (all when empty), binary.

        gpg is asked by full fingerprint with ``no-export-clean``: every packet the home holds leaves it, the
        key's history included (``export-clean`` keeps only the newest self-signature of each user id, and a
        signature made before a renewal is then judged by no binding at all).  gkeys' own homes hold no
        third-party certification (``self-sigs-only`` imports); a home that does (an authority quarantine, a
        test world) exports them too, and the importing side drops them.  ``clean=True`` asks for
        ``export-clean`` (nothing in gkeys uses it).  Its selectors also match subkeys (and
        the exact form ``FPR!`` exports a primary *without* its subkeys, so it cannot be used), so the
        output is filtered per keyblock by primary fingerprint, keyblocks carrying a named primary as a
        subkey are dropped (:mod:`gkeys_portage.openpgp.keyblocks`), and gpg must then see the same set of
        primaries in the bytes returned, or nothing is returned.
        """
        wanted = [parse_fingerprint(f) for f in fingerprints]
        args = ["--export-options", "export-clean" if clean else "no-export-clean", "--export", *wanted]
        raw = self._checked(args, what="exporting keys").stdout
        selection = select_keyblocks(raw, wanted)
        seen = self.show_primaries(selection.data) if selection.kept else set()
        if seen != selection.primaries:
            raise GpgError(f"exported keys: gpg sees {len(seen)} primary key(s) where "
                           f"{len(selection.primaries)} were selected; nothing exported")
        return selection

    def list_keys_exporting(self, guess: Collection[str]) -> tuple[list[PublicKey], Selection | None, list[str]]:
        """:meth:`list_keys` of every key, and meanwhile :meth:`export_exact` of ``guess`` (its checking
        ``--show-keys`` costs a signature check per packet: install-key's longest gpg call, now beside the listing).

        Returns the keys, the selection (None when ``guess`` is empty or its export failed: the caller then exports
        the keys it really wants, and a failure is raised there) and the names it was exported by.  The home must
        not change until the selection is used: it is only the export of those names at the time of the listing.
        """
        names: list[str] = sorted({parse_fingerprint(f) for f in guess})
        with ThreadPoolExecutor(max_workers=1) as pool:
            exporting = pool.submit(self.export_exact, names) if names else None
            keys = self.list_keys()
            try:
                selection = exporting.result() if exporting is not None else None
            except GpgError:
                selection = None
        return keys, selection, names

    def import_ownertrust(self, levels: Mapping[Fingerprint, int]) -> None:
        """Set owner trust per primary fingerprint (``--import-ownertrust``; 5 full, 6 ultimate), no agent.

        Under ``trust-model direct`` the owner trust *is* the key's validity; no certification counts.
        """
        lines = "".join(f"{parse_fingerprint(fpr)}:{int(level)}:\n" for fpr, level in sorted(levels.items()))
        probe(self.program).require(Capability.TRUST_DIRECT, "set owner trust for a trust-model direct home")
        self._checked(["--no-autostart", "--trust-model", "direct", "--import-ownertrust"],
                      lines.encode("ascii"), what="setting owner trust")

    def direct_validity(self, options_file: Path) -> dict[Fingerprint, str]:
        """Each key's validity letter under ``trust-model direct``, gpg started with ``options_file`` as
        its gpg.conf (a gpg.conf gpg cannot start with is a :class:`GpgError`).  The command line's
        trust model overrides a gpg.conf's, so ``direct`` is named here too."""
        probe(self.program).require(Capability.TRUST_DIRECT, "check a trust-model direct home")
        result = self._checked(["--options", str(options_file), "--trust-model", "direct",
                                "--no-autostart", "--batch",
                                "--with-colons", "--fixed-list-mode", "--with-fingerprint", "--list-keys"],
                               what="reading the home with its gpg.conf")
        return {key.fingerprint: key.primary.validity for key in parse_colons(result.stdout.decode("latin-1"))}

    def show_primaries(self, data: bytes) -> set[Fingerprint]:
        """The primary fingerprints GnuPG sees in key data, without importing it (``--show-keys``).

        Under the engine's import trust model (engine.py): under ``always`` gpg 2.2 dies ("Fatal: can't open
        trustdb.gpg") on a revoked key in a home without a trustdb, as every keyring home is after a
        revocation was merged (the staging home's trustdb is not committed), which made every later export
        of it fail.
        """
        result = self._checked([*probe(self.program).import_trust_options(), "--with-colons", "--fixed-list-mode",
                                "--with-fingerprint", "--show-keys"],
                               data, what="reading exported keys")
        return {key.fingerprint for key in parse_colons(result.stdout.decode("latin-1"))}

    def export_keys(self, fingerprints: Sequence[str] = (), *, armor: bool = True, clean: bool = False) -> bytes:
        """Export public keys by exact primary fingerprint (all when empty); see :meth:`export_exact`."""
        data = self.export_exact(fingerprints, clean=clean).data
        return armor_public_keys(data) if armor and data else data

    # -- certifications (keys/authority.py) -------------------------------------------------------

    def import_with_certifications(self, data: bytes) -> list[Fingerprint]:
        """Import keys *keeping* third-party certifications (for a quarantine home that checks them).

        The options are explicit, so a changed default (``import-clean``, ``self-sigs-only``) cannot
        silently strip the certifications an authority check needs.
        """
        probe(self.program).require(Capability.KEEP_CERTIFICATIONS, "import keys with their certifications")
        result = self.run(["--import-options", ",".join(KEEP_CERTIFICATIONS), "--import"], data)
        if result.timed_out:
            raise GpgError("importing keys: gpg timed out")
        return [fpr for fpr in dict.fromkeys(
            parse_fingerprint(value.split(" ")[1]) for keyword, _, value in
            (line.partition(" ") for line in result.status.lines)
            if keyword == "IMPORT_OK" and len(value.split(" ")) >= 2)]

    def check_sigs(self, fingerprints: Sequence[str] = ()) -> list[PublicKey]:
        """``--check-sigs`` listing: every signature checked by GnuPG (``Signature.check``: ``!`` good)."""
        args = ["--with-colons", "--fixed-list-mode", "--with-fingerprint", "--with-fingerprint",
                "--check-sigs", *fingerprints]
        result = self.run(args)
        if result.timed_out:
            raise GpgError("checking signatures: gpg timed out")
        if not fingerprints and result.returncode != 0:
            raise GpgError(f"checking signatures failed: {last_error_line(result.stderr)}", detail=result.stderr)
        return parse_colons(result.stdout.decode("latin-1"))


def _import_report(result: GpgResult) -> ImportReport:
    imported: list[Fingerprint] = []
    problems: list[str] = []
    not_imported = 0
    for line in result.status.lines:
        keyword, _, value = line.partition(" ")
        parts = value.split(" ")
        if keyword == "IMPORT_OK" and len(parts) >= 2:
            fpr = parse_fingerprint(parts[1])
            if fpr not in imported:
                imported.append(fpr)
        elif keyword == "NODATA":
            problems.append("no OpenPGP data")
        elif keyword == "IMPORT_PROBLEM":
            problems.append(f"IMPORT_PROBLEM {value}".strip())
        elif keyword == "IMPORT_RES" and len(parts) > IMPORT_RES_NOT_IMPORTED:
            not_imported += int(parts[IMPORT_RES_NOT_IMPORTED]) if parts[IMPORT_RES_NOT_IMPORTED].isascii() \
                and parts[IMPORT_RES_NOT_IMPORTED].isdigit() else 0
    if not_imported:
        problems.insert(0, f"{not_imported} key(s) not imported")
    if not any(line.startswith("IMPORT_RES ") for line in result.status.lines):
        problems.append("gpg reported no import result")
    if result.returncode != 0:
        # gpg also exits 2 when it merely cannot reach an agent (imports never need one): the exit
        # status counts with gpg's error lines other than that one.
        # Words are looked for outside what gpg quotes: a home under a directory called "failed", a key id
        # like F1A466ECBBADBCC1 or a user id "Bad Error <x>" is no error.
        errors = [line.strip() for line in status_lines(result.stderr)
                  if not line.startswith("[GNUPG:]") and _IMPORT_ERROR_WORDS.search(_QUOTED_OR_NAMES.sub("", line))
                  and not _AGENT_TROUBLE.search(_QUOTED_OR_NAMES.sub("", line))]
        if errors or not result.stderr.strip():
            problems.append(errors[-1] if errors else f"gpg exited with status {result.returncode}")
    return ImportReport(imported, "; ".join(problems), result.stderr)


