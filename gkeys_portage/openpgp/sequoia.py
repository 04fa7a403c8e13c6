"""The second opinion: Sequoia (``pysequoia``, in-process) checks the very bytes GnuPG checked.

GnuPG stays the verifier of record (:mod:`gkeys_portage.openpgp.process`); every signature the GnuPG door
verifies is also handed to Sequoia, against an export of the same keyring, and Sequoia's answer rides on the
:class:`~gkeys_portage.openpgp.status.StatusReport` as a :class:`SecondOpinion`.  :func:`~gkeys_portage.openpgp.
verdict.decide` then says "verified" only when both accept with the same signer (``engines-disagree`` otherwise),
so no verifier asks for the second opinion itself, and nothing outside ``openpgp/`` imports ``pysequoia``.

What each side lacks (measured, pysequoia 0.1.35): GnuPG 2.2 hashes only the first 19,998 bytes of a cleartext
line (T6272) and accepts SHA-1 self-signatures; Sequoia parses MPIs strictly (an RSA bit count above the value's
length is normalised first, :func:`~gkeys_portage.openpgp.packets.canonical_mpis`), refuses certificates whose
self-signatures or subkey binding use SHA-1, takes no reference time but judges each signing key at the
signature's creation time under the binding valid then (a signature made while its key was valid stays good after
expiry; a soft revocation counts from its date, a hard one always; a soft one older than a newer self-signature is
undone, which gkeys' rule does not allow: :mod:`~gkeys_portage.openpgp.history.timerule`), so it needs the key's
history (:func:`~gkeys_portage.openpgp.signatures.export_all` hands it over), and returns the cleartext body
without its final line ending.
"""

from __future__ import annotations

import base64
import contextlib
import enum
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gkeys_portage.core import children
from gkeys_portage.core.errors import EngineError, EnginesDisagreeError, NoSignatureError
from gkeys_portage.openpgp.history.store import HISTORY_FILE
from gkeys_portage.openpgp.packets import (
    ARMOR_BEGIN,
    SIGNATURE_TAG,
    Clearsigned,
    Packet,
    _new_format,
    armor,
    canonical_mpis,
    parse_packets,
)

#: The fix a missing pysequoia names.
INSTALL_HINT = ("install pysequoia (pip install pysequoia, or emerge dev-python/pysequoia), or turn the second "
                "opinion off explicitly with '[gpg] second-opinion = no' in gkeys.conf")

_enabled = True
_lock = threading.Lock()
_certs: dict[str, tuple[tuple[int, ...], _Certificates]] = {}
_loading: dict[str, threading.Lock] = {}  # per keyring: held while its certificates are exported and read

# Sequoia's errors capture a Rust backtrace when RUST_BACKTRACE is set (common on developers' machines): the
# first refusal of a run then costs 60-90 ms of CPU resolving symbols gkeys never shows (it keeps the first line,
# :func:`_said`).  RUST_LIB_BACKTRACE, read first by Rust, turns that off for errors only (panics still show one);
# a value the user set is kept.
os.environ.setdefault("RUST_LIB_BACKTRACE", "0")


class Opinion(enum.Enum):
    """What Sequoia said, or why it said nothing."""

    ACCEPTED = "accepted"
    REFUSED = "refused"
    OFF = "off"  # turned off in gkeys.conf ([gpg] second-opinion = no)
    MISSING = "missing"  # pysequoia cannot be imported


@dataclass(frozen=True)
class SecondOpinion:
    """Sequoia's answer about one input: the ``(primary, signing key)`` fingerprints of its good signatures,
    its own words when it refused, and (for a signed message) the text it says was signed."""

    opinion: Opinion
    signers: frozenset[tuple[str, str]] = frozenset()
    said: str = ""
    text: bytes | None = None
    sha1_bindings: frozenset[str] = frozenset()  # primaries whose self-signatures use SHA-1 (Sequoia's policy)

    def accepts(self, primary: str, signing: str) -> bool:
        """Whether Sequoia found a good signature by ``signing``, a key of the certificate ``primary``."""
        return self.opinion is Opinion.ACCEPTED and (primary.upper(), signing.upper()) in self.signers


