"""All HTTP goes through here (``requests``): timeouts, retries with backoff, size limits.

``requests`` is imported when first used, not with this module: it costs ~50 ms of start-up, and most
commands (``verify-media`` of a local file, every hook) never go online.

``file://`` URLs are read from disk so a local mirror or seed directory can be configured.
A 404 raises :class:`NotFoundError` (callers may treat it as "not on this source"); every other
failure, after the configured retries, raises :class:`NetworkError` (exit status 3).

Deadlines: ``timeout`` bounds each read *and* each attempt as a whole: an answer still arriving
``timeout`` seconds after the attempt began is cut unless its bytes came at least at
:data:`MIN_RATE` (a server sending a byte a second never stalls a call past ``timeout``, a large
download on a slow but working link still completes).  A caller may also give a ``deadline`` for
the whole call, retries included (:meth:`HttpClient.round_deadline`: a refresh round), after which
:class:`DeadlineError` says the source did not answer in time.
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
#: Bytes per second that earn an attempt time beyond ``timeout`` (16 KiB/s: a slow link, not a drip).
MIN_RATE = 16 * 1024
_T = TypeVar("_T")


class NotFoundError(NetworkError):
    """The server answered 404 / 410 (or the local file does not exist)."""

    reason = "not-found"


class TooLargeError(NetworkError):
    """The response is larger than the caller allows."""

    reason = "too-large"


class HostNotFoundError(NetworkError):
    """DNS says the host name does not exist (NXDOMAIN): an answer about the name, not an outage.

    WKD needs the distinction: the direct method counts only where the advanced method's host does not
    exist; an advanced host that exists but cannot be reached is a source that did not answer."""


class DeadlineError(NetworkError):
    """The call did not finish by the caller's deadline (a source too slow to count as answering)."""


#: Seconds an attempt may go unanswered before the client says it waits (at most half the timeout).
WAIT_NOTICE = 3.0


