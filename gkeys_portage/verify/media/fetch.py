"""Fetch release media: resolve ``latest-<name>.txt``, download the file and its siblings into a
quarantine folder, verify, and only then move the file and the siblings that were verified into the
destination directory (siblings the verifier ignored, e.g. an unsigned ``.DIGESTS``, are deleted).

Quarantine: ``<state>/quarantine/media/``.  A partial download stays there and is resumed by the
next run; a file that fails verification is renamed ``<name>.rejected`` there (so the next run
downloads afresh) and nothing reaches the destination.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import stat
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.core.errors import (
    BadInputError,
    GkeysError,
    NoSignatureError,
    RollbackError,
    StaleError,
    StateError,
    UsageError,
)
from gkeys_portage.core.http import NotFoundError, safe_url
from gkeys_portage.core.state import atomic_write, atomic_write_json, fsync_directory, read_json, staging_directory
from gkeys_portage.keys.context import Gkeys, SignatureVerifier
from gkeys_portage.verify.media.digests import (
    LatestEntry,
    check_name,
    latest_timestamp,
    newest_of_product,
    parse_latest,
)
from gkeys_portage.verify.media.download import Downloader
from gkeys_portage.verify.media.record import journal_media, refusal_journaled
from gkeys_portage.verify.media.verifier import (
    ALL_SIBLINGS,
    CONTENTS,
    MAX_STATEMENT,
    SIGNED_SIBLINGS,
    MediaVerification,
    MediaVerifier,
    NamedEntry,
    SignedBy,
    all_digests,
    checked,
    media_signatures,
    signed_text,
)

MAX_CONTENTS = 256 * 1024 * 1024
DEFAULT_MIRROR = "https://distfiles.gentoo.org"
DEFAULT_CATEGORY = "gentoo"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.+-]*$")
RECORD = "media-latest"
#: ``{NAME: build stamp}`` of the newest file installed by ``--latest NAME``.
BUILD_RECORD = "media-latest-builds"

Progress = Callable[[int, int], None]


@dataclass
class LatestChoice:
    """The newest entry of a verified latest file and where to download it."""

    latest: str
    url: str
    entry: LatestEntry
    signed: SignedBy
    timestamp: int | None = None
    build: str = ""


@dataclass
class Fetched:
    """A fetched and verified file: where it went, and the verification facts."""

    verification: MediaVerification
    installed: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    latest: LatestChoice | None = None
    already: bool = False  # a verified copy was already in the destination: nothing downloaded


def quarantine_dir(ctx: Gkeys) -> Path:
    """Where unverified downloads live (created 0700)."""
    path = ctx.ensure_layout().state_dir / "quarantine" / "media"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def downloader(ctx: Gkeys) -> Downloader:
    """A downloader configured from ``[media] stall-timeout`` and ``max-size``."""
    try:
        stall = float(ctx.config.get("media", "stall-timeout", "60"))
        limit = int(ctx.config.get("media", "max-size", str(16 << 30)))
    except ValueError as exc:
        raise BadInputError(f"[media]: {exc}") from exc
    return Downloader(ctx.http, stall_timeout=stall, max_bytes=limit)


def file_name(url: str) -> str:
    """The safe base name of the file a URL names."""
    path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
    if not path or path.endswith("/"):
        raise UsageError(f"{safe_url(url)}: the URL names no file")
    return check_name(path.rsplit("/", 1)[-1], safe_url(url))


def resolve_latest(ctx: Gkeys, verifier: SignatureVerifier, mirror: str, name: str,
                   arch: str | None = None) -> LatestChoice:
    """Verify ``releases/<arch>/autobuilds/latest-<name>.txt`` on ``mirror``; choose its newest entry."""
    if not _NAME.match(name):
        raise UsageError(f"--latest {name!r}: expected a name like stage3-amd64-openrc")
    arch = arch or (name.split("-")[1] if name.count("-") >= 1 else "")
    if not _NAME.match(arch):
        raise UsageError(f"--latest {name!r}: cannot tell the architecture; give --arch")
    base = f"{mirror.rstrip('/')}/releases/{arch}/autobuilds/"
    latest = f"latest-{name}.txt"
    try:
        data = ctx.http.get(base + latest, max_bytes=MAX_STATEMENT)
    except NotFoundError as exc:
        raise NotFoundError(f"{latest}: not on the mirror ({safe_url(base + latest)}); check NAME, --arch, --mirror",
                            file=safe_url(base + latest)) from exc
    good = checked(latest, verifier.clearsigned, data)
    text = signed_text(good.plaintext or b"", latest)
    entry, build = newest_of_product(parse_latest(text, latest), name, latest)
    url = urllib.parse.urljoin(base, entry.path)
    if not url.startswith(base):
        raise BadInputError(f"{latest}: {entry.path!r} points outside the mirror")
    choice = LatestChoice(latest, url, entry, SignedBy(latest, "clearsigned latest file", good.signer),
                          latest_timestamp(text), build)
    _check_rollback(ctx, name, choice)
    _check_age(ctx, choice)
    return choice


def _check_age(ctx: Gkeys, choice: LatestChoice) -> None:
    """Refuse a latest file signed longer ago than ``[media] max-age`` days (a frozen mirror)."""
    days = ctx.config.number("media", "max-age", 0.0)
    signed = choice.signed.signature.created
    if days and time.time() - signed > days * 86400:
        raise StaleError(f"{choice.latest} was signed {choice.signed.signature.created_at:%Y-%m-%d}, more than "
                         f"{days:g} days ago ([media] max-age): the mirror may be frozen; refused")


def _check_rollback(ctx: Gkeys, name: str, choice: LatestChoice) -> None:
    """Refuse a validly signed latest file older than one fetched before (a replayed mirror), and a build of
    ``name`` older than one installed before (whatever the list's ``ts`` says)."""
    seen = read_json(ctx.layout.record(RECORD), {}).get(name)
    if isinstance(seen, int) and (choice.timestamp is None or choice.timestamp < seen):
        raise RollbackError(f"{choice.latest}: ts={choice.timestamp} is older than ts={seen} fetched before "
                            f"(a stale or replayed mirror); refused")
    builds = ctx.layout.record(BUILD_RECORD)
    built = read_json(builds, {}).get(name)
    if isinstance(built, str) and choice.build < built:
        raise RollbackError(f"{choice.latest}: its newest {name} was built {choice.build}, before the build "
                            f"{built} fetched earlier (a stale or replayed mirror); refused (try another "
                            f"--mirror; if releng withdrew {built}, remove {name!r} from {builds})")


def _record_latest(ctx: Gkeys, name: str, choice: LatestChoice) -> None:
    """Remember the newest latest-file time stamp and build stamp fetched for ``name``."""
    with ctx.lock:
        if choice.timestamp is not None:
            path = ctx.layout.record(RECORD)
            record = read_json(path, {})
            record[name] = max(choice.timestamp, record.get(name, 0))
            atomic_write_json(path, record)
        path = ctx.layout.record(BUILD_RECORD)
        builds = read_json(path, {})
        builds[name] = max(choice.build, str(builds.get(name, "")))
        atomic_write_json(path, builds)


def _refuse_if_missing(ctx: Gkeys, url: str, name: str) -> None:
    """Raise :class:`NotFoundError` (exit 3) when the server does not have ``url`` itself."""
    if not ctx.http.exists(url):
        raise NotFoundError(f"{name}: not on the mirror ({safe_url(url)}); check the URL (the file name and the "
                            "mirror)", file=safe_url(url))


def fetch_siblings(ctx: Gkeys, url: str, folder: Path, name: str) -> list[str]:
    """Download the siblings that exist into ``folder``; return the suffixes that were absent (404)."""
    skipped = []
    for suffix in ALL_SIBLINGS:
        local = folder / (name + suffix)
        try:
            data = ctx.http.get(url + suffix, max_bytes=MAX_CONTENTS if suffix in CONTENTS else MAX_STATEMENT)
        except NotFoundError:
            local.unlink(missing_ok=True)  # never verify against a stale sibling of an earlier run
            skipped.append(suffix)
            continue
        atomic_write(local, data)
    if all(s in skipped for s in SIGNED_SIBLINGS):
        _refuse_if_missing(ctx, url, name)
        raise NoSignatureError(f"nothing signed {name}: the mirror has none of "
                               f"{', '.join(name + s for s in SIGNED_SIBLINGS)}")
    return skipped


def download_and_verify(ctx: Gkeys, media: MediaVerifier, url: str, folder: Path, *,
                        expected_size: int | None = None, progress: Progress | None = None,
                        verify_progress: Progress | None = None) -> tuple[Path, Fetched]:
    """Fetch ``url`` and its siblings into ``folder`` and verify; a rejected file is renamed ``.rejected``."""
    name = file_name(url)
    skipped = fetch_siblings(ctx, url, folder, name)
    try:  # before a multi-GB download
        media.check_bindable(name, {s: folder / (name + s) for s in ALL_SIBLINGS if s not in skipped})
    except GkeysError:
        _refuse_if_missing(ctx, url, name)  # a file the mirror does not have is "not found" (3), whatever signs it
        raise
    target = folder / name
    downloader(ctx).fetch(url, target, expected_size=expected_size, progress=progress)
    try:
        verification = media.verify(target, verify_progress)
    except GkeysError:
        os.replace(target, folder / (name + ".rejected"))
        raise
    return target, Fetched(verification, skipped=[name + s for s in skipped])


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """One fetch per file name at a time (the state lock is not held during long downloads)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            raise StateError(f"another fetch-media run is downloading {path.name[1:-5]}") from exc
        yield
    finally:
        os.close(fd)


def _copy_beside(source: Path, final: Path) -> None:
    """Copy ``source`` to ``final`` on another filesystem: into a fresh temp file that
    :func:`tempfile.mkstemp` creates in ``final``'s directory (``O_EXCL``, so a planted file or symlink is
    never opened), fsync, then rename over ``final`` (a symlink there is replaced, not followed)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent)
    try:
        with os.fdopen(fd, "wb") as out, open(source, "rb") as data:
            shutil.copyfileobj(data, out, 1 << 20)
            out.flush()
            os.fchmod(out.fileno(), stat.S_IMODE(os.fstat(data.fileno()).st_mode))
            os.fsync(out.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def check_destination(dest_dir: Path) -> None:
    """Refuse a destination where another local user could swap the verified files after the check.

    Every directory from ``/`` down to ``dest_dir`` (symlinks resolved) must be owned by the caller or root
    and, if anyone may write to it, carry the sticky bit (``/tmp`` itself is fine: there nobody can rename
    another user's entry); a symlink on the way that another user owns (and so may re-point) is refused too.
    """
    def refuse(folder: Path, why: str) -> StateError:
        return StateError(f"{folder} {why}: that user could replace the verified files after the check; "
                          f"choose a directory only you (or root) can write to (-d DIR)")

    mine = (os.getuid(), 0)
    lexical = Path(os.path.abspath(dest_dir))
    for folder in [lexical, *lexical.parents]:
        info = folder.lstat()
        if stat.S_ISLNK(info.st_mode) and info.st_uid not in mine:
            raise refuse(folder, f"is a symlink owned by uid {info.st_uid}")
    real = dest_dir.resolve()
    for folder in [real, *real.parents]:
        info = folder.stat()
        if info.st_uid not in mine:
            raise refuse(folder, f"is owned by uid {info.st_uid}")
        if info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
            raise refuse(folder, "is world-writable (without the sticky bit)")


def check_before_creating(dest_dir: Path) -> None:
    """:func:`check_destination` of ``dest_dir``, or of its nearest existing ancestor if it does not exist
    yet (so nothing is created below a directory that others control)."""
    absolute = Path(os.path.abspath(dest_dir))
    try:
        check_destination(next(p for p in (absolute, *absolute.parents) if os.path.lexists(p)))
    except OSError as exc:
        raise StateError(f"cannot use {dest_dir}: {exc.strerror or exc} (choose another -d DIR)") from exc


def install(files: list[Path], dest_dir: Path) -> list[Path]:
    """Move verified files into ``dest_dir`` (the main file last); each appears atomically.

    ``dest_dir`` and the directories above it must be safe from other users (:func:`check_destination`); a
    file is renamed into place, or, across filesystems, copied into a temp file only this run created (see
    :func:`_copy_beside`); a name in ``dest_dir`` is never opened for writing.
    """
    installed = []
    final = dest_dir
    check_before_creating(dest_dir)
    try:
        dest_dir.mkdir(parents=True, exist_ok=True)
        check_destination(dest_dir)
        for source in files:
            final = dest_dir / source.name
            try:
                os.replace(source, final)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                _copy_beside(source, final)
                source.unlink()
            installed.append(final)
    except OSError as exc:
        kept = files[0].parent if files else dest_dir
        raise StateError(f"cannot install {final}: {exc.strerror or exc}; the verified files not yet "
                         f"installed stay in {kept} (choose another -d DIR)") from exc
    fsync_directory(dest_dir)
    return installed


def already_verified(media: MediaVerifier, existing: Path, expected_size: int | None,
                     verify_progress: Progress | None = None) -> Fetched | None:
    """The verification of a copy already in the destination (with the siblings installed beside it),
    or None if there is none, it has another size than announced, or it does not verify (then it is
    downloaded afresh and replaced)."""
    if existing.is_symlink() or not existing.is_file():
        return None
    if expected_size is not None and existing.stat().st_size != expected_size:
        return None
    check_destination(existing.parent)
    try:
        return Fetched(media.verify(existing, verify_progress), already=True)
    except GkeysError:
        return None


def fetch_media(ctx: Gkeys, url: str, dest_dir: Path, *, category: str, nick: str | None = None,
                expected_size: int | None = None, progress: Progress | None = None,
                allow_unnamed: bool = False, bind_by_date: bool = False, named: NamedEntry | None = None,
                verify_progress: Progress | None = None) -> Fetched:
    """Download ``url`` with its siblings, verify them all, then move the file and the verified siblings
    into ``dest_dir``; siblings the verifier ignored or did not check are deleted from quarantine.

    A copy already in ``dest_dir`` that verifies (re-verified in place) is not downloaded again.
    ``allow_unnamed``, ``bind_by_date`` and ``named``: see :class:`MediaVerifier`.
    """
    media = MediaVerifier(media_signatures(ctx, category, nick), category, allow_unnamed=allow_unnamed,
                          bind_by_date=bind_by_date, named=named, all_digests=all_digests(ctx.config))
    check_before_creating(dest_dir)  # before the download; again when installing
    present = already_verified(media, dest_dir / file_name(url), expected_size, verify_progress)
    if present is not None:
        journal_media(ctx, present.verification, dest_dir / file_name(url))
        return present
    folder = quarantine_dir(ctx)
    with _exclusive(folder / f".{file_name(url)}.lock"), \
            refusal_journaled(ctx, dest_dir / file_name(url), category, url=url):  # never the quarantine path
        target, fetched = download_and_verify(ctx, media, url, folder, expected_size=expected_size,
                                              progress=progress, verify_progress=verify_progress)
        verified = set(fetched.verification.verified_files)
        siblings = [p for p in (target.with_name(target.name + s) for s in ALL_SIBLINGS) if p.exists()]
        for sibling in siblings:
            if sibling.name not in verified:
                sibling.unlink()  # never installed beside the file as if it had been checked
        fetched.installed = install([*[s for s in siblings if s.name in verified], target], dest_dir)
    fetched.verification.file = str(dest_dir / target.name)
    journal_media(ctx, fetched.verification, dest_dir / target.name)  # installed: journaled where it stays
    return fetched


def fetch_latest(ctx: Gkeys, name: str, mirror: str, dest_dir: Path, *, category: str, nick: str | None = None,
                 arch: str | None = None, progress: Progress | None = None, allow_unnamed: bool = False,
                 bind_by_date: bool = False, verify_progress: Progress | None = None,
                 chosen: Callable[[LatestChoice], None] | None = None) -> Fetched:
    """Resolve the newest ``name`` from the mirror's signed latest file, then :func:`fetch_media` it.

    ``chosen`` hears the verified choice before anything is downloaded.  The chosen entry, when the signed
    list gives its size, names the file (rule ``listed-in-latest``) even where only an ``.asc`` signs it.
    """
    choice = resolve_latest(ctx, media_signatures(ctx, category, nick), mirror, name, arch)
    if chosen is not None:
        chosen(choice)
    size = choice.entry.size
    named = NamedEntry(choice.latest, choice.entry.filename, size) if size is not None else None
    fetched = fetch_media(ctx, choice.url, dest_dir, category=category, nick=nick,
                          expected_size=size, progress=progress, allow_unnamed=allow_unnamed,
                          bind_by_date=bind_by_date, named=named, verify_progress=verify_progress)
    _record_latest(ctx, name, choice)
    fetched.latest = choice
    return fetched


def verify_url(ctx: Gkeys, url: str, *, category: str, nick: str | None = None,
               progress: Progress | None = None, allow_unnamed: bool = False,
               bind_by_date: bool = False) -> Fetched:
    """Download ``url`` and its siblings into a private quarantine folder, verify, then delete them."""
    media = MediaVerifier(media_signatures(ctx, category, nick), category, allow_unnamed=allow_unnamed,
                          bind_by_date=bind_by_date, all_digests=all_digests(ctx.config))
    with staging_directory(quarantine_dir(ctx), "verify-") as folder:
        _target, fetched = download_and_verify(ctx, media, url, folder, progress=progress)
    fetched.verification.file = url
    return fetched
