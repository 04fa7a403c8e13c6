"""Build the developer seed file from an LDAP directory (``gkeys-ldap``), with ``ldap3``.

Gentoo's directory keeps one entry per developer under ``ou=devs,dc=gentoo,dc=org`` with
``uid`` (the nick), ``cn`` (the full name), ``mail``, ``gentooStatus`` (``active`` for current
developers) and ``gpgfingerprint`` (zero or more fingerprints, often written with spaces, sometimes
the word ``undefined``).  A seed is made per active developer::

    nick = keydir = uid, name = cn, keys = fingerprint = the cleaned fingerprints,
    uid = ["cn <uid@gentoo.org>"]

A fingerprint that is not 40 or 64 hex digits after removing spaces is reported and dropped; a
developer left without any valid fingerprint (or without ``uid``) is reported and left out.

Network trouble (refused connection, timeout, TLS failure, a search not ended by its deadline) raises
:class:`NetworkError` (exit 3).
"""

from __future__ import annotations

import contextlib
import glob
import ipaddress
import math
import re
import socket
import ssl
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gkeys_portage.core.config import eprefix
from gkeys_portage.core.errors import BadInputError, GkeysError, NetworkError, SeedFormatError, UsageError
from gkeys_portage.core.state import atomic_write, read_limited
from gkeys_portage.core.types import Fingerprint, Nick, is_fingerprint, parse_fingerprint
from gkeys_portage.keys.seedfetch import SeedChanges, diff_seeds
from gkeys_portage.keys.seeds import Seed, dump_seeds, parse_seeds

ATTRIBUTES = ("uid", "cn", "mail", "gentooStatus", "gpgfingerprint")
DEFAULT_BASE = "ou=devs,dc=gentoo,dc=org"
ACTIVE = "active"
DEFAULT_TIMEOUT = 30.0
#: the whole search (connect, bind, every page) must end within this many seconds: the per-read timeout
#: alone lets a server that sends a byte every few seconds hold gkeys-ldap for ever
DEFAULT_DEADLINE = 300.0
PAGE_SIZE = 500
#: memory bound: a directory answer with more entries than this is refused
MAX_ENTRIES = 100_000
_PAGED_RESULTS = "1.2.840.113556.1.4.319"
_INCOMPLETE = {3: "timeLimitExceeded", 4: "sizeLimitExceeded", 11: "adminLimitExceeded"}
_REFERRAL = 10
MAX_SEED_FILE = 64 << 20
GENTOO_DOMAIN = "gentoo.org"

_NICK_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._+-]{0,63}\Z")


@dataclass(frozen=True)
class LdapSettings:
    """Where and how to connect.  ``ldaps://`` or ``starttls`` protect the connection (certificates
    are verified against ``ca_file`` or the system's CAs); a password is never sent in the clear."""

    uri: str
    base: str = DEFAULT_BASE
    bind_dn: str | None = None
    password: str | None = None
    starttls: bool = False
    ca_file: Path | None = None
    timeout: float = DEFAULT_TIMEOUT
    deadline: float = DEFAULT_DEADLINE