def use_second_opinion(on: bool) -> None:
    """Turn the second opinion on or off for this process (``[gpg] second-opinion``; on by default)."""
    global _enabled
    _enabled = on


def second_opinion_enabled() -> bool:
    """Whether signatures get a second opinion in this process."""
    return _enabled


def describe() -> tuple[str, str]:
    """The second opinion's state (``on``, ``off``, ``missing``) and a line that says what it is."""
    if not _enabled:
        return "off", "off ([gpg] second-opinion = no): GnuPG's verdict alone"
    missing = missing_reason()
    if missing is not None:
        return "missing", f"missing: {missing}; every signature is refused until it is installed"
    from importlib.metadata import PackageNotFoundError, version

    try:
        shown = f"pysequoia {version('pysequoia')}"
    except PackageNotFoundError:
        shown = "pysequoia"
    return "on", f"on: Sequoia ({shown}) confirms every signature GnuPG accepts"


def missing_reason() -> str | None:
    """Why pysequoia cannot be used (None when it can)."""
    if sys.modules.get("pysequoia") is not None:  # imported already: no import machinery per signature
        return None
    try:
        import pysequoia  # noqa: F401
    except ImportError as exc:
        return f"pysequoia cannot be imported ({exc})"
    return None


def _pubring_identity(homedir: Path) -> tuple[int, ...]:
    identity: list[int] = []
    for name in ("pubring.kbx", "pubring.gpg", HISTORY_FILE):  # the keys' history is read with them
        try:
            st = os.stat(homedir / name)
        except OSError:
            identity += [0, 0, 0]
            continue
        identity += [st.st_ino, st.st_mtime_ns, st.st_size]
    return tuple(identity)


SUBKEY_TAG = 14
PRIMARY_TAG = 6


def _key_ids(packets: Iterable[Packet]) -> set[str]:
    """The v4 fingerprints and key ids (lower-case hex) of a certificate's primary key and subkeys."""
    ids: set[str] = set()
    for packet in packets:
        if packet.tag in (PRIMARY_TAG, SUBKEY_TAG) and packet.body[:1] == b"\x04":
            body = packet.body
            fingerprint = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest()  # noqa: S324
            ids |= {fingerprint, fingerprint[-16:]}
    return ids


def _split(data: bytes) -> list[tuple[bytes, frozenset[str]]]:
    """Each certificate of the export ``data`` (its packets, one primary key to the next) with the key ids it is
    found by, read by gkeys' parser: a worker gets them without pysequoia reading the keyring here too (it checks
    every self-signature, ~0.1 s for 50 RSA-4096 keys)."""
    certs: list[list[Packet]] = []
    for packet in parse_packets(data):
        if packet.tag == PRIMARY_TAG:
            certs.append([])
        if certs:
            certs[-1].append(packet)
    return [(b"".join(map(_new_format, cert)), frozenset(_key_ids(cert))) for cert in certs]


@dataclass(frozen=True)
class _Certificates:
    """A keyring's export, and each of its certificates with the fingerprints and key ids of its keys (Sequoia asks
    for the signer's: handing it only that certificate keeps a check at a fraction of a millisecond).  pysequoia
    reads them in this process only when a check runs here (:attr:`certs`, :attr:`by_id`)."""

    data: bytes
    blobs: list[tuple[bytes, frozenset[str]]]

    @functools.cached_property
    def certs(self) -> list[Any]:
        """The certificates as pysequoia read them."""
        import pysequoia

        return list(pysequoia.Cert.split_bytes(self.data)) if self.data else []

    @functools.cached_property
    def by_id(self) -> dict[str, list[Any]]:
        """:attr:`certs` by the fingerprints and key ids of their keys."""
        by_id: dict[str, list[Any]] = {}
        for cert in self.certs:
            for name in _key_ids(parse_packets(bytes(cert))):
                by_id.setdefault(name, []).append(cert)
        return by_id

    @functools.cached_property
    def sha1_bindings(self) -> frozenset[str]:
        """:func:`sha1_self_signed` of these certificates, worked out once (only a refusal asks: before, each
        refusal exported and parsed the whole keyring again, ~40 ms a refusal with gpg's export)."""
        try:
            return _sha1_certificates(self.certs)
        except Exception:  # noqa: BLE001 - only a diagnosis: without it the refusal still stands
            return frozenset()

    def store(self, ids: list[str]) -> list[Any]:
        """The certificates holding a key named in ``ids`` (pysequoia's key store callback)."""
        found = {id(cert): cert for wanted in ids for cert in self.by_id.get(str(wanted).lower(), ())}
        return list(found.values())


