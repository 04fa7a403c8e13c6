"""Signatures one at a time: a detached signature, an inline (clearsigned or signed) message, and signing."""

from __future__ import annotations

import io
import os
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, TypeVar, cast

from gkeys_portage.core import children
from gkeys_portage.core.errors import GpgError, NoSignatureError
from gkeys_portage.core.scratch import owned_prefix, sweep_once
from gkeys_portage.core.types import Fingerprint
from gkeys_portage.openpgp.engine import Capability, probe
from gkeys_portage.openpgp.history.store import HISTORY_FILE, merge
from gkeys_portage.openpgp.packets import (
    CLEARSIGN_BEGIN,
    detached_signature_packets,
    find_clearsigned,
    literal_data,
    signature_issuers,
    signed_message_packets,
)
from gkeys_portage.openpgp.process import (
    FD_DIR,
    MAX_INLINE,
    OUTPUT_SLACK,
    DataSource,
    GpgProcess,
    GpgResult,
    OpenFile,
    Tee,
)
from gkeys_portage.openpgp.sequoia import (
    APART_BYTES,
    Opinion,
    SecondOpinion,
    check_detached,
    check_detached_apart,
    check_inline,
    preload,
)
from gkeys_portage.openpgp.status import StatusReport, expect_signers

#: the signature files handed to gpg, under ``$TMPDIR`` (named with their owner: a killed run's are swept)
SIG_PREFIX = "gkeys-sig-"
#: bytes read, hashed and handed to Sequoia's pipe at a time (:class:`~gkeys_portage.openpgp.process.Tee`)
TEE_CHUNK = 1 << 20

