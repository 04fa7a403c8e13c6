"""CLI action ``verify-overlays``: the overlay list (repositories.xml) for eselect-repository and layman."""

from __future__ import annotations

import argparse
from pathlib import Path

from gkeys_portage.cli.common import SubParsers, add_action, add_category, add_nick
from gkeys_portage.cli.output import Report
from gkeys_portage.core.context import Gkeys
from gkeys_portage.core.errors import GkeysError
from gkeys_portage.verify.overlay_urls import Severity
from gkeys_portage.verify.overlays import (
    OverlaySettings,
    OverlayVerification,
    install_list,
    load_list,
    verify_overlay_list,
)

DESCRIPTION = """\
Verify an overlay list (repositories.xml) before eselect-repository or layman clone what it names.

1. The detached signature (LIST.asc, or -s SIG) must be good and made by a key pinned in the
   category ([overlays] category, default gentoo-infra; or -C CAT, and -n NICK for one seed).
2. The signed bytes are parsed safely: no entity declarations, no external entities or DTD
   fetching, UTF-8 only, bounded size ([overlays] max-size, MiB), depth and element count.
3. The list must follow repositories.dtd / repositories.xsd (required elements and attributes,
   quality/status/source-type values, repository-name pattern, unique names; no comment,
   processing instruction or element inside a <source> or <name>, since eselect-repository reads
   only the text before it), and every <source> must be safe to hand to a VCS: an allowed scheme
   for its type, or [user@]host:path for ssh-based types; never file://, local paths, git remote
   helpers (ext::, fd::), a leading '-' (also in user, host or port), whitespace, control
   characters or encoded controls.

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
  gkeys verify-overlays list.xml -s list.xml.sig -C gentoo-infra --json
  gkeys verify-overlays --install                        # what the postsync.d hook runs

exit status: 0 verified (and written), 1 not verified, refused by the checks, too old or a rollback,
2 not an acceptable XML document or bad usage, 3 network failure."""


def _describe(verification: OverlayVerification, verbose: bool) -> Report:
    """The human lines and JSON document of a verification."""
    name, overlays = verification.source.name, verification.overlays
    label = name.rstrip("/").rsplit("/", 1)[-1]  # findings name the file, not the whole URL
    report = Report(data=verification.to_json())
    signer = verification.signature.signer
    report.good(f"{name}: good signature by {signer.pin.category}/{signer.pin.nick} ({signer.pin.fingerprint}) "
                f"made {signer.created_at:%Y-%m-%d %H:%M:%S} UTC")
    for note in verification.signature.ignored:
        report.warn(f"ignored: {note}")
    sources = ", ".join(f"{kind} {count}" for kind, count in overlays.source_counts().items()) or "none"
    official = sum(1 for repo in overlays.repos if repo.status == "official")
    report.info(f"{name}: {len(overlays.repos)} repositories ({official} official); sources: {sources}")
    for finding in overlays.of(Severity.ERROR):
        report.error(f"{label} {finding}")
    for finding in overlays.of(Severity.WARNING):
        report.warn(f"{label} {finding}")
    notices = overlays.of(Severity.NOTICE)
    if verbose:
        for finding in notices:
            report.info(f"{label} {finding}")
    elif notices:
        count = len(notices)
        report.info(f"{name}: {count} {'source uses' if count == 1 else 'sources use'} an unauthenticated "
                    "transport (git://, http://, rsync://, ...); -v lists them")
    return report


def run_verify_overlays(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Verify the list, report every finding, and write it with -o/--install if it passed."""
    settings = OverlaySettings.from_config(ctx.config)
    output = Path(args.output) if args.output else (settings.output if args.install else None)
    location = args.list or settings.url
    signature = args.signature or (None if args.list else settings.signature_url)
    try:
        signed = load_list(ctx, location, signature, settings.limits)
        verification = verify_overlay_list(ctx, signed, args.category or settings.category, nick=args.nick,
                                           limits=settings.limits)
    except GkeysError as exc:
        if output is None:
            raise
        raise type(exc)(f"{exc.message}; {output} left unchanged", detail=exc.detail) from exc
    report = _describe(verification, bool(getattr(args, "verbose", False)))
    report.data["output"] = None
    if not verification.ok:
        errors = len(verification.overlays.errors)
        report.error(f"{location}: refused, {errors} error{'s' if errors != 1 else ''}"
                     + (f"; {output} left unchanged" if output else ""))
        report.exit_code = 1
        return report
    if output is not None:
        changed = install_list(ctx, verification, output)
        report.data["output"] = str(output)
        report.data["changed"] = changed
        report.good(f"wrote the verified list to {output}" if changed else f"{output} is already this list")
    return report


def register(sub: SubParsers) -> None:
    """Register verify-overlays."""
    p = add_action(sub, "verify-overlays", run_verify_overlays,
                   summary="verify repositories.xml (signature, format, safe source URLs)",
                   description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("list", nargs="?", metavar="PATH|URL", help="the overlay list (default: [overlays] url)")
    p.add_argument("-s", "--signature", metavar="SIG", help="detached signature, path or URL (default: LIST.asc)")
    add_category(p, help_text="category whose pinned keys may sign the list (default: [overlays] category, "
                              "else gentoo-infra)")
    add_nick(p, help_text="accept only this seed's keys")
    out = p.add_mutually_exclusive_group()
    out.add_argument("-o", "--output", metavar="OUT", help="write the verified list here, atomically")
    out.add_argument("--install", action="store_true",
                     help="write the verified list to [overlays] output (default <gkeysdir>/overlays/repositories.xml)")
