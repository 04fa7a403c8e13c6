"""Sequoia's check of a large detached-signature target in a child process (run as ``python -I -S`` FILE).

pysequoia holds Python's lock while it reads and hashes: checked in-process, a 512 MiB image stalls every other
thread of gkeys (verify-media's own digests) for the whole pass.  In a child of its own, Sequoia hashes on its own
CPU.  The parent (:func:`gkeys_portage.openpgp.sequoia.check_detached_apart`) writes one JSON request to stdin::

    {"path": [sys.path of the parent], "certs": [[base64 certificate, [its fingerprints and key ids]], ...],
     "signatures": [base64 signature packet, ...], "data": "/dev/fd/N"}

and reads one JSON answer from stdout, ``{"valid": [[primary, signing key], ...], "said": [refusal, ...]}``;
anything else (no answer, a garbled one, a non-zero exit) is a refusal there.  This module imports nothing of
gkeys (it runs without gkeys' package on its path) and only pysequoia besides the standard library.

pysequoia checks one signature per call, and a pipe is read once.  With more than one distinct signature packet
the data is read here once, in pieces of :data:`PIECE` bytes, and written to one child of this same module per
signature (each checks its one signature over its own pipe): memory stays bounded however large the file and
however many packets the ``.asc`` holds (identical packets are checked once; more than :data:`MAX_SIGNATURES`
distinct ones are refused, saying so).  Reading it whole instead took a 96 MiB file to 304 MiB.

Run as ``python -I -S FILE --serve``, it is instead the batch worker of one gkeys run
(:mod:`gkeys_portage.openpgp.second.worker`): it reads one JSON request per line from stdin and writes one JSON
answer per line to stdout, until stdin ends.  ``{"path": [...]}`` comes first; ``{"keyring": N, "certs": [...]}``
loads a keyring's certificates under the number ``N`` (answered ``{"loaded": N}``); ``{"id": I, "keyring": N,
"items": [[[base64 signature packet, ...], "/data/file"], ...]}`` checks each item's signatures over the bytes of its
file (the very file gpg's ``--multifile`` run reads), answered ``{"id": I, "answers": [{"valid": [...], "said":
[...]}, ...]}``, one per item, in order.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

PIECE = 1 << 20  # bytes read and handed on at a time
MAX_SIGNATURES = 8  # distinct signature packets checked over one large file (each a child hashing it)


def _said(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _fan_out(request: dict[str, Any], signatures: list[str]) -> dict[str, list[Any]]:
    """Check each signature in a child of its own, the data read once and written to every child's pipe."""
    children: list[tuple[subprocess.Popen[bytes], int | None]] = []
    try:
        for one in signatures:
            read_end, write_end = os.pipe()
            child = subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, pass_fds=(read_end,))
            os.close(read_end)
            children.append((child, write_end))
            assert child.stdin is not None
            with child.stdin:
                child.stdin.write(json.dumps({**request, "signatures": [one], "data": f"/dev/fd/{read_end}"}).encode())
        with open(request["data"], "rb", buffering=0) as source:
            while piece := source.read(PIECE):
                for index, (reader, pipe_end) in enumerate(children):
                    if pipe_end is not None and not _hand_on(pipe_end, piece):
                        os.close(pipe_end)  # this child stopped reading (its signature failed to parse)
                        children[index] = (reader, None)
    finally:
        for _, still_open in children:
            if still_open is not None:
                with contextlib.suppress(OSError):
                    os.close(still_open)
    valid: list[list[str]] = []
    said: list[str] = []
    for child, _ in children:
        assert child.stdout is not None
        with child.stdout:
            out = child.stdout.read()
        child.wait()
        try:
            answered = json.loads(out)
            valid += [[str(primary), str(signing)] for primary, signing in answered["valid"]]
            said += [str(text) for text in answered["said"]]
        except (ValueError, TypeError, KeyError):
            said.append(f"the check of one signature failed (exit status {child.returncode})")
    return {"valid": valid, "said": said}


def _hand_on(fd: int, piece: bytes) -> bool:
    """Write all of ``piece`` to ``fd``; False once the reader is gone."""
    view = memoryview(piece)
    try:
        while view:
            view = view[os.write(fd, view):]
    except BrokenPipeError:
        return False
    return True


