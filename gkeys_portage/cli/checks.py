"""CLI actions ``check-key`` (is each key usable?) and ``spec-check`` (GLEP 63 compliance).

Presentation only: the checks live in :mod:`gkeys_portage.checks.glep63`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from gkeys_portage.checks.cutoffs import Cutoff, check_cutoffs, parse_cutoffs
from gkeys_portage.checks.glep63 import DEFAULT_DAYS, DEFAULT_SPEC, SPECS, Level, check_health, check_key, get_spec
from gkeys_portage.checks.glep63.findings import count_levels
from gkeys_portage.cli.common import SubParsers, add_action, add_category, add_nick
from gkeys_portage.core.errors import EXIT_NOT_VERIFIED, BadInputError, ConfigError, UsageError
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.ui.output import Report

if TYPE_CHECKING:  # imported by the actions that use them: every gkeys command builds this parser
    from gkeys_portage.checks.glep63.sources import KeyResult, Subject

CONFIG_SECTION = "checks"


def _when(args: argparse.Namespace) -> datetime | None:
    from gkeys_portage.checks.glep63.sources import parse_at

    return parse_at(args.at) if args.at else None


def _date(epoch: int | None) -> str:
    return "never" if epoch is None else datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d")


#: The result word of a key that passed with a warning (check-key): says what the warning means.
WARNED = {"expire:soon": "expires soon"}


def _result_word(result: KeyResult, warnings_fail: bool, passed: str, failed: str) -> str:
    """NOT INSTALLED, the failed word, what a warning means (``expires soon``), or the passed word."""
    if result.subject.key is None:
        return "NOT INSTALLED"
    if not result.ok(warnings_fail=warnings_fail):
        return failed
    warned = [WARNED[issue.code] for issue in result.issues if issue.level is Level.WARNING and issue.code in WARNED]
    return warned[0] if warned and passed == "ok" else passed


def _table(results: Sequence[KeyResult], warnings_fail: bool, passed: str, failed: str) -> list[str]:
    """A summary table: one row per key."""
    rows = [("KEY", "KEY ID", "ALGO", "EXPIRES", "ERR", "WARN", "NOTE", "RESULT")]
    for result in results:
        key, counts = result.subject.key, count_levels(result.issues)
        rows.append((result.subject.label, result.subject.fingerprint[-16:],
                     key.primary.algorithm_name if key else "-", _date(key.primary.expires) if key else "-",
                     str(counts["error"]), str(counts["warning"]), str(counts["note"]),
                     _result_word(result, warnings_fail, passed, failed)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows]


def _render(report: Report, results: Sequence[KeyResult], *, warnings_fail: bool, passed: str,
            failed: str) -> Report:
    """Findings as `` * `` lines (errors, warnings, notes), the table, the exit status."""
    for result in results:
        for issue in result.issues:
            line = f"{result.subject.label}: {issue.level} {issue.code} ({issue.concerns}): {issue.message}"
            {Level.ERROR: report.error, Level.WARNING: report.warn, Level.NOTE: report.info}[issue.level](line)
    for line in _table(results, warnings_fail, passed, failed):
        report.plain(line)
    bad = [r for r in results if not r.ok(warnings_fail=warnings_fail)]
    report.data["keys"] = [r.to_json(warnings_fail=warnings_fail) for r in results]
    report.data["ok"] = not bad
    verdict = f"{len(bad) if bad else len(results)} of {len(results)} keys {failed if bad else passed}"
    soon = sum(1 for r in results if _result_word(r, warnings_fail, passed, failed) == WARNED["expire:soon"])
    if soon and not bad:
        verdict += f" ({soon} {'expires' if soon == 1 else 'expire'} soon: renew or replace before then)"
    if bad:
        report.error(verdict)
        report.exit_code = EXIT_NOT_VERIFIED
    else:
        report.good(verdict)
    return report


def _cutoffs(ctx: Gkeys) -> dict[str, Cutoff]:
    """``[checks] cutoffs``: the dated crypto cut-offs (:mod:`gkeys_portage.checks.cutoffs`)."""
    return parse_cutoffs(ctx.config.get(CONFIG_SECTION, "cutoffs", ""))


def _require_subjects(subjects: Sequence[Subject], args: argparse.Namespace) -> None:
    """Refuse to report "0 of 0 keys" as a pass: a check that checked nothing is bad input."""
    if not subjects:
        where = f"category {args.category!r}" if args.category else "any category with a keyring"
        raise BadInputError(f"no keys to check: no seed in {where} pins a key")


def _days(ctx: Gkeys, args: argparse.Namespace) -> int:
    if args.days is not None:
        days: int = args.days
    else:
        raw = ctx.config.get(CONFIG_SECTION, "expiry-days", str(DEFAULT_DAYS))
        try:
            days = int(raw)
        except ValueError:
            raise ConfigError(f"[{CONFIG_SECTION}] expiry-days: not a whole number: {raw!r}") from None
    if days < 0:
        raise UsageError("--days must not be negative")
    return days


def run_check_key(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Check that keys are valid, unrevoked, unexpired, can sign, and do not expire soon."""
    from gkeys_portage.checks.glep63.sources import load_subjects, run_checks

    at = _when(args)
    days = _days(ctx, args)
    cutoffs = _cutoffs(ctx)
    subjects = load_subjects(ctx, category=args.category, nick=args.nick,
                             keyring=Path(args.keyring) if args.keyring else None, at=at, sigs=True)
    _require_subjects(subjects, args)
    results = run_checks(subjects, lambda key: check_health(key, at, days) + check_cutoffs(key, at, cutoffs))
    report = Report(data={"action": "check-key", "at": (at or datetime.now(UTC)).isoformat(), "days": days})
    report = _render(report, results, warnings_fail=args.warnings_fail, passed="ok", failed="FAILED")
    if args.notify or args.dry_run:
        _notify(ctx, args, report, subjects, days, (at or datetime.now(UTC)).timestamp())
    return report


