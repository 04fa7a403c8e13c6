"""All HTTP goes through here (``requests``): timeouts, retries with backoff, size limits.

``requests`` is imported when first used, not with this module: it costs ~50 ms of start-up, and most
commands (``verify-media`` of a local file, every hook) never go online.

``file://`` URLs are read from disk so a local mirror or seed directory can be configured.
A 404 raises :class:`NotFoundError` (callers may treat it as "not on this source"); every other
failure, after the configured retries, raises :class:`NetworkError` (exit status 3).
"""

from __future__ import annotations

import errno
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import requests

from gkeys_portage import __version__
from gkeys_portage.core.errors import NetworkError

USER_AGENT = f"gkeys-portage/{__version__}"
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
MAX_REDIRECTS = 5
RETRY_STATUSES = {408, 425, 429, 500, 502, 503, 504}
_T = TypeVar("_T")


class NotFoundError(NetworkError):
    """The server answered 404 / 410 (or the local file does not exist)."""

    reason = "not-found"


class TooLargeError(NetworkError):
    """The response is larger than the caller allows."""

    reason = "too-large"


@dataclass
class HttpClient:
    """A small ``requests`` wrapper with the policy of design.md §3 (timeouts, retries, backoff)."""

    timeout: float = 30.0
    retries: int = 3
    backoff: float = 0.5

    def __post_init__(self) -> None:
        import requests.adapters

        #: origin (scheme://host:port) -> why it could not be reached; later requests to it fail at once, so
        #: an offline run says each source's cause once instead of waiting out every key's retries
        self.unreachable: dict[str, str] = {}
        self._unreachable_lock = threading.Lock()

        self.session = requests.Session()
        self.session.headers["User-Agent"] = USER_AGENT
        self.session.max_redirects = MAX_REDIRECTS
        self.session.trust_env = False  # no proxies or netrc from the environment by accident
        # Enough pooled connections per host for the key-fetch thread pool (no reconnect per request).
        adapter = requests.adapters.HTTPAdapter(pool_connections=8, pool_maxsize=64)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def get(self, url: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
        """Download ``url`` completely (at most ``max_bytes``), retrying transient failures."""
        if url.startswith("file://"):
            return _read_file_url(url, max_bytes)
        return self.with_retries(url, lambda: self._get_once(url, max_bytes))

    def exists(self, url: str) -> bool:
        """Whether ``url`` is there: False only when the server answers 404 / 410 to a HEAD request (or the
        local file is absent); any other answer is True (the download itself then says what is wrong)."""
        if url.startswith("file://"):
            return Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path)).exists()

        def head() -> bool:
            with self.session.head(url, timeout=self.timeout, allow_redirects=True) as response:
                if response.status_code in RETRY_STATUSES:
                    raise Retryable(f"HTTP {response.status_code}")
                return response.status_code not in (404, 410)

        return self.with_retries(url, head)

    def post_form(self, url: str, fields: Mapping[str, str], *, max_bytes: int = 1 << 20) -> tuple[int, bytes]:
        """POST an urlencoded form; ``(status, body)`` of the final answer (redirects are not followed,
        the body is cut at ``max_bytes``).  5xx, resets and timeouts are retried, then :class:`NetworkError`."""
        return self.with_retries(url, lambda: self._post_once(url, fields, max_bytes))

    def _post_once(self, url: str, fields: Mapping[str, str], max_bytes: int) -> tuple[int, bytes]:
        with self.session.post(url, data=dict(fields), timeout=self.timeout, stream=True,
                               allow_redirects=False) as response:
            if response.status_code in RETRY_STATUSES:
                raise Retryable(f"HTTP {response.status_code}")
            body = b""
            for chunk in self._iter_body(response):
                body += chunk[: max_bytes - len(body)]
                if len(body) >= max_bytes:
                    break
            return response.status_code, body

    def with_retries(self, url: str, attempt: Callable[[], _T], *,
                     describe: Callable[[Exception | None], str] | None = None, hint: str = "") -> _T:
        """``attempt()`` until it returns, with backoff between tries: the one retry loop of every HTTP call.

        :class:`Retryable` and ``requests`` failures (resets, timeouts) are tried again; a 404, a body too
        large, too many redirects, an invalid URL and every other error are raised at once, and so is a host name
        DNS says does not exist.  A host that could not be reached at all (DNS, refused, no route, connect
        timeout) is remembered for the rest of the run (:attr:`unreachable`): later requests to it fail at
        once with the same cause, so it is said once per source, not once per key.  After the
        last try, :class:`NetworkError` names the last failure (``describe``, default
        :func:`describe_failure`) and ends with ``hint``.
        """
        import requests

        origin = _origin(url)
        with self._unreachable_lock:
            known = self.unreachable.get(origin)
        if known is not None:
            raise NetworkError(f"{safe_url(url)}: {known} (as before: not asked again in this run{hint})")
        last: Exception | None = None
        number = 0
        for number in range(self.retries + 1):
            if number:
                time.sleep(self.backoff * (2 ** (number - 1)))
            try:
                return attempt()
            except (NotFoundError, TooLargeError):
                raise
            except Retryable as exc:
                last = exc
            except requests.exceptions.TooManyRedirects as exc:
                raise NetworkError(f"{safe_url(url)}: too many redirects") from exc
            except requests.exceptions.InvalidURL as exc:
                raise NetworkError(f"{safe_url(url)}: invalid URL") from exc
            except requests.exceptions.RequestException as exc:
                last = exc
                if network_cause(exc)[0] == "dns":
                    break  # DNS answered that the name does not exist: asking again changes nothing
        if last is not None and network_cause(last)[0] in _UNREACHABLE_CAUSES:
            with self._unreachable_lock:
                self.unreachable.setdefault(origin, describe_failure(last))
        raise NetworkError(f"{safe_url(url)}: {(describe or describe_failure)(last)} "
                           f"(after {number + 1} attempt{'s' if number else ''}{hint})")

    def _get_once(self, url: str, max_bytes: int) -> bytes:
        with self.session.get(url, timeout=self.timeout, stream=True) as response:
            if response.status_code in (404, 410):
                raise NotFoundError(f"{safe_url(url)}: not found (HTTP {response.status_code})")
            if response.status_code in RETRY_STATUSES:
                raise Retryable(f"HTTP {response.status_code}")
            if response.status_code != 200:
                raise NetworkError(f"{safe_url(url)}: HTTP {response.status_code}")
            chunks: list[bytes] = []
            size = 0
            for chunk in self._iter_body(response):
                size += len(chunk)
                if size > max_bytes:
                    raise TooLargeError(f"{safe_url(url)}: response larger than {max_bytes} bytes")
                chunks.append(chunk)
            return b"".join(chunks)

    @staticmethod
    def _iter_body(response: requests.Response) -> Iterator[bytes]:
        import requests

        try:
            yield from response.iter_content(1 << 16)
        except requests.exceptions.ChunkedEncodingError as exc:
            raise Retryable(f"connection broken mid-body: {exc}") from exc
        except requests.exceptions.ConnectionError as exc:
            raise Retryable(f"connection broken mid-body: {exc}") from exc