def _certificates(homedir: Path, export: Callable[[], bytes]) -> _Certificates:
    """The keyring's certificates as Sequoia reads them, cached while the keyring file is unchanged (keyrings
    are replaced by rename)."""
    key = str(homedir)
    identity = _pubring_identity(homedir)
    with _lock:
        cached = _certs.get(key)
        loading = _loading.setdefault(key, threading.Lock())
    if cached is not None and cached[0] == identity:
        return cached[1]
    with loading:  # one export per keyring: verify-tree's parallel batches all ask at their start
        with _lock:
            cached = _certs.get(key)
        if cached is not None and cached[0] == identity:
            return cached[1]
        return _read_certificates(key, identity, export)


def _read_certificates(key: str, identity: tuple[int, ...], export: Callable[[], bytes]) -> _Certificates:
    data = export()
    found = _Certificates(data, _split(data))
    if found.blobs:  # an empty or failed export is never kept: the next check exports again
        with _lock:
            _certs[key] = (identity, found)
    return found


def preload(homedir: Path, export: Callable[[], bytes]) -> None:
    """Read the keyring's certificates before gpg runs in the same home (an engine that rewrites its home while
    it verifies, as gpg-sq does, must not export at the same moment); the check that follows reuses them."""
    if _enabled and missing_reason() is None:
        with contextlib.suppress(Exception):  # the check itself reports what went wrong
            _certificates(homedir, export)


def _said(exc: Exception) -> str:
    """Sequoia's message, first line only (pysequoia appends a Rust backtrace when RUST_BACKTRACE is set)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _opinion(run: Callable[[_Certificates], Any], homedir: Path, export: Callable[[], bytes]) -> SecondOpinion:
    certs = _prelude(homedir, export)
    return certs if isinstance(certs, SecondOpinion) else _answer(run, certs)


def _prelude(homedir: Path, export: Callable[[], bytes]) -> _Certificates | SecondOpinion:
    """The keyring's certificates, or the opinion every check gets without them (off, missing, unreadable)."""
    if not _enabled:
        return SecondOpinion(Opinion.OFF)
    missing = missing_reason()
    if missing is not None:
        return SecondOpinion(Opinion.MISSING, said=missing)
    try:
        return _certificates(homedir, export)
    except Exception as exc:  # noqa: BLE001 - pysequoia raises plain exceptions; any is a refusal
        return SecondOpinion(Opinion.REFUSED, said=f"cannot read the keyring: {_said(exc)}")


def _answer(run: Callable[[_Certificates], Any], certs: _Certificates) -> SecondOpinion:
    """Sequoia's opinion from one check ``run`` against ``certs``."""
    try:
        result = run(certs)
    except Exception as exc:  # noqa: BLE001 - "no valid signatures" and parse errors alike refuse
        return SecondOpinion(Opinion.REFUSED, said=_said(exc), sha1_bindings=certs.sha1_bindings)
    signers = frozenset((str(sig.certificate).upper(), str(sig.signing_key).upper()) for sig in result.valid_sigs)
    text = result.bytes if isinstance(result.bytes, bytes) else None
    return SecondOpinion(Opinion.ACCEPTED if signers else Opinion.REFUSED, signers,
                         said="" if signers else "no valid signature", text=text)


