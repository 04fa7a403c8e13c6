"""The one door to GnuPG.

Every gpg invocation of the package is built here, on top of python-gnupg's
process handling.  Each call:

* runs against one explicit GnuPG home (never the user's ``~/.gnupg`` or ``$GNUPGHOME``),
* gets a minimal, explicit environment (``TZ=UTC``, ``LC_ALL=C``, no agent variables),
* ignores any ``gpg.conf`` (``--no-options``) and never touches the network (``--disable-dirmngr``),
* is killed after a timeout, which callers treat as "not verified",
* has its stdout and stderr read through bounded collectors: more output than allowed kills gpg
  and is "not verified" (a decompression bomb never fills memory),
* verifies only bytes :mod:`gkeys_portage.openpgp.packets` parsed and rebuilt, never the file or
  message as received (the two armor parsers cannot disagree about what gpg reads),
* reports machine-readable status lines, parsed by :mod:`gkeys_portage.openpgp.status`.

Nothing else in the package knows gpg's arguments.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from queue import Empty, Queue
from typing import IO, Any

import gnupg

from gkeys_portage.core.errors import GpgError, NoSignatureError
from gkeys_portage.core.types import Fingerprint, parse_fingerprint
from gkeys_portage.openpgp.colons import PublicKey, parse_colons
from gkeys_portage.openpgp.keyblocks import Selection, armor_public_keys, select_keyblocks
from gkeys_portage.openpgp.packets import (
    CLEARSIGN_BEGIN,
    detached_signature_packets,
    find_clearsigned,
    signed_message_packets,
)
from gkeys_portage.openpgp.status import StatusReport, parse_status

# python-gnupg logs every non-zero gpg exit as a warning; this module inspects exit codes itself.
logging.getLogger("gnupg").setLevel(logging.ERROR)

DEFAULT_TIMEOUT = 300.0
GPG_BINARY = os.environ.get("GKEYS_GPG", "gpg")
STATUS_LINE_PREFIX = "[GNUPG:] "

#: Options given to every gpg call.
BASE_OPTIONS = [
    "--no-options",
    "--no-greeting",
    "--no-permission-warning",
    "--disable-dirmngr",
    "--no-auto-key-retrieve",
    "--auto-key-locate", "clear,local",
    "--trust-model", "always",
    "--display-charset", "utf-8",
    "--utf8-strings",
]

#: Most bytes read from gpg's stdout (and, separately, stderr) in one call; beyond it gpg is killed.
MAX_OUTPUT = 256 * 1024 * 1024
#: Most bytes of an inline-signed message handed to gpg.
MAX_INLINE = 256 * 1024 * 1024
#: Slack over the input size that gpg's output of a verified message may use.
OUTPUT_SLACK = 64 * 1024
#: Status output allowed per file of a ``--verify --multifile`` run.
MULTIFILE_OUTPUT_PER_FILE = 64 * 1024



#: Where a process finds its open descriptors by name (Linux: ``/proc/self/fd``; missing in a bare chroot).
FD_DIR = "/dev/fd"


@dataclass(frozen=True)
class OpenFile:
    """A file the caller holds open for reading: gpg reads it itself, through ``/dev/fd/N`` of that
    very descriptor (the same inode, whatever its name points at by then), not through a pipe."""

    fd: int

    @property
    def path(self) -> str:
        """The name under which gpg opens the descriptor (it inherits the same number)."""
        return f"{FD_DIR}/{self.fd}"


DataSource = bytes | Path | IO[bytes] | OpenFile

#: ``--import-options`` for key data from sources and for rebuilding keyrings (see :meth:`GnuPG.import_report`).
SAFE_IMPORT_OPTIONS = ("import-clean", "self-sigs-only")
#: Field of ``IMPORT_RES`` counting keys GnuPG did not import (doc/DETAILS).
IMPORT_RES_NOT_IMPORTED = 13
_IMPORT_ERROR_WORDS = re.compile(r"\b(?:error|fail\w*|invalid|too large|not imported|unknown|bad|can't|cannot|fatal)\b",
                                 re.IGNORECASE)
_AGENT_TROUBLE = re.compile(r"agent", re.IGNORECASE)
#: What gpg's messages quote and may contain any word: file names, user ids ("..."), key ids and fingerprints
#: (hex: a key id like F1A466ECBBADBCC1 holds "BAD").
_QUOTED_OR_NAMES = re.compile(r'"[^"]*"|\S*/\S*|\b[0-9A-Fa-f]{8,}\b')


@dataclass
class GpgResult:
    """Outcome of one gpg run."""

    returncode: int
    status: StatusReport
    stdout: bytes
    stderr: str
    timed_out: bool = False
    overflow: bool = False  # gpg wrote more than allowed and was killed


@dataclass
class ImportReport:
    """What one ``gpg --import`` did: primaries imported (IMPORT_OK) and why anything was not."""

    imported: list[Fingerprint]
    problem: str  # "" when every key was imported and gpg exited 0
    stderr: str = ""


def minimal_environment(homedir: Path) -> dict[str, str]:
    """The explicit environment for a gpg process: nothing inherited but ``PATH``."""
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "TZ": "UTC",
        "LC_ALL": "C",
        "LANG": "C",
        "GNUPGHOME": str(homedir),
        "HOME": str(homedir),
    }


def faked_time_option(when: datetime) -> list[str]:
    """``--faked-system-time`` frozen at ``when`` (so --at evaluations are reproducible)."""
    stamp = when.astimezone(UTC).strftime("%Y%m%dT%H%M%S")
    return ["--faked-system-time", stamp + "!"]


def prepare_home(homedir: Path) -> Path:
    """Create a GnuPG home with safe permissions (0700) if it does not exist."""
    homedir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(homedir, 0o700)
    return homedir


_PROBED: dict[str, gnupg.GPG] = {}  # gpg binary -> a python-gnupg object whose version probe ran
_PROBE_LOCK = threading.Lock()


def _python_gnupg(homedir: Path, options: list[str]) -> gnupg.GPG:
    """python-gnupg bound to ``homedir`` and ``options``.

    python-gnupg probes gpg (``gpg --list-config``, a process start) in every constructor; the answer (the
    version) is the binary's, not the home's, so the probe runs once per binary and process and later
    objects are copies with their own home, environment and options.  A gpg that cannot run fails the
    first probe (:class:`GpgError`).
    """
    with _PROBE_LOCK:
        probed = _PROBED.get(GPG_BINARY)
        if probed is None:
            try:
                probed = gnupg.GPG(gpgbinary=GPG_BINARY, gnupghome=str(homedir), env=minimal_environment(homedir),
                                   options=list(options))
            except (OSError, ValueError) as exc:
                raise GpgError(f"cannot run gpg: {exc}") from exc
            _PROBED[GPG_BINARY] = probed
    bound = copy.copy(probed)
    bound.gnupghome = str(homedir)
    bound.env = minimal_environment(homedir)
    bound.options = list(options)
    bound.encoding = "latin-1"
    return bound


class GnuPG:
    """GnuPG bound to one home directory.

    ``faked_time`` evaluates everything as of that moment; ``timeout`` bounds every call; ``read_only``
    homes are never written by this object (no lock files).
    """

    def __init__(self, homedir: Path, *, faked_time: datetime | None = None,
                 timeout: float = DEFAULT_TIMEOUT, read_only: bool = False) -> None:
        self.homedir = prepare_home(Path(homedir))
        self.timeout = timeout
        options = list(BASE_OPTIONS)
        if faked_time is not None:
            options += faked_time_option(faked_time)
        if read_only:
            # Live keyrings are only ever replaced by rename, never written in place, so readers need
            # no lock files (and keep working on a full disk).
            options.append("--lock-never")
        self.options = options
        self._gpg = _python_gnupg(self.homedir, options)

    # -- running ---------------------------------------------------------------------------------

    def run(self, args: Sequence[str], stdin: DataSource | None = None,
            passphrase: str | None = None, *, max_output: int = MAX_OUTPUT,
            pass_fds: tuple[int, ...] = ()) -> GpgResult:
        """Run gpg with ``args``; feed ``stdin`` (bytes, a path or a binary stream) if given.

        ``pass_fds`` are descriptors gpg inherits (named in ``args`` as ``/dev/fd/N``).

        gpg's stdout and stderr are each read into at most ``max_output`` bytes: beyond that gpg is
        killed and the result says ``overflow`` (callers treat it as "not verified").
        """
        if isinstance(stdin, OpenFile):
            raise GpgError("an open file is handed to gpg as /dev/fd/N, not on stdin")
        try:
            process = self._spawn(args, passphrase is not None, pass_fds)
        except OSError as exc:
            raise GpgError(f"cannot run gpg: {exc}") from exc
        if stdin is not None and not isinstance(stdin, bytes):
            _widen_pipe(process.stdin)
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            process.kill()

        timer = threading.Timer(self.timeout, kill)
        timer.daemon = True
        timer.start()
        writer = None
        errors: Queue[BaseException] = Queue()
        opened: IO[bytes] | None = None
        try:
            if passphrase is not None:
                process.stdin.write((passphrase + "\n").encode("utf-8"))
                process.stdin.flush()
            if stdin is not None:
                source: IO[bytes] | _BytesReader
                if isinstance(stdin, bytes):
                    source = _BytesReader(stdin)
                elif isinstance(stdin, Path):
                    opened = source = open(stdin, "rb")  # noqa: SIM115 - closed in finally
                else:
                    source = stdin
                writer = gnupg._threaded_copy_data(source, process.stdin, 1 << 20, errors)
            else:
                process.stdin.close()
            stdout, stderr, overflow = _drain(process, max_output)
        finally:
            timer.cancel()
            if writer is not None:
                writer.join(self.timeout)
            with contextlib.suppress(OSError):
                process.stdin.close()
            if opened is not None:
                opened.close()
        try:
            error = errors.get_nowait()
        except Empty:
            error = None
        if error is not None and not isinstance(error, BrokenPipeError) and not overflow:
            raise GpgError(f"cannot feed data to gpg: {error}")
        text = stderr.decode("latin-1")
        return GpgResult(
            returncode=process.returncode if process.returncode is not None else -1,
            status=parse_status(line.rstrip() for line in status_lines(text) if line.startswith(STATUS_LINE_PREFIX)),
            stdout=stdout,
            stderr=text,
            timed_out=timed_out.is_set(),
            overflow=overflow,
        )

    def _spawn(self, args: Sequence[str], passphrase: bool, pass_fds: tuple[int, ...]) -> Any:
        """python-gnupg's gpg process (its command line and environment), inheriting ``pass_fds``."""
        if not pass_fds:
            return self._gpg._open_subprocess(list(args), passphrase)
        return subprocess.Popen(self._gpg.make_args(list(args), passphrase), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self._gpg.env, pass_fds=pass_fds)

    def _checked(self, args: Sequence[str], stdin: DataSource | None = None,
                 passphrase: str | None = None, what: str = "gpg") -> GpgResult:
        result = self.run(args, stdin, passphrase)
        if result.timed_out:
            raise GpgError(f"{what}: gpg timed out after {self.timeout:.0f}s")
        if result.returncode != 0:
            raise GpgError(f"{what} failed: {_last_error_line(result.stderr)}", detail=result.stderr)
        return result

    # -- keys ------------------------------------------------------------------------------------

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
            raise GpgError(f"listing keys failed: {_last_error_line(result.stderr)}", detail=result.stderr)
        keys = parse_colons(result.stdout.decode("latin-1"))
        # gpg's selectors match subkeys too: a key carrying a named fingerprint as a subkey is not the key.
        wanted = {name.upper() for name in names}
        return [key for key in keys if key.fingerprint in wanted] if names else keys

    def import_report(self, data: bytes | IO[bytes], *,
                      options: Sequence[str] = SAFE_IMPORT_OPTIONS) -> ImportReport:
        """Import OpenPGP key data (bytes, or a binary stream read to its end) and report what GnuPG
        did (never raises for what the data holds).

        ``options`` are gpg's ``--import-options``: by default third-party certifications are not
        stored (``self-sigs-only``) and unusable parts are removed (``import-clean``) — trust comes from
        pins, and a flood of certifications must neither grow a keyblock to GnuPG's 5 MiB keybox limit
        (after which a revocation can no longer be merged) nor cost minutes of CPU per refresh.
        """
        # An import needs no agent; under "--trust-model always" gpg 2.2 dies ("Fatal: can't open
        # trustdb.gpg") after merging a revocation into a home without a trustdb: "direct" has no trustdb.
        args = ["--no-autostart", "--trust-model", "direct"]
        if options:
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
        return report.imported

    def export_exact(self, fingerprints: Sequence[str] = (), *, clean: bool = True) -> Selection:
        """Export exactly the keyblocks whose *primary* fingerprint is named (all when empty), binary.

        gpg is asked by full fingerprint with ``export-clean`` (``clean=False`` keeps third-party
        certifications and their revocations, as a keyserver publishes a key: for test worlds and bundles
        built ``--with-certifications``).  Its selectors also match subkeys (and
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

    def import_ownertrust(self, levels: Mapping[Fingerprint, int]) -> None:
        """Set owner trust per primary fingerprint (``--import-ownertrust``; 5 full, 6 ultimate), no agent.

        Under ``trust-model direct`` the owner trust *is* the key's validity; no certification counts.
        """
        lines = "".join(f"{parse_fingerprint(fpr)}:{int(level)}:\n" for fpr, level in sorted(levels.items()))
        self._checked(["--no-autostart", "--trust-model", "direct", "--import-ownertrust"],
                      lines.encode("ascii"), what="setting owner trust")

    def direct_validity(self, options_file: Path) -> dict[Fingerprint, str]:
        """Each key's validity letter under ``trust-model direct``, gpg started with ``options_file`` as
        its gpg.conf (a gpg.conf gpg cannot start with is a :class:`GpgError`).  The command line's
        trust model overrides a gpg.conf's, so ``direct`` is named here too."""
        result = self._checked(["--options", str(options_file), "--trust-model", "direct",
                                "--no-autostart", "--batch",
                                "--with-colons", "--fixed-list-mode", "--with-fingerprint", "--list-keys"],
                               what="reading the home with its gpg.conf")
        return {key.fingerprint: key.primary.validity for key in parse_colons(result.stdout.decode("latin-1"))}

    def show_primaries(self, data: bytes) -> set[Fingerprint]:
        """The primary fingerprints GnuPG sees in key data, without importing it (``--show-keys``).

        ``--trust-model direct``: under ``always`` gpg 2.2 dies ("Fatal: can't open trustdb.gpg") on a
        revoked key in a home without a trustdb, as every keyring home is after a revocation was merged
        (the staging home's trustdb is not committed), which made every later export of it fail.
        """
        result = self._checked(["--trust-model", "direct", "--with-colons", "--fixed-list-mode",
                                "--with-fingerprint", "--show-keys"],
                               data, what="reading exported keys")
        return {key.fingerprint for key in parse_colons(result.stdout.decode("latin-1"))}

    def export_keys(self, fingerprints: Sequence[str] = (), *, armor: bool = True, clean: bool = True) -> bytes:
        """Export public keys by exact primary fingerprint (all when empty); see :meth:`export_exact`."""
        data = self.export_exact(fingerprints, clean=clean).data
        return armor_public_keys(data) if armor and data else data

    # -- certifications (keys/authority.py) -------------------------------------------------------

    def import_with_certifications(self, data: bytes) -> list[Fingerprint]:
        """Import keys *keeping* third-party certifications (for a quarantine home that checks them).

        The options are explicit, so a changed default (``import-clean``, ``self-sigs-only``) cannot
        silently strip the certifications an authority check needs.
        """
        result = self.run(["--import-options", "no-import-clean,no-self-sigs-only,no-import-minimal", "--import"],
                          data)
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
            raise GpgError(f"checking signatures failed: {_last_error_line(result.stderr)}", detail=result.stderr)
        return parse_colons(result.stdout.decode("latin-1"))

    # -- signatures ------------------------------------------------------------------------------

    def verify_detached(self, signature: bytes, data: DataSource) -> StatusReport:
        """Verify a detached ``signature`` over ``data`` (bytes, a path, or a binary stream).

        Streams are piped into gpg, so a caller can hash the same bytes while gpg reads them.  An
        :class:`OpenFile` is read by gpg itself through ``/dev/fd/N`` (no pipe); the caller must make
        sure that the file does not change meanwhile (:mod:`gkeys_portage.verify.media.pinned`).
        """
        try:
            packets = detached_signature_packets(signature)
        except NoSignatureError as exc:
            return StatusReport(failures=[exc.message])
        # The signature goes to $TMPDIR, never into the (possibly full, possibly shared) keyring home;
        # gpg reads exactly the packets that were checked.
        with tempfile.NamedTemporaryFile(prefix="gkeys-sig-") as sigfile:
            sigfile.write(packets)
            sigfile.flush()
            if isinstance(data, OpenFile):
                result = self.run(["--verify", sigfile.name, data.path], max_output=OUTPUT_SLACK * 16,
                                  pass_fds=(data.fd,))
            elif isinstance(data, Path):
                # absolute: a relative name "-" is stdin to gpg, and "--name" an option
                result = self.run(["--verify", sigfile.name, str(data.absolute())], max_output=OUTPUT_SLACK * 16)
            else:
                result = self.run(["--verify", sigfile.name, "-"], data, max_output=OUTPUT_SLACK * 16)
        return _verdict(result, "verifying signature")

    def verify_clearsigned(self, message: bytes) -> tuple[StatusReport, bytes]:
        """Verify an inline (clearsigned or signed) message; return its status and the signed text.

        gpg never sees ``message`` itself: a cleartext block is rebuilt from its parsed parts (text
        around it is dropped), a signed message is handed over as its uncompressed packets
        (:mod:`gkeys_portage.openpgp.packets`).  The returned text is what gpg says was signed, and for a
        cleartext block it must equal the text parsed here, or nothing was verified.
        """
        if len(message) > MAX_INLINE:
            return StatusReport(failures=[f"signed message larger than {MAX_INLINE} bytes"]), b""
        try:
            if is_cleartext(message):
                block = find_clearsigned(message)
                expected: bytes | None = cleartext_output(block.escaped)
                checked = block.canonical
            else:
                expected, checked = None, signed_message_packets(message)
        except NoSignatureError as exc:
            return StatusReport(failures=[exc.message]), b""
        result = self.run(["--decrypt"], checked, max_output=len(checked) + OUTPUT_SLACK)
        report = _verdict(result, "verifying signed message")
        if expected is not None and result.stdout != expected and report.signatures:
            return StatusReport(failures=["gpg and gkeys disagree on the signed text; refused"]), b""
        return report, result.stdout

    def verify_many_multifile(self, pairs: Sequence[tuple[Path, Path]], *, jobs: int = 1) -> list[StatusReport]:
        """Verify many detached signatures ``(signature_path, data_path)`` with ``jobs`` parallel
        ``gpg --verify --multifile`` processes; one report per pair, in order.

        ``data_path`` must be ``signature_path`` without its suffix (gpg's rule).  Both files are read
        once and handed to :meth:`verify_detached_many`, so gpg checks exactly the bytes read here.
        """
        for sig, data in pairs:
            if sig.with_suffix("") != data:
                raise GpgError(f"multifile verify needs {data} beside {sig}")
        items: list[tuple[bytes, bytes] | StatusReport] = []
        for sig, data in pairs:
            try:
                items.append((sig.read_bytes(), data.read_bytes()))
            except OSError as exc:
                items.append(StatusReport(failures=[f"cannot read {sig} or {data}: {exc.strerror}"]))
        checked = [item for item in items if not isinstance(item, StatusReport)]
        reports = iter(self.verify_detached_many(checked, jobs=jobs))
        return [item if isinstance(item, StatusReport) else next(reports) for item in items]

    def verify_detached_many(self, items: Sequence[tuple[bytes, bytes]], *, jobs: int = 1, parts: int = 0,
                             scratch: str | None = None) -> list[StatusReport]:
        """Verify many detached signatures ``(signature, data)`` held in memory; one report per item,
        in order.

        The items are split into ``parts`` runs of ``gpg --verify --multifile`` (at least ``jobs``),
        ``jobs`` of them at a time.  gpg is run directly, not through python-gnupg: python-gnupg
        always adds ``--batch``, and in batch mode gpg does not pair a detached signature with its data
        file.  Each file's status is cut at gpg's ``FILE_START`` lines, so an unreadable signature only
        fails its own file.

        gpg only ever reads bytes parsed here: each signature is parsed (a pure detached signature,
        strict armor) and its binary packets are written, beside a copy of its data, to a private
        directory under ``scratch`` (default ``$TMPDIR``; ``/dev/shm`` keeps it in memory).
        """
        if not items:
            return []
        return self.verify_prepared(self.prepare_detached_many(items, scratch=scratch), jobs=jobs, parts=parts)

    def prepare_detached_many(self, items: Sequence[tuple[bytes, bytes]], *,
                              scratch: str | None = None) -> PreparedSignatures:
        """The first half of :meth:`verify_detached_many`: parse each signature and write its binary packets
        and its data to a new private directory under ``scratch``; gpg is not run yet.  Lets a caller write
        the next batch while gpg checks the current one (:meth:`verify_prepared` runs and removes it)."""
        refused: dict[int, StatusReport] = {}
        remove_stale_scratch(scratch)
        directory = tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, dir=scratch)
        try:
            names: list[str] = []
            for index, (signature, data) in enumerate(items):
                try:
                    packets = detached_signature_packets(signature)
                except NoSignatureError as exc:
                    refused[index] = StatusReport(failures=[exc.message])
                    continue
                name = os.path.join(directory.name, str(index))
                _write_new(name + ".sig", packets)
                _write_new(name, data)
                names.append(name + ".sig")
        except BaseException:
            directory.cleanup()
            raise
        return PreparedSignatures(len(items), names, refused, directory)

    def verify_prepared(self, prepared: PreparedSignatures, *, jobs: int = 1, parts: int = 0) -> list[StatusReport]:
        """The second half of :meth:`verify_detached_many`: gpg over a prepared directory, which is removed
        afterwards whatever happens; one report per item, in order."""
        try:
            private = Path(prepared.directory.name)
            reports = iter(self._multifile(prepared.names, private, jobs, parts) if prepared.names else [])
            return [prepared.refused[index] if index in prepared.refused else next(reports)
                    for index in range(prepared.count)]
        finally:
            prepared.directory.cleanup()

    def _multifile(self, names: Sequence[str], private: Path, jobs: int, parts: int) -> list[StatusReport]:
        """Run ``names`` (signature files in ``private``) through ``parts`` gpg processes, ``jobs`` at once.

        gpg writes its status lines to a file in ``private`` rather than to a pipe: no reader thread
        wakes for every line.  The file is read only after gpg exited, and never more than the status
        output allowed per signature.
        """
        count = max(1, parts, jobs)
        size = -(-len(names) // count)
        chunks = [list(names[i : i + size]) for i in range(0, len(names), size)]
        command = [GPG_BINARY, "--homedir", str(self.homedir), *self.options, "--verify", "--multifile"]
        env = minimal_environment(self.homedir)

        def one(number: int, chunk: list[str]) -> list[StatusReport]:
            limit = MULTIFILE_OUTPUT_PER_FILE * len(chunk)
            with open(private / f"status-{number}", "w+b") as status:
                try:
                    process = subprocess.Popen([*command[:-2], "--status-fd", str(status.fileno()), *command[-2:],
                                                *chunk], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL, env=env, pass_fds=(status.fileno(),))
                except OSError as exc:
                    raise GpgError(f"cannot run gpg: {exc}") from exc
                try:
                    process.wait(self.timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                    raise GpgError("verifying signatures: gpg timed out") from None
                status.seek(0)
                output = status.read(limit + 1)
            if len(output) > limit:
                return [StatusReport(failures=["gpg wrote more output than a signature check can; refused"])
                        for _ in chunk]
            return split_file_status(status_lines(output.decode("latin-1")), chunk)

        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(chunks)))) as pool:
            runs = pool.map(one, range(len(chunks)), chunks)
            return [report for reports in runs for report in reports]

    def sign(self, data: Path, signer: Fingerprint, *, clearsign: bool = False, armor: bool = True,
             passphrase: str | None = None, notations: Mapping[str, str] | None = None) -> bytes:
        """Sign the file ``data`` with the key ``signer``: detached by default, or clearsigned.

        ``notations`` (``name@domain`` -> value) go into the signature's hashed area, non-critical.
        """
        args = ["--local-user", signer, "--digest-algo", "SHA512", "--output", "-"]
        for name, value in (notations or {}).items():
            if "=" in name or "%" in value or not name.isprintable() or not value.isprintable():
                raise GpgError(f"refusing notation {name!r}: gpg would not store it as given")
            args += ["--sig-notation", f"{name}={value}"]
        if passphrase is not None:
            args = ["--pinentry-mode", "loopback", *args]
        if clearsign:
            args.append("--clearsign")
        else:
            args.append("--detach-sign")
            if armor:
                args.append("--armor")
        result = self._checked([*args, str(data)], passphrase=passphrase, what="signing")
        if not any(line.startswith("SIG_CREATED") for line in result.status.lines):
            raise GpgError("signing failed: gpg created no signature", detail=result.stderr)
        return result.stdout

    # -- key generation --------------------------------------------------------------------------

    def generate_key(self, uid: str, *, algorithm: str = "ed25519", usage: str = "cert",
                     expire: str = "1y", passphrase: str = "", preferences: Sequence[str] = (),
                     cert_digest: str | None = None) -> Fingerprint:
        """Create a primary key non-interactively (``--quick-generate-key``).

        ``preferences`` (e.g. ``["SHA512", "AES256", "ZLIB"]``) become the key's algorithm preferences
        (``--default-preference-list``); ``cert_digest`` is the self-signature hash (``--cert-digest-algo``).
        """
        args = [*_key_options(preferences, cert_digest), "--pinentry-mode", "loopback", "--passphrase-fd", "0",
                "--quick-generate-key", uid, algorithm, usage, expire]
        result = self._checked(args, passphrase=passphrase, what="generating a key")
        return _created_fingerprint(result, "generating a key")

    def add_subkey(self, primary: Fingerprint, *, algorithm: str = "ed25519", usage: str = "sign",
                   expire: str = "1y", passphrase: str = "", cert_digest: str | None = None) -> Fingerprint:
        """Add a subkey to ``primary``; return the subkey fingerprint.

        ``cert_digest`` is the hash of the binding signature (``--cert-digest-algo``).
        """
        args = [*_key_options((), cert_digest), "--pinentry-mode", "loopback", "--passphrase-fd", "0",
                "--quick-add-key", primary, algorithm, usage, expire]
        result = self._checked(args, passphrase=passphrase, what="adding a subkey")
        return _created_fingerprint(result, "adding a subkey")

    def certify(self, subject: Fingerprint, certifier: Fingerprint, uids: Sequence[str] = (), *,
                expire: str = "0", passphrase: str = "") -> None:
        """Certify ``uids`` (all when empty) of ``subject`` with ``certifier`` (exportable; ``expire``
        like ``1y``, ``0`` = never), as an authority does (``--quick-sign-key``)."""
        args = ["--pinentry-mode", "loopback", "--passphrase-fd", "0", "--local-user", certifier,
                "--default-cert-expire", expire, "--quick-sign-key", subject, *uids]
        self._checked(args, passphrase=passphrase, what="certifying a key")

    def revoke_certification(self, subject: Fingerprint, certifier: Fingerprint, uids: Sequence[str] = (), *,
                             passphrase: str = "") -> None:
        """Revoke ``certifier``'s certification of ``uids`` of ``subject`` (``--quick-revoke-sig``)."""
        args = ["--pinentry-mode", "loopback", "--passphrase-fd", "0", "--quick-revoke-sig", subject, certifier,
                *uids]
        self._checked(args, passphrase=passphrase, what="revoking a certification")

    def add_uid(self, fingerprint: Fingerprint, uid: str, *, passphrase: str = "") -> None:
        """Add the user id ``uid`` to the own key ``fingerprint`` (``--quick-add-uid``)."""
        args = ["--pinentry-mode", "loopback", "--passphrase-fd", "0", "--quick-add-uid", fingerprint, uid]
        self._checked(args, passphrase=passphrase, what="adding a user id")

    def revoke_uid(self, fingerprint: Fingerprint, uid: str, *, passphrase: str = "") -> None:
        """Revoke the user id ``uid`` of the own key ``fingerprint`` (``--quick-revoke-uid``)."""
        args = ["--pinentry-mode", "loopback", "--passphrase-fd", "0", "--quick-revoke-uid", fingerprint, uid]
        self._checked(args, passphrase=passphrase, what="revoking a user id")

    def set_expiry(self, fingerprint: Fingerprint, expire: str, *, subkeys: bool = False,
                   passphrase: str = "") -> None:
        """Set the expiry of the primary key (or of all its subkeys) relative to the current time."""
        args = ["--pinentry-mode", "loopback", "--passphrase-fd", "0", "--quick-set-expire", fingerprint, expire]
        if subkeys:
            args.append("*")
        self._checked(args, passphrase=passphrase, what="setting the expiry")

    def delete_secret_and_public(self, fingerprint: Fingerprint) -> None:
        """Delete a key and its secret parts from this home (used to undo a half-generated key)."""
        self._checked(["--batch", "--yes", "--delete-secret-and-public-key", fingerprint], what="deleting a key")

    def revocation_certificate(self, fingerprint: Fingerprint) -> bytes:
        """The revocation certificate GnuPG wrote when it generated ``fingerprint``, ready to import."""
        path = self.homedir / "openpgp-revocs.d" / f"{fingerprint}.rev"
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise GpgError(f"no revocation certificate for {fingerprint}: {exc}") from exc
        return text.replace(b"\n:-----BEGIN PGP PUBLIC KEY BLOCK-----", b"\n-----BEGIN PGP PUBLIC KEY BLOCK-----")

    def close(self) -> None:
        """Stop any gpg-agent this home started (after signing or key generation)."""
        subprocess.run(["gpgconf", "--homedir", str(self.homedir), "--kill", "all"],
                       env=minimal_environment(self.homedir), capture_output=True, check=False,
                       timeout=30)


