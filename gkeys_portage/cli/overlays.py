"""CLI action ``verify-overlays``: the overlay list (repositories.xml) for eselect-repository and layman."""

from __future__ import annotations

import argparse
from pathlib import Path

from gkeys_portage.cli.common import SubParsers, add_action, add_category, add_nick
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.ui.output import Report

DESCRIPTION = """\
Verify an overlay list (repositories.xml) before eselect-repository or layman clone what it names.

1. The detached signature (LIST.asc, or -s SIG) must be good and made by an overlay-list key
   ([purposes] overlay-list, default gentoo/snapshot: Gentoo's infrastructure key) pinned in the
   category ([overlays] category, default gentoo; or -C CAT, and -n NICK for one seed); a key of
   another purpose (the git-mirror key, a release key) is refused naming both.
2. The signed bytes are parsed safely: no entity declarations, no external entities or DTD
   fetching, UTF-8 only, bounded size ([overlays] max-size, MiB), depth and element count.
3. The list must follow repositories.dtd / repositories.xsd (required elements and attributes,
   quality/status/source-type values, repository-name pattern, unique names; no comment,
   processing instruction or element inside a <source> or <name>, since eselect-repository reads
   only the text before it), and every <source> must be safe to hand to a VCS: an allowed scheme
   for its type, or [user@]host:path for ssh-based types; never file://, local paths, git remote
   helpers (ext::, fd::), a leading '-' (also in user, host or port), whitespace, control
   characters, '%' or a backslash (eselect-repository's bash 'read' and Portage's repos.conf
   parser would read another URL), nor an attribute but type (layman reads branch=).  Old-format
   <overlay> entries (read by layman, not by eselect-repository) are refused.

Every finding names its line and repository.  Errors refuse the list (exit 1) and nothing is
written; warnings (e.g. 'ssh://git@host:user/repo', which git cannot clone) are reported;
notices (unauthenticated transports: git://, http://, rsync://) are counted and listed with -v.

Without PATH|URL the configured [overlays] url and signature-url are used.  With -o OUT (or
--install: [overlays] output) a list that passed is written atomically; on any failure the
previous file stays as it was, and a list signed before the one installed there is refused
(no rollback).  With [overlays] max-age (days; 0 = off, the default) a list signed longer ago is
refused (a mirror frozen in the past)."""

EPILOG = """\
examples:
  gkeys verify-overlays repositories.xml                 # uses repositories.xml.asc
  gkeys verify-overlays https://api.gentoo.org/overlays/repositories.xml -o /var/lib/gkeys/overlays/repositories.xml
  gkeys verify-overlays list.xml -s list.xml.sig -C my-lists --json   # [purposes] overlay-list = my-lists/me
  gkeys verify-overlays --install                        # what the postsync.d hook runs

exit status: 0 verified (and written), 1 not verified, refused by the checks, too old or a rollback,
2 not an acceptable XML document or bad usage, 3 network failure."""


def run_verify_overlays(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Verify the list, report every finding, and write it with -o/--install if it passed."""
    from gkeys_portage.ui.overlays import OverlayRequest, overlay_report  # not on every command's start-up

    return overlay_report(ctx, OverlayRequest(
        location=args.list, signature=args.signature, category=args.category, nick=args.nick,
        output=Path(args.output) if args.output else None, install=args.install,
        verbose=bool(getattr(args, "verbose", False)), list_warnings=True))


def register(sub: SubParsers) -> None:
    """Register verify-overlays."""
    p = add_action(sub, "verify-overlays", run_verify_overlays,
                   verifies="list", summary="verify repositories.xml (signature, format, safe source URLs)",
                   description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("list", nargs="?", metavar="PATH|URL", help="the overlay list (default: [overlays] url)")
    p.add_argument("-s", "--signature", metavar="SIG", help="detached signature, path or URL (default: LIST.asc)")
    add_category(p, help_text="category whose overlay-list keys may sign the list (default: [overlays] category, "
                              "else gentoo)")
    add_nick(p, help_text="accept only this seed's keys")
    out = p.add_mutually_exclusive_group()
    out.add_argument("-o", "--output", metavar="OUT", help="write the verified list here, atomically")
    out.add_argument("--install", action="store_true",
                     help="write the verified list to [overlays] output (default <gkeysdir>/overlays/repositories.xml)")