#: Self-signatures that bind a signing subkey: the subkey binding and its embedded back-signature.
BINDING_TYPES = frozenset({0x18, 0x19})
HASH_SHA1 = 2


def sha1_self_signed(data: bytes) -> frozenset[str]:
    """Primary fingerprints (v4) of the certificates in ``data`` that Sequoia's standard policy refuses for SHA-1:
    no user id or direct-key self-signature it accepts (it says so when asked for the key's expiry), or a subkey
    binding made with SHA-1.  GnuPG 2.2 and 2.4 accept both."""
    import pysequoia

    return _sha1_certificates(pysequoia.Cert.split_bytes(data))


def _sha1_certificates(certs: Iterable[Any]) -> frozenset[str]:
    """:func:`sha1_self_signed` of certificates pysequoia has read."""
    found: set[str] = set()
    for cert in certs:
        primary = str(cert.fingerprint).upper()
        try:
            cert.expiration  # noqa: B018 - evaluated under Sequoia's policy: the binding it would use
        except Exception as exc:  # noqa: BLE001 - pysequoia raises plain exceptions
            if "SHA1" in str(exc):
                found.add(primary)
        if any(packet.tag == SIGNATURE_TAG and len(packet.body) > 4 and packet.body[0] == 4
               and packet.body[1] in BINDING_TYPES and packet.body[3] == HASH_SHA1
               for packet in parse_packets(bytes(cert))):
            found.add(primary)
    return frozenset(found)


def _one_by_one(packets: bytes) -> list[bytes]:
    """Each signature packet of ``packets`` on its own, MPIs canonical (pysequoia reads one signature per call)."""
    return [bytes([0xC0 | SIGNATURE_TAG, 255]) + len(p.body).to_bytes(4, "big") + p.body
            for p in parse_packets(canonical_mpis(packets)) if p.tag == SIGNATURE_TAG]


def check_detached(homedir: Path, export: Callable[[], bytes], packets: bytes,
                   data: bytes | str) -> SecondOpinion:
    """Sequoia's verdict on the detached signature ``packets`` over ``data`` (bytes, or the name of a file
    Sequoia reads itself: ``/dev/fd/N`` of the descriptor GnuPG reads), against the keyring in ``homedir``
    (``export`` returns its certificates).  Each signature is checked on its own; the good ones are listed."""
    return _opinion(_detached(packets, data), homedir, export)


def _detached(packets: bytes, data: bytes | str) -> Callable[[_Certificates], Any]:
    """The check of :func:`check_detached`, to run against a keyring's certificates."""
    def run(certs: _Certificates) -> Any:
        import pysequoia

        store, source = certs.store, data
        signatures = _one_by_one(packets)
        if len(signatures) > 1 and isinstance(source, str) and not os.path.isfile(source):
            with open(source, "rb") as stream:  # a pipe is read once: keep its bytes for each signature
                source = stream.read()
        valid: list[Any] = []
        said: list[str] = []
        for one in signatures:
            signature = pysequoia.Sig.from_bytes(one)
            try:
                if isinstance(source, bytes):
                    valid += pysequoia.verify(bytes=source, store=store, signature=signature).valid_sigs
                else:
                    valid += pysequoia.verify(file=source, store=store, signature=signature).valid_sigs
            except Exception as exc:  # noqa: BLE001 - a refusal of this one signature
                said.append(_said(exc))
        if not valid:
            raise RuntimeError("; ".join(dict.fromkeys(said)) or "no signature")
        return _Verified(valid)

    return run


@dataclass(frozen=True)
class _Verified:
    """The good signatures of several pysequoia calls, shaped like one call's answer."""

    valid_sigs: list[Any]
    bytes: None = None


@dataclass(frozen=True)
class _Signer:
    """One good signature as the child process named it, shaped like pysequoia's."""

    certificate: str
    signing_key: str