F_SETPIPE_SZ = 1031  # Linux fcntl: set a pipe's capacity


@dataclass
class PreparedSignatures:
    """Detached signatures and their data written to a private directory, waiting for one gpg check."""

    count: int  # items given, in order
    names: list[str]  # the signature files gpg reads
    refused: dict[int, StatusReport]  # items that were no detached signature (never shown to gpg)
    directory: tempfile.TemporaryDirectory[str]


def _write_new(path: str, data: bytes) -> None:
    """Write ``data`` to a file that must not exist yet (never through a planted name), owner-only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


SCRATCH_PREFIX = "gkeys-multifile-"
STALE_SCRATCH_SECONDS = 24 * 3600


def remove_stale_scratch(scratch: str | None, *, now: float | None = None) -> int:
    """Remove this user's scratch directories of killed runs (older than a day) under ``scratch``.

    A SIGKILLed verification cannot remove its private directory, and under ``/dev/shm`` the copies of
    signatures and payloads would hold memory until the next reboot.  No verification runs for a day
    (every gpg call has a timeout), so an older directory belongs to nobody.  Returns how many were removed.
    """
    parent = Path(scratch if scratch is not None else tempfile.gettempdir())
    cutoff = (time.time() if now is None else now) - STALE_SCRATCH_SECONDS
    removed = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if (entry.name.startswith(SCRATCH_PREFIX) and entry.is_dir(follow_symlinks=False)
                        and info.st_uid == os.geteuid() and info.st_mtime < cutoff):
                    shutil.rmtree(entry.path)
                    removed += 1
    return removed


def _widen_pipe(stream: IO[bytes]) -> None:
    """Give a pipe a 1 MiB buffer (Linux) so streaming gigabytes to gpg costs fewer context switches."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fcntl.fcntl(stream.fileno(), F_SETPIPE_SZ, 1 << 20)


