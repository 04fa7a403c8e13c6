"""CLI action ``binpkg-keyring``: Portage's GPKG verification home from the ``[binpkg]`` pins."""

from __future__ import annotations

import argparse
from pathlib import Path

from gkeys_portage.cli.common import SubParsers, add_action
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.portage.binpkg import resolve_home, update_home
from gkeys_portage.ui.output import Report

DESCRIPTION = """\
Build Portage's binary package verification home (BINPKG_GPG_VERIFY_GPG_HOME, by default
${ROOT}${EPREFIX}/etc/portage/gnupg) from the seeds: only the keys pinned for binary packages
([binpkg] category/nicks, default gentoo/weekly), each fully trusted under gpg's direct trust
model, nothing else.  Built beside the home and swapped in atomically; a run with nothing new
returns without touching it.  'gkeys-trust-helper' does the same for PORTAGE_TRUST_HELPER.
"""

EPILOG = """\
config ([binpkg] section, all optional):
  category = gentoo         the seed category of the binary package signers
  nicks = weekly            space-separated seed nicks whose keys may sign binary packages

make.conf:
  PORTAGE_TRUST_HELPER="gkeys-trust-helper"
"""


def run_binpkg_keyring(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Build or confirm the verification home."""
    done = update_home(ctx, resolve_home(args.gnupghome, args.eroot), refresh=not args.no_refresh,
                       force=args.force)
    out = Report(data=done.to_json())
    for warning in done.warnings:
        out.warn(warning)
    if done.replaced is not None:
        out.info(f"moved the previous home to {done.replaced}")
    if done.changed:
        out.good(f"{done.home}: trusting {', '.join(done.keys)} for binary packages")
    else:
        out.good(f"{done.home}: up to date")
    return out


def register(sub: SubParsers) -> None:
    """Register ``binpkg-keyring``."""
    parser = add_action(sub, "binpkg-keyring", run_binpkg_keyring,
                        examples=("gkeys binpkg-keyring",
                                  "gkeys binpkg-keyring --eroot /mnt/gentoo --no-refresh",
                                  "gkeys binpkg-keyring --gnupghome /etc/portage/gnupg --force"),
                        summary="build Portage's binary package verification home from the pinned keys",
                        description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--eroot", type=Path, metavar="DIR", help="build DIR/etc/portage/gnupg")
    parser.add_argument("--gnupghome", type=Path, metavar="DIR", help="the home to build (wins over --eroot)")
    parser.add_argument("--no-refresh", action="store_true", help="do not refresh keys even when due")
    parser.add_argument("--force", action="store_true", help="rebuild even when nothing changed")
