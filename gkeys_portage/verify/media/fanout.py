"""Hash a big file fast: one read, every digest in a thread of its own.

* :func:`read_once` / :func:`hash_states`: one read feeds every consumer (a hashlib object, or gpg
  verifying a detached signature through a pipe), each in its own thread with a small bounded queue
  of chunks: the one read of a file a signed statement lists (:mod:`gkeys_portage.verify.media.passes`);
* :func:`hash_held`: digests of a held descriptor, each thread reading it with ``pread`` into one reused
  buffer (the journal's digest of a lone ``.asc``'s file when Sequoia's pass did not hash it).

Memory stays flat whatever the file size (one buffer per hashing thread; at most ``QUEUE_DEPTH`` chunks in
flight per consumer).  hashlib releases the GIL while hashing and gpg runs in its own process, so the
passes overlap.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from queue import Queue
from typing import Any, Generic, TypeVar, cast

from gkeys_portage.core.errors import BadInputError
from gkeys_portage.core.fs.regular import open_regular

CHUNK = 1 << 20
QUEUE_DEPTH = 8
T = TypeVar("T")

_Chunks = Queue[bytes | None]


class ChunkStream:
    """A binary stream over a queue of chunks (``read`` only), for piping into gpg."""

    def __init__(self, chunks: _Chunks) -> None:
        self._chunks = chunks
        self._raw = b""
        self._current = memoryview(b"")
        self._offset = 0
        self._eof = False

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (a whole chunk if ``size`` < 0); ``b""`` at the end."""
        while self._offset >= len(self._current):
            if self._eof:
                return b""
            chunk = self._chunks.get()
            if chunk is None:
                self._eof = True
                return b""
            self._raw, self._current, self._offset = chunk, memoryview(chunk), 0
        end = len(self._current) if size < 0 else min(len(self._current), self._offset + size)
        whole = self._offset == 0 and end == len(self._current)
        data = self._raw if whole else bytes(self._current[self._offset : end])  # no copy for whole chunks
        self._offset = end
        return data

    def drain(self) -> None:
        """Discard whatever the reader still sends (the consumer stopped early)."""
        while not self._eof:
            if self._chunks.get() is None:
                self._eof = True


class _Consumer(Generic[T]):
    """One thread fed by one queue; remembers its result or the exception it raised."""

    def __init__(self, name: str, work: Callable[[ChunkStream], T]) -> None:
        self.queue: _Chunks = Queue(maxsize=QUEUE_DEPTH)
        self.result: T | None = None
        self.error: BaseException | None = None
        self._work = work
        self.thread = threading.Thread(target=self._run, name=f"fanout-{name}", daemon=True)

    def _run(self) -> None:
        stream = ChunkStream(self.queue)
        try:
            self.result = self._work(stream)
        except BaseException as exc:  # re-raised in the caller's thread
            self.error = exc
        finally:
            stream.drain()


def _hash_all(algorithm: str) -> Callable[[ChunkStream], Any]:
    def work(stream: ChunkStream) -> Any:
        digest = hashlib.new(algorithm)
        while chunk := stream.read():
            digest.update(chunk)
        return digest  # not finished: a caller may still copy the state (verify.media.prefix)

    return work


def read_once(path: Path, hashes: list[str], detached: Callable[[ChunkStream], T] | None = None,
              progress: Callable[[int, int], None] | None = None) -> tuple[dict[str, str], T | None]:
    """Read ``path`` once; return ``{hashlib name: hex}`` and ``detached(stream)``'s result.

    ``detached`` receives a binary stream of the file's bytes (for
    :meth:`~gkeys_portage.openpgp.gnupg.GnuPG.verify_detached`); an exception it raises is re-raised
    here after every consumer has finished.
    """
    states, result = _read_path(path, hashes, detached, progress)
    return {name: state.hexdigest() for name, state in states.items()}, result