class Signatures(GpgProcess):
    """Verify one signature, or make one."""

    def verify_detached(self, signature: bytes, data: DataSource) -> StatusReport:
        """Verify a detached ``signature`` over ``data`` (bytes, a path, or a binary stream).

        Streams are piped into gpg, so a caller can hash the same bytes while gpg reads them.  An
        :class:`OpenFile` is read by gpg itself through ``/dev/fd/N`` (no pipe); the caller must make
        sure that the file does not change meanwhile (:mod:`gkeys_portage.verify.media.pinned`).
        """
        probe(self.program).require(Capability.STATUS, "verify signatures")
        try:
            packets = detached_signature_packets(signature)
        except NoSignatureError as exc:
            return StatusReport.unparsable(exc)
        # The signature goes to $TMPDIR, never into the (possibly full, possibly shared) keyring home;
        # gpg reads exactly the packets that were checked, and Sequoia the same packets and bytes, meanwhile.
        spool: _Spool | None = None
        target: bytes | str
        if isinstance(data, OpenFile):
            target = data.path
        elif isinstance(data, Path):
            target = str(data.absolute())
        elif isinstance(data, bytes):
            target = data
        else:
            spool = _Spool(data)
            data, target = cast(IO[bytes], spool), spool.path
        preload(self.homedir, lambda: export_all(self))
        # Sequoia hashes while gpg does (in-process it holds Python's lock meanwhile: a large file is checked in
        # a child process); a stream is spooled as gpg reads it and checked once gpg is done
        second = background(lambda: self._second_piped(packets, target, data)) if spool is None else None
        try:
            sweep_once(tempfile.gettempdir(), SIG_PREFIX)  # the signature files of runs that were killed
            with tempfile.NamedTemporaryFile(prefix=owned_prefix(SIG_PREFIX)) as sigfile:
                sigfile.write(packets)
                sigfile.flush()
                if isinstance(data, OpenFile):
                    result = self.run(["--verify", sigfile.name, data.path], max_output=OUTPUT_SLACK * 16,
                                      pass_fds=(data.fd,))
                elif isinstance(data, Path):
                    # absolute: a relative name "-" is stdin to gpg, and "--name" an option
                    result = self.run(["--verify", sigfile.name, str(data.absolute())],
                                      max_output=OUTPUT_SLACK * 16)
                else:
                    result = self.run(["--verify", sigfile.name, "-"], data, max_output=OUTPUT_SLACK * 16)
            report = expect_signers(signature_verdict(result, "verifying signature"), signature_issuers(packets))
            report.second = second() if second is not None else self.second_detached(packets, target)
        finally:
            if spool is not None:
                spool.discard()
        return report

    def _second_piped(self, packets: bytes, target: bytes | str, data: DataSource) -> SecondOpinion:
        """Sequoia's verdict on a file through a pipe that ``cat`` (another process) fills from the same
        descriptor or path: Sequoia maps a regular file it opens whole into memory (a 2 GiB image would be 2 GiB
        of resident pages), a pipe it reads in a bounded buffer."""
        if isinstance(target, bytes):
            return self.second_detached(packets, target)
        tee = data.tee if isinstance(data, OpenFile) else None
        if tee is not None and _size(target, data) >= APART_BYTES:
            return self._second_teed(packets, cast(OpenFile, data), tee)
        if tee is not None:
            _hash_into(cast(OpenFile, data).fd, tee, None)  # small: hashed here; Sequoia in-process holds the lock
        read_end, write_end = os.pipe()
        try:
            feeder = subprocess.Popen(children.tied(["cat", str(target)]), stdin=subprocess.DEVNULL, stdout=write_end,
                                      stderr=subprocess.DEVNULL, preexec_fn=children.preexec_for(),
                                      pass_fds=(data.fd,) if isinstance(data, OpenFile) else ())
        except OSError:
            os.close(read_end)
            return self.second_detached(packets, target)  # no cat: Sequoia reads the file itself
        finally:
            os.close(write_end)
        try:
            if _size(target, data) >= APART_BYTES:  # a large file: Sequoia hashes in a child, off Python's lock
                return check_detached_apart(self.homedir, lambda: export_all(self), packets, read_end)
            return self.second_detached(packets, f"{FD_DIR}/{read_end}")
        finally:
            os.close(read_end)  # a feeder still writing stops (SIGPIPE)
            feeder.wait()

    def _second_teed(self, packets: bytes, data: OpenFile, tee: Tee) -> SecondOpinion:
        """Sequoia's verdict on a large held file (in a child process) through a pipe that a thread of this process
        fills from the descriptor, hashing every byte into ``tee`` on the way: one read for Sequoia's pass and the
        caller's digest.  The thread hashes to the end even if the child stops reading."""
        read_end, write_end = os.pipe()
        feeder = threading.Thread(target=_hash_into, args=(data.fd, tee, write_end), name="gkeys-tee", daemon=True)
        feeder.start()
        try:
            return check_detached_apart(self.homedir, lambda: export_all(self), packets, read_end)
        finally:
            os.close(read_end)  # the feeder, if still writing, gets EPIPE and only hashes on
            feeder.join()

    def second_detached(self, packets: bytes, data: bytes | str) -> SecondOpinion:
        """Sequoia's verdict on the detached signature ``packets`` over ``data`` (bytes, or a file name),
        against this keyring (:mod:`gkeys_portage.openpgp.sequoia`)."""
        return check_detached(self.homedir, lambda: export_all(self), packets, data)

    def verify_clearsigned(self, message: bytes) -> tuple[StatusReport, bytes]:
        """Verify an inline (clearsigned or signed) message; return its status and the signed text.

        gpg never sees ``message`` itself: a cleartext block is rebuilt from its parsed parts (text
        around it is dropped), a signed message is handed over as its uncompressed packets
        (:mod:`gkeys_portage.openpgp.packets`).  The returned text is what gpg says was signed, and for a
        cleartext block it must equal the text parsed here, or nothing was verified; for a signed message it is
        the literal packet's data exactly as signed (a text-mode one keeps its CRLF, which gpg strips), and gpg's
        output must be that data (up to those CRs).
        """
        probe(self.program).require(Capability.STATUS, "verify signatures")
        literal = b""
        if len(message) > MAX_INLINE:
            return StatusReport(failures=[f"signed message larger than {MAX_INLINE} bytes"]), b""
        try:
            if is_cleartext(message):
                probe(self.program).require(Capability.CLEARTEXT, "verify cleartext-signed messages")
                block = find_clearsigned(message)
                expected: bytes | None = cleartext_output(block.escaped)
                checked, issuers = block.canonical, signature_issuers(block.signature)
            else:
                checked = signed_message_packets(message)
                literal = literal_data(checked)
                # gpg writes a text-mode literal without its CRs: the same data up to those
                expected, issuers = None, signature_issuers(checked)
        except NoSignatureError as exc:
            return StatusReport.unparsable(exc), b""
        # Sequoia reads a cleartext block as received (its own reading of the framing, line endings included),
        # GnuPG the block rebuilt from gkeys' parse: the texts both return must then be one text.
        cleartext = block if expected is not None else None
        preload(self.homedir, lambda: export_all(self))
        second = background(lambda: check_inline(self.homedir, lambda: export_all(self), checked, cleartext))
        result = self.run(["--decrypt"], checked, max_output=len(checked) + OUTPUT_SLACK)
        report = expect_signers(signature_verdict(result, "verifying signed message"), issuers)
        same = (result.stdout == expected if expected is not None
                else result.stdout in (literal, literal.replace(b"\r\n", b"\n")))
        if not same and report.signatures:
            return StatusReport(failures=["gpg and gkeys disagree on the signed text; refused"]), b""
        text = result.stdout if expected is not None else literal
        report.second = same_text(second(), text, cleartext=expected is not None)
        return report, text

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
            probe(self.program).require(Capability.LOOPBACK, "sign with a passphrase given to gkeys")
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


