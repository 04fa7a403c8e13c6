"""Signatures one at a time: a detached signature, an inline (clearsigned or signed) message, and signing."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from gkeys_portage.core.errors import GpgError, NoSignatureError
from gkeys_portage.core.scratch import owned_prefix, sweep_once
from gkeys_portage.core.types import Fingerprint
from gkeys_portage.openpgp.engine import Capability, probe
from gkeys_portage.openpgp.packets import (
    CLEARSIGN_BEGIN,
    detached_signature_packets,
    find_clearsigned,
    literal_data,
    signature_issuers,
    signed_message_packets,
)
from gkeys_portage.openpgp.process import (
    MAX_INLINE,
    OUTPUT_SLACK,
    DataSource,
    GpgProcess,
    GpgResult,
    OpenFile,
)
from gkeys_portage.openpgp.status import StatusReport, expect_signers

#: the signature files handed to gpg, under ``$TMPDIR`` (named with their owner: a killed run's are swept)
SIG_PREFIX = "gkeys-sig-"

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
        # gpg reads exactly the packets that were checked.
        sweep_once(tempfile.gettempdir(), SIG_PREFIX)  # the signature files of runs that were killed
        with tempfile.NamedTemporaryFile(prefix=owned_prefix(SIG_PREFIX)) as sigfile:
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
        return expect_signers(signature_verdict(result, "verifying signature"), signature_issuers(packets))

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
        result = self.run(["--decrypt"], checked, max_output=len(checked) + OUTPUT_SLACK)
        report = expect_signers(signature_verdict(result, "verifying signed message"), issuers)
        same = (result.stdout == expected if expected is not None
                else result.stdout in (literal, literal.replace(b"\r\n", b"\n")))
        if not same and report.signatures:
            return StatusReport(failures=["gpg and gkeys disagree on the signed text; refused"]), b""
        return report, result.stdout if expected is not None else literal

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