def _notify(ctx: Gkeys, args: argparse.Namespace, report: Report, subjects: Sequence[Subject], days: int,
            now: float) -> None:
    """``--notify``: mail the owners of keys expiring within ``days`` (``--dry-run``: print the messages)."""
    from gkeys_portage.checks import notify

    config = notify.notify_config(ctx.config)
    ctx.ensure_layout()
    with ctx.lock:
        reminders = notify.due(ctx.layout, notify.reminders_for(ctx, subjects, days, now, config.sender,
                                                                args.to or []))
        if args.dry_run:
            for item in reminders:
                report.text_block(item.message.as_string())
        elif reminders:
            notify.send(config, ctx.layout, reminders, timeout=ctx.config.sources.timeout)
    report.data["notified"] = [item.to_json() for item in reminders]
    for item in reminders:
        for recipient, answer in item.refused.items():
            report.warn(f"{item.label}: the mail server refused {recipient}: {answer}")
        if item.sent:
            reached = [r for r in item.recipients if r not in item.refused]
            report.good(f"{item.label}: reminder sent to {', '.join(reached)}")
    if not reminders:
        report.info(f"no reminder due (keys expiring within {days} days were mailed about already, or none)")


def run_spec_check(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Check keys against a GLEP 63 spec."""
    if args.list_specs:
        report = Report(data={"specs": {name: spec.doc for name, spec in SPECS.items()}, "default": DEFAULT_SPEC})
        for name, spec in SPECS.items():
            report.plain(f"{name:<26}{spec.doc}{'  [default]' if name == DEFAULT_SPEC else ''}")
        return report
    from gkeys_portage.checks.glep63.sources import load_subjects, run_checks

    spec = get_spec(args.spec or ctx.config.get(CONFIG_SECTION, "spec", DEFAULT_SPEC))
    at = _when(args)
    cutoffs = _cutoffs(ctx)
    subjects = load_subjects(ctx, category=args.category, nick=args.nick,
                             keyring=Path(args.keyring) if args.keyring else None, at=at, sigs=True)
    _require_subjects(subjects, args)
    results = run_checks(subjects, lambda key: check_key(key, spec, at) + check_cutoffs(key, at, cutoffs))
    when = at or datetime.now(UTC)
    report = Report(data={"action": "spec-check", "spec": spec.name, "at": when.isoformat()})
    report.info(f"spec {spec.name} ({spec.doc}), as of {when:%Y-%m-%d %H:%M:%S} UTC")
    report = _render(report, results, warnings_fail=args.warnings_fail, passed="compliant", failed="NOT compliant")
    report.data["compliant"] = report.data["ok"]
    return report


def _add_selection(parser: argparse.ArgumentParser) -> None:
    add_category(parser, help_text="category to check (default: every category with a keyring)")
    add_nick(parser, help_text="only this seed's keys (needs -C)")
    parser.add_argument("--keyring", metavar="FILE",
                        help="check every key in this OpenPGP key file instead (armored or binary; imported "
                             "into a throwaway GnuPG home, never into your keyrings)")
    parser.add_argument("--at", metavar="TIME",
                        help="evaluate as of TIME (2018-08-03T00:01:00Z, 2018-08-03 or @EPOCH; default now)")
    parser.add_argument("--warnings-fail", action="store_true",
                        help="exit 1 on warnings too (notes never fail)")


_EXIT = ("exit status: 0 every key passed, 1 a key has errors (or warnings with --warnings-fail),\n"
         "2 bad input or usage (unknown spec, unreadable key file, no keys in it, no key to check).")


def register(sub: SubParsers) -> None:
    """Register check-key and spec-check."""
    p = add_action(
        sub, "check-key", run_check_key,
        summary="check installed keys: invalid, revoked, expired, no signing subkey, expiring soon",
        description="Check each pinned key of a category (or every key of a file) as of now or --at:\n"
                    "  error    validity:invalid, validity:revoked, validity:expired (primary key),\n"
                    "           subkey:none:s (nothing can sign), key:missing (pinned but not installed)\n"
                    "  warning  expire:soon (key or usable subkey expires within --days),\n"
                    "           subkey:none:s (only the primary key can sign), subkey:invalid\n"
                    "  note     subkey:revoked, subkey:expired (superseded subkeys)",
        epilog="examples:\n  gkeys check-key -C gentoo-devs\n  gkeys check-key -C gentoo -n releng --days 60\n"
               "  gkeys check-key --keyring someone.asc --json\n\n"
               f"default for --days: [{CONFIG_SECTION}] expiry-days (30).\n" + _EXIT)
    _add_selection(p)
    p.add_argument("--days", type=int, metavar="N", help="warn about keys expiring within N days (default 30)")
    p.add_argument("--notify", action="store_true",
                   help="mail the owner(s) of each key expiring within N days, once per expiry "
                        "([notify] smtp = host:port, from = address)")
    p.add_argument("--to", action="append", metavar="ADDR", help="with --notify: mail ADDR instead (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="with --notify: print the messages, send nothing")

    specs = "\n".join(f"  {name:<26}{spec.doc}" for name, spec in SPECS.items())
    p = add_action(
        sub, "spec-check", run_spec_check, summary="check keys against GLEP 63 (issue codes as glep63-check)",
        description="Check keys against a GLEP 63 spec.  Findings carry glep63-check's codes and levels\n"
                    "(validity:expired, algo:rsa:tooshort, algo:ecc:invalid, expire:long, expire:short,\n"
                    "expire:none, subkey:none:s, subkey:none:e, subkey:multipurpose, uid:nogentoo, ...).\n"
                    "glep63-2.2 also requires SHA-2 self-signatures (sig:sha1) and notes a primary key\n"
                    "that is not certify-only (key:notcertifyonly).\n\nspecs:\n" + specs,
        epilog="examples:\n  gkeys spec-check -C gentoo-devs\n"
               "  gkeys spec-check -C gentoo-devs -n alice --spec glep63-2.1\n"
               "  gkeys spec-check --keyring key.asc --at 2018-08-03T00:01:00Z --json\n\n"
               f"default spec: [{CONFIG_SECTION}] spec, else {DEFAULT_SPEC}.\n" + _EXIT)
    _add_selection(p)
    p.add_argument("--spec", metavar="NAME", help=f"spec to check against (default {DEFAULT_SPEC})")
    p.add_argument("--list-specs", action="store_true", help="list the known specs and exit")
