"""CLI actions that hand keys to others: build-keyring, export-wkd, send-key."""

from __future__ import annotations

import argparse
from pathlib import Path

from gkeys_portage.cli.common import SubParsers, add_action, add_category
from gkeys_portage.core.errors import EXIT_NETWORK, EXIT_NOT_VERIFIED
from gkeys_portage.keys import bundle, publish
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.ui.output import Report


def run_build_keyring(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Write a reproducible keyring bundle of a category (optionally signed)."""
    built = bundle.build_keyring(ctx, args.category, args.nick or [], Path(args.output), sign=args.sign)
    report = Report(data=built.to_json())
    report.good(f"{built.category}: {len(built.fingerprints)} key(s) written to "
                f"{', '.join(str(p) for p in built.files)}")
    for path in built.signatures:
        report.info(f"signed: {path}")
    return report


def run_export_wkd(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Write a WKD tree of a category's pinned keys for a web server."""
    exported = publish.export_wkd(ctx, args.category, Path(args.output), domain=args.domain, method=args.method)
    report = Report(data=exported.to_json())
    for address, fingerprints in sorted(exported.addresses.items()):
        report.good(f"{address}: {', '.join(fingerprints)}")
    for note in exported.skipped:
        report.warn(f"skipped {note}")
    report.info(f"{len(exported.files)} file(s) written under {args.output}")
    return report


def run_send_key(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Upload pinned keys to an HKP keyserver; exit 1 if it refused one, 3 if it could not be reached."""
    uploads = publish.send_keys(ctx, args.category, args.nick or [], args.keyserver)
    report = Report(data={"category": args.category, "keys": [u.to_json() for u in uploads]})
    for upload in uploads:
        line = f"{upload.nick} {upload.fingerprint}: {upload.answer}"
        if upload.status == "accepted":
            report.good(f"sent {line}")
        else:
            report.error(f"{upload.status}: {line}")
    if any(u.status == "refused" for u in uploads):
        report.exit_code = EXIT_NOT_VERIFIED
    elif any(u.status == "unreachable" for u in uploads):
        report.exit_code = EXIT_NETWORK
    return report


def register(sub: SubParsers) -> None:
    """Register build-keyring, export-wkd and send-key."""
    p = add_action(sub, "build-keyring", run_build_keyring,
                   examples=("gkeys build-keyring -C gentoo-devs -o /var/www/keys",
                             "gkeys build-keyring -C gentoo -o /var/www/keys --sign"),
                   summary="write a reproducible keyring bundle of a category for others",
                   epilog="Writes DIR/CAT.gpg (binary), DIR/CAT.asc (armored) and the manifest DIR/CAT.json;\n"
                          "the same seeds and keys give the same bytes (the manifest time is\n"
                          "$SOURCE_DATE_EPOCH, else the newest time in the keys). With --sign, each file\n"
                          "gets a detached signature FILE.asc by the [sign] key. Users consume it with\n"
                          "[keyrings] CAT = URL-of-CAT.gpg (signature checked against [verify-seeds] CAT).\n"
                          "Consumers refuse a signed bundle older than their [policy] max-bundle-age (default\n"
                          "30 days) as stale: re-sign it daily, from a timer, even when nothing changed (a\n"
                          "systemd timer unit example is in /usr/share/doc/gkeys-portage/keys.md).")
    add_category(p, required=True)
    p.add_argument("-n", "--nick", action="append", metavar="NICK",
                   help="only this seed (repeatable; default: every seed of the category)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory")
    p.add_argument("--sign", action="store_true",
                   help="sign the three files with the [sign] key (re-sign daily: consumers refuse bundles older "
                        "than [policy] max-bundle-age)")

    p = add_action(sub, "export-wkd", run_export_wkd,
                   examples=("gkeys export-wkd -C gentoo-devs -o /var/www/gentoo.org --domain gentoo.org",
                             "gkeys export-wkd -C gentoo-devs -o /var/www/openpgpkey.gentoo.org --domain gentoo.org "
                             "--method advanced"),
                   summary="write a WKD tree of a category's keys",
                   epilog="direct:   DIR/.well-known/openpgpkey/hu/<hash> + policy   (DIR = web root of DOMAIN)\n"
                          "advanced: DIR/.well-known/openpgpkey/DOMAIN/hu/<hash> + policy\n"
                          "          (DIR = web root of openpgpkey.DOMAIN)\n"
                          "Each file holds the binary keys carrying that address, with only that user id.")
    add_category(p, required=True)
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory")
    p.add_argument("--domain", metavar="DOMAIN", help="only addresses at DOMAIN")
    p.add_argument("--method", choices=publish.METHODS, default="advanced",
                   help="WKD layout to write (default: advanced)")

    p = add_action(sub, "send-key", run_send_key,
                   examples=("gkeys send-key -C gentoo-devs -n larry",
                             "gkeys send-key -C gentoo --keyserver hkps://keys.openpgp.org"),
                   summary="upload pinned keys to an HKP keyserver",
                   epilog="One POST /pks/add per key (armored, self-signatures only); the answer is\n"
                          "reported per key. Exit 1 if the keyserver refused a key, 3 if it was unreachable.")
    add_category(p, required=True)
    p.add_argument("-n", "--nick", action="append", metavar="NICK", help="only this seed (repeatable)")
    p.add_argument("--keyserver", metavar="URL",
                   help="hkp://, hkps://, http:// or https:// (default: the first of [sources] keyservers)")
