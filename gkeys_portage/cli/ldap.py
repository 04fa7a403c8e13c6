"""``gkeys-ldap``: search Gentoo's developer directory and build the developer seed file from it.

Argument parsing and presentation only; :mod:`gkeys_portage.keys.ldapseeds` does the work.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from gkeys_portage import __version__
from gkeys_portage.core.errors import BadInputError
from gkeys_portage.core.state import read_limited
from gkeys_portage.core.types import parse_category
from gkeys_portage.keys import ldapseeds
from gkeys_portage.ui.output import Console, Report
from gkeys_portage.ui.runner import JsonUsageParser, add_output_options, run_report

DESCRIPTION = """\
Read Gentoo's LDAP developer directory (attributes uid, cn, mail, gentooStatus, gpgfingerprint) and
turn it into a gkeys seed file, as infrastructure does for the gentoo-devs category.

Every active developer (gentooStatus=active) becomes one seed:
  nick = keydir = uid, name = cn, keys = fingerprint = the gpgfingerprint values with spaces
  removed and upper-cased, uid = "cn <uid@gentoo.org>".
A gpgfingerprint that is not 40 or 64 hex digits is reported and dropped; a developer without a
valid fingerprint or without uid is reported and left out.
"""

EPILOG = """\
actions:
  search         print matching developers (default: every active one)
  update-seeds   write the seed file atomically and print what was Added / Updated / Removed

examples:
  gkeys-ldap search --uri ldaps://ldap.gentoo.org -n larry
  gkeys-ldap search --uri ldap://ldap.example.org --starttls --ca-file ca.pem -N "the Cow" --json
  gkeys-ldap update-seeds -C gentoo-devs -o gentoo-devs.seeds --uri ldaps://ldap.gentoo.org \
                          --base ou=devs,dc=gentoo,dc=org
  gkeys sign -F gentoo-devs.seeds          # then sign and publish the new seed file

refused:
  a bind password over plain ldap:// to another host (use ldaps:// or --starttls); --starttls with
  ldaps://; an empty password file; a search that yields no developer with a valid fingerprint,
  or that the server cuts short (size or time limit) or refers elsewhere (referrals are never
  followed): the old file stays.

exit status:
  0  done   2  usage or bad input (bad filter, bind refused, unknown base, empty result)
  3  network failure (connection refused, timeout, TLS failure, past --deadline)