@dataclass
class Developer:
    """One directory entry as read (attribute values as lists, missing attributes empty)."""

    dn: str
    uid: list[str] = field(default_factory=list)
    cn: list[str] = field(default_factory=list)
    mail: list[str] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    fingerprints: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The nick if there is one, else the DN (for messages)."""
        return self.uid[0] if self.uid else self.dn

    @property
    def active(self) -> bool:
        """True when ``gentooStatus`` is ``active``."""
        return any(value.strip().lower() == ACTIVE for value in self.status)

    def to_json(self) -> dict[str, Any]:
        """Machine-readable form for ``--json``."""
        return {"dn": self.dn, "uid": self.uid, "cn": self.cn, "mail": self.mail, "gentooStatus": self.status,
                "gpgfingerprint": self.fingerprints}


@dataclass(frozen=True)
class Problem:
    """Something wrong with an entry: ``dropped`` says whether the whole developer was left out."""

    who: str
    message: str
    dropped: bool

    def to_json(self) -> dict[str, Any]:
        """Machine-readable form for ``--json``."""
        return {"who": self.who, "message": self.message, "dropped": self.dropped}


@dataclass
class SeedBuild:
    """The seeds made from a search, and what was wrong on the way."""

    seeds: dict[Nick, Seed]
    problems: list[Problem]
    inactive: int = 0


def clean_fingerprint(value: str) -> Fingerprint | None:
    """``value`` without spaces, upper-cased, if it is 40 or 64 hex digits; otherwise None."""
    cleaned = "".join(value.split()).upper()
    return parse_fingerprint(cleaned) if is_fingerprint(cleaned) and not cleaned.startswith("0X") else None


def escape_value(value: str) -> str:
    """Escape a value for an LDAP filter (RFC 4515)."""
    out = []
    for char in value:
        out.append(f"\\{ord(char):02x}" if char in "\\*()\x00" else char)
    return "".join(out)


def search_filter(*, nick: str | None = None, name: str | None = None, mail: str | None = None,
                  include_inactive: bool = False, extra: str | None = None) -> str:
    """The LDAP filter for a developer search (all conditions must hold).

    ``name`` matches anywhere in ``cn``; ``extra`` is a raw filter such as ``(gentooAccess=infra.group)``.
    """
    parts = [] if include_inactive else [f"(gentooStatus={ACTIVE})"]
    if nick:
        parts.append(f"(uid={escape_value(nick)})")
    if name:
        parts.append(f"(cn=*{escape_value(name)}*)")
    if mail:
        parts.append(f"(mail={escape_value(mail)})")
    if extra:
        extra = extra.strip()
        if not (extra.startswith("(") and extra.endswith(")")):
            raise UsageError(f"invalid LDAP filter {extra!r}: it must be enclosed in parentheses")
        parts.append(extra)
    if not parts:
        return "(uid=*)"
    return parts[0] if len(parts) == 1 else "(&" + "".join(parts) + ")"


def _values(attributes: Any, name: str) -> list[str]:
    value = attributes.get(name) if attributes is not None else None
    if value is None:
        return []
    items = value if isinstance(value, list | tuple) else [value]
    return [item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item) for item in items]


def developer_from_entry(dn: str, attributes: Any) -> Developer:
    """A :class:`Developer` from one search result entry (ldap3's attribute dictionary)."""
    return Developer(dn=dn, uid=_values(attributes, "uid"), cn=_values(attributes, "cn"),
                     mail=_values(attributes, "mail"), status=_values(attributes, "gentooStatus"),
                     fingerprints=_values(attributes, "gpgfingerprint"))


def _fingerprints(dev: Developer, problems: list[Problem]) -> list[Fingerprint]:
    found: list[Fingerprint] = []
    for raw in dev.fingerprints:
        if raw.strip().lower() in ("", "undefined"):
            continue
        fpr = clean_fingerprint(raw)
        if fpr is None:
            problems.append(Problem(dev.label, f"malformed gpgfingerprint {raw!r} dropped "
                                    "(need 40 or 64 hex digits)", dropped=False))
        elif fpr not in found:
            found.append(fpr)
    return found


def seed_for(dev: Developer, problems: list[Problem]) -> Seed | None:
    """The seed for one developer entry, or None (with the reason added to ``problems``)."""
    if not dev.uid:
        problems.append(Problem(dev.label, "no uid attribute: left out", dropped=True))
        return None
    nick = dev.uid[0].strip()
    if not _NICK_RE.match(nick):
        problems.append(Problem(dev.label, f"uid {nick!r} is not a usable nick: left out", dropped=True))
        return None
    name = dev.cn[0].strip() if dev.cn and dev.cn[0].strip() else ""
    if not name:
        problems.append(Problem(nick, "no cn attribute: the nick is used as the name", dropped=False))
        name = nick
    fingerprints = _fingerprints(dev, problems)
    if not fingerprints:
        problems.append(Problem(nick, "no valid gpgfingerprint: left out", dropped=True))
        return None
    return Seed(nick=Nick(nick), name=name, keydir=nick, keys=list(fingerprints), fingerprint=list(fingerprints),
                uid=[f"{name} <{nick}@{GENTOO_DOMAIN}>"])


def build_seeds(developers: Iterable[Developer], *, include_inactive: bool = False) -> SeedBuild:
    """Seeds for the (active) developers; duplicate nicks are reported and only the first is kept."""
    seeds: dict[Nick, Seed] = {}
    problems: list[Problem] = []
    inactive = 0
    for dev in developers:
        if not include_inactive and not dev.active:
            inactive += 1
            continue
        seed = seed_for(dev, problems)
        if seed is None:
            continue
        if seed.nick in seeds:
            problems.append(Problem(seed.nick, f"duplicate uid ({dev.dn}): left out", dropped=True))
            continue
        seeds[seed.nick] = seed
    return SeedBuild(seeds=seeds, problems=problems, inactive=inactive)


# -- talking to the server ----------------------------------------------------------------------------


def _check_settings(settings: LdapSettings) -> tuple[str, bool]:
    parts = urlsplit(settings.uri)
    scheme = parts.scheme.lower()
    if scheme not in ("ldap", "ldaps") or not parts.hostname:
        raise UsageError(f"invalid LDAP URI {settings.uri!r}: use ldap://HOST[:PORT] or ldaps://HOST[:PORT]")
    if scheme == "ldaps" and settings.starttls:
        raise UsageError("--starttls is for ldap:// URIs; ldaps:// is already encrypted")
    for name, value in (("--timeout", settings.timeout), ("--deadline", settings.deadline)):
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"{name} {value:g}: give a positive number of seconds")
    if settings.ca_file is not None and not settings.ca_file.is_file():
        raise UsageError(f"CA file {settings.ca_file} does not exist")
    if settings.password == "":
        raise BadInputError("empty bind password: an empty password makes the bind unauthenticated")
    if settings.password is not None and scheme == "ldap" and not settings.starttls \
            and not _is_loopback(parts.hostname):
        raise UsageError("refusing to send a bind password in the clear: use ldaps:// or --starttls")
    return parts.hostname, scheme == "ldaps"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ldap3_install_hint() -> str:
    """How to install ldap3 here: with USE=ldap where Portage installed gkeys-portage (pip would break PEP 668
    there), else the ``[ldap]`` extra."""
    if glob.glob(eprefix() + "/var/db/pkg/app-crypt/gkeys-portage-*"):
        return ("on Gentoo, rebuild gkeys-portage with USE=ldap: echo 'app-crypt/gkeys-portage ldap' >> "
                f"{eprefix()}/etc/portage/package.use/gkeys-portage && emerge --oneshot app-crypt/gkeys-portage")
    return "pip install 'gkeys-portage[ldap]'"


