"""The journal spool: what ``gkeys verify -F`` decided inside a build, left for root to confirm and journal.

``gkeys-verify.eclass`` runs ``gkeys verify -F`` inside Portage's build sandbox, read-only
(``GKEYS_READ_ONLY_KEYRINGS=1``), usually as the ``portage`` user (``FEATURES=userpriv``): it cannot write root's
journal.  It may write one directory, the spool (docs/journal.md "Distfiles a build verified"):

1. The spool is ``state/journal-spool`` below the state directory: made by root, group ``portage``, mode 3770
   (setgid: records belong to that group; sticky: a build user can remove only its own records).
2. The eclass names it in ``GKEYS_JOURNAL_SPOOL`` after ``addwrite``: a reader writes a record only there, and
   only if that is this gkeys' spool (a write anywhere else would be a sandbox violation that fails the build).
3. One verdict, one record: a small JSON object (file, its SHA-256 and size, the signature, category and nick, the
   signers' fingerprints, the verdict, the time, the package atom), at most :data:`MAX_RECORD` bytes, written to a
   ``.tmp-`` name with ``O_EXCL|O_NOFOLLOW`` and renamed into place.  A spool holding :data:`MAX_RECORDS` names
   takes no more (one warning; the build goes on).
4. A record is a *claim* by whoever owns it; :mod:`gkeys_portage.verify.ingest` reads it as root without following
   links (:func:`read_claims`), refuses anything else, and journals root's own verdict.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import re
import secrets
import stat
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gkeys_portage.core import journal
from gkeys_portage.core.state import Layout
from gkeys_portage.core.types import parse_category

SPOOL_GROUP = "portage"  # Portage's PORTAGE_GRPNAME: the group builds run as
SPOOL_MODE = 0o3770
VARIABLE = "GKEYS_JOURNAL_SPOOL"  # set by gkeys-verify.eclass to the spool it allowed with addwrite
MAX_RECORD = 8192  # bytes of one record
MAX_RECORDS = 256  # names in the spool before a reader writes no more
STALE_TMP = 3600.0  # seconds before root removes a .tmp- file a killed build left
RECORD_NAME = re.compile(r"[0-9]{1,12}-[0-9]{1,10}-[0-9a-f]{8}\.json")
_HEX = re.compile(r"[0-9A-F]{40}|[0-9A-F]{64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_NICK = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_ATOM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+/:=-]{0,255}")
VERDICTS = ("accepted", "refused")


def spool_dir(layout: Layout) -> Path:
    """The spool of ``layout``'s state directory."""
    return layout.state_dir / "journal-spool"


def ensure_spool(layout: Layout, group: str = SPOOL_GROUP) -> Path | None:
    """Make the spool (root only: root-owned, ``group``, mode 3770); None when the state directory or the group
    does not exist (no build user to write it).  An existing spool is left as it is (:func:`unsafe_spool`)."""
    path = spool_dir(layout)
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        return None
    if not layout.state_dir.is_dir() or os.path.lexists(path):
        return path if os.path.lexists(path) else None
    os.mkdir(path, 0o700)
    os.chown(path, 0, gid)
    os.chmod(path, SPOOL_MODE)
    return path