def _read_bounded(stream: IO[bytes], limit: int, over: threading.Event, process: subprocess.Popen[bytes],
                  into: list[bytes]) -> None:
    """Read ``stream`` to its end into ``into``; past ``limit`` bytes kill ``process`` and set ``over``."""
    total = 0
    while True:
        chunk = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
        if not chunk:
            return
        total += len(chunk)
        if total > limit:
            over.set()
            with contextlib.suppress(OSError):
                process.kill()
            return
        into.append(chunk)


def _drain(process: subprocess.Popen[bytes], limit: int) -> tuple[bytes, bytes, bool]:
    """gpg's stdout and stderr (each at most ``limit`` bytes) once it exited, and whether it overflowed."""
    over = threading.Event()
    outputs: tuple[list[bytes], list[bytes]] = ([], [])
    readers = []
    for stream, into in ((process.stdout, outputs[0]), (process.stderr, outputs[1])):
        if stream is None:
            continue
        reader = threading.Thread(target=_read_bounded, args=(stream, limit, over, process, into), daemon=True)
        reader.start()
        readers.append(reader)
    for reader in readers:
        reader.join()
    process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    return b"".join(outputs[0]), b"".join(outputs[1]), over.is_set()


class _BytesReader:
    """A minimal binary stream over bytes (python-gnupg's copier only needs ``read``)."""

    def __init__(self, data: bytes) -> None:
        self._view = memoryview(data)
        self._pos = 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._view) if size < 0 else min(len(self._view), self._pos + size)
        chunk = bytes(self._view[self._pos : end])
        self._pos = end
        return chunk


