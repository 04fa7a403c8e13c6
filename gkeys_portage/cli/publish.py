"""CLI actions that hand keys to others: build-keyring (and the publishing actions beside it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gkeys_portage.cli.common import SubParsers, add_action, add_category
from gkeys_portage.cli.output import Report
from gkeys_portage.core import bundle
from gkeys_portage.core.context import Gkeys


def run_build_keyring(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Write a reproducible keyring bundle of a category (optionally signed)."""
    built = bundle.build_keyring(ctx, args.category, args.nick or [], Path(args.output), sign=args.sign)
    report = Report(data=built.to_json())
    report.good(f"{built.category}: {len(built.fingerprints)} key(s) written to "
                f"{', '.join(str(p) for p in built.files)}")
    for path in built.signatures:
        report.info(f"signed: {path}")
    return report


def register(sub: SubParsers) -> None:
    """Register build-keyring."""
    p = add_action(sub, "build-keyring", run_build_keyring,
                   summary="write a reproducible keyring bundle of a category for others",
                   epilog="Writes DIR/CAT.gpg (binary), DIR/CAT.asc (armored) and the manifest DIR/CAT.json;\n"
                          "the same seeds and keys give the same bytes (the manifest time is\n"
                          "$SOURCE_DATE_EPOCH, else the newest time in the keys). With --sign, each file\n"
                          "gets a detached signature FILE.asc by the [sign] key. Users consume it with\n"
                          "[keyrings] CAT = URL-of-CAT.gpg (signature checked against [verify-seeds] CAT).")
    add_category(p, required=True)
    p.add_argument("-n", "--nick", action="append", metavar="NICK",
                   help="only this seed (repeatable; default: every seed of the category)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory")
    p.add_argument("--sign", action="store_true", help="sign the three files with the [sign] key")
