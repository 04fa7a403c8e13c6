"""A self-contained OpenPGP world for the demo and the tests: throwaway keys and a loopback server.

* :class:`KeyFactory` makes keys (certify-only primary + signing subkey; ed25519 unless asked) in one throwaway
  GnuPG home, optionally "in the past" (expired keys), and signs files as any of them.
* :class:`LoopbackServer` is a threaded HTTP server on 127.0.0.1 that serves static files, an HKP
  ``/pks/lookup`` endpoint and WKD trees, with optional per-request latency and injected faults.

Nothing here touches the network beyond 127.0.0.1, ``~`` or the user's keyrings.
"""

from __future__ import annotations

import http.server
import socket
import struct
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from gkeys_portage.core.types import Fingerprint
from gkeys_portage.keys.sources import wkd_hash
from gkeys_portage.openpgp.gnupg import GnuPG


@dataclass
class DemoKey:
    """A generated key: primary fingerprint, signing subkey, user id."""

    name: str
    email: str
    fingerprint: Fingerprint
    signing_subkey: Fingerprint

    @property
    def uid(self) -> str:
        """``Name <email>``."""
        return f"{self.name} <{self.email}>"


class KeyFactory:
    """Generates and uses throwaway keys in one GnuPG home, with ``program`` (default: the selected engine;
    the tests make every key and signature with the reference GnuPG, so each engine checks the same bytes)."""

    def __init__(self, home: Path, *, program: str | None = None) -> None:
        self.home = home
        self.gpg = GnuPG(home, program=program)
        self.keys: dict[str, DemoKey] = {}

    def _at(self, when: datetime | None) -> GnuPG:
        return self.gpg if when is None else GnuPG(self.home, faked_time=when, program=self.gpg.program)

    def create(self, nick: str, *, name: str | None = None, email: str | None = None,
               created: datetime | None = None, expire: str = "2y", algorithm: str = "ed25519") -> DemoKey:
        """A certify-only primary with a signing subkey of the same ``algorithm`` (gpg's name: ed25519,
        rsa4096, ...), created "at" ``created``."""
        gpg = self._at(created)
        email = email or f"{nick}@gentoo.org"
        name = name or nick.capitalize()
        primary = gpg.generate_key(f"{name} <{email}>", algorithm=algorithm, usage="cert", expire=expire)
        subkey = gpg.add_subkey(primary, algorithm=algorithm, usage="sign", expire=expire)
        key = DemoKey(name, email, primary, subkey)
        self.keys[nick] = key
        return key

    def public(self, *nicks: str, armor: bool = True) -> bytes:
        """Exported public keys of the named keys, as a keyserver publishes them (certifications kept)."""
        return self.gpg.export_keys([self.keys[n].fingerprint for n in nicks], armor=armor, clean=False)

    def revocation(self, nick: str) -> bytes:
        """The key's revocation certificate (import it to revoke the key)."""
        return self.gpg.revocation_certificate(self.keys[nick].fingerprint)

    def certify(self, certifier: str, subject: str, uids: Sequence[str] = (), *, expire: str = "0",
                when: datetime | None = None) -> None:
        """``certifier`` certifies ``uids`` (default: all) of ``subject``, optionally "at" ``when``."""
        self._at(when).certify(self.keys[subject].fingerprint, self.keys[certifier].fingerprint, uids, expire=expire)

    def revoke_certification(self, certifier: str, subject: str, uids: Sequence[str] = (), *,
                             when: datetime | None = None) -> None:
        """``certifier`` revokes its certification of ``subject`` (a retirement), optionally "at" ``when``."""
        self._at(when).revoke_certification(self.keys[subject].fingerprint, self.keys[certifier].fingerprint, uids)

    def revoke(self, nick: str) -> None:
        """Revoke ``nick``'s key in this home (its exported public key then carries the revocation)."""
        self.gpg.import_keys(self.revocation(nick))

    def sign(self, nick: str, path: Path, *, clearsign: bool = False, armor: bool = True,
             when: datetime | None = None, notations: Mapping[str, str] | None = None) -> bytes:
        """Sign the file ``path`` as ``nick`` (detached by default), optionally "at" ``when``, with
        ``notations`` in the signature's hashed area."""
        return self._at(when).sign(path, self.keys[nick].fingerprint, clearsign=clearsign, armor=armor,
                                   notations=notations)

    def sign_bytes(self, nick: str, data: bytes, workdir: Path, **kwargs: object) -> bytes:
        """Sign bytes (written to a scratch file in ``workdir``)."""
        scratch = workdir / f".to-sign-{nick}-{time.monotonic_ns()}"
        scratch.write_bytes(data)
        try:
            return self.sign(nick, scratch, **kwargs)  # type: ignore[arg-type]
        finally:
            scratch.unlink()

    def close(self) -> None:
        """Stop the agent of the key home."""
        self.gpg.close()


def past(days: float) -> datetime:
    """A datetime ``days`` ago (UTC)."""
    return datetime.fromtimestamp(time.time() - days * 86400, UTC)


Responder = Callable[["RequestInfo"], "Response"]


@dataclass
class RequestInfo:
    """What a responder sees of a request."""

    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes = b""  # of a POST


