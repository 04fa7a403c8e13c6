"""Resumable streaming download of one big file (stage3, ISO) with the HTTP client's session.

* resumes a partial file with an HTTP ``Range`` request (and restarts cleanly if the server
  ignores the range or answers a different one);
* checks the size announced by the caller (the signed ``latest-*.txt``) against what the server
  announces, and never writes more bytes than announced: a server that sends more is refused;
* a stall (no byte for ``stall_timeout`` seconds) aborts the attempt, and so does a drip: an attempt
  slower than ``stall_timeout`` plus what its bytes earn at 16 KiB/s (a byte a second never holds a
  fetch, nor Portage waiting on ``gkeys-fetch``, for ever); the next attempt resumes;
* memory stays flat (64 KiB reads written straight to disk).

Everything lands in a file the caller chose (a quarantine folder); nothing here decides trust.
"""

from __future__ import annotations

import re
import shutil
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gkeys_portage.core.errors import BadInputError, NetworkError
from gkeys_portage.core.http import (
    RETRY_STATUSES,
    HttpClient,
    NotFoundError,
    Retryable,
    check_rate,
    describe_failure,
    safe_url,
)

if TYPE_CHECKING:
    import requests  # imported when a download starts (start-up cost, see core.http)

_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")

Progress = Callable[[int, int], None]


class OversizeDownloadError(BadInputError):
    """The server announced or sent more bytes than allowed (the size the signed latest file gave)."""


@dataclass
class Downloader:
    """Download big files with resume, size checks and a stall timeout, through ``http``'s session."""

    http: HttpClient
    stall_timeout: float = 60.0
    max_bytes: int = 16 << 30

    def fetch(self, url: str, dest: Path, *, expected_size: int | None = None,
              progress: Progress | None = None) -> int:
        """Download ``url`` into ``dest`` (resuming what is there); return the final size.

        Raises :class:`NotFoundError` for 404, :class:`OversizeDownloadError` when the server
        announces or sends more than ``expected_size`` (or ``max_bytes``), :class:`NetworkError`
        after the client's retries (the partial file stays in ``dest`` for the next run).
        """
        if expected_size is not None and expected_size > self.max_bytes:
            raise OversizeDownloadError(f"{dest.name}: announced size {expected_size} exceeds the limit "
                                        f"{self.max_bytes} ([media] max-size)")
        if url.startswith("file://"):
            return self._copy_local(url, dest, expected_size)
        return self.http.with_retries(url, lambda: self._attempt(url, dest, expected_size, progress),
                                      describe=lambda exc: _describe(exc, self.stall_timeout),
                                      hint=f"; the partial file stays in {dest.parent}")

    def _attempt(self, url: str, dest: Path, expected_size: int | None, progress: Progress | None) -> int:
        have = dest.stat().st_size if dest.exists() else 0
        limit = expected_size if expected_size is not None else self.max_bytes
        if expected_size is not None and have == expected_size:
            return have  # already complete; verification decides whether it is good
        if have > limit:
            dest.unlink()
            have = 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        timeout = (self.http.timeout, self.stall_timeout)
        with self.http.session.get(url, headers=headers, stream=True, timeout=timeout) as response:
            offset, announced = self._accept(response, url, dest, have)
            if announced is not None and announced > limit:
                raise OversizeDownloadError(
                    f"{safe_url(url)}: the server announces {announced} bytes, more than the "
                    f"{limit} allowed" + (" (the signed latest file's size)" if expected_size is not None else ""))
            if announced is not None and expected_size is not None and announced < expected_size:
                raise BadInputError(f"{safe_url(url)}: the server announces {announced} bytes, "
                                    f"the signed latest file says {expected_size}")
            size = self._write(response, dest, offset, announced or limit, progress)
        if announced is not None and size < announced:
            raise Retryable(f"connection closed after {size} of {announced} bytes")
        if expected_size is not None and size != expected_size:
            raise Retryable(f"got {size} of {expected_size} bytes")
        return size

    @staticmethod
    def _accept(response: requests.Response, url: str, dest: Path, have: int) -> tuple[int, int | None]:
        """Check the status; return (offset to write at, total size announced or None)."""
        status = response.status_code
        if status in (404, 410):
            raise NotFoundError(f"{safe_url(url)}: not found (HTTP {status})")
        if status == 416 and have:
            dest.unlink()  # our partial file is longer than the server's: start again
            raise Retryable("the partial file did not fit the server's file (HTTP 416)")
        if status in RETRY_STATUSES:
            raise Retryable(f"HTTP {status}")
        length = response.headers.get("Content-Length")
        if status == 200:
            return 0, int(length) if length and length.isascii() and length.isdigit() else None
        if status == 206:
            match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if not match or int(match.group(1)) != have:
                dest.unlink(missing_ok=True)
                raise Retryable("the server answered a different range")
            total = match.group(3)
            return have, int(total) if total != "*" else None
        raise NetworkError(f"{safe_url(url)}: HTTP {status}")

    def _write(self, response: requests.Response, dest: Path, offset: int, limit: int,
               progress: Progress | None) -> int:
        """Append the body to ``dest``; an attempt slower than ``stall_timeout`` plus what its bytes earn at
        :data:`~gkeys_portage.core.http.MIN_RATE` is cut (a dripping mirror never holds a fetch for ever;
        the next attempt resumes from what arrived)."""
        size = offset
        started = time.monotonic()
        with open(dest, "ab" if offset else "wb") as out:
            for chunk in HttpClient.iter_body(response, lambda got: check_rate(started, got, self.stall_timeout)):
                size += len(chunk)
                if size > limit:
                    raise OversizeDownloadError(f"{safe_url(response.url)}: the server sent more than the "
                                                f"{limit} bytes announced; refused")
                out.write(chunk)
                if progress is not None:
                    progress(size >> 20, limit >> 20)
        return size

    def _copy_local(self, url: str, dest: Path, expected_size: int | None) -> int:
        source = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path))
        try:
            size = source.stat().st_size
        except FileNotFoundError as exc:
            raise NotFoundError(f"{url}: no such file") from exc
        except OSError as exc:
            raise NetworkError(f"{url}: {exc.strerror}") from exc
        limit = expected_size if expected_size is not None else self.max_bytes
        if size > limit:
            raise OversizeDownloadError(f"{url}: {size} bytes, more than the {limit} allowed")
        if expected_size is not None and size != expected_size:
            raise BadInputError(f"{url}: {size} bytes, the signed latest file says {expected_size}")
        shutil.copyfile(source, dest)
        return size


def _describe(exc: Exception | None, stall_timeout: float) -> str:
    """One short line for a failed attempt; a read timeout is a stall."""
    text = str(exc)
    if exc is not None and ("timed out" in text.lower() or "timeout" in type(exc).__name__.lower()):
        return f"stalled (no data for {stall_timeout:g} s)"
    return describe_failure(exc)