def same_text(second: SecondOpinion, text: bytes, *, cleartext: bool) -> SecondOpinion:
    """``second``, or a refusal when Sequoia accepted a different signed text than ``text`` (GnuPG's, which is
    what gkeys and its consumers read).  Sequoia returns a cleartext body without its final line ending."""
    if second.opinion is not Opinion.ACCEPTED or second.text is None:
        return second
    # a cleartext's last line ending is not signed: GnuPG prints the block's own (LF or CRLF), Sequoia none
    endings = (b"\n", b"\r\n") if cleartext else (b"",)
    if any(second.text + ending == text for ending in endings):
        return second
    seen = second.text + endings[0]
    return replace(second, opinion=Opinion.REFUSED, signers=frozenset(),
                   said=f"it read another signed text than GnuPG ({len(seen)} bytes against {len(text)}: "
                        f"{_first_difference(seen, text)})")


def _first_difference(a: bytes, b: bytes) -> str:
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    line = a[:at].count(b"\n") + 1
    return f"they differ from byte {at}, line {line}"


T = TypeVar("T")


def _hash_into(fd: int, tee: Tee, pipe: int | None) -> None:
    """Read ``fd`` from offset 0 with ``pread``, hash every chunk into ``tee`` and write it to ``pipe`` (closed at
    the end; a reader gone makes it stop writing, not hashing); ``tee.complete`` once the end was reached."""
    buffer = bytearray(TEE_CHUNK)
    view = memoryview(buffer)
    try:
        while count := os.preadv(fd, [buffer], tee.done):
            for state in tee.states.values():
                state.update(view[:count])
            if pipe is not None and not _write_all(pipe, view[:count]):
                os.close(pipe)
                pipe = None
            tee.done += count
        tee.complete = True
    except OSError:
        pass  # not complete: the caller hashes the file itself, and a short pipe makes Sequoia refuse
    finally:
        if pipe is not None:
            os.close(pipe)


def _write_all(fd: int, view: memoryview) -> bool:
    """Write all of ``view`` to ``fd``; False once the reader is gone."""
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        return False
    return True


def _size(target: str, data: DataSource) -> int:
    """The size of the file gpg reads (0 when it cannot be told: Sequoia then checks it in-process)."""
    try:
        return os.fstat(data.fd).st_size if isinstance(data, OpenFile) else os.stat(target).st_size
    except OSError:
        return 0


def export_all(gpg: GpgProcess) -> bytes:
    """Every certificate of ``gpg``'s keyring, binary, merged with the keys' history the home keeps
    (:mod:`~gkeys_portage.openpgp.history.store`): what the second opinion checks against, so Sequoia judges a
    signature by the binding valid when it was made (GnuPG's keybox keeps only a subkey's newest binding)."""
    result = gpg.run(["--export"])
    exported = result.stdout if result.returncode == 0 else b""
    try:
        history = (gpg.homedir / HISTORY_FILE).read_bytes()
    except OSError:
        return exported
    if not exported or not history:
        return exported
    try:
        return merge([history], base=exported)
    except GpgError:  # an unreadable history adds nothing
        return exported


def background(work: Callable[[], T]) -> Callable[[], T]:
    """Run ``work`` in a thread (Sequoia hashes while gpg does); the returned call waits for its answer."""
    box: list[T | BaseException] = []

    def run() -> None:
        try:
            box.append(work())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box.append(exc)

    thread = threading.Thread(target=run, name="gkeys-sequoia", daemon=True)
    thread.start()

    def wait() -> T:
        thread.join()
        answer = box[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return wait


class _Spool(io.RawIOBase):
    """A binary stream that copies every chunk read from it into an unnamed scratch file, which Sequoia reads as
    ``/dev/fd/N`` once gpg is done: both engines see the bytes as they were read, once, without holding them
    in memory (pysequoia holds Python's lock while it reads, so it cannot read a pipe fed from this process)."""

    def __init__(self, source: IO[bytes]) -> None:
        super().__init__()
        self.source = source
        self._copy = tempfile.TemporaryFile(prefix="gkeys-spool-")  # noqa: SIM115 - closed by discard()
        self.path = f"{FD_DIR}/{self._copy.fileno()}"

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        chunk = self.source.read(-1 if size is None else size)
        self._copy.write(chunk)
        if not chunk:
            self._copy.flush()
        return chunk

    def discard(self) -> None:
        """Remove the copy."""
        self._copy.close()


def signature_verdict(result: GpgResult, what: str) -> StatusReport:
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


