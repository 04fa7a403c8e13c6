"""``gkeys-fetch``: Portage's fetch wrapper that verifies release media as it is downloaded.

Portage (>= 3.0.82) runs ``FETCH_WRAPPER`` with its own words expanded (``${URI}``, ``${FILE}``,
``${DISTDIR}``) and the whole real fetch command appended as ONE shell-quoted argument; as a
``FETCHCOMMAND``/``RESUMECOMMAND`` replacement the command follows ``--`` as separate words.  Both:

    gkeys-fetch --uri URI --file DISTDIR/FILE [-c CONFIG] -- COMMAND...

The wrapper runs the real command unchanged.  If the file name (the local one or the URI's) matches a
pattern of ``[fetch] patterns`` (release media by default) or ``[fetch] renamed`` (local names of
media renamed with ``->``) and the command left a file behind, the file is checked with the
release-media verifier (``gkeys verify-media``), pinned to ``[fetch] category`` (default
``[media] category``, else gentoo) and optionally ``[fetch] nick``, against the siblings beside the
URI (``.asc``, ``.DIGESTS``, ``.DIGESTS.asc``, ``.sha256``, ``.CONTENTS.gz``), which are fetched into a
scratch folder next to the file while the file itself downloads.
Anything short of "verified" removes the file (so Portage tries the next mirror) and exits 1 with
one line saying why.  Other files pass through untouched.

A download that brought nothing (no file, or an empty one: wget's answer to a 404) is "download
failed": the empty file is removed, the command's status passed on (1 if it claimed success), and no
signature is asked for (the siblings are fetched only once the download holds data).
A failed command (non-zero status) that left data: the file is verified all the same, because
Portage ignores the command's status when the file's Manifest digests match and would otherwise take
it unverified: a file that verifies is kept and the command's status passed on unchanged; one that
does not (a partial download, usually) is removed and the command's status passed on, so such a
partial file is downloaded afresh, not resumed.

SIGTERM and SIGHUP end the wrapper through ``SystemExit`` (status 128+N), so an interrupted
verification removes the unverified file as Ctrl-C does.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import os
import posixpath
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from gkeys_portage.core import children, invocation
from gkeys_portage.core.config import Config, load_config
from gkeys_portage.core.errors import EXIT_BAD_INPUT, EXIT_NOT_VERIFIED, BadInputError, GkeysError, UsageError
from gkeys_portage.core.scratch import make_dir
from gkeys_portage.installfiles import doc_file
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.ui.output import Console
from gkeys_portage.verify.media.fetch import DEFAULT_CATEGORY, fetch_siblings
from gkeys_portage.verify.media.record import journal_media, refusal_journaled
from gkeys_portage.verify.media.verifier import (
    MediaVerification,
    MediaVerifier,
    all_digests,
    media_signatures,
)

#: Release media verified by default (``[fetch] patterns`` replaces the list).
DEFAULT_PATTERNS = ("stage3-*.tar.*", "install-*.iso", "admincd-*.iso", "livegui-*.iso")
#: Portage downloads to ``FILE.__download__`` and renames the file after its digest check.
DOWNLOAD_SUFFIX = ".__download__"
#: How often the download is looked at for its first bytes (the signature siblings are fetched then).
WATCH_SECONDS = 0.1


@dataclass
class FetchRequest:
    """What Portage asked for: the URI, the file it downloads to, and the real fetch command."""

    uri: str
    path: Path
    command: list[str]
    config: Path | None = None
    root: Path | None = None

    @property
    def names(self) -> list[str]:
        """The names this download goes by: the distfile name (without Portage's download suffix) and the
        URI's last path component (they differ for ``SRC_URI="URI -> name"``)."""
        name = self.path.name.removesuffix(DOWNLOAD_SUFFIX)
        uri_name = posixpath.basename(unquote(urlsplit(self.uri).path))
        return [name] + ([uri_name] if uri_name and uri_name != name else [])

    @property
    def media_name(self) -> str:
        """The name the signature siblings refer to: the URI's (upstream's) name."""
        return self.names[-1]


def build_parser() -> argparse.ArgumentParser:
    """The ``gkeys-fetch`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="gkeys-fetch", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run Portage's real fetch command, then verify release media (stage3, ISO) with gkeys.\n"
                    "Files that match no [fetch] pattern pass through untouched; a matching file that\n"
                    "does not verify is removed, so Portage tries the next mirror.",
        epilog='make.conf (Portage >= 3.0.82):\n'
               '  FETCH_WRAPPER="gkeys-fetch --uri \\"\\${URI}\\" --file \\"\\${DISTDIR}/\\${FILE}\\" --"\n'
               'or around FETCHCOMMAND / RESUMECOMMAND (older Portage):\n'
               '  FETCHCOMMAND="gkeys-fetch --uri \\"\\${URI}\\" --file \\"\\${DISTDIR}/\\${FILE}\\" -- '
               'wget -t 3 -T 60 --passive-ftp -O \\"\\${DISTDIR}/\\${FILE}\\" \\"\\${URI}\\""\n\n'
               "exit status: the fetch command's own on a failed download; 1 not verified (file removed);\n"
               "2 usage or configuration error (nothing downloaded).\n\n"
               "examples:\n"
               "  gkeys-fetch --uri https://distfiles.gentoo.org/releases/amd64/autobuilds/current-stage3-amd64-openrc/"
               "stage3-amd64-openrc-20261201T170309Z.tar.xz --file /var/cache/distfiles/stage3.tar.xz "
               "-- wget -O /var/cache/distfiles/stage3.tar.xz https://distfiles.gentoo.org/stage3.tar.xz\n"
               "  gkeys-fetch --uri https://example.org/foo-1.0.tar.gz --file /var/cache/distfiles/foo-1.0.tar.gz "
               "-- curl -fLo /var/cache/distfiles/foo-1.0.tar.gz https://example.org/foo-1.0.tar.gz\n")
    parser.add_argument("--uri", required=True, help="the URI Portage is downloading (${URI})")
    parser.add_argument("--file", required=True, help="the file it downloads to (${DISTDIR}/${FILE})")
    parser.add_argument("-c", "--config", metavar="FILE",
                        help="gkeys configuration (default: $GKEYS_CONFIG or ${EPREFIX}/etc/gkeys/gkeys.conf)")
    parser.add_argument("--root", metavar="DIR", help="gkeys state directory (wins over [base] gkeysdir)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- and the real fetch command (one shell-quoted word, or several words)")
    return parser


def parse_request(argv: Sequence[str]) -> FetchRequest:
    """Parse the wrapper's arguments.  One word after ``--`` is a shell-quoted command (FETCH_WRAPPER)."""
    args = build_parser().parse_args(list(argv))
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if len(command) == 1:
        try:
            command = shlex.split(command[0])
        except ValueError as exc:
            raise UsageError(f"cannot split the fetch command {command[0]!r}: {exc}") from exc
    if not command:
        raise UsageError("no fetch command after '--' (set FETCH_WRAPPER or FETCHCOMMAND as "
                         f"{doc_file('portage.md')} "
                         "and gkeys-fetch(1) show)")
    return FetchRequest(args.uri, Path(args.file), command,
                        Path(args.config) if args.config else None, Path(args.root) if args.root else None)


def patterns(config: Config) -> list[str]:
    """``[fetch] patterns`` (space-separated globs, default: the release-media names) plus ``[fetch] renamed``.

    ``renamed`` lists the local names (globs) of release media that ebuilds rename with ``SRC_URI="URI ->
    name"``: on a Gentoo distfiles mirror such a file is found under its local name only (the URI's name is
    then that name too), so no upstream pattern can match it there.
    """
    default = " ".join(DEFAULT_PATTERNS)
    return config.get("fetch", "patterns", default).split() + config.get("fetch", "renamed", "").split()


def allow_unnamed(config: Config) -> bool:
    """``[fetch] allow-unnamed`` (default no): accept media that nothing signed binds to their name."""
    return config.flag("fetch", "allow-unnamed", False)


def bind_by_date(config: Config) -> bool:
    """``[fetch] bind-by-date`` (default no): accept an ``.asc`` made after the build stamp in the name as
    binding the file to its name, although that binds a date, not a name."""
    return config.flag("fetch", "bind-by-date", False)


def wants_verification(request: FetchRequest, globs: Sequence[str]) -> bool:
    """True if any name of the download matches one of ``globs``."""
    return any(fnmatch.fnmatchcase(name, glob) for name in request.names for glob in globs)


def run_command(command: Sequence[str], *, watch: Path | None = None,
                on_data: Callable[[], None] | None = None) -> int:
    """Run the real fetch command with the wrapper's stdio; its exit status (128+N for signal N).

    With ``watch`` and ``on_data``: ``on_data`` is called once, as soon as ``watch`` holds data (at
    once for a file being resumed), never for a download that writes nothing (a 404).
    """
    def check() -> None:
        nonlocal on_data
        if on_data is not None and watch is not None and has_data(watch):
            callback, on_data = on_data, None
            callback()

    check()
    try:
        process = subprocess.Popen(children.tied(list(command)), preexec_fn=children.preexec_for())
    except OSError as exc:
        sys.stderr.write(f"gkeys-fetch: cannot run {command[0]}: {exc.strerror}\n")
        return 127
    try:
        while True:
            try:
                status = process.wait(timeout=WATCH_SECONDS if on_data is not None else None)
                break
            except subprocess.TimeoutExpired:
                check()
    except BaseException:  # interrupted: the download must not outlive the wrapper
        process.kill()
        process.wait()
        raise
    return 128 - status if status < 0 else status


def has_data(path: Path) -> bool:
    """True if ``path`` is a regular file holding at least one byte."""
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


@contextlib.contextmanager
def scratch_directory(request: FetchRequest) -> Iterator[Path]:
    """A private scratch directory beside the download (same filesystem), removed afterwards (named with its
    owner: one a killed fetch left is removed by the next)."""
    stage = make_dir(request.path.parent, ".gkeys-fetch-")
    try:
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def link_media(request: FetchRequest, stage: Path) -> Path:
    """The downloaded file in ``stage`` under its upstream name, beside its siblings (a hard link, or a
    symlink across devices)."""
    media = stage / request.media_name
    try:
        os.link(request.path, media)
    except OSError:
        media.symlink_to(request.path.resolve())
    return media


def media_verifier(ctx: Gkeys) -> MediaVerifier:
    """The release-media verifier for ``[fetch] category``/``nick`` (default: ``[media] category``, else
    gentoo; any seed of it); ``[fetch] bind-by-date = yes`` binds by a date, ``[fetch] allow-unnamed = yes``
    accepts files nothing signed binds to their name."""
    category = ctx.config.get("fetch", "category", ctx.config.get("media", "category", DEFAULT_CATEGORY))
    nick = ctx.config.get("fetch", "nick", "").strip()
    return MediaVerifier(media_signatures(ctx, category, nick), category, allow_unnamed=allow_unnamed(ctx.config),
                         bind_by_date=bind_by_date(ctx.config), all_digests=all_digests(ctx.config))


@dataclass
class Download:
    """The real fetch command's exit status (0 until it has run)."""

    status: int = 0


def fetch_and_verify(ctx: Gkeys, request: FetchRequest, download: Download) -> MediaVerification | None:
    """Run the download (its status goes to ``download``) while the siblings are fetched beside it, then
    verify.

    The siblings are asked for only once the download holds data.  Returns None if the download
    failed: the command left no file or an empty one (wget's answer to a 404; removed), whatever its
    status.  Otherwise the verification, also after a failed command (Portage may accept a file left
    behind on its Manifest digests alone).  Raises a :class:`GkeysError` if the file could not be
    verified.
    """
    with scratch_directory(request) as stage, ThreadPoolExecutor(max_workers=1) as pool:
        started: list[Future[object]] = []

        def fetch_signatures() -> None:
            started.append(pool.submit(fetch_siblings, ctx, request.uri, stage, request.media_name))

        download.status = run_command(request.command, watch=request.path, on_data=fetch_signatures)
        if not has_data(request.path):
            if os.path.lexists(request.path) and not os.path.isdir(request.path):
                discard(request.path)
            return None
        if not started:
            fetch_signatures()
        verifier = media_verifier(ctx)
        with refusal_journaled(ctx, final_path(request), verifier.category, url=request.uri):  # never the scratch
            started[0].result()  # no signed sibling on the mirror, or a network failure: not verified
            if not request.path.is_file():
                raise BadInputError(f"{request.path} is missing after the download")
            return verifier.verify(link_media(request, stage))


def final_path(request: FetchRequest) -> Path:
    """Where the file stays: ``DISTDIR/FILE``, the name Portage gives the download once it is done."""
    return request.path.with_name(request.path.name.removesuffix(DOWNLOAD_SUFFIX))


def signers(result: MediaVerification) -> str:
    """``category/nick`` of every signed sibling, without repeats."""
    return ", ".join(dict.fromkeys(f"{s.signature.pin.category}/{s.signature.pin.nick}" for s in result.signed))


def discard(path: Path) -> None:
    """Remove an unverified download (it may already be gone)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _exit_on_signal(signum: int, _frame: object) -> None:
    """Turn SIGTERM/SIGHUP into ``SystemExit(128+N)``: Python's default ends the process at once, skipping
    the ``except``/``finally`` that remove an unverified file."""
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def exit_on_termination() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :func:`_exit_on_signal`'s ``SystemExit`` (main thread only); the previous
    handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _exit_on_signal) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _download_failed(console: Console, name: str, status: int) -> int:
    """Report a download that brought nothing (no file, or an empty one): not a verification failure."""
    if status:
        console.fail(f"gkeys-fetch: {name}: download failed (the fetch command exited {status}); nothing was "
                     "verified, Portage tries the next mirror", status)
        return status
    console.fail(f"gkeys-fetch: {name}: download failed (the fetch command reported success but wrote "
                 "nothing); Portage tries the next mirror", EXIT_NOT_VERIFIED)
    return EXIT_NOT_VERIFIED


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gkeys-fetch``; return its exit status (see the module docstring)."""
    with exit_on_termination(), invocation.recorded(config=None, root=None):  # _main records the real ones
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    """:func:`main` with the signal handlers in place."""
    console = Console()
    try:
        request = parse_request(sys.argv[1:] if argv is None else argv)
        invocation.record(config=str(request.config) if request.config else None,  # its next steps act on the
                          root=str(request.root) if request.root else None)  # same config and state
        ctx = Gkeys(load_config(request.config, request.root))
        ctx.waiting = console.waiting  # its siblings' downloads say when they wait
        globs = patterns(ctx.config)
        allow_unnamed(ctx.config)  # a bad value is a configuration error before anything is downloaded
        bind_by_date(ctx.config)
    except GkeysError as exc:
        console.fail(f"gkeys-fetch: {exc.message}", exc.exit_code)
        return exc.exit_code
    except SystemExit as exc:  # argparse has printed --help or a usage error
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    if not wants_verification(request, globs):
        return run_command(request.command)
    name = request.names[0]
    download = Download()
    try:
        result = fetch_and_verify(ctx, request, download)
    except GkeysError as exc:
        discard(request.path)
        status = download.status or EXIT_NOT_VERIFIED  # a failed command's own status, else 1
        console.fail(f"gkeys-fetch: {name}: NOT verified, removed: {exc.message}", status)
        return status
    except Exception as exc:  # a bug: still fail closed, still one line
        discard(request.path)
        status = download.status or EXIT_NOT_VERIFIED
        console.fail(f"gkeys-fetch: {name}: NOT verified, removed: internal error: {type(exc).__name__}: {exc}",
                     status)
        return status
    except BaseException:  # interrupted (Ctrl-C, SIGTERM, SIGHUP): never leave an unverified file behind
        discard(request.path)
        raise
    if result is None:
        return _download_failed(console, name, download.status)
    # kept in DISTDIR under the name Portage gives it once the download is done (never the scratch link)
    journal_media(ctx, result, final_path(request))
    unbound = {"allowed-unnamed": " (name not bound by anything signed; [fetch] allow-unnamed)",
               "signed-after-build": " (name bound by a date, not a name; [fetch] bind-by-date)",
               }.get(result.name_rule, "")
    console.message("good", f"gkeys-fetch: {name}: verified, signed by {signers(result)}{unbound}"
                    + (f" (the download command's status {download.status} is passed on)" if download.status else ""))
    return download.status


if __name__ == "__main__":
    sys.exit(main())
