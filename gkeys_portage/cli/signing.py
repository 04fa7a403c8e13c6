"""CLI actions ``sign`` and ``verify``."""

from __future__ import annotations

import argparse
from pathlib import Path

from gkeys_portage.cli.common import SubParsers, add_action, add_category, add_nick
from gkeys_portage.core.errors import NotVerifiedError, UsageError
from gkeys_portage.core.state import atomic_write
from gkeys_portage.core.types import parse_category
from gkeys_portage.keys import signing
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.ui.output import Report
from gkeys_portage.verify.file import (
    default_categories,
    journal_file,
    locate,
    locate_message,
    spool_file,
    verify_input,
)


def run_verify(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Verify a file or URL; name the nick and fingerprint that signed it."""
    if args.output and args.signature:
        raise UsageError("--output is for inline-signed messages; it cannot be combined with -s")
    signed = locate_message(ctx, args.file) if args.output else locate(ctx, args.file, args.signature)
    try:
        category, result = verify_input(ctx, signed, default_categories(ctx, args.category), args.nick)
    except NotVerifiedError as exc:
        if args.category:  # inside a build: the refusal is left for root too (docs/journal.md)
            spool_file(ctx, signed, args.category, args.nick, None, exc)
        raise
    report = Report(data={"file": signed.name, "signature": signed.signature_name or "inline",
                          "category": category, **result.to_json()})
    if args.output and result.plaintext is not None:
        atomic_write(Path(args.output), result.plaintext)
        report.data["output"] = args.output
        report.info(f"signed text written to {args.output}")
    journal_file(ctx, signed, category, result)  # accepted: the caller acts on it now
    spool_file(ctx, signed, category, args.nick, result)  # a read-only reader in a build: left for root
    for good in result.good:
        report.good(f"{signed.name}: good signature by {good.pin.category}/{good.pin.nick} "
                    f"({good.pin.fingerprint}) made {good.created_at:%Y-%m-%d %H:%M:%S} UTC")
    for note in result.ignored:
        report.warn(f"ignored: {note}")
    return report


def run_sign(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Sign a file with the [sign] key."""
    seed_category = parse_category(args.seed_category) if args.seed_category else None
    output = signing.sign_file(ctx, Path(args.file), clearsign=args.clearsign,
                               output=Path(args.output) if args.output else None, seed_category=seed_category)
    bound = f" (bound to seed category {seed_category})" if seed_category else ""
    return Report(data={"file": args.file, "signature": str(output), "clearsign": args.clearsign,
                        "seed_category": seed_category}).good(f"signed {args.file}: {output}{bound}")


def register(sub: SubParsers) -> None:
    """Register sign and verify."""
    p = add_action(sub, "verify", run_verify, verifies="file",
                   summary="verify a signed file or URL against pinned keys",
                   description="Verify a detached (-s SIG, FILE.asc, FILE.sig) or clearsigned file.\n"
                               "A signature counts only if it is good AND its primary key fingerprint is\n"
                               "pinned by a seed of the category (or by the one nick given with -n).",
                   epilog="examples:\n  gkeys verify -F stage3.tar.xz.DIGESTS -C gentoo\n"
                          "  gkeys verify -F foo.tar.gz -s foo.tar.gz.asc -C gentoo-devs -n alice\n"
                          "  gkeys verify -F SHA256SUMS.asc -C gentoo-devs -o SHA256SUMS")
    p.add_argument("-F", "--file", required=True, metavar="FILE|URL", help="the signed file or URL")
    p.add_argument("-s", "--signature", metavar="SIG", help="detached signature file or URL")
    add_category(p, help_text="category whose keyring and seeds decide (default: every installed one)")
    add_nick(p, help_text="accept only this seed's keys")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="FILE is an inline-signed (clearsigned) message: write its signed text to OUT "
                        "(atomically, only once it verified; text outside the signed part is dropped)")

    p = add_action(sub, "sign", run_sign,
                   examples=("gkeys sign -F SHA256SUMS --clearsign -o SHA256SUMS.asc",
                             "gkeys sign -F gentoo-devs.seeds --seed-category gentoo-devs --detach "
                             "-o gentoo-devs.seeds.sig"),
                   summary="sign a file with the [sign] key",
                   epilog="The key is the seed [sign] category/nick; its secret key must be in\n"
                          "[sign] gnupghome (default: the GnuPG home of the [sign] category).\n"
                          "Seed files: sign with --seed-category CAT (fetch-seed -C CAT requires it), e.g.\n"
                          "  gkeys sign -F gentoo-devs.seeds --seed-category gentoo-devs --detach "
                          "-o gentoo-devs.seeds.asc")
    p.add_argument("-F", "--file", required=True, metavar="FILE", help="file to sign")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--detach", dest="clearsign", action="store_false", default=False,
                      help="armored detached signature FILE.asc (default)")
    mode.add_argument("--clearsign", dest="clearsign", action="store_true", help="clearsigned copy")
    p.add_argument("-o", "--output", metavar="OUT", help="output file (default FILE.asc)")
    p.add_argument("--seed-category", metavar="CAT",
                   help="FILE is CAT's seed file: bind the signature to CAT (seed-category@gentoo.org notation)")
