"""Many detached signatures in few gpg processes (``gpg --verify --multifile``), on copies gkeys checked."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from gkeys_portage.core import children
from gkeys_portage.core.errors import GpgError, NoSignatureError
from gkeys_portage.core.scratch import owned_prefix, remove_stale_dirs
from gkeys_portage.openpgp.engine import Capability, probe
from gkeys_portage.openpgp.packets import detached_signature
from gkeys_portage.openpgp.process import (
    OUTPUT_SLACK,
    STATUS_LINE_PREFIX,
    GpgProcess,
    minimal_environment,
    status_lines,
)
from gkeys_portage.openpgp.second.worker import check_batch
from gkeys_portage.openpgp.sequoia import preload
from gkeys_portage.openpgp.signatures import background, export_all, signature_verdict
from gkeys_portage.openpgp.status import StatusReport, expect_signers, parse_status

MULTIFILE_OUTPUT_PER_FILE = 64 * 1024


class BatchVerify(GpgProcess):
    """Verify many detached signatures with few gpg processes."""

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
        directory = tempfile.TemporaryDirectory(prefix=owned_prefix(SCRATCH_PREFIX), dir=scratch)
        try:
            names: list[str] = []
            issuers: list[list[str]] = []
            for index, (signature, data) in enumerate(items):
                try:
                    packets, issued = detached_signature(signature)
                except NoSignatureError as exc:
                    refused[index] = StatusReport.unparsable(exc)
                    continue
                name = os.path.join(directory.name, str(index))
                _write_new(name + ".sig", packets)
                _write_new(name, data)
                names.append(name + ".sig")
                issuers.append(issued)
        except BaseException:
            directory.cleanup()
            raise
        return PreparedSignatures(len(items), names, refused, directory, issuers)

    def verify_prepared(self, prepared: PreparedSignatures, *, jobs: int = 1, parts: int = 0) -> list[StatusReport]:
        """The second half of :meth:`verify_detached_many`: gpg over a prepared directory, which is removed
        afterwards whatever happens; one report per item, in order."""
        try:
            private = Path(prepared.directory.name)
            # Sequoia reads the very files gpg reads, while gpg runs (the second opinion): a large batch in the
            # worker process of the run, beside gpg and gkeys' own Python (openpgp/second/worker.py)
            preload(self.homedir, lambda: export_all(self))
            second = background(lambda: check_batch(self.homedir, lambda: export_all(self), prepared.names))
            # each file's verdicts must match its own signature packets: the per-file split is checked too
            checked = [expect_signers(report, issuers) for report, issuers in zip(
                self._multifile(prepared.names, private, jobs, parts) if prepared.names else [], prepared.issuers,
                strict=True)]
            for report, opinion in zip(checked, second(), strict=True):
                report.second = opinion
            reports = iter(checked)
            return [prepared.refused[index] if index in prepared.refused else next(reports)
                    for index in range(prepared.count)]
        finally:
            prepared.directory.cleanup()

    def _multifile(self, names: Sequence[str], private: Path, jobs: int, parts: int) -> list[StatusReport]:
        """Run ``names`` (signature files in ``private``) through ``parts`` gpg processes, ``jobs`` at once.

        An engine without ``--multifile`` verdicts (gpg-sq) gets one ``gpg --verify`` per signature
        instead, ``jobs`` at once: the same check, slower (:mod:`gkeys_portage.openpgp.engine`).

        gpg writes its status lines to a file in ``private`` rather than to a pipe: no reader thread
        wakes for every line.  The file is read only after gpg exited, and never more than the status
        output allowed per signature.
        """
        engine = probe(self.program)
        engine.require(Capability.STATUS, "verify signatures")
        if not engine.has(Capability.MULTIFILE):
            return self._one_by_one(names, jobs)
        count = max(1, parts, jobs)
        size = -(-len(names) // count)
        chunks = [list(names[i : i + size]) for i in range(0, len(names), size)]
        command = [self.program, "--homedir", str(self.homedir), *self.options, "--verify", "--multifile"]
        env = minimal_environment(self.homedir)

        def one(number: int, chunk: list[str]) -> list[StatusReport]:
            limit = MULTIFILE_OUTPUT_PER_FILE * len(chunk)
            with open(private / f"status-{number}", "w+b") as status:
                try:
                    process = subprocess.Popen(children.tied([*command[:-2], "--status-fd", str(status.fileno()),
                                                               *command[-2:], *chunk]),
                                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL, env=env, pass_fds=(status.fileno(),),
                                               preexec_fn=children.preexec_for())
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

    def _one_by_one(self, names: Sequence[str], jobs: int) -> list[StatusReport]:
        """``gpg --verify NAME DATA`` for each signature file ``NAME`` (its data beside it), ``jobs`` at once."""

        def one(name: str) -> StatusReport:
            result = self.run(["--verify", name, name[: -len(".sig")]], max_output=OUTPUT_SLACK * 16)
            return signature_verdict(result, "verifying signatures")

        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(names)))) as pool:
            return list(pool.map(one, names))


@dataclass
class PreparedSignatures:
    """Detached signatures and their data written to a private directory, waiting for one gpg check."""

    count: int  # items given, in order
    names: list[str]  # the signature files gpg reads
    refused: dict[int, StatusReport]  # items that were no detached signature (never shown to gpg)
    directory: tempfile.TemporaryDirectory[str]
    issuers: list[list[str]]  # for each of ``names``: its packets' issuer key ids (status.expect_signers)


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


def remove_stale_scratch(scratch: str | None, *, now: float | None = None) -> int:
    """Remove this user's scratch directories of killed runs under ``scratch`` (their owner is gone).

    A SIGKILLed verification cannot remove its private directory, and under ``/dev/shm`` the copies of
    signatures and payloads would hold memory until the next reboot.  Returns how many were removed.
    """
    return remove_stale_dirs(scratch if scratch is not None else tempfile.gettempdir(), SCRATCH_PREFIX, now=now)


#: The failure of a file a multifile run did not report on in full (gpg killed, out of memory, a name twice).
INCOMPLETE_RESULT = ("gpg stopped before it reported on this signature in full (killed or out of memory?); "
                     "not verified: run the command again")



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


