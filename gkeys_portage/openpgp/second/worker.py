"""Sequoia's checks of the signature batches in one worker process per run, beside gpg's ``--multifile`` runs.

pysequoia holds Python's lock for each check, and its RSA arithmetic is pure Rust (pysequoia 0.1.35 from PyPI:
0.8 ms of CPU for an RSA-4096 signature, 0.24 ms for RSA-2048, 0.09 ms for ed25519).  In-process, a batch's
checks therefore ran one after the other with gkeys' own Python (reading git, writing the next round, judging the
last): the second opinion's time was added to gkeys' serial path.  A worker of its own (``python -I -S
sequoia_child.py --serve``, :mod:`gkeys_portage.openpgp.sequoia_child`) checks on another CPU while gkeys' Python
and gpg go on, so the run's wall time approaches the longest of the three instead of the sum.

Nothing changes in what is decided: the worker gets the certificates of the same keyring export as the in-process
check (each certificate with the key ids it is found by, :func:`~gkeys_portage.openpgp.sequoia.cert_request`,
sent once per keyring and process), the same signature packets one by one (MPIs canonical) and the name of the
very data file gpg's ``--multifile`` run reads; its answers become the same
:class:`~gkeys_portage.openpgp.sequoia.SecondOpinion` records, judged by ``decide`` as before.  Fail closed: a
worker that cannot start, dies, stalls past gpg's timeout, or answers anything but one well-formed answer per item
makes every signature of the batch a refusal that says so (the next batch starts a new worker).  The worker is
tied to gkeys (:func:`gkeys_portage.core.children.tied`), started and waited for by a thread that lives as long
as it does, and ends when gkeys closes its input or dies.

Small batches (the hooks, an incremental sync, a short history) stay in-process while no worker runs: starting
one costs more (an interpreter, 25-70 ms of CPU, and the signers' certificates validated again) than it saves below
:data:`MIN_BATCH` signatures.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from gkeys_portage.core import children
from gkeys_portage.openpgp.sequoia import (
    CHILD,
    MAX_ANSWER,
    Opinion,
    SecondOpinion,
    _answer,
    _Certificates,
    _detached,
    _one_by_one,
    _prelude,
    _said,
    answer_fields,
    cert_request,
    missing_reason,
    second_opinion_enabled,
    verified,
)

#: the fewest signatures a batch needs to start the worker (once it runs, every batch goes to it): verify-tree's
#: batches reach it from ~800 commits on; GitHub's 197-commit history (93 signatures, batches of 20-50) stays
#: in-process, where the worker's start cost more than it saved (1.41x against 1.08x, the same run)
MIN_BATCH = 200
#: the fewest signatures a run announces (:func:`expect`) to start the worker at once
MIN_RUN = 400
#: how long the worker may take for one request (gpg's own timeout for a --multifile run)
TIMEOUT = 600.0
#: how long gkeys' exit waits for the worker to end by itself
CLOSE_WAIT = 5.0


class WorkerError(RuntimeError):
    """The worker could not be asked or gave no readable answer."""


class _Worker:
    """One ``sequoia_child.py --serve`` process and the keyrings it holds; one request at a time (a worker that
    failed is ended, and started again by its next request)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.process: subprocess.Popen[bytes] | None = None
        self.keyrings: dict[int, tuple[_Certificates, int]] = {}  # id(certs) -> (certs, number in the worker)
        self.asked = 0  # batches asked: each answer names its batch, so a stale answer is never taken
        self.errors: IO[bytes] | None = None  # the worker's standard error, for the refusal's words

    def running(self) -> bool:
        """Whether a worker process is up (a batch of any size then goes to it)."""
        return self.process is not None and self.process.poll() is None

    def ask(self, certs: _Certificates, items: list[tuple[list[bytes], str]],
            timeout: float) -> list[tuple[list[tuple[str, str]], list[str]]]:
        """Each item's good signers and refusals, from the worker (started if need be): :class:`WorkerError`
        unless it answered exactly one well-formed answer per item."""
        with self.lock:
            try:
                process = self.process if self.process is not None and self.running() else self._start()
                number = self._load(process, certs, timeout)
                self.asked += 1
                answer = self._request(process, {"id": self.asked, "keyring": number, "items": [
                    [[base64.b64encode(one).decode() for one in signatures], name] for signatures, name in items]},
                    timeout, MAX_ANSWER * max(1, len(items)))
                if not isinstance(answer, dict) or set(answer) != {"id", "answers"} or answer["id"] != self.asked:
                    raise WorkerError("not the answer to this batch")
                answers = answer["answers"]
                if not isinstance(answers, list) or len(answers) != len(items):
                    raise WorkerError("not one answer per signature")
                return [answer_fields(one) for one in answers]
            except (WorkerError, ValueError, TypeError, OSError) as exc:
                self._stop()
                raise WorkerError(f"Sequoia's worker process gave no readable answer ({exc})") from None

    def _load(self, process: subprocess.Popen[bytes], certs: _Certificates, timeout: float) -> int:
        """The worker's number for the keyring ``certs``, sent to it the first time."""
        known = self.keyrings.get(id(certs))
        if known is not None and known[0] is certs:
            return known[1]
        number = len(self.keyrings) + 1
        if self._request(process, {"keyring": number, "certs": cert_request(certs)}, timeout,
                         MAX_ANSWER) != {"loaded": number}:
            raise WorkerError("the keyring was not loaded")
        self.keyrings[id(certs)] = (certs, number)  # certs kept: their id is never reused meanwhile
        return number

    def _start(self) -> subprocess.Popen[bytes]:
        """A new worker, started by (and waited for in) a thread of its own that lives as long as it does: the
        child's tie to gkeys (``PR_SET_PDEATHSIG``) follows the thread that started it."""
        self._stop()
        started: list[subprocess.Popen[bytes] | BaseException] = []
        ready = threading.Event()

        self.errors = tempfile.TemporaryFile(prefix="gkeys-sequoia-")  # noqa: SIM115 - closed by _stop

        def own() -> None:
            try:
                process = subprocess.Popen(children.tied([sys.executable, "-I", "-S", str(CHILD), "--serve"]),
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors,
                                           preexec_fn=children.preexec_for())
            except BaseException as exc:  # noqa: BLE001 - handed to the asking thread
                started.append(exc)
                ready.set()
                return
            started.append(process)
            ready.set()
            process.wait()

        threading.Thread(target=own, name="gkeys-sequoia-worker", daemon=True).start()
        ready.wait()
        if isinstance(started[0], BaseException):
            raise WorkerError(f"cannot start it: {started[0]}")
        self.process = started[0]
        _write(self.process, {"path": sys.path})
        return self.process

    def _request(self, process: subprocess.Popen[bytes], request: dict[str, Any], timeout: float,
                 limit: int) -> Any:
        """Send one request line, read one answer line (at most ``limit`` bytes, within ``timeout``)."""
        _write(process, request)
        assert process.stdout is not None
        line = _read_line(process.stdout, limit, timeout)
        if not line:
            try:
                status: int | str = process.wait(1)
            except subprocess.TimeoutExpired:
                status = "none yet"
            raise WorkerError(f"it ended, exit status {status}{self._said()}")
        return json.loads(line)

    def _said(self) -> str:
        """The last line the worker wrote to its standard error (a Python traceback's cause), or ""."""
        if self.errors is None:
            return ""
        try:
            self.errors.seek(max(0, os.fstat(self.errors.fileno()).st_size - 4096))
            lines = self.errors.read().decode(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return f": {lines[-1][:300]}" if lines else ""

    def close(self) -> None:
        """End the worker at gkeys' exit: its input closed, it ends by itself and is waited for (its CPU time is
        then counted with gkeys' children, as gpg's is)."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        try:
            process.wait(CLOSE_WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self.process = process
        self._stop()

    def _stop(self) -> None:
        """End the worker (a failed request leaves it in an unknown state); the next request starts another."""
        process, self.process = self.process, None
        self.keyrings.clear()
        if process is not None:
            if process.poll() is None:
                process.kill()
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    stream.close()
        if self.errors is not None:
            self.errors.close()
            self.errors = None


def _write(process: subprocess.Popen[bytes], request: dict[str, Any]) -> None:
    assert process.stdin is not None
    process.stdin.write(json.dumps(request).encode() + b"\n")
    process.stdin.flush()


def _read_line(stream: IO[bytes], limit: int, timeout: float) -> bytes:
    """One line from ``stream`` (empty at its end), refused past ``limit`` bytes or ``timeout`` seconds."""
    fd, data = stream.fileno(), bytearray()
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise WorkerError(f"no answer within {timeout:g} s")
        if not select.select([fd], [], [], left)[0]:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b""
        data += chunk
        if len(data) > limit:
            raise WorkerError(f"an answer longer than {limit} bytes")
    if data.index(b"\n") != len(data) - 1:
        raise WorkerError("more than one answer")
    return bytes(data)


class _Pool:
    """Up to :data:`WORKERS` workers, started as batches come while the others are busy (verify-tree runs one gpg
    per core, so one Sequoia per core keeps pace with them); a batch waits for a free one."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.idle: list[_Worker] = []
        self.started = 0
        self.free = threading.Condition()

    def running(self) -> bool:
        """Whether a worker process is up (a batch of any size then goes to the workers)."""
        with self.free:
            return self.started > 0

    def prestart(self) -> None:
        """Start a worker now, in the background (its interpreter starts while gkeys lists keys and reads git);
        from then on every batch goes to the workers."""
        with self.free:
            if self.started:
                return
            one = _Worker()
            self.started += 1
        one.lock.acquire()  # its first request waits for the start

        def start() -> None:
            try:
                one._start()
            except WorkerError:
                pass  # its first request starts it again, and refuses if it cannot
            finally:
                one.lock.release()

        threading.Thread(target=start, name="gkeys-sequoia-start", daemon=True).start()
        with self.free:
            self.idle.append(one)
            self.free.notify()

    def ask(self, certs: _Certificates, items: list[tuple[list[bytes], str]],
            timeout: float) -> list[tuple[list[tuple[str, str]], list[str]]]:
        """:meth:`_Worker.ask` of a free worker, a new one while fewer than :attr:`size` run."""
        with self.free:
            while not self.idle and self.started >= self.size:
                self.free.wait()
            if self.idle:
                one = self.idle.pop()
            else:
                one = _Worker()
                self.started += 1
        try:
            return one.ask(certs, items, timeout)
        finally:
            with self.free:
                self.idle.append(one)
                self.free.notify()

    def close(self) -> None:
        """End every worker (gkeys' exit)."""
        with self.free:
            workers, self.idle, self.started = self.idle, [], 0
        for one in workers:
            one.close()


#: Sequoia workers at most: one per two of the cores verify-tree runs gpg on (CommitVerifier.jobs: one per core, at
#: most 4).  Each worker validates the signers' certificates once more (three public-key checks a certificate,
#: 2.4 ms for RSA-4096) and costs an interpreter: on 2 CPUs, already busy with two gpg runs, a second worker
#: cost 0.2 s of CPU on 2,000 RSA-4096 commits for no wall time.
WORKERS = max(1, min(4, os.cpu_count() or 1) // 2)
_WORKER = _Pool(WORKERS)
atexit.register(_WORKER.close)
#: Held while Sequoia checks a batch in-process: pysequoia holds Python's lock for each check, so two batches'
#: checks never run at once anyway; side by side they only hand the lock back and forth.
_in_process = threading.Lock()


def expect(signatures: int) -> None:
    """Say how many signatures a run will hand the batch door (verify-tree: the range's commits): from
    :data:`MIN_RUN` on, the worker starts now, beside the key listing and git, and takes every batch, the short
    first ones included (else each would be checked in-process and the signers' certificates read twice)."""
    if signatures >= MIN_RUN and second_opinion_enabled() and missing_reason() is None:
        _WORKER.prestart()


@contextlib.contextmanager
def run(signatures: int) -> Iterator[None]:
    """A run of about ``signatures`` signatures through the batch door (:func:`expect`); the workers end with it
    (one per run: a sync inside ``emerge`` keeps no idle Sequoia process for the rest of emerge's life)."""
    expect(signatures)
    try:
        yield
    finally:
        _WORKER.close()


def check_batch(homedir: Path, export: Callable[[], bytes], names: Sequence[str]) -> list[SecondOpinion]:
    """Sequoia's opinion on each prepared signature file of ``names`` (a ``.sig`` file with its data beside it,
    as gpg's ``--multifile`` reads them), against the keyring in ``homedir``: in the worker once a batch is large
    enough (:data:`MIN_BATCH`), else in-process, holding Python's lock (:func:`~gkeys_portage.openpgp.sequoia.
    check_detached` of each)."""
    certs = _prelude(homedir, export)
    if isinstance(certs, SecondOpinion):
        return [certs for _name in names]
    if len(names) < MIN_BATCH and not _WORKER.running():
        with _in_process:  # the same checks, the keyring looked up once for the batch (as gpg's run reads it)
            return [_answer(_detached(*_read_pair(name)), certs) for name in names]
    items: list[tuple[list[bytes], str]] = []
    unreadable: dict[int, SecondOpinion] = {}
    for index, name in enumerate(names):
        try:
            with open(name, "rb") as sig:
                items.append((_one_by_one(sig.read()), name[: -len(".sig")]))
        except Exception as exc:  # noqa: BLE001 - as in-process: building Sequoia's input is inside the guard
            unreadable[index] = SecondOpinion(Opinion.REFUSED, said=_said(exc), sha1_bindings=certs.sha1_bindings)
            items.append(([], name[: -len(".sig")]))
    try:
        answers = _WORKER.ask(certs, items, TIMEOUT)
    except WorkerError as exc:
        refused = SecondOpinion(Opinion.REFUSED, said=str(exc), sha1_bindings=certs.sha1_bindings)
        return [refused for _name in names]
    return [unreadable.get(index) or _answer(_answered(found), certs) for index, found in enumerate(answers)]


def _answered(found: tuple[list[tuple[str, str]], list[str]]) -> Callable[[_Certificates], Any]:
    """A check whose answer the worker gave: its good signers, or its refusals raised."""
    return lambda _certs: verified(*found)


def _read_pair(name: str) -> tuple[bytes, bytes]:
    """The prepared signature file ``name`` and its data beside it, as gpg reads them (Sequoia's input)."""
    with open(name, "rb") as sig, open(name[: -len(".sig")], "rb") as data:
        return sig.read(), data.read()