#: Sequoia's pass over a target this large runs in a child process (:mod:`gkeys_portage.openpgp.sequoia_child`):
#: in-process it holds Python's lock for ~1 ms per MiB (128 MiB in 0.10-0.14 s; a pure-Python thread runs at a
#: tenth of its speed meanwhile), stalling gkeys' own hashing threads; a child's interpreter and pysequoia start
#: cost 25-70 ms of CPU (measured, ``-I -S``), what the lock costs at ~32-64 MiB.
APART_BYTES = 64 << 20
CHILD = Path(__file__).with_name("sequoia_child.py")
_FINGERPRINT = re.compile(r"[0-9A-F]{40}|[0-9A-F]{64}")
#: the most a child may answer (a few fingerprints and refusals)
MAX_ANSWER = 1 << 20


def check_detached_apart(homedir: Path, export: Callable[[], bytes], packets: bytes, fd: int) -> SecondOpinion:
    """:func:`check_detached` of the file read from descriptor ``fd`` (a pipe), in a child process: the same
    signature packets, the same certificates (each with the key ids it is found by), the same bytes; a missing,
    garbled or failed answer is a refusal."""
    def run(certs: _Certificates) -> Any:
        request = {"path": sys.path, "data": f"/dev/fd/{fd}", "certs": cert_request(certs),
                   "signatures": [base64.b64encode(one).decode() for one in _one_by_one(packets)]}
        done = subprocess.run(children.tied([sys.executable, "-I", "-S", str(CHILD)]),
                              input=json.dumps(request).encode(), capture_output=True, pass_fds=(fd,), check=False,
                              preexec_fn=children.preexec_for())
        return verified(*_child_answer(done))

    return _opinion(run, homedir, export)


def cert_request(certs: _Certificates) -> list[list[Any]]:
    """``certs`` as a child process gets them: each certificate (base64) with the key ids it is found by."""
    return [[base64.b64encode(blob).decode(), sorted(ids)] for blob, ids in certs.blobs]


def verified(valid: list[tuple[str, str]], said: list[str]) -> Any:
    """A child's good signers as a check's answer; :class:`RuntimeError` with its refusals when there are none."""
    if not valid:
        raise RuntimeError("; ".join(dict.fromkeys(said)) or "no signature")
    return _Verified([_Signer(primary, signing) for primary, signing in valid])