class Retryable(Exception):
    """A failure worth another attempt (5xx, reset, timeout, a download cut short): see
    :meth:`HttpClient.with_retries`."""


#: Causes that say the host cannot be reached at all (not one request's bad luck): see :attr:`HttpClient.unreachable`.
_UNREACHABLE_CAUSES = frozenset({"dns", "dns-temporary", "refused", "connect-timeout", "unreachable"})


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps (``requests`` -> urllib3 -> socket), at most a few levels deep."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo and len(seen) < 12:
        item = todo.pop(0)
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        todo += [item.__cause__, item.__context__, getattr(item, "reason", None)]
        todo += [arg for arg in getattr(item, "args", ()) if isinstance(arg, BaseException)]


def network_cause(exc: BaseException) -> tuple[str, str]:
    """The real cause of a failed request: a stable code and a short text.

    ``dns`` (the host name does not resolve), ``dns-temporary`` (no DNS answer: offline or no resolver),
    ``refused``, ``connect-timeout`` / ``timeout``, ``unreachable`` (no route to the network), ``tls``,
    ``reset``, else ``failed``.  Read from the exception chain (``requests`` wraps urllib3, which wraps the
    socket error), never from the message text.
    """
    import ssl  # with requests: neither is loaded by commands that never go online

    import requests

    chain = list(_chain(exc))
    for item in chain:
        if isinstance(item, socket.gaierror):
            if item.errno == socket.EAI_AGAIN:
                return "dns-temporary", "host name lookup failed (no DNS answer: offline, or no DNS server?)"
            return "dns", "host name not found (DNS)"
    for item in chain:
        if isinstance(item, ConnectionRefusedError):
            return "refused", "connection refused"
        if isinstance(item, ssl.SSLError | requests.exceptions.SSLError):
            return "tls", "TLS handshake or certificate check failed"
        if isinstance(item, OSError) and item.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return "unreachable", "network unreachable (no route to host)"
    if any(isinstance(item, requests.exceptions.ConnectTimeout) for item in chain):
        return "connect-timeout", "timed out connecting"
    if any(isinstance(item, requests.exceptions.Timeout | TimeoutError) for item in chain):
        return "timeout", "timed out"
    for item in chain:
        if isinstance(item, ConnectionResetError):
            return "reset", "connection reset by the server"
    return "failed", "connection failed"


def describe_failure(exc: Exception | None) -> str:
    """One short line for a download failure (its real cause: see :func:`network_cause`)."""
    if exc is None:
        return "failed"
    import requests

    if isinstance(exc, requests.exceptions.RequestException | OSError):
        return network_cause(exc)[1]
    return str(exc).splitlines()[0][:200]


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}:{parts.port or ''}"


def safe_url(url: str) -> str:
    """The URL without credentials or query noise, for messages."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def _read_file_url(url: str, max_bytes: int) -> bytes:
    path = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path))
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except FileNotFoundError as exc:
        raise NotFoundError(f"{url}: no such file") from exc
    except OSError as exc:
        raise NetworkError(f"{url}: {exc.strerror}") from exc
    if len(data) > max_bytes:
        raise TooLargeError(f"{url}: larger than {max_bytes} bytes")
    return data