def answer(request: dict[str, Any]) -> dict[str, list[Any]]:
    """Sequoia's verdict on each signature of ``request`` over its data (the good signers, the refusals)."""
    distinct = list(dict.fromkeys(str(one) for one in request["signatures"]))  # the same packet twice: once
    if len(distinct) > MAX_SIGNATURES:
        return {"valid": [], "said": [f"{len(distinct)} distinct signature packets over one large file; at most "
                                      f"{MAX_SIGNATURES} are checked: refused"]}
    if len(distinct) > 1:
        return _fan_out(request, distinct)
    import pysequoia

    store = _store(request["certs"])
    valid: list[list[str]] = []
    said: list[str] = []
    for one in distinct:  # one at most: Sequoia reads the pipe itself, in a bounded buffer
        try:
            signature = pysequoia.Sig.from_bytes(base64.b64decode(one))
            result = pysequoia.verify(file=request["data"], store=store, signature=signature)
            valid += [[str(sig.certificate).upper(), str(sig.signing_key).upper()] for sig in result.valid_sigs]
        except Exception as exc:  # noqa: BLE001 - a refusal of this one signature
            said.append(_said(exc))
    return {"valid": valid, "said": said}


def _store(certs: list[Any]) -> Callable[[list[str]], list[Any]]:
    """pysequoia's key store callback over ``certs`` (``[base64 certificate, [its fingerprints and key ids]]``)."""
    import pysequoia

    by_id: dict[str, list[Any]] = {}
    for blob, ids in certs:
        try:
            cert = pysequoia.Cert.from_bytes(base64.b64decode(blob))
        except Exception:  # noqa: BLE001, S112 - a certificate Sequoia cannot read verifies nothing here
            continue
        for name in ids:
            by_id.setdefault(str(name), []).append(cert)

    def store(ids: list[str]) -> list[Any]:
        found = {id(cert): cert for wanted in ids for cert in by_id.get(str(wanted).lower(), ())}
        return list(found.values())

    return store


def check_item(store: Callable[[list[str]], list[Any]], signatures: list[str], name: str) -> dict[str, list[Any]]:
    """Sequoia's verdict on each signature (base64 packets, one signature each) over the bytes of file ``name``."""
    import pysequoia

    valid: list[list[str]] = []
    said: list[str] = []
    try:
        with open(name, "rb") as stream:
            data = stream.read()
    except OSError as exc:
        return {"valid": [], "said": [f"cannot read the signed data: {exc.strerror}"]}
    for one in signatures:
        try:
            signature = pysequoia.Sig.from_bytes(base64.b64decode(one))
            result = pysequoia.verify(bytes=data, store=store, signature=signature)
            valid += [[str(sig.certificate).upper(), str(sig.signing_key).upper()] for sig in result.valid_sigs]
        except Exception as exc:  # noqa: BLE001 - a refusal of this one signature
            said.append(_said(exc))
    return {"valid": valid, "said": said}


#: keyrings a worker keeps loaded (verify-tree asks with one per listed category)
MAX_KEYRINGS = 8


def serve() -> None:
    """The batch worker: one JSON request per line from stdin, one JSON answer per line to stdout."""
    stores: dict[int, Callable[[list[str]], list[Any]]] = {}
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if "path" in request:
            sys.path[:0] = [str(entry) for entry in request["path"]]  # where the parent found pysequoia
            continue
        number = int(request["keyring"])
        if "certs" in request:
            if len(stores) >= MAX_KEYRINGS:
                stores.pop(next(iter(stores)))
            stores[number] = _store(request["certs"])
            reply: dict[str, Any] = {"loaded": number}
        else:
            reply = {"id": request["id"], "answers": [check_item(stores[number], signatures, name)
                                                      for signatures, name in request["items"]]}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def main() -> None:
    """Read the request from stdin, write the answer to stdout (``--serve``: answer requests until stdin ends)."""
    if sys.argv[1:] == ["--serve"]:
        serve()
        return
    request = json.loads(sys.stdin.buffer.read())
    sys.path[:0] = [str(entry) for entry in request["path"]]  # where the parent found pysequoia
    sys.stdout.write(json.dumps(answer(request)))


if __name__ == "__main__":
    main()
