"""The one door to GnuPG: running gpg.

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
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from queue import Empty, Queue
from typing import IO, Any

import gnupg

from gkeys_portage.core import children
from gkeys_portage.core.config import untrusted_program
from gkeys_portage.core.errors import ConfigError, GpgError
from gkeys_portage.openpgp.status import StatusReport, parse_status

# python-gnupg logs every non-zero gpg exit as a warning; this module inspects exit codes itself.
logging.getLogger("gnupg").setLevel(logging.ERROR)

DEFAULT_TIMEOUT = 300.0
#: The environment variable that names the OpenPGP program; it wins over ``[gpg] program``.
PROGRAM_VARIABLE = "GKEYS_GPG"
DEFAULT_PROGRAM = "gpg"
_configured_program: str | None = None
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



#: Where a process finds its open descriptors by name (Linux: ``/proc/self/fd``; missing in a bare chroot).
FD_DIR = "/dev/fd"


@dataclass
class Tee:
    """Hash states (hashlib name -> hashlib object) fed with every byte of the file that Sequoia's pass reads,
    by the reader that fills Sequoia's pipe (:meth:`~gkeys_portage.openpgp.signatures.Signatures.verify_detached`):
    the caller's digest comes from that pass instead of a pass of its own.  ``done`` is the bytes hashed so far;
    ``complete`` is set once the whole file went through (else the caller hashes it itself)."""

    states: dict[str, Any]
    done: int = 0
    complete: bool = False


@dataclass(frozen=True)
class OpenFile:
    """A file the caller holds open for reading: gpg reads it itself, through ``/dev/fd/N`` of that
    very descriptor (the same inode, whatever its name points at by then), not through a pipe.  With a
    :class:`Tee`, the bytes Sequoia's pass reads are hashed into it on the way."""

    fd: int
    tee: Tee | None = field(default=None, compare=False)

    @property
    def path(self) -> str:
        """The name under which gpg opens the descriptor (it inherits the same number)."""
        return f"{FD_DIR}/{self.fd}"


DataSource = bytes | Path | IO[bytes] | OpenFile


@dataclass
class GpgResult:
    """Outcome of one gpg run."""

    returncode: int
    status: StatusReport
    stdout: bytes
    stderr: str
    timed_out: bool = False
    overflow: bool = False  # gpg wrote more than allowed and was killed



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


def use_program(program: str | None) -> None:
    """Run ``program`` for gpg from now on (``[gpg] program``; None: back to ``gpg``); ``$GKEYS_GPG`` wins.
    The selected engine is refused at once when others can replace it (:func:`refuse_untrusted`)."""
    global _configured_program
    refuse_untrusted(os.environ.get(PROGRAM_VARIABLE) or program or DEFAULT_PROGRAM)
    _configured_program = program or None


def selected_program() -> str:
    """The OpenPGP program gkeys runs: ``$GKEYS_GPG``, else ``[gpg] program``, else ``gpg`` from ``PATH``.

    What it can do is :mod:`gkeys_portage.openpgp.engine`'s business."""
    return os.environ.get(PROGRAM_VARIABLE) or _configured_program or DEFAULT_PROGRAM


_TRUSTED: set[str] = set()  # programs found root's (checked once per run)


def refuse_untrusted(program: str) -> None:
    """Refuse an engine that someone other than root and the running user can replace (a :class:`ConfigError`
    naming the file and the fix), before it ever runs: it would decide every verdict
    (:func:`~gkeys_portage.core.config.untrusted_program`).  A program not found is left to the caller's run,
    which says so."""
    if program in _TRUSTED:
        return
    found = shutil.which(program, path=os.environ.get("PATH", os.defpath))
    why = untrusted_program(Path(found).absolute()) if found else None
    if why is not None:
        raise ConfigError(f"refusing the OpenPGP engine {found}: {why} (anyone who can replace it decides every "
                          "verdict): make it and its directories owned by root and writable only by root "
                          "(chown root; chmod go-w), or set [gpg] program in gkeys.conf (or $GKEYS_GPG) to such a "
                          "GnuPG")
    _TRUSTED.add(program)


def faked_time_option(when: datetime) -> list[str]:
    """``--faked-system-time`` frozen at ``when`` (so --at evaluations are reproducible), as seconds since
    the epoch: every engine reads that form (gpg-sq refuses ``YYYYMMDDTHHMMSS!``; see ``engine``)."""
    return ["--faked-system-time", f"{int(when.astimezone(UTC).timestamp())}!"]