@dataclass
class Response:
    """What a responder returns.

    ``stall``: seconds to wait before answering; ``abort_after``: send only that many body bytes,
    then reset the connection (a server or proxy dying mid-body); ``drip``: seconds between body bytes
    (a server that answers a byte at a time, each read within any timeout).
    """

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    stall: float = 0.0
    abort_after: int | None = None
    drip: float = 0.0


@dataclass
class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1 with static files, HKP and WKD, latency and faults."""

    latency: float = 0.0
    files: dict[str, bytes] = field(default_factory=dict)
    hkp: dict[str, bytes] = field(default_factory=dict)  # upper-case fingerprint -> what to answer
    uploads: list[bytes] = field(default_factory=list)  # ``keytext`` of each HKP ``POST /pks/add``
    routes: dict[str, Responder] = field(default_factory=dict)  # path -> responder (wins over files)
    log: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: with Nagle's algorithm the body waits for the
            # client's delayed ACK (40 ms on Linux), on top of the latency a test asked for.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
                return

            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                server._handle(self, head=False)

            def do_HEAD(self) -> None:  # noqa: N802 - stdlib name
                server._handle(self, head=True)

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                server._handle(self, head=False)

        class QuietServer(http.server.ThreadingHTTPServer):
            # a keyserver's backlog (nginx: 511), not socketserver's 5: install-key opens [sources] workers
            # connections at once, and a connection beyond the backlog waits for a SYN retry
            request_queue_size = 128

            def handle_error(self, request: object, client_address: object) -> None:
                return  # clients that hang up (timeouts, killed runs) are part of the tests

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:40123``."""
        port = self.httpd.server_address[1]
        return f"http://127.0.0.1:{port}"

    def close(self) -> None:
        """Stop serving."""
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- publishing ------------------------------------------------------------------------------

    def publish(self, path: str, data: bytes) -> str:
        """Serve ``data`` at ``path``; return its URL."""
        self.files["/" + path.lstrip("/")] = data
        return self.url + "/" + path.lstrip("/")

    def publish_wkd(self, email: str, data: bytes, *, method: str = "advanced") -> None:
        """Serve a key by WKD (``advanced`` or ``direct``) under the layout of :meth:`wkd_templates`."""
        local, _, domain = email.rpartition("@")
        prefix = f"/wkd-advanced/{domain}/.well-known/openpgpkey/{domain}" if method == "advanced" \
            else f"/wkd-direct/{domain}/.well-known/openpgpkey"
        self.files[f"{prefix}/hu/{wkd_hash(local)}"] = data

    def wkd_templates(self) -> tuple[str, str]:
        """``[sources] wkd-advanced-url`` and ``wkd-direct-url`` values pointing at this server."""
        return (f"{self.url}/wkd-advanced/{{domain}}/.well-known/openpgpkey/{{domain}}",
                f"{self.url}/wkd-direct/{{domain}}/.well-known/openpgpkey")

    # -- serving ---------------------------------------------------------------------------------

    def _respond(self, info: RequestInfo) -> Response:
        if info.path in self.routes:
            return self.routes[info.path](info)
        if info.path == "/pks/add":
            keytext = urllib.parse.parse_qs(info.body.decode("ascii", "replace")).get("keytext", [""])[0]
            if not keytext.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----"):
                return Response(400, b"Invalid keytext")
            self.uploads.append(keytext.encode("ascii", "replace"))
            return Response(200, b"Key block added to key server database.")
        if info.path == "/pks/lookup":
            search = info.query.get("search", [""])[0].upper().removeprefix("0X")
            if info.query.get("op", [""])[0] != "get" or search not in self.hkp:
                return Response(404, b"No results found")
            return Response(200, self.hkp[search], {"Content-Type": "application/pgp-keys"})
        if info.path in self.files:
            return Response(200, self.files[info.path])
        return Response(404, b"not found")

    def _handle(self, handler: http.server.BaseHTTPRequestHandler, *, head: bool) -> None:
        parts = urllib.parse.urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0) if handler.command == "POST" else 0
        info = RequestInfo(parts.path, urllib.parse.parse_qs(parts.query), dict(handler.headers.items()),
                           handler.rfile.read(length) if length else b"")
        self.log.append(f"HEAD {handler.path}" if head else handler.path)  # a HEAD is no download
        if self.latency:
            time.sleep(self.latency)
        response = self._respond(info)
        if response.stall:
            time.sleep(response.stall)
        body = response.body
        status = response.status
        headers = dict(response.headers)
        range_header = info.headers.get("Range", "")
        if status == 200 and range_header.startswith("bytes=") and "Content-Length" not in headers:
            start_text = range_header[6:].split("-")[0]
            if start_text.isdigit() and int(start_text) < len(body):
                start = int(start_text)
                headers["Content-Range"] = f"bytes {start}-{len(body) - 1}/{len(body)}"
                body, status = body[start:], 206
        try:
            handler.send_response(status)
            headers.setdefault("Content-Length", str(len(body)))
            for key, value in headers.items():
                handler.send_header(key, value)
            handler.end_headers()
            if head:
                return
            if response.abort_after is not None:
                handler.wfile.write(body[: response.abort_after])
                handler.wfile.flush()
                handler.close_connection = True
                handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                handler.connection.close()
                return
            if response.drip:
                for offset in range(len(body)):
                    handler.wfile.write(body[offset:offset + 1])
                    handler.wfile.flush()
                    time.sleep(response.drip)
                return
            handler.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