def unsafe_spool(path: Path) -> str:
    """Why ``path`` is no spool root may read (a symlink, not a directory, not root's, writable by anyone), or
    an empty string."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        return "it is not a directory (a symbolic link, or a file)"
    if info.st_uid != 0:
        return f"it belongs to uid {info.st_uid}, not root"
    if info.st_mode & 0o002:
        return f"anyone may write it (mode {oct(info.st_mode & 0o7777)})"
    return ""


def pending(layout: Layout) -> bool:
    """For a root command that may journal: whether the spool holds anything to take in (it is made first
    when missing and the group exists).  False for anyone else, a read-only reader, or journaling off."""
    if os.geteuid() != 0 or not journal.enabled() or not layout.state_dir.is_dir():
        return False
    where = spool_dir(layout)
    if not os.path.lexists(where):
        with contextlib.suppress(OSError):  # a read-only state directory: no spool, no build's record
            ensure_spool(layout)
        return False
    try:
        with os.scandir(where) as entries:
            return next(entries, None) is not None
    except OSError:
        return True  # not a directory: ingest names it


# -- the reader's side (inside a build) ----------------------------------------------------------------


def requested(layout: Layout) -> Path | None:
    """The spool this reader may write: ``GKEYS_JOURNAL_SPOOL`` when it is this gkeys' spool; None when unset.
    Raises :class:`OSError` naming both when it names another place (a mismatched ``GKEYS_VERIFY_SPOOL``)."""
    named = os.environ.get(VARIABLE, "")
    if not named or os.environ.get("GKEYS_JOURNAL", "").lower() in ("off", "no", "0", "false"):
        return None
    mine = spool_dir(layout)
    if os.path.abspath(named) != str(mine.absolute()):
        raise OSError(f"{VARIABLE}={named} is not this gkeys' spool {mine} (set GKEYS_VERIFY_SPOOL to it)")
    return mine


def requested_quietly(layout: Layout) -> bool:
    """Whether this reader is asked to spool its verdicts (a mismatched spool is then warned of by
    :func:`spool_verdict`)."""
    return bool(os.environ.get(VARIABLE)) and os.environ.get(journal.READ_ONLY_VARIABLE) == "1"


def _atom() -> str:
    """The package being built, from Portage's ebuild environment (``CATEGORY/PF::REPO``), else empty."""
    cat, pf, repo = (os.environ.get(name, "") for name in ("CATEGORY", "PF", "PORTAGE_REPO_NAME"))
    atom = f"{cat}/{pf}" + (f"::{repo}" if repo else "") if cat and pf else ""
    return atom if _ATOM.fullmatch(atom) else ""


def write_record(spool: Path, claim: Mapping[str, Any]) -> Path:
    """Drop one record into ``spool`` atomically (temp name, ``O_EXCL|O_NOFOLLOW``, rename); :class:`OSError` when
    the spool is full or the record too large."""
    body = json.dumps({"version": 1, "time": round(time.time(), 3), "atom": _atom(), **claim}, sort_keys=True,
                      ensure_ascii=True).encode()
    if len(body) > MAX_RECORD:
        raise OSError(f"the record is {len(body)} bytes, more than {MAX_RECORD}")
    with os.scandir(spool) as names:
        if sum(1 for _ in zip(names, range(MAX_RECORDS), strict=False)) >= MAX_RECORDS:
            raise OSError(f"the spool {spool} is full ({MAX_RECORDS} records): as root run gkeys journal ingest")
    name = f"{int(time.time())}-{os.getpid()}-{secrets.token_hex(4)}.json"
    temp = spool / f".tmp-{name}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    try:
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(temp, spool / name)
    return spool / name


def spool_verdict(layout: Layout, claim: Mapping[str, Any]) -> None:
    """Write ``claim`` to the spool the eclass allowed, if any; never fail the build (one warning)."""
    try:
        spool = requested(layout)
        if spool is not None:
            write_record(spool, claim)
    except (OSError, ValueError, TypeError) as exc:
        journal.warn_once(f"cannot leave this verdict for the trust journal: {exc}")


# -- root's side ---------------------------------------------------------------------------------------


class Refused(Exception):
    """A spool entry that is not a record root reads (its name, and why)."""


@dataclass(frozen=True)
class Claim:
    """One record, checked: what a build said it verified, and who owns the record."""

    name: str
    user: str
    uid: int
    data: dict[str, Any]