def _key_options(preferences: Sequence[str], cert_digest: str | None) -> list[str]:
    options: list[str] = []
    if preferences:
        options += ["--default-preference-list", " ".join(preferences)]
    if cert_digest:
        options += ["--cert-digest-algo", cert_digest]
    return options


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


def _created_fingerprint(result: GpgResult, what: str) -> Fingerprint:
    for line in result.status.lines:
        keyword, _, value = line.partition(" ")
        if keyword == "KEY_CREATED":
            return parse_fingerprint(value.split(" ")[-1])
    raise GpgError(f"{what}: gpg reported no new key", detail=result.stderr)


def _verdict(result: GpgResult, what: str) -> StatusReport:
    """The status of a verifying run; a timeout raises, an overflow or a gpg killed by a signal (the OOM
    killer, an administrator: it may have stopped before reporting a bad signature after a good one) is a
    report without signatures.  A non-zero exit alone is not: gpg exits 2 for an ignored unknown signer."""
    if result.overflow:
        return StatusReport(failures=["gpg wrote more output than the signed data can explain (a "
                                      "decompression bomb?); refused"])
    if result.timed_out:
        raise GpgError(f"{what}: gpg timed out")
    if result.returncode < 0:
        return StatusReport(failures=[f"{what}: gpg was killed by signal {-result.returncode} before it finished; "
                                      "not verified (run the command again)"])
    return result.status