"""


def _connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("directory")
    group.add_argument("--uri", required=True, metavar="URI",
                       help="the LDAP server: ldap://HOST[:PORT] or ldaps://HOST[:PORT]")
    group.add_argument("--base", default=ldapseeds.DEFAULT_BASE, metavar="DN",
                       help=f"search base (default: {ldapseeds.DEFAULT_BASE})")
    group.add_argument("--bind-dn", metavar="DN", help="bind as DN (default: anonymous)")
    group.add_argument("--password-file", metavar="FILE", help="the bind password, first line of FILE")
    group.add_argument("--starttls", action="store_true", help="upgrade an ldap:// connection with STARTTLS")
    group.add_argument("--ca-file", metavar="FILE",
                       help="CA certificates (PEM) to verify the server with (default: the system's)")
    group.add_argument("--timeout", type=float, default=ldapseeds.DEFAULT_TIMEOUT, metavar="SECONDS",
                       help=f"connect and per-read timeout (default: {ldapseeds.DEFAULT_TIMEOUT:.0f})")
    group.add_argument("--deadline", type=float, default=ldapseeds.DEFAULT_DEADLINE, metavar="SECONDS",
                       help="the whole search must end within SECONDS, however the server paces its answer "
                            f"(default: {ldapseeds.DEFAULT_DEADLINE:.0f})")
    group.add_argument("--filter", dest="extra_filter", metavar="FILTER",
                       help="an extra raw LDAP filter that must also match, e.g. '(gentooAccess=infra.group)'")


def build_parser(*, json_errors: bool = False) -> argparse.ArgumentParser:
    """The ``gkeys-ldap`` argument parser."""
    parser_class = JsonUsageParser if json_errors else argparse.ArgumentParser
    parser = parser_class(prog="gkeys-ldap", description=DESCRIPTION, epilog=EPILOG,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"gkeys-portage {__version__}")
    sub = parser.add_subparsers(title="actions", metavar="ACTION", dest="action")
    sub.required = True
    search = sub.add_parser("search", help="print matching developers",
                            description="Print the developers that match all the given filters "
                                        "(default: every active developer).",
                            epilog="examples:\n  gkeys-ldap search --uri ldaps://ldap.gentoo.org -n larry\n"
                                   "  gkeys-ldap search --uri ldaps://ldap.gentoo.org --all -m larry@gentoo.org\n",
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    search.add_argument("-n", "--nick", help="uid equals NICK")
    search.add_argument("-N", "--name", help="cn contains NAME")
    search.add_argument("-m", "--mail", help="mail equals MAIL")
    search.add_argument("-f", "--fingerprint", help="has this fingerprint (spaces allowed)")
    search.add_argument("--all", action="store_true", help="include retired and inactive developers")
    _connection_options(search)
    add_output_options(search)
    search.set_defaults(func=run_search)
    update = sub.add_parser("update-seeds", help="write the seed file of all active developers",
                            description="Build the seed file of every active developer with a valid fingerprint, "
                                        "replace FILE atomically and print the changes against the old FILE.",
                            epilog="examples:\n  gkeys-ldap update-seeds -C gentoo-devs -o gentoo-devs.seeds "
                                   "--uri ldaps://ldap.gentoo.org\n"
                                   "  gkeys-ldap update-seeds -C gentoo-devs --dry-run --uri ldaps://ldap.gentoo.org\n",
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    update.add_argument("-C", "--category", required=True, metavar="CAT", help="the seed category (e.g. gentoo-devs)")
    update.add_argument("-o", "--output", metavar="FILE", help="the seed file to write (default: CAT.seeds)")
    update.add_argument("--dry-run", action="store_true", help="print the changes, write nothing")
    _connection_options(update)
    add_output_options(update)
    update.set_defaults(func=run_update_seeds)
    return parser


def settings_from(args: argparse.Namespace) -> ldapseeds.LdapSettings:
    """Connection settings from the command line."""
    password = None
    if args.password_file:
        lines = read_limited(Path(args.password_file), 4096, "password file").decode("utf-8", "replace").splitlines()
        password = lines[0] if lines else ""
        if not password:
            # an empty password makes an LDAP simple bind unauthenticated (RFC 4513 5.1.2): refuse it
            raise BadInputError(f"{args.password_file}: empty password (its first line is empty); "
                                "leave out --bind-dn and --password-file for an anonymous search")
    if password is not None and not args.bind_dn:
        raise BadInputError("--password-file needs --bind-dn")
    return ldapseeds.LdapSettings(uri=args.uri, base=args.base, bind_dn=args.bind_dn, password=password,
                                  starttls=args.starttls, ca_file=Path(args.ca_file) if args.ca_file else None,
                                  timeout=args.timeout, deadline=args.deadline)


def _add_problems(report: Report, problems: Sequence[ldapseeds.Problem]) -> None:
    for problem in problems:
        report.warn(f"{problem.who}: {problem.message}")


def run_search(args: argparse.Namespace, console: Console) -> Report:
    """``gkeys-ldap search``."""
    settings = settings_from(args)
    ldap_filter = ldapseeds.search_filter(nick=args.nick, name=args.name, mail=args.mail,
                                          include_inactive=args.all, extra=args.extra_filter)
    developers = ldapseeds.search(settings, ldap_filter)
    if args.fingerprint:
        developers = ldapseeds.with_fingerprint(developers, args.fingerprint)
    report = Report(data={"action": "search", "uri": settings.uri, "base": settings.base, "filter": ldap_filter,
                          "count": len(developers), "developers": [d.to_json() for d in developers]})
    report.info(f"{len(developers)} developer(s) in {settings.base} matching {ldap_filter}")
    for line in ldapseeds.describe(developers):
        report.plain(line)
    return report


def run_update_seeds(args: argparse.Namespace, console: Console) -> Report:
    """``gkeys-ldap update-seeds``."""
    category = parse_category(args.category)
    output = Path(args.output) if args.output else Path(f"{category}.seeds")
    settings = settings_from(args)
    ldap_filter = ldapseeds.search_filter(extra=args.extra_filter)
    developers = ldapseeds.search(settings, ldap_filter)
    built = ldapseeds.build_seeds(developers)
    changes = ldapseeds.write_seed_file(output, built.seeds, dry_run=args.dry_run)
    report = Report(data={
        "action": "update-seeds", "category": category, "file": str(output), "uri": settings.uri,
        "base": settings.base, "filter": ldap_filter, "entries": len(developers), "seeds": len(built.seeds),
        "changes": changes.to_json(), "problems": [p.to_json() for p in built.problems], "dry_run": args.dry_run,
    })
    report.info(f"{len(developers)} entries in {settings.base}; {len(built.seeds)} seeds for {category}")
    _add_problems(report, built.problems)
    for label, nicks in (("Added", changes.added), ("Updated", changes.updated), ("Removed", changes.removed)):
        if nicks:
            report.info(f"{label}: {', '.join(nicks)}")
    unchanged = not (changes.added or changes.updated or changes.removed)
    if args.dry_run:
        report.info(f"dry run: {output} not written" + (" (it is up to date)" if unchanged else ""))
    else:
        report.good(f"wrote {output} ({len(built.seeds)} seeds{', unchanged' if unchanged else ''})")
        report.info(f"next: sign and publish it, e.g. gkeys sign -F {output}")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gkeys-ldap``; return the exit status (also the console script)."""
    words = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(json_errors="--json" in words).parse_args(words)  # usage errors as JSON too
    return run_report(args, args.func)


if __name__ == "__main__":
    sys.exit(main())