def _child_answer(done: subprocess.CompletedProcess[bytes]) -> tuple[list[tuple[str, str]], list[str]]:
    """The good signers and refusals a child answered; :class:`RuntimeError` unless it answered exactly that."""
    why = (done.stderr.decode(errors="replace").strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    if done.returncode != 0 or len(done.stdout) > MAX_ANSWER:
        raise RuntimeError(f"Sequoia's check in a child process failed ({why})")
    try:
        return answer_fields(json.loads(done.stdout))
    except (ValueError, TypeError) as exc:
        raise RuntimeError(f"Sequoia's check in a child process gave no readable answer ({exc})") from None


def answer_fields(answer: Any) -> tuple[list[tuple[str, str]], list[str]]:
    """The good signers and refusals of one answer ``{"valid": [[primary, signing], ...], "said": [...]}`` of a
    child process; :class:`ValueError` (or :class:`TypeError`) unless it is exactly that."""
    if not isinstance(answer, dict) or set(answer) != {"valid", "said"} or not all(
            isinstance(answer[field], list) for field in answer):
        raise ValueError("not the answer's fields")
    valid = [(primary, signing) for primary, signing in answer["valid"]
             if _FINGERPRINT.fullmatch(primary) and _FINGERPRINT.fullmatch(signing)]
    said = [text for text in answer["said"] if isinstance(text, str)]
    if len(valid) != len(answer["valid"]) or len(said) != len(answer["said"]):
        raise ValueError("a field of the wrong shape")
    return valid, said


def check_inline(homedir: Path, export: Callable[[], bytes], packets: bytes,
                 cleartext: Clearsigned | None = None) -> SecondOpinion:
    """Sequoia's verdict on an inline-signed message; its ``text`` is what Sequoia says was signed.

    A signed message is given as its ``packets``.  A cleartext block is read as received (``cleartext``: the
    block the parser found, cut at its line starts, so a decoy marker inside a line cuts nothing), its
    signature's armor rebuilt around canonical MPIs when they differ.  Building Sequoia's input runs inside the
    refusal guard: any exception there is Sequoia's refusal, never an escape."""
    def run(certs: _Certificates) -> Any:
        import pysequoia

        return pysequoia.verify(bytes=_inline_input(packets, cleartext), store=certs.store)

    return _opinion(run, homedir, export)


def _inline_input(packets: bytes, cleartext: Clearsigned | None) -> bytes:
    """What Sequoia reads for :func:`check_inline` (raises on input it cannot build: a refusal there)."""
    if cleartext is None:
        with contextlib.suppress(NoSignatureError):  # GnuPG refused it too; Sequoia says why in its own words
            return canonical_mpis(packets)
        return packets
    canonical = canonical_mpis(cleartext.signature)
    if canonical == cleartext.signature:
        return cleartext.received
    received = cleartext.received
    if not received[cleartext.armor_at:].startswith(ARMOR_BEGIN):
        raise ValueError("the cleartext block's signature is not where the parse found it")
    return received[:cleartext.armor_at] + armor(canonical)


#: Why two verifiers may disagree when gkeys knows no cause: never the user's fault.
UNKNOWN_CAUSE = ("two independent OpenPGP implementations read this signature differently, which is not your "
                 "doing; gkeys accepts only what both accept: report it to the gkeys developers with the file "
                 "and its signature")


def sha1_cause(primary: str) -> str:
    """The cause and the fix of a disagreement over a certificate with SHA-1 self-signatures."""
    return (f"the cause: key {primary} binds its user ids or signing subkey with SHA-1 self-signatures, which "
            f"GnuPG accepts and Sequoia's policy refuses; the fix: the key owner re-signs them with SHA-256 or "
            f"stronger (gpg --cert-digest-algo SHA512 --quick-set-expire {primary} <expiry> '*'), then "
            f"gkeys refresh-key")


def confirm(second: SecondOpinion | None, signers: list[tuple[str, str, str]]) -> None:
    """Raise unless Sequoia agrees with each of GnuPG's good signatures ``(primary, signing key, who)``.

    * second opinion off in gkeys.conf: GnuPG's verdict alone (``gkeys doctor`` reports the setting);
    * pysequoia missing: a refusal naming the fix, never a silent single-engine run;
    * no second opinion on the report (a path that bypassed the door) or Sequoia refused or credited another
      signer: :class:`EnginesDisagreeError`, naming what each said.
    """
    if second is not None and second.opinion is Opinion.OFF:
        return
    if second is not None and second.opinion is Opinion.MISSING:
        raise EngineError(f"no second opinion on this signature: {second.said}", capability="second opinion",
                          next_step=INSTALL_HINT)
    for primary, signing, who in signers:
        if second is not None and second.accepts(primary, signing):
            continue
        gnupg = f"GnuPG says good signature by {who} (signing key {signing})"
        if second is None:
            sequoia = "Sequoia was not asked (no second opinion was taken on this path)"
        elif second.opinion is Opinion.ACCEPTED:
            others = ", ".join(sorted(f"{p} (signing key {s})" for p, s in second.signers))
            sequoia = f"Sequoia says good signature only by {others}"
        else:
            sequoia = f"Sequoia refuses it ({second.said})"
        why = (sha1_cause(primary) if second is not None and primary.upper() in second.sha1_bindings
               else UNKNOWN_CAUSE)
        raise EnginesDisagreeError(f"the two verifiers disagree: {gnupg}; {sequoia}; not verified: {why}",
                                   next_step="gkeys refresh-key" if "SHA-1" in why else "")