def hash_states(path: Path, hashes: list[str], progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """``{hashlib name: hashlib object}`` of ``path`` from one read, each digest in a thread of its own on the
    same chunks (hashlib releases Python's lock, so on 2 CPUs SHA-512 and SHA-256 run at once); the objects
    are not finished, so a caller may copy a state and hash more after it (:mod:`.prefix`)."""
    return _read_path(path, hashes, None, progress)[0]


def _read_path(path: Path, hashes: list[str], detached: Callable[[ChunkStream], T] | None,
               progress: Callable[[int, int], None] | None) -> tuple[dict[str, Any], T | None]:
    with open(open_regular(path), "rb") as handle:
        return _fan_out(handle.fileno(), path, hashes, detached, progress)


def _fan_out(fd: int, path: Path, hashes: list[str], detached: Callable[[ChunkStream], T] | None,
             progress: Callable[[int, int], None] | None) -> tuple[dict[str, Any], T | None]:
    hashers = {name: _Consumer(name, _hash_all(name)) for name in dict.fromkeys(hashes)}
    consumers: list[_Consumer[object]] = list(hashers.values())
    signer: _Consumer[T] | None = _Consumer("gpg", detached) if detached is not None else None
    if signer is not None:
        consumers.append(signer)  # type: ignore[arg-type]
    for consumer in consumers:
        consumer.thread.start()
    try:
        _feed(fd, path, consumers, progress)
    finally:
        for consumer in consumers:
            consumer.queue.put(None)
        for consumer in consumers:
            consumer.thread.join()
    for consumer in consumers:
        if consumer.error is not None:
            raise consumer.error
    digests = {name: c.result for name, c in hashers.items()}
    return digests, (signer.result if signer is not None else None)


def _feed(fd: int, path: Path, consumers: list[_Consumer[object]],
          progress: Callable[[int, int], None] | None) -> None:
    """Read ``fd`` from offset 0 to its end with ``pread`` and hand every chunk to every consumer."""
    total = os.fstat(fd).st_size
    done = 0
    while True:
        try:
            chunk = os.pread(fd, CHUNK, done)
        except OSError as exc:
            raise BadInputError(f"cannot read {path}: {exc.strerror}") from exc
        if not chunk:
            break
        for consumer in consumers:
            consumer.queue.put(chunk)
        done += len(chunk)
        if progress is not None:
            progress(done >> 20, total >> 20)


class Background(Generic[T]):
    """One call run in its own thread, started at once; :meth:`result` waits for it."""

    def __init__(self, name: str, call: Callable[[], T]) -> None:
        self._call = call
        self._result: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._result = self._call()
        except BaseException as exc:  # re-raised by result() in the caller's thread
            self._error = exc

    def join(self) -> None:
        """Wait until the call has returned (or raised)."""
        self._thread.join()

    def done(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True once the call has returned (or raised)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def result(self) -> T:
        """The call's return value, or its exception re-raised here."""
        self.join()
        if self._error is not None:
            raise self._error
        return cast(T, self._result)


class _Hasher:
    """Digests of an open file, computed in one thread from ``pread`` into one reused buffer."""

    def __init__(self, fd: int, path: Path, algorithms: list[str]) -> None:
        self.digests = {name: hashlib.new(name) for name in algorithms}
        self.done = 0
        self.error: BadInputError | None = None
        self._fd, self._path = fd, path
        self.thread = threading.Thread(target=self._run, name=f"hash-{'-'.join(algorithms)}", daemon=True)

    def _run(self) -> None:
        buffer = bytearray(CHUNK)
        view = memoryview(buffer)
        while True:
            try:
                count = _pread_into(self._fd, buffer, self.done)
            except OSError as exc:
                self.error = BadInputError(f"cannot read {self._path}: {exc.strerror}")
                return
            if not count:
                return
            for digest in self.digests.values():
                digest.update(view[:count])  # hashlib releases the GIL: the threads hash at once
            self.done += count


def _pread_into(fd: int, buffer: bytearray, offset: int) -> int:
    """``pread`` into ``buffer`` at ``offset``; the number of bytes read (0 at the end)."""
    return os.preadv(fd, [buffer], offset)


def spare_cpus() -> int:
    """The CPUs this process may run on, less the one gpg's own pass keeps busy (at least 1)."""
    return max(1, len(os.sched_getaffinity(0)) - 1)


def hash_held(fd: int, path: Path, hashes: list[str],
              progress: Callable[[int, int], None] | None = None) -> dict[str, str]:
    """``{hashlib name: hex}`` of the open file ``fd`` (named ``path`` in messages), from offset 0 to its end.

    The digests are spread over :func:`spare_cpus` threads (on 2 CPUs one thread computes them all, so
    gpg's pass keeps a CPU of its own; with more, each digest has its own); each thread reads the file
    itself (``pread``: the descriptor's offset is not used) and the caller holds the file still.
    ``progress(MiB done, MiB total)`` is called from this thread while they run.
    """
    names = list(dict.fromkeys(hashes))
    count = min(len(names), spare_cpus())
    hashers = [_Hasher(fd, path, names[number::count]) for number in range(count)]
    for hasher in hashers:
        hasher.thread.start()
    total = os.fstat(fd).st_size
    for hasher in hashers:
        while hasher.thread.is_alive():
            hasher.thread.join(0.1)
            if progress is not None:
                progress(min(h.done for h in hashers) >> 20, total >> 20)
    for hasher in hashers:
        if hasher.error is not None:
            raise hasher.error
    if progress is not None and hashers:
        progress(total >> 20, total >> 20)
    return {name: digest.hexdigest() for hasher in hashers for name, digest in hasher.digests.items()}
