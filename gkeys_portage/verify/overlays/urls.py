"""Is a ``<source>`` URL of the overlay list safe to hand to a VCS (run as root by eselect/layman)?

The policy tables are kept apart from the checking code.  Each problem is a :class:`UrlIssue` with a
stable code and a severity:

error (refuse the list)
    ``source:empty``, ``source:whitespace`` (whitespace or control characters anywhere, including
    around the URL: eselect-repository copies the raw text into repos.conf), ``source:option``
    (a leading ``-``, or a user, host or port starting with ``-``: ``--upload-pack=…``,
    ``ssh://-oProxyCommand=…``), ``source:helper`` (git remote-helper syntax ``ext::sh -c …``,
    ``fd::…``), ``source:local`` (``file://``, absolute or relative paths), ``source:scheme``
    (a scheme the source type does not allow), ``source:host`` (missing or malformed host),
    ``source:percent`` (any ``%``) and ``source:backslash`` (any ``\\``): the readers would not get the URL
    checked here (see *Readers* below).
warning (reported, list accepted)
    ``source:port`` (a port that is not a number: the clone will fail), ``source:credentials``
    (a password in the URL), ``source:unsupported`` (a scheme the VCS does not understand, e.g.
    ``git+https://``), ``source:non-ascii`` (look-alike host names).
notice (counted; listed with ``-v``)
    ``source:unauthenticated``: ``http://``, ``git://``, ``rsync://``, ``svn://``, ``bzr://``,
    CVS ``:pserver:`` — readable and modifiable by anyone on the path.

Readers: a source is accepted only if every program that reads the list gets exactly the text checked here.

* eselect-repository (v14, ``eselect-repo-helper`` and ``repository.eselect``): the helper prints
  ``name remote TYPE URL`` (lxml's ``.text``, not stripped); the eselect module reads that line with bash
  ``read r state arg1 arg2`` (no ``-r``: every backslash escape is undone, leading and trailing blanks are
  dropped, a newline ends the record) and appends ``sync-uri = URL`` to repos.conf with ``sed``.  Portage then
  reads repos.conf with :class:`configparser.ConfigParser` (``portage.util.configparser.SafeConfigParser``,
  basic interpolation): a ``%`` is an interpolation error that makes Portage drop *every* repository
  (``emerge --sync``: "Nothing to sync", exit 0), ``%%`` reads as ``%``, ``%(name)s`` as another option.
* layman (2.4.3): ``xml.etree`` ``.text.strip()`` of each ``<source>``.
So whitespace or a control character anywhere, any backslash and any ``%`` refuse the list (a
percent-encoded URL is refused with them: the real list has none).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    """How bad a finding is: errors refuse the list, warnings and notices are only reported."""

    ERROR = "error"
    WARNING = "warning"
    NOTICE = "notice"


@dataclass(frozen=True)
class UrlIssue:
    """One problem with one source URL."""

    severity: Severity
    code: str
    message: str


# -- policy tables ---------------------------------------------------------------------------------

#: URL schemes each source type may use (repositories.dtd ``source/@type``).
ALLOWED_SCHEMES: dict[str, frozenset[str]] = {
    "git": frozenset({"https", "http", "git", "ssh", "git+ssh", "ssh+git"}),
    "mercurial": frozenset({"https", "http", "ssh"}),
    "svn": frozenset({"https", "http", "svn", "svn+ssh"}),
    "bzr": frozenset({"https", "http", "bzr", "bzr+ssh", "ssh"}),
    "darcs": frozenset({"https", "http", "ssh"}),
    "rsync": frozenset({"rsync", "ssh"}),
    "cvs": frozenset(),
    "tar": frozenset({"https", "http"}),
}
#: Schemes that are not dangerous but that the VCS does not understand (warning, with the fix).
UNSUPPORTED_SCHEMES: dict[str, dict[str, str]] = {
    "git": {"git+https": "https", "git+http": "http"},
}
#: Source types that accept the scp-like form ``[user@]host:path`` (ssh underneath).
SCP_LIKE_TYPES = frozenset({"git", "bzr", "darcs", "rsync", "cvs"})
#: CVS connection methods (``:method:[user@]host:/path``) that reach a server; ``:local:`` and
#: ``:fork:`` would read the local disk.
CVS_METHODS = frozenset({"pserver", "ext", "ssh", "gserver", "kserver"})
#: Transports without authentication or integrity.
UNAUTHENTICATED = frozenset({"http", "git", "rsync", "svn", "bzr", "pserver"})

_HELPER = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9+.-]*::")
_SCHEME = re.compile(r"\A([A-Za-z][A-Za-z0-9+.-]*)://")
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"\A{_LABEL}(?:\.{_LABEL})*\.?\Z")
_IPV6 = re.compile(r"\A\[[0-9A-Fa-f:.]+\]\Z")
_CVS_METHOD = re.compile(r"\A:([a-z]+):(.*)\Z", re.S)
_PRINTABLE_ASCII = re.compile(r"\A[\x21-\x7e]*\Z")
_AUTHORITY_END = re.compile(r"[/?#]")


def _error(code: str, message: str) -> UrlIssue:
    return UrlIssue(Severity.ERROR, code, message)


def _bad_characters(url: str) -> list[UrlIssue]:
    """Whitespace, control characters, ``%``, backslashes (the readers would get another URL), non-ASCII."""
    for char in url:
        if char.isspace() or unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            return [_error("source:whitespace", f"contains whitespace or a control character (U+{ord(char):04X})")]
    if "\\" in url:
        return [_error("source:backslash", "contains a backslash: eselect-repository reads the URL with bash 'read' "
                                          "(no -r), which removes it, so repos.conf would get another URL")]
    if "%" in url:
        return [_error("source:percent", "contains '%': Portage reads repos.conf with configparser interpolation, "
                                         "so eselect-repository's copy of this URL would make it drop every "
                                         "repository ('%%' would read as '%')")]
    if not _PRINTABLE_ASCII.match(url):
        return [UrlIssue(Severity.WARNING, "source:non-ascii", "contains non-ASCII characters")]
    return []


def _check_host(host: str, what: str) -> list[UrlIssue]:
    if not host:
        return [_error("source:host", f"{what} has no host")]
    if host.startswith("-"):
        return [_error("source:option", f"{what} host {host!r} starts with '-' (would be read as an option)")]
    if not (_HOSTNAME.match(host) or _IPV6.match(host) or not host.isascii()):
        return [_error("source:host", f"{what} host {host!r} is not a valid host name")]
    return []


def _check_user(user: str | None) -> list[UrlIssue]:
    if user is None:
        return []
    if user.startswith("-"):
        return [_error("source:option", f"user name {user!r} starts with '-' (would be read as an option)")]
    if ":" in user:
        return [UrlIssue(Severity.WARNING, "source:credentials", "the URL carries a password")]
    return []


def _split_authority(authority: str) -> tuple[str | None, str, str | None]:
    """``user@host:port`` -> (user, host, port); IPv6 literals keep their brackets."""
    user, at, hostport = authority.rpartition("@")
    if hostport.startswith("["):
        end = hostport.find("]")
        host, rest = (hostport[:end + 1], hostport[end + 1:]) if end != -1 else (hostport, "")
        port = rest[1:] if rest.startswith(":") else None
    else:
        host, colon, port_text = hostport.partition(":")
        port = port_text if colon else None
    return (user if at else None), host, port


def _check_port(port: str | None, host: str) -> list[UrlIssue]:
    if port is None or port == "":
        return []
    if port.startswith("-"):
        return [_error("source:option", f"port {port!r} starts with '-' (would be read as an option)")]
    if not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        return [UrlIssue(Severity.WARNING, "source:port",
                         f"port {port!r} is not a port number, so the clone will fail "
                         f"(scp-like 'user@{host}:path' needs no 'ssh://')")]
    return []


def _check_url(source_type: str, scheme: str, rest: str) -> list[UrlIssue]:
    """A ``scheme://authority/path`` URL."""
    scheme = scheme.lower()
    if scheme == "file":
        return [_error("source:local", "file:// reads the local disk, not a remote repository")]
    allowed = ALLOWED_SCHEMES.get(source_type, frozenset())
    issues: list[UrlIssue] = []
    if scheme not in allowed:
        fix = UNSUPPORTED_SCHEMES.get(source_type, {}).get(scheme)
        if fix is None:
            choices = ", ".join(sorted(allowed)) or "none; use the [user@]host:/path form"
            return [_error("source:scheme", f"{scheme}:// is not allowed for type {source_type} (allowed: {choices})")]
        issues.append(UrlIssue(Severity.WARNING, "source:unsupported",
                               f"{source_type} does not understand {scheme}://; use {fix}://"))
    authority = _AUTHORITY_END.split(rest, maxsplit=1)[0]
    user, host, port = _split_authority(authority)
    issues += _check_user(user) + _check_host(host, f"{scheme}:// URL") + _check_port(port, host)
    if scheme in UNAUTHENTICATED:
        issues.append(UrlIssue(Severity.NOTICE, "source:unauthenticated",
                               f"{scheme}:// has no authentication or integrity protection"))
    return issues