def _owner_may_write(uid: int, gid: int) -> str:
    """The owner's name if ``uid`` is root or a member of the spool's group ``gid``; else raise :class:`Refused`."""
    try:
        user = pwd.getpwuid(uid)
    except KeyError as exc:
        raise Refused(f"owned by uid {uid}, which is no user") from exc
    if uid == 0 or user.pw_gid == gid or user.pw_name in grp.getgrgid(gid).gr_mem:
        return user.pw_name
    raise Refused(f"owned by {user.pw_name}, who is not in the spool's group")


def _fields(data: Any) -> dict[str, Any]:
    """``data`` if it has exactly the shape of a record; else raise :class:`Refused` naming the first fault."""
    checks: dict[str, Any] = {
        "version": lambda v: v == 1, "time": lambda v: isinstance(v, int | float) and 0 < v < 2 ** 40,
        "atom": lambda v: isinstance(v, str) and (not v or _ATOM.fullmatch(v)),
        "verdict": lambda v: v in VERDICTS,
        "file": lambda v: isinstance(v, str) and v.startswith("/") and "\0" not in v and len(v) < 4096,
        "signature": lambda v: isinstance(v, str) and (v == "inline" or v.startswith("/")) and "\0" not in v
        and len(v) < 4096,
        "message": lambda v: isinstance(v, bool), "category": lambda v: isinstance(v, str) and parse_category(v),
        "nick": lambda v: isinstance(v, str) and (not v or _NICK.fullmatch(v)),
        "sha256": lambda v: isinstance(v, str) and _SHA256.fullmatch(v),
        "size": lambda v: isinstance(v, int) and v >= 0,
        "signers": lambda v: isinstance(v, list) and len(v) <= 16 and all(isinstance(f, str) and _HEX.fullmatch(f)
                                                                          for f in v),
        "code": lambda v: isinstance(v, str) and len(v) <= 64,
    }
    if not isinstance(data, dict) or set(data) != set(checks):
        raise Refused("not a record (fields missing or unknown)")
    for key, check in checks.items():
        try:
            ok = check(data[key])
        except Exception:  # noqa: BLE001 - a parser's refusal of a field is the record's refusal
            ok = False
        if not ok:
            raise Refused(f"field {key!r} is not valid")
    return data


def _read(spool: Path, name: str, gid: int) -> Claim:
    """One record, opened without following a link, checked; :class:`Refused` if it is anything else."""
    if not RECORD_NAME.fullmatch(name):
        raise Refused("not a record name")
    try:
        fd = os.open(spool / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise Refused(f"cannot be opened as a file ({exc.strerror}: a symbolic link?)") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise Refused("not a plain file with one link")
        user = _owner_may_write(info.st_uid, gid)
        raw = os.read(fd, MAX_RECORD + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_RECORD:
        raise Refused(f"larger than {MAX_RECORD} bytes")
    try:
        data = _fields(json.loads(raw))
    except (ValueError, UnicodeDecodeError) as exc:
        raise Refused("not JSON") from exc
    return Claim(name, user, info.st_uid, data)


def remove(path: Path) -> str:
    """Remove one spool entry (never recursing); an empty string, or why it stays."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            os.rmdir(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"cannot remove it ({exc.strerror}): remove it by hand (rm -r {path})"
    return ""


def read_claims(spool: Path) -> Iterator[Claim | tuple[str, str]]:
    """Each entry of ``spool`` (at most :data:`MAX_RECORDS`): a :class:`Claim`, or ``(name, why)`` for an entry
    refused (the caller removes it either way).  Leftover ``.tmp-`` files of a killed build are removed silently
    once stale."""
    gid = os.lstat(spool).st_gid
    with os.scandir(spool) as entries:
        names = sorted(entry.name for _, entry in zip(range(MAX_RECORDS * 4), entries, strict=False))
    for name in names[:MAX_RECORDS * 2]:
        if name.startswith(".tmp-"):
            with contextlib.suppress(OSError):
                if time.time() - os.lstat(spool / name).st_mtime > STALE_TMP:
                    remove(spool / name)
            continue
        try:
            yield _read(spool, name, gid)
        except Refused as exc:
            yield name, str(exc)
