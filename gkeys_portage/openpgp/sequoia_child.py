"""Sequoia's check of a large detached-signature target in a child process (run as ``python -I -S`` FILE).

pysequoia holds Python's lock while it reads and hashes: checked in-process, a 512 MiB image stalls every other
thread of gkeys (verify-media's own digests) for the whole pass.  In a child of its own, Sequoia hashes on its own
CPU.  The parent (:func:`gkeys_portage.openpgp.sequoia.check_detached_apart`) writes one JSON request to stdin::

    {"path": [sys.path of the parent], "certs": [[base64 certificate, [its fingerprints and key ids]], ...],
     "signatures": [base64 signature packet, ...], "data": "/dev/fd/N"}

and reads one JSON answer from stdout, ``{"valid": [[primary, signing key], ...], "said": [refusal, ...]}``;
anything else (no answer, a garbled one, a non-zero exit) is a refusal there.  This module imports nothing of
gkeys (it runs without gkeys' package on its path) and only pysequoia besides the standard library.
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any


def _said(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def answer(request: dict[str, Any]) -> dict[str, list[Any]]:
    """Sequoia's verdict on each signature of ``request`` over its data (the good signers, the refusals)."""
    import pysequoia

    by_id: dict[str, list[Any]] = {}
    for blob, ids in request["certs"]:
        cert = pysequoia.Cert.from_bytes(base64.b64decode(blob))
        for name in ids:
            by_id.setdefault(str(name), []).append(cert)

    def store(ids: list[str]) -> list[Any]:
        found = {id(cert): cert for wanted in ids for cert in by_id.get(str(wanted).lower(), ())}
        return list(found.values())

    signatures = [base64.b64decode(one) for one in request["signatures"]]
    source: bytes | str = request["data"]
    if len(signatures) > 1:  # a pipe is read once: keep its bytes for each signature
        with open(source, "rb") as stream:
            source = stream.read()
    valid: list[list[str]] = []
    said: list[str] = []
    for one in signatures:
        try:
            signature = pysequoia.Sig.from_bytes(one)
            if isinstance(source, bytes):
                result = pysequoia.verify(bytes=source, store=store, signature=signature)
            else:
                result = pysequoia.verify(file=source, store=store, signature=signature)
            valid += [[str(sig.certificate).upper(), str(sig.signing_key).upper()] for sig in result.valid_sigs]
        except Exception as exc:  # noqa: BLE001 - a refusal of this one signature
            said.append(_said(exc))
    return {"valid": valid, "said": said}


def main() -> None:
    """Read the request from stdin, write the answer to stdout."""
    request = json.loads(sys.stdin.buffer.read())
    sys.path[:0] = [str(entry) for entry in request["path"]]  # where the parent found pysequoia
    sys.stdout.write(json.dumps(answer(request)))


if __name__ == "__main__":
    main()