def _ldap3() -> Any:
    try:
        import ldap3
    except ImportError as exc:
        raise UsageError(f"gkeys-ldap needs the ldap3 module: {ldap3_install_hint()}") from exc
    return ldap3


def _network_errors() -> tuple[type[BaseException], ...]:
    from ldap3.core import exceptions as ex

    return (ex.LDAPSocketOpenError, ex.LDAPSocketReceiveError, ex.LDAPSocketSendError,
            ex.LDAPSessionTerminatedByServerError, ex.LDAPResponseTimeoutError, ex.LDAPStartTLSError,
            ex.LDAPCommunicationError, ex.LDAPSSLConfigurationError, ssl.SSLError, OSError)


def _connect(settings: LdapSettings, watchdog: _Watchdog) -> Any:
    ldap3 = _ldap3()
    host, use_ssl = _check_settings(settings)
    tls = ldap3.Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=str(settings.ca_file) if settings.ca_file else None,
                    sni=None if _is_loopback(host) else host)
    # referrals are never followed: ldap3 would otherwise bind with our password to whatever host
    # the directory names (over plain ldap:// too); a referral makes the search fail instead
    server = ldap3.Server(settings.uri, use_ssl=use_ssl, tls=tls, get_info=ldap3.NONE,
                          connect_timeout=settings.timeout, allowed_referral_hosts=[])
    connection = ldap3.Connection(server, user=settings.bind_dn, password=settings.password, read_only=True,
                                  receive_timeout=max(1, math.ceil(settings.timeout)), raise_exceptions=True,
                                  auto_bind=ldap3.AUTO_BIND_NONE, auto_referrals=False)
    connection.open()
    watchdog.watch(connection)
    if settings.starttls and connection.start_tls() is not True:
        # ldap3 returns False (without raising) when it did not start TLS; binding now would send
        # the password in the clear
        with contextlib.suppress(Exception):
            connection.unbind()
        raise NetworkError(f"LDAP server {settings.uri}: STARTTLS was not established; refusing to continue")
    connection.bind()
    return connection