def _has_line(data: bytes, line: bytes) -> bool:
    """Whether ``line`` starts a line of ``data``."""
    return data.startswith(line) or b"\n" + line in data


def is_cleartext(message: bytes) -> bool:
    """Whether :meth:`GnuPG.verify_clearsigned` takes ``message`` as a cleartext-signed block (else as a
    signed message): a line is the cleartext header."""
    return _has_line(message, CLEARSIGN_BEGIN)


def cleartext_output(escaped: Sequence[bytes]) -> bytes:
    """What gpg prints for a cleartext block: each dash-unescaped line without trailing blanks, plus
    its line break."""
    out = []
    for line in escaped:
        line = line[2:] if line.startswith(b"- ") else line
        carriage = line.endswith(b"\r")
        line = line.rstrip(b" \t\r")
        out.append(line + (b"\r\n" if carriage else b"\n"))
    return b"".join(out)


def _last_error_line(stderr: str) -> str:
    lines = [ln for ln in status_lines(stderr) if ln.strip() and not ln.startswith("[GNUPG:]")]
    return lines[-1].strip() if lines else "no error message"


#: The failure of a file a multifile run did not report on in full (gpg killed, out of memory, a name twice).
INCOMPLETE_RESULT = ("gpg stopped before it reported on this signature in full (killed or out of memory?); "
                     "not verified: run the command again")