def prepare_home(homedir: Path) -> Path:
    """Create a GnuPG home with safe permissions (0700) if it does not exist."""
    homedir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(homedir, 0o700)
    return homedir


_PROBED: dict[str, gnupg.GPG] = {}  # gpg binary -> a python-gnupg object whose version probe ran
_PROBE_LOCK = threading.Lock()


def _python_gnupg(program: str, homedir: Path, options: list[str]) -> gnupg.GPG:
    """python-gnupg bound to ``homedir`` and ``options``.

    python-gnupg probes gpg (``gpg --list-config``, a process start) in every constructor; the answer (the
    version) is the binary's, not the home's, so the probe runs once per binary and process and later
    objects are copies with their own home, environment and options.  A gpg that cannot run fails the
    first probe (:class:`GpgError`).
    """
    with _PROBE_LOCK:
        probed = _PROBED.get(program)
        if probed is None:
            try:
                probed = gnupg.GPG(gpgbinary=program, gnupghome=str(homedir), env=minimal_environment(homedir),
                                   options=list(options))
            except (OSError, ValueError) as exc:
                raise GpgError(f"cannot run gpg: {exc}") from exc
            _PROBED[program] = probed
    bound = copy.copy(probed)
    bound.gnupghome = str(homedir)
    bound.env = minimal_environment(homedir)
    bound.options = list(options)
    bound.encoding = "latin-1"
    return bound



class GpgProcess:
    """A gpg process runner bound to one home directory (the base of :class:`~gkeys_portage.openpgp.gnupg.GnuPG`).

    ``faked_time`` evaluates everything as of that moment; ``timeout`` bounds every call; ``read_only``
    homes are never written by this object (no lock files); ``program`` is the OpenPGP program (default:
    :func:`selected_program`, fixed when the object is made).
    """

    def __init__(self, homedir: Path, *, faked_time: datetime | None = None,
                 timeout: float = DEFAULT_TIMEOUT, read_only: bool = False, program: str | None = None) -> None:
        self.program = program or selected_program()
        refuse_untrusted(self.program)
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
        self._gpg = _python_gnupg(self.program, self.homedir, options)

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
        """gpg with python-gnupg's command line and environment, inheriting ``pass_fds``; it ends with gkeys
        (:mod:`gkeys_portage.core.children`)."""
        return subprocess.Popen(children.tied(self._gpg.make_args(list(args), passphrase)), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self._gpg.env, pass_fds=pass_fds,
                                preexec_fn=children.preexec_for())

    def _checked(self, args: Sequence[str], stdin: DataSource | None = None,
                 passphrase: str | None = None, what: str = "gpg") -> GpgResult:
        result = self.run(args, stdin, passphrase)
        if result.timed_out:
            raise GpgError(f"{what}: gpg timed out after {self.timeout:.0f}s")
        if result.returncode != 0:
            raise GpgError(f"{what} failed: {last_error_line(result.stderr)}", detail=result.stderr)
        return result

    def close(self) -> None:
        """Stop any gpg-agent this home started (after signing or key generation)."""
        subprocess.run(children.tied(["gpgconf", "--homedir", str(self.homedir), "--kill", "all"]),
                       env=minimal_environment(self.homedir), capture_output=True, check=False,
                       timeout=30, preexec_fn=children.preexec_for())


F_SETPIPE_SZ = 1031  # Linux fcntl: set a pipe's capacity


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


def last_error_line(stderr: str) -> str:
    lines = [ln for ln in status_lines(stderr) if ln.strip() and not ln.startswith("[GNUPG:]")]
    return lines[-1].strip() if lines else "no error message"



def status_lines(text: str) -> list[str]:
    """gpg's status output (or stderr) split into lines at LF only, as gpg writes them.

    ``str.splitlines`` also splits at U+0085, U+001C..U+001E, VT, FF and CR: a user id or notation
    gpg copies into a status line (it escapes only bytes below 0x20) as UTF-8 ``C2 85`` would then
    start a forged ``[GNUPG:] VALIDSIG`` line of another key.  On stderr (``LC_ALL=C``) gpg prints a user
    id's non-ASCII bytes raw: a split quote would let its words count as gpg's own error words.
    """
    return text.split("\n")
