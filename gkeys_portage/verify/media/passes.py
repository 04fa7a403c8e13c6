"""The reads of a release file: as few as the verdict needs (docs/media.md, "One read").

* :func:`listed_pass`: a signed statement lists the file (verified by both engines, and small): **one read**,
  every digest the statements are checked on (and the journal's) computed from the same chunks, each in a
  thread of its own; a detached ``.asc`` beside it is compared on its digest prefix (:mod:`.prefix`) from the
  same hash states, never verified (nothing relies on it);
* :func:`asc_pass`: only a detached ``.asc`` signs the file: **two reads side by side**, gpg's (it reads the
  held descriptor itself) and Sequoia's (a child process, fed by a thread of gkeys that hashes the journal's
  SHA-256 on the way: :class:`~gkeys_portage.openpgp.process.Tee`); where the file cannot be held still, one
  read feeds gpg's pipe and the digest (:func:`~gkeys_portage.verify.media.fanout.read_once`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast

from gkeys_portage.core import children
from gkeys_portage.core.errors import BadInputError, GpgError, NoSignatureError, NotVerifiedError
from gkeys_portage.openpgp.packets import detached_signature_packets
from gkeys_portage.openpgp.process import DataSource, OpenFile, Tee
from gkeys_portage.openpgp.verdict import VerifyResult
from gkeys_portage.verify.media.fanout import Background, ChunkStream, hash_held, hash_states, read_once
from gkeys_portage.verify.media.pinned import pinned, unchanged
from gkeys_portage.verify.media.prefix import HASHES, prefixes
from gkeys_portage.verify.media.prefix import disagreeing as prefix_disagrees

Progress = Callable[[int, int], None]
Detached = Callable[[bytes, DataSource], VerifyResult]


class AscDisagreesError(NotVerifiedError):
    """A detached ``.asc`` beside a listed file signs other bytes (its digest prefix does not match)."""


def asc_hashes(signature: bytes | None) -> list[str]:
    """The hashlib names the ``.asc``'s signature packets hash with (to compute in the same read); none if it
    does not parse (:func:`asc_agrees` refuses it then)."""
    if signature is None:
        return []
    try:
        found, _why = prefixes(detached_signature_packets(signature))
    except NoSignatureError:
        return []
    return [prefix.hash_name for prefix in found if prefix.hash_name in HASHES.values()]


def listed_pass(path: Path, hashes: list[str], progress: Progress | None) -> tuple[int, dict[str, Any]]:
    """``(size, {hashlib name: unfinished hash state})`` of ``path`` from one read, the file unchanged meanwhile."""
    with unchanged(path):
        size = path.stat().st_size  # the file unchanged() vouches for
        return size, hash_states(path, hashes, progress)


def asc_agrees(name: str, signature: bytes, states: dict[str, Any], listed_by: str) -> list[str]:
    """Compare the ``.asc`` of ``name`` with the file on its digest prefix; raise :class:`AscDisagreesError` if it
    signs other bytes (:class:`NoSignatureError` if it is no signature); the lines that say what was compared."""
    source = name + ".asc"
    try:
        bad, why = prefix_disagrees(detached_signature_packets(signature), states)
    except NoSignatureError as exc:
        raise exc.reworded(f"{source}: {exc.message}") from exc
    if bad:
        raise AscDisagreesError(
            f"{source}: BAD signature: its {bad[0]} digest does not match {name} (the .asc signs other bytes); "
            f"next: fetch {name} and its siblings again from the release directory (a stale {source} alone may "
            f"be removed: {listed_by} binds {name})")
    said = [f"{source}: not verified, not needed: {listed_by} (verified by both engines) lists {name} with a "
            f"matching digest; its digest prefix matches {name} (no signature check)"]
    if why:
        said.append(f"{source}: prefix not compared for {', '.join(why)}")
    return said


def asc_pass(path: Path, signature: bytes, detached: Detached, source: str, during: Callable[[], object],
             progress: Progress | None) -> tuple[int, dict[str, str], VerifyResult]:
    """``(size, {"sha256": hex}, gpg's and Sequoia's verdict)`` on ``path`` and its lone ``.asc``; ``during`` runs
    beside the engines (the unsigned statements' notes).  The journal's SHA-256 comes from Sequoia's read."""
    with pinned(path) as fd:
        if fd is None:
            during()
            with unchanged(path):
                size = path.stat().st_size  # the file unchanged() vouches for

                def piped(stream: ChunkStream) -> VerifyResult:
                    return checked(source, detached, signature, cast(IO[bytes], stream))

                digests, good = read_once(path, ["sha256"], piped, progress)
                return size, digests, cast(VerifyResult, good)
        tee = Tee({"sha256": hashlib.new("sha256")})
        held = OpenFile(fd, tee)
        gpg_pass = Background("gpg", lambda: checked(source, detached, signature, held))
        try:
            during()
            size = os.fstat(fd).st_size  # the descriptor pinned() holds still
            while not gpg_pass.done(0.1):
                if progress is not None:
                    progress(tee.done >> 20, size >> 20)
            good = gpg_pass.result()
            if tee.complete:
                digests = {name: state.hexdigest() for name, state in tee.states.items()}
            else:  # Sequoia's pass did not run (second opinion off): the digest is read apart
                digests = hash_held(fd, path, ["sha256"], progress)
        except KeyboardInterrupt:
            children.end_all()  # else the join below waits for gpg (and Sequoia) to hash the whole file
            raise
        finally:
            gpg_pass.join()  # never leave gpg running behind a refusal
    return size, digests, good


def checked(source: str, call: Callable[..., VerifyResult], *args: object) -> VerifyResult:
    """Run a verification; a failure (not verified, unusable input, gpg failing) names the sibling it is about."""
    try:
        return call(*args)
    except (NotVerifiedError, BadInputError, GpgError) as exc:
        raise exc.reworded(f"{source}: {exc.message}") from exc