def search(settings: LdapSettings, ldap_filter: str) -> list[Developer]:
    """Run one subtree search under ``settings.base`` (paged) and return the entries.

    The whole search ends within ``settings.deadline`` seconds: past it the connection is cut and the
    search fails as a network failure (a server that answers a byte at a time never trips the per-read
    ``timeout``).
    """
    ldap3 = _ldap3()
    from ldap3.core import exceptions as ex

    where = f"LDAP server {settings.uri}"
    watchdog = _Watchdog(settings.deadline)
    try:
        with watchdog:
            connection = _connect(settings, watchdog)
            try:
                entries = _paged_search(connection, settings.base, ldap_filter, ldap3.SUBTREE)
            finally:
                with contextlib.suppress(*_network_errors(), ex.LDAPException):
                    connection.unbind()
    except ex.LDAPInvalidFilterError as exc:
        raise UsageError(f"invalid LDAP filter {ldap_filter!r}: {exc}") from exc
    except (ex.LDAPBindError, ex.LDAPInvalidCredentialsResult,
            ex.LDAPInappropriateAuthenticationResult) as exc:
        raise BadInputError(f"{where} refused the bind as {settings.bind_dn or 'anonymous'}: {exc}") from exc
    except ex.LDAPNoSuchObjectResult as exc:
        raise BadInputError(f"{where}: search base {settings.base!r} does not exist") from exc
    except ex.LDAPOperationResult as exc:
        raise BadInputError(f"{where}: {exc.description or exc}: {exc.message or ''}".rstrip(": ")) from exc
    except (*_network_errors(), ex.LDAPException) as exc:
        if watchdog.fired:
            raise NetworkError(f"{where}: the search did not end within {settings.deadline:g} s (the server "
                               "answers too slowly); try again later, or allow longer with --deadline SECONDS") from exc
        raise NetworkError(f"{where}: {_reason(exc) if isinstance(exc, _network_errors()) else exc}") from exc
    return [developer_from_entry(entry.get("dn", ""), entry.get("attributes")) for entry in entries]