def _check_scp_like(source_type: str, url: str) -> list[UrlIssue]:
    """``[user@]host:path`` (ssh underneath), as git, rsync, bzr, darcs and CVS accept it."""
    if source_type not in SCP_LIKE_TYPES:
        return [_error("source:scheme", f"not a URL (type {source_type} needs scheme://host/path)")]
    authority, _, path = url.partition(":")
    user, _, host = authority.rpartition("@")
    issues = _check_user(user if "@" in authority else None) + _check_host(host, "scp-like source")
    if path.startswith("-"):
        issues.append(_error("source:option", f"path {path!r} starts with '-' (would be read as an option)"))
    return issues


def _check_cvs_root(url: str) -> list[UrlIssue]:
    """A CVSROOT: ``:method:[user@]host:/path`` or ``[user@]host:/path``."""
    match = _CVS_METHOD.match(url)
    if not match:
        return _check_scp_like("cvs", url)
    method, rest = match.groups()
    if method not in CVS_METHODS:
        return [_error("source:local" if method in ("local", "fork") else "source:scheme",
                       f"CVS method :{method}: is not allowed (allowed: {', '.join(sorted(CVS_METHODS))})")]
    issues = _check_scp_like("cvs", rest)
    if method in UNAUTHENTICATED:
        issues.append(UrlIssue(Severity.NOTICE, "source:unauthenticated",
                               f":{method}: has no authentication or integrity protection"))
    return issues