@dataclass
class HttpClient:
    """A small ``requests`` wrapper with the policy of design.md §3 (timeouts, retries, backoff).

    ``waiting`` (the console's, when a person or a log reads along) is told once per host and attempt when an
    attempt has gone :data:`WAIT_NOTICE` seconds (at most half the timeout) without finishing: "waiting for
    HOST, attempt 2 of 4 (attempt 1: timed out)", so a dead mirror is not minutes of silence."""

    timeout: float = 30.0
    retries: int = 3
    backoff: float = 0.5
    waiting: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        import requests.adapters

        self._said: set[str] = set()  # waiting notices already given (a pool of key fetches says each once)

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

    def get(self, url: str, *, max_bytes: int = DEFAULT_MAX_BYTES, deadline: float | None = None) -> bytes:
        """Download ``url`` completely (at most ``max_bytes``), retrying transient failures, each attempt
        within ``timeout`` (see the module's deadlines) and all of them by ``deadline`` (a
        :func:`time.monotonic` value) if given."""
        if url.startswith("file://"):
            return _read_file_url(url, max_bytes)
        return self.with_retries(url, lambda: self._get_once(url, max_bytes, deadline), deadline=deadline)

    def request_budget(self) -> float:
        """The longest one call may take with the configured timeout, retries and backoff (seconds)."""
        return self.timeout * (self.retries + 1) + sum(self.backoff * 2 ** n for n in range(self.retries))

    def round_deadline(self) -> float:
        """A deadline for a round of concurrent requests starting now (one request's budget): a source
        that has not answered by then counts as unanswered, however its requests were queued."""
        return time.monotonic() + self.request_budget()

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
        started = time.monotonic()
        with self.session.post(url, data=dict(fields), timeout=self.timeout, stream=True,
                               allow_redirects=False) as response:
            if response.status_code in RETRY_STATUSES:
                raise Retryable(f"HTTP {response.status_code}")
            body = b""
            for chunk in self.iter_body(response, lambda got: self._check_time(url, started, got, None)):
                body += chunk[: max_bytes - len(body)]
                if len(body) >= max_bytes:
                    break
            return response.status_code, body

    def with_retries(self, url: str, attempt: Callable[[], _T], *,
                     describe: Callable[[Exception | None], str] | None = None, hint: str = "",
                     deadline: float | None = None) -> _T:
        """``attempt()`` until it returns, with backoff between tries: the one retry loop of every HTTP call.

        :class:`Retryable` and ``requests`` failures (resets, timeouts) are tried again; a 404, a body too
        large, too many redirects, an invalid URL and every other error are raised at once, and so is a host name
        DNS says does not exist.  A host that could not be reached at all (DNS, refused, no route, connect
        timeout) is remembered for the rest of the run (:attr:`unreachable`): later requests to it fail at
        once with the same cause, so it is said once per source, not once per key.  After the
        last try, :class:`NetworkError` names the last failure (``describe``, default
        :func:`describe_failure`) and ends with ``hint``; past ``deadline`` (monotonic), no further
        attempt is made and :class:`DeadlineError` is raised.
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
                pause = self.backoff * (2 ** (number - 1))
                if deadline is not None:
                    pause = min(pause, max(0.0, deadline - time.monotonic()))
                time.sleep(pause)
            if deadline is not None and time.monotonic() >= deadline:
                raise DeadlineError(f"{safe_url(url)}: no complete answer in time"
                                    f"{f' ({describe_failure(last)})' if last is not None else ''}")
            notice = self._notice(url, number, last)
            try:
                return attempt()
            except (NotFoundError, TooLargeError, DeadlineError):
                raise
            except Retryable as exc:
                last = exc
            except requests.exceptions.TooManyRedirects as exc:
                raise NetworkError(f"{safe_url(url)}: too many redirects") from exc
            except requests.exceptions.InvalidURL as exc:
                raise NetworkError(f"{safe_url(url)}: invalid URL") from exc
            except requests.exceptions.RequestException as exc:
                if host_does_not_exist(exc):
                    raise HostNotFoundError(f"{safe_url(url)}: {describe_failure(exc)}{hint}") from exc
                last = exc
                if network_cause(exc)[0] == "dns":
                    break  # DNS answered that the name does not exist: asking again changes nothing
            finally:
                if notice is not None:
                    notice.cancel()
        if last is not None and network_cause(last)[0] in _UNREACHABLE_CAUSES:
            with self._unreachable_lock:
                self.unreachable.setdefault(origin, describe_failure(last))
        raise NetworkError(f"{safe_url(url)}: {(describe or describe_failure)(last)} "
                           f"(after {number + 1} attempt{'s' if number else ''}{hint})")

    def _notice(self, url: str, number: int, last: Exception | None) -> threading.Timer | None:
        """A timer that tells :attr:`waiting` about attempt ``number`` (0-based) if it is still running after
        :data:`WAIT_NOTICE` seconds (at most half the timeout); None when nobody listens."""
        if self.waiting is None:
            return None
        host = urllib.parse.urlsplit(url).hostname or url
        port = urllib.parse.urlsplit(url).port
        where = f"{host}:{port}" if port else host
        before = f" (attempt {number}: {describe_failure(last)})" if last is not None else ""
        text = f"waiting for {where}, attempt {number + 1} of {self.retries + 1}{before}"

        def say() -> None:
            with self._unreachable_lock:
                if text in self._said:
                    return
                self._said.add(text)
            if self.waiting is not None:
                self.waiting(text)

        timer = threading.Timer(min(WAIT_NOTICE, self.timeout / 2), say)
        timer.daemon = True
        timer.start()
        return timer

    def _get_once(self, url: str, max_bytes: int, deadline: float | None = None) -> bytes:
        started = time.monotonic()
        read_timeout = self.timeout if deadline is None else max(0.001, min(self.timeout, deadline - started))
        with self.session.get(url, timeout=read_timeout, stream=True) as response:
            if response.status_code in (404, 410):
                raise NotFoundError(f"{safe_url(url)}: not found (HTTP {response.status_code})")
            if response.status_code in RETRY_STATUSES:
                raise Retryable(f"HTTP {response.status_code}")
            if response.status_code != 200:
                raise NetworkError(f"{safe_url(url)}: HTTP {response.status_code}")
            chunks: list[bytes] = []
            size = 0
            for chunk in self.iter_body(response, lambda got: self._check_time(url, started, got, deadline)):
                size += len(chunk)
                if size > max_bytes:
                    raise TooLargeError(f"{safe_url(url)}: response larger than {max_bytes} bytes")
                chunks.append(chunk)
            return b"".join(chunks)

    def _check_time(self, url: str, started: float, received: int, deadline: float | None) -> None:
        """Cut an answer that is too slow: past the caller's ``deadline``, or past ``timeout`` plus what
        the bytes received so far earn at :data:`MIN_RATE`."""
        if deadline is not None and time.monotonic() >= deadline:
            raise DeadlineError(f"{safe_url(url)}: no complete answer in time ({received} bytes so far)")
        check_rate(started, received, self.timeout)

    @staticmethod
    def iter_body(response: requests.Response, check: Callable[[int], None] | None = None) -> Iterator[bytes]:
        """The body in pieces as they arrive (``read1``: whatever one read brings, never waiting to fill a
        buffer), with ``check(bytes so far)`` called before each read."""
        import requests
        import urllib3.exceptions

        received = 0
        try:
            while True:
                if check is not None:
                    check(received)
                chunk = response.raw.read1(1 << 16, decode_content=True)
                if not chunk:
                    return
                received += len(chunk)
                yield chunk
        except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError,
                urllib3.exceptions.ProtocolError) as exc:
            raise Retryable(f"connection broken mid-body: {exc}") from exc
        except (urllib3.exceptions.ReadTimeoutError, TimeoutError) as exc:
            raise Retryable(f"timed out mid-body: {exc}") from exc
        except urllib3.exceptions.DecodeError as exc:
            raise NetworkError(f"undecodable body: {exc}") from exc


def check_rate(started: float, received: int, allowance: float) -> None:
    """Raise :class:`Retryable` when an answer begun at ``started`` (monotonic) has taken longer than
    ``allowance`` seconds plus what its ``received`` bytes earn at :data:`MIN_RATE`: a server sending a
    byte a second is cut, however large the answer may be, while a slow but working link goes on."""
    elapsed = time.monotonic() - started
    if elapsed > allowance + received / MIN_RATE:
        raise Retryable(f"too slow ({received} bytes in {elapsed:.0f}s)")


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


def host_does_not_exist(exc: BaseException) -> bool:
    """True if ``exc`` was caused by a name resolution that said the name does not exist (``EAI_NONAME``,
    ``EAI_NODATA``), not by a resolver that could not answer (``EAI_AGAIN``: an outage)."""
    missing = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}
    return any(isinstance(item, socket.gaierror) and item.errno in missing for item in _chain(exc))


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
