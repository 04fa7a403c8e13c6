"""CLI action ``verify-snapshot``: an emerge-webrsync snapshot against the pinned repository key."""

from __future__ import annotations

import argparse
from pathlib import Path

from gkeys_portage.cli.common import SubParsers, add_action, add_category
from gkeys_portage.core.errors import GkeysError, UsageError
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.ui.output import Report
from gkeys_portage.verify.manifest.snapshot import (
    DEFAULT_SNAPSHOT_MAX_AGE,
    discard,
    fetch_snapshot,
    verify_snapshot,
)

DESCRIPTION = """\
Verify an emerge-webrsync snapshot (gentoo-YYYYMMDD.tar.xz and its .gpgsig).

The signature must come from the category's pinned repository key (the seed 'snapshot', Gentoo's
ebuild repository key DCD05B71...); the release-media and mirror keys pinned in the same category do
not count.  The file name is not signed, so the date is read from inside the signed archive
(metadata/timestamp.x) and must be the day the name says.  That time must not be older than the
newest snapshot verified before for the repository (the high-water mark in gkeys' state: a mirror
serving an old snapshot is refused) nor older than the maximum age (a frozen mirror).

FILE may be a URL: the snapshot and its .gpgsig are downloaded into -d DIR first, and removed
again if they do not verify.
"""

EPILOG = """\
config ([snapshot] section, all optional):
  category = gentoo      whose repository key signs snapshots
  max-age = 48           hours (snapshots are made daily; 0 = no maximum)

examples:
  gkeys verify-snapshot /var/cache/distfiles/gentoo-20261204.tar.xz
  gkeys verify-snapshot https://distfiles.gentoo.org/snapshots/gentoo-20261204.tar.xz -d /var/tmp
  gkeys --json verify-snapshot gentoo-20261204.tar.xz -C gentoo --max-age 72

exit status: 0 verified, 1 not verified (unsigned, wrong signer, renamed, older than the last one,
too old), 2 bad input, 3 network failure.
"""


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://", "file://"))


def run_verify_snapshot(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Verify (after downloading, for a URL) one snapshot; raise the repository's high-water mark."""
    category = args.category or ctx.config.get("snapshot", "category", "gentoo")
    max_age = args.max_age if args.max_age is not None else ctx.config.number("snapshot", "max-age",
                                                                              DEFAULT_SNAPSHOT_MAX_AGE)
    if max_age < 0:
        raise UsageError(f"--max-age {max_age:g}: expected hours (0 for no maximum)")
    source = args.file if _is_url(args.file) else None
    path = fetch_snapshot(ctx, args.file, Path(args.dest)) if source else Path(args.file)
    try:
        verified = verify_snapshot(ctx, path, category, signature=Path(args.signature) if args.signature else None,
                                   repo=args.repo, max_age_hours=max_age, source=source, record=not args.no_record)
    except GkeysError:
        if source:
            discard(path)
        raise
    signer = verified.signer
    return Report(data=verified.to_json()).good(
        f"{path.name}: signed by {signer.pin.category}/{signer.pin.nick} ({signer.pin.fingerprint}), tree of "
        f"{verified.timestamp:%Y-%m-%d %H:%M:%S} UTC: verified")


def register(sub: SubParsers) -> None:
    """Register verify-snapshot."""
    p = add_action(sub, "verify-snapshot", run_verify_snapshot, summary="verify an emerge-webrsync snapshot",
                   description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("file", metavar="FILE", help="gentoo-YYYYMMDD.tar.xz (a path or a URL)")
    add_category(p, help_text="category whose repository key signs snapshots (default: [snapshot] category, "
                              "else gentoo)")
    p.add_argument("-s", "--signature", metavar="SIG", help="the signature (default: FILE.gpgsig)")
    p.add_argument("-d", "--dest", default=".", metavar="DIR", help="where a URL is downloaded to (default: .)")
    p.add_argument("--repo", default="gentoo", metavar="NAME",
                   help="the repository whose high-water mark applies (default: gentoo)")
    p.add_argument("--max-age", type=float, metavar="HOURS",
                   help=f"refuse a snapshot older than this (default: [snapshot] max-age, else "
                        f"{DEFAULT_SNAPSHOT_MAX_AGE:g}; 0 = no maximum)")
    p.add_argument("--no-record", action="store_true", help="do not raise the high-water mark")