def check_source(source_type: str, url: str) -> list[UrlIssue]:
    """Every problem with ``url`` as a source of type ``source_type`` (empty list: safe)."""
    if url == "":
        return [_error("source:empty", "empty source")]
    if url.lstrip().startswith("-"):
        return [_error("source:option", "starts with '-' (would be read as an option, e.g. --upload-pack=…)")]
    if _HELPER.match(url.lstrip()):
        helper = url.lstrip().split("::")[0]
        what = "runs an arbitrary command" if helper.lower() == "ext" else "hands the address to a local helper program"
        return [_error("source:helper", f"git remote-helper syntax '{helper}::' {what}")]
    issues = _bad_characters(url)
    if any(issue.severity is Severity.ERROR for issue in issues):
        return issues
    scheme = _SCHEME.match(url)
    if scheme:
        return issues + _check_url(source_type, scheme.group(1), url[scheme.end():])
    if url.startswith(("/", ".", "~")) or ":" not in url.split("/", 1)[0]:
        return [_error("source:local", "a local path, not a remote repository")]
    if url.lower().startswith("file:"):
        return [_error("source:local", "file: reads the local disk, not a remote repository")]
    if source_type == "cvs":
        return issues + _check_cvs_root(url)
    return issues + _check_scp_like(source_type, url)
