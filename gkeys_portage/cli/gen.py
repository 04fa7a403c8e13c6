"""``gkeys-gen``: generate a GLEP 63 compliant OpenPGP key for a Gentoo developer.

Argument parsing, prompting and presentation only; :mod:`gkeys_portage.checks.keygen` does the work.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gkeys_portage import __version__
from gkeys_portage.checks import keygen
from gkeys_portage.checks.glep63 import Level
from gkeys_portage.core.errors import BadInputError, UsageError
from gkeys_portage.core.state import read_limited
from gkeys_portage.ui.output import Console, Report
from gkeys_portage.ui.runner import JsonUsageParser, add_output_options, run_report

MAX_PASSPHRASE_FILE = 4096

DESCRIPTION = """\
Generate an OpenPGP key that meets GLEP 63 (v2.2), the key policy for Gentoo developers:

  * a certify-only primary key (ed25519, or RSA 4096/2048 with --algorithm),
  * a separate signing subkey and an encryption subkey (cv25519, or RSA),
  * one expiry for all of them, at most 900 days ahead (default: 1 year, as GLEP 63 recommends),
  * SHA-2 preferences and SHA-512 self-signatures,
  * a user id "NAME <EMAIL>" with your @gentoo.org address.

The public key and a revocation certificate are written beside the key, in the GnuPG home (or to
--output-dir) as <FPR>.pub.asc and <FPR>.rev.asc, never into the current directory by default; the
new key is checked with the glep63-2.2 spec (as 'gkeys spec-check' does) and the
next steps (backup, upload, LDAP) are printed.

Without --name/--email and a passphrase option, gkeys-gen asks on the terminal.  Without a
terminal it refuses at once instead of waiting for input.
"""

EPILOG = """\
examples:
  gkeys-gen                                   # asks for name, e-mail and passphrase
  gkeys-gen --name "Larry the Cow" --email larry@gentoo.org \\
            --passphrase-file ~/.secret/pass --homedir ~/.gnupg
  gkeys-gen --name Test --email test@example.org --allow-any-email \\
            --no-passphrase --homedir /tmp/test-gnupg --algorithm rsa4096 --expire 2y --json

refused:
  an address outside @gentoo.org (unless --allow-any-email); expiry beyond 900 days, "never" or
  under 15 days; a non-interactive run without --passphrase-file or --no-passphrase; a GnuPG
  home that already holds a secret key with the same user id.

exit status:
  0  key generated and GLEP 63 compliant (with --allow-any-email: except uid:nogentoo, which is
     reported and listed under "accepted" in --json)
  1  generated, but spec-check found errors (or gpg failed)
  2  usage or bad input