class _Watchdog:
    """Cuts the LDAP connection's socket once ``seconds`` have passed (``fired`` then says so)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.fired = False
        self._connection: Any = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True

    def watch(self, connection: Any) -> None:
        """Cut ``connection`` at the deadline (at once if it has already passed)."""
        with self._lock:
            self._connection = connection
            fired = self.fired
        if fired:
            self._shutdown(connection)

    def _cut(self) -> None:
        with self._lock:
            self.fired = True
            connection = self._connection
        if connection is not None:
            self._shutdown(connection)

    @staticmethod
    def _shutdown(connection: Any) -> None:
        with contextlib.suppress(OSError, AttributeError):
            connection.socket.shutdown(socket.SHUT_RDWR)  # a blocked recv returns at once

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def _paged_search(connection: Any, base: str, ldap_filter: str, scope: Any) -> list[dict[str, Any]]:
    """All entries of a paged search (RFC 2696).  A server that stops early (its size or time limit)
    or refers part of the answer elsewhere (a referral or a continuation reference, which are not
    followed) makes the whole search fail: a partial developer list must never become a seed file."""
    entries: list[dict[str, Any]] = []
    cookie: bytes | None = None
    while True:
        connection.search(base, ldap_filter, scope, attributes=list(ATTRIBUTES), paged_size=PAGE_SIZE,
                          paged_cookie=cookie)
        result = connection.result or {}
        entries += [entry for entry in connection.response or [] if entry.get("type") == "searchResEntry"]
        code = result.get("result")
        references = [ref for entry in connection.response or [] if entry.get("type") == "searchResRef"
                      for ref in entry.get("uri") or [""]]
        if code == _REFERRAL or references:
            where = _referral_targets(references or result.get("referrals") or [])
            raise GkeysError(f"the LDAP server referred (part of) the search to {where}; referrals are not "
                             "followed, so the developer list would be incomplete: search the server that "
                             "holds the entries (--uri/--base)")
        if code in _INCOMPLETE:
            raise GkeysError(f"the LDAP server stopped after {len(entries)} entries ({_INCOMPLETE[code]}); "
                             "bind as a user without that limit or narrow the search")
        if len(entries) > MAX_ENTRIES:
            raise GkeysError(f"the LDAP search returned more than {MAX_ENTRIES} entries; narrow it with --filter")
        controls = result.get("controls") or {}
        cookie = controls.get(_PAGED_RESULTS, {}).get("value", {}).get("cookie") or None
        if not cookie:
            return entries


def _referral_targets(uris: Sequence[str]) -> str:
    shown = [repr(str(uri)[:200]) for uri in list(uris)[:3]]
    more = f" and {len(uris) - 3} more" if len(uris) > 3 else ""
    return (", ".join(shown) + more) if shown else "another server"


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if "timed out" in text or "timeout" in text.lower():
        return "timed out"
    return text.splitlines()[0][:200]


# -- the seed file ------------------------------------------------------------------------------------


def load_old_seeds(path: Path) -> dict[Nick, Seed]:
    """The seeds currently in ``path`` (empty if it does not exist)."""
    if not path.exists():
        return {}
    try:
        return parse_seeds(read_limited(path, MAX_SEED_FILE, "seed file"), str(path))
    except SeedFormatError as exc:
        raise SeedFormatError(f"{exc} (the existing file would be replaced; move it away first)") from exc


def write_seed_file(path: Path, seeds: dict[Nick, Seed], *, dry_run: bool = False) -> SeedChanges:
    """Replace ``path`` atomically with ``seeds`` (unless ``dry_run``) and return the changes.

    An empty result is refused: an LDAP search that finds nobody is far more likely a wrong base or
    filter than a project without developers, and would remove every developer's key.
    """
    if not seeds:
        raise GkeysError(f"no developer with a valid fingerprint found; {path} left unchanged")
    old = load_old_seeds(path)
    changes = diff_seeds(old, seeds)
    if not dry_run:
        atomic_write(path, dump_seeds(seeds))
    return changes


def with_fingerprint(developers: Iterable[Developer], fingerprint: str) -> list[Developer]:
    """The developers whose ``gpgfingerprint`` values include ``fingerprint`` (spaces and case ignored)."""
    wanted = parse_fingerprint("".join(fingerprint.split()))
    return [dev for dev in developers if wanted in {clean_fingerprint(raw) for raw in dev.fingerprints}]


def describe(developers: Sequence[Developer]) -> list[str]:
    """One text line per developer for ``gkeys-ldap search``."""
    lines = []
    for dev in developers:
        fprs = ", ".join(clean_fingerprint(f) or f"{f!r} (malformed)" for f in dev.fingerprints) or "-"
        lines.append(f"{dev.label}: {dev.cn[0] if dev.cn else '-'} <{', '.join(dev.mail) or '-'}> "
                     f"[{', '.join(dev.status) or 'no status'}] {fprs}")
    return lines