def status_lines(text: str) -> list[str]:
    """gpg's status output (or stderr) split into lines at LF only, as gpg writes them.

    ``str.splitlines`` also splits at U+0085, U+001C..U+001E, VT, FF and CR: a user id or notation
    gpg copies into a status line (it escapes only bytes below 0x20) as UTF-8 ``C2 85`` would then
    start a forged ``[GNUPG:] VALIDSIG`` line of another key.  On stderr (``LC_ALL=C``) gpg prints a user
    id's non-ASCII bytes raw: a split quote would let its words count as gpg's own error words.
    """
    return text.split("\n")


def split_file_status(lines: Sequence[str], names: Sequence[str]) -> list[StatusReport]:
    """Split ``--status-fd`` output of a ``--verify --multifile`` run into one report per file.

    Reports are matched to files by the name gpg prints in ``FILE_START``, never by position, so a
    file gpg skipped cannot shift another file's verdict onto it.  A file without a complete
    ``FILE_START`` ... ``FILE_DONE`` block (unreadable, gpg stopped early, named twice) gets a report
    with a failure and no signatures: never "good".
    """
    blocks: dict[str, list[str]] = {}
    complete: set[str] = set()
    seen_twice: set[str] = set()
    current: str | None = None
    for line in lines:
        if line.startswith(STATUS_LINE_PREFIX + "FILE_START "):
            parts = line[len(STATUS_LINE_PREFIX):].split(" ", 2)
            current = parts[2] if len(parts) == 3 else ""
            if current in blocks:
                seen_twice.add(current)
            blocks[current] = []
        elif line.startswith(STATUS_LINE_PREFIX + "FILE_DONE"):
            if current is not None:
                complete.add(current)
            current = None
        elif current is not None:
            blocks[current].append(line)
    reports = []
    for name in names:
        if name in complete and name not in seen_twice:
            reports.append(parse_status(blocks[name]))
        else:
            # name is a file in a private scratch directory: it means nothing to the user
            reports.append(StatusReport(failures=[INCOMPLETE_RESULT]))
    return reports


def gpg_version() -> tuple[int, ...] | None:
    """The version of the gpg that gkeys runs (``$GKEYS_GPG``, default ``gpg``); None if it cannot run."""
    quiet = logging.getLogger("gnupg")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # python-gnupg logs a missing binary as an error; the caller reports it
    try:
        with tempfile.TemporaryDirectory(prefix="gkeys-version-") as home:
            version = GnuPG(Path(home))._gpg.version
    except (GpgError, OSError, ValueError):
        return None
    finally:
        quiet.setLevel(level)
    return tuple(int(part) for part in version) if version else None