"""


def ask_line(question: str) -> str:
    """Ask on stderr and read one line from stdin (stdout stays clean for ``--json``)."""
    sys.stderr.write(question)
    sys.stderr.flush()
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\r\n")


@dataclass
class Prompter:
    """How gkeys-gen asks questions: ``interactive`` is false without a terminal (then it never asks)."""

    interactive: bool
    ask: Callable[[str], str] = ask_line
    secret: Callable[[str], str] = getpass.getpass


def terminal_prompter() -> Prompter:
    """The prompter for a real run: interactive only when stdin is a terminal."""
    return Prompter(interactive=sys.stdin.isatty())


def build_parser(*, json_errors: bool = False) -> argparse.ArgumentParser:
    """The ``gkeys-gen`` argument parser."""
    parser_class = JsonUsageParser if json_errors else argparse.ArgumentParser
    parser = parser_class(prog="gkeys-gen", description=DESCRIPTION, epilog=EPILOG,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"gkeys-portage {__version__}")
    parser.add_argument("--name", help="your full name for the user id")
    parser.add_argument("--email", help="your @gentoo.org address for the user id")
    secret = parser.add_mutually_exclusive_group()
    secret.add_argument("--passphrase-file", metavar="FILE",
                        help="read the passphrase from the first line of FILE (keep it mode 0600)")
    secret.add_argument("--no-passphrase", action="store_true",
                        help="leave the secret key unprotected (tests, or a key kept on an encrypted token)")
    parser.add_argument("--homedir", metavar="DIR",
                        help="GnuPG home to create the key in (default: $GNUPGHOME or ~/.gnupg)")
    parser.add_argument("--output-dir", "--outdir", metavar="DIR",
                        help="where <FPR>.pub.asc and <FPR>.rev.asc are written (default: the GnuPG home, "
                             "beside the key)")
    parser.add_argument("--algorithm", choices=sorted(keygen.ALGORITHMS), default=keygen.DEFAULT_ALGORITHM,
                        help=f"key algorithm (default: {keygen.DEFAULT_ALGORITHM})")
    parser.add_argument("--expire", default=keygen.DEFAULT_EXPIRE, metavar="WHEN",
                        help="expiry: 1y, 18m, 52w, 400d or YYYY-MM-DD; at most 900 days (default: 1y)")
    parser.add_argument("--allow-any-email", action="store_true",
                        help="accept an address outside @gentoo.org (GLEP 63's uid rule is reported, not enforced)")
    add_output_options(parser)
    return parser


def _default_homedir() -> Path:
    return Path(os.environ.get("GNUPGHOME") or Path.home() / ".gnupg")


def _read_passphrase_file(path: Path) -> str:
    data = read_limited(path, MAX_PASSPHRASE_FILE, "passphrase file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{path}: the passphrase is not UTF-8 text") from exc
    lines = text.splitlines()
    passphrase = lines[0] if lines else ""
    if not passphrase:
        raise BadInputError(f"{path}: empty passphrase; use --no-passphrase for an unprotected key")
    return passphrase


def _ask_passphrase(prompter: Prompter) -> str:
    first = prompter.secret("Passphrase for the new key: ")
    if not first:
        raise BadInputError("empty passphrase; use --no-passphrase for an unprotected key")
    if prompter.secret("Repeat the passphrase: ") != first:
        raise BadInputError("the passphrases differ")
    return first


def _refuse_without_terminal(args: argparse.Namespace, prompter: Prompter) -> None:
    missing = [opt for opt, value in (("--name", args.name), ("--email", args.email)) if not value]
    if args.passphrase_file is None and not args.no_passphrase:
        missing.append("--passphrase-file FILE or --no-passphrase")
    if missing and not prompter.interactive:
        raise UsageError(f"no terminal to ask on: give {', '.join(missing)}")


def collect(args: argparse.Namespace, prompter: Prompter) -> tuple[keygen.KeySpec, str]:
    """The validated key spec and passphrase, asking only for what the options leave open."""
    _refuse_without_terminal(args, prompter)
    name = args.name or prompter.ask("Full name: ")
    email = args.email or prompter.ask("E-mail address (@gentoo.org): ")
    spec = keygen.key_spec(name, email, algorithm=args.algorithm, expire=args.expire,
                           allow_any_email=args.allow_any_email)
    if args.no_passphrase:
        return spec, ""
    if args.passphrase_file is not None:
        return spec, _read_passphrase_file(Path(args.passphrase_file))
    return spec, _ask_passphrase(prompter)


def run(args: argparse.Namespace, prompter: Prompter, console: Console | None = None) -> Report:
    """Generate the key the arguments (and answers) describe; return the report."""
    spec, passphrase = collect(args, prompter)
    homedir = Path(args.homedir) if args.homedir else _default_homedir()
    if console is not None and not console.json_mode:
        console.message("info", f"generating {spec.algorithm} key for {spec.uid} in {homedir} ...")
    outdir = Path(args.output_dir) if args.output_dir else homedir
    key = keygen.generate(spec, homedir, outdir, passphrase=passphrase)
    report = Report(data={"action": "gkeys-gen", "ok": not key.errors, **key.to_json()})
    report.good(f"created {key.fingerprint} {key.uid}")
    report.info(f"signing subkey {key.signing_subkey}, encryption subkey {key.encryption_subkey}")
    report.info(f"expires {key.expires:%Y-%m-%d}; {'protected by a passphrase' if passphrase else 'NO passphrase'}")
    report.info(f"public key: {key.public_key_file}")
    report.info(f"revocation certificate: {key.revocation_file} (keep a copy offline: it revokes the key)")
    accepted = key.accepted_errors
    for issue in key.issues:
        line = f"{keygen.DEFAULT_SPEC} {issue.level}: {issue.code} ({issue.concerns}): {issue.message}"
        if issue.code in accepted:
            report.warn(f"{line} (accepted by --allow-any-email)")
        else:
            {Level.ERROR: report.error, Level.WARNING: report.warn}.get(issue.level, report.info)(line)
    if key.errors:
        report.exit_code = 1
    elif accepted:
        report.warn(f"{keygen.DEFAULT_SPEC}: compliant except {', '.join(accepted)} (accepted by --allow-any-email)")
    else:
        report.good(f"compliant with {keygen.DEFAULT_SPEC}")
    report.info("next steps:")
    for number, step in enumerate(key.next_steps(), 1):
        report.plain(f"   {number}. {step}")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gkeys-gen``; return the exit status (also the console script)."""
    words = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(json_errors="--json" in words).parse_args(words)  # usage errors as JSON too
    prompter = terminal_prompter()
    return run_report(args, lambda parsed, console: run(parsed, prompter, console))


if __name__ == "__main__":
    sys.exit(main())
