"""CLI actions on keys: install-key, import-key, refresh-key, list-key, remove-key, export-keyring; and the
trust journal's history, audit and journal verify."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from gkeys_portage.cli.common import SubParsers, add_action, add_category, add_nick, bundle_notes
from gkeys_portage.core.errors import StateError
from gkeys_portage.keys import authority, refresh
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.install import KeyOutcome, KeyStatus, summarize_failure
from gkeys_portage.keys.prerequisites import FIRST_STEP
from gkeys_portage.ui import journal
from gkeys_portage.ui.output import Report

_LABELS = {
    KeyStatus.ADDED: "Added",
    KeyStatus.UPDATED: "Updated",
    KeyStatus.UNCHANGED: "Unchanged",
    KeyStatus.MISSING: "Not found",
    KeyStatus.MISMATCH: "Fingerprint mismatch",
    KeyStatus.UNREACHABLE: "Unreachable",
    KeyStatus.REFUSED: "Refused",
}


def outcome_lines(report: Report, outcomes: Sequence[KeyOutcome], *, only_problems: bool = False) -> None:
    """Human lines for key install outcomes (problems as warnings, with the reason).

    Keys that no source could be reached for share one line: the sources' causes are said once, by the
    failure line (:func:`summarize_failure`), not once per key and URL.
    """
    offline = [o for o in outcomes if o.status is KeyStatus.UNREACHABLE and o.unanswered and not o.dropped]
    if offline:
        report.warn(f"{_LABELS[KeyStatus.UNREACHABLE]}: {', '.join(f'{o.nick} {o.fingerprint}' for o in offline)}")
    shown = {id(o) for o in offline}
    for outcome in outcomes:
        if id(outcome) in shown:
            continue
        label = f"{_LABELS[outcome.status]}: {outcome.nick} {outcome.fingerprint}"
        if outcome.status.ok:
            if not only_problems:
                report.good(label + (f"  ({outcome.source})" if outcome.source else ""))
        else:
            reason = "; ".join(outcome.errors[-2:]) or "no source had it"
            report.warn(f"{label}: {reason}")
        if outcome.dropped:
            report.warn(f"Dropped for {outcome.nick}: {', '.join(outcome.dropped)} (not pinned by the seed)")


def _finish(report: Report, outcomes: Sequence[KeyOutcome]) -> Report:
    report.data["keys"] = [o.to_json() for o in outcomes]
    failure = summarize_failure(outcomes)
    if failure is not None:
        report.error(str(failure))
        report.exit_code = failure.exit_code
    return report


def run_install_key(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Fetch and install the keys of a category (or one nick)."""
    ctx.require_category(args.category)  # a typo lists the installed categories, it is not an empty success
    notes: list[str] = []
    outcomes = refresh.install_keys(ctx, args.category, args.nick,
                                   progress=args.console.progress(f"fetching {args.category} keys"), notes=notes)
    report = Report(data={"category": args.category, "notes": notes})
    bundle_notes(report, args.category, notes)
    outcome_lines(report, outcomes)
    return _finish(report, outcomes)


def run_import_key(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Import a seed's keys from a file or URL (fingerprint-checked)."""
    outcomes = refresh.import_key(ctx, args.category, args.nick, args.file)
    report = Report(data={"category": args.category, "nick": args.nick, "source": args.file})
    outcome_lines(report, outcomes)
    return _finish(report, outcomes)


def run_refresh_key(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Refresh installed keys (at most once per [policy] refresh-interval unless --force)."""
    categories = [ctx.require_category(args.category)] if args.category else [c for c in ctx.seeds.categories()
                                                          if ctx.keyring(c).exists()]
    if not categories:  # nothing to refresh is not "refreshed": exit 2 (state), as check-key (docs/exit-codes.md)
        raise StateError(f"no keys to refresh: no category has keys installed in {ctx.layout.root} yet",
                         next_step=FIRST_STEP)
    report = Report(data={"refreshed": []})
    for category in categories:
        if not args.nick and authority.authority_source(ctx, category) is not None:
            # Keys that come from an authority keyring are refreshed by re-reading that keyring.
            result, update = authority.refresh(ctx, category, force=args.force,
                                               progress=args.console.progress(f"refreshing {category}"))
            if update is not None:
                report.data.setdefault("authority", []).append(update.to_json())
                for label, nicks in (("Added", update.changes.added), ("Removed", update.changes.removed)):
                    if nicks:
                        report.info(f"{category}: {label}: {', '.join(nicks)}")
        else:
            result = refresh.refresh_keys(ctx, category, args.nick, force=args.force,
                                         progress=args.console.progress(f"refreshing {category}"))
        report.data["refreshed"].append(result.to_json())
        if result.skipped:
            report.info(f"{category}: refreshed recently; skipped (use --force)")
            continue
        bundle_notes(report, category, result.notes)
        outcome_lines(report, result.outcomes, only_problems=True)
        if result.warning:
            report.warn(f"{category}: {result.warning}")
        else:
            report.good(f"{category}: {len(result.outcomes)} keys refreshed")
    _refresh_webrsync_keyrings(ctx, report)
    return report


def _refresh_webrsync_keyrings(ctx: Gkeys, report: Report) -> None:
    """Bring the webrsync keyrings setup-portage wrote up to date with the keys as refreshed (a revoked or
    replaced repository key must reach emerge-webrsync too); a keyring that could not be is an error (exit 1)."""
    from gkeys_portage.portage.webrsync import KeyringState, refresh_webrsync_keyrings
    from gkeys_portage.verify.manifest.purpose import repository_keyring

    results = refresh_webrsync_keyrings(ctx.layout.state_dir, lambda category: repository_keyring(ctx, category))
    if results:
        report.data["webrsync_keyrings"] = [result.to_json() for result in results]
    for result in results:
        if result.state is KeyringState.UPDATED:
            report.good(f"webrsync keyring {result.path}: brought up to date with the {result.category} "
                        "repository keys")
        elif result.state is KeyringState.FAILED:
            report.error(f"webrsync keyring {result.path}: {result.detail}")
            report.exit_code = report.exit_code or 1
        elif result.state is not KeyringState.UNCHANGED:
            report.warn(f"webrsync keyring {result.path}: {result.detail}")


def _date(epoch: int | None) -> str:
    return "never" if epoch is None else datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d")


def run_list_key(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """List each seed's keys and whether they are installed."""
    if args.category:
        ctx.require_category(args.category)
    rows = refresh.list_keys(ctx, args.category, args.nick)
    report = Report(data={"keys": []})
    for seed, key in rows:
        if key is None:
            report.warn(f"{seed.nick}: {' '.join(seed.keys)} not installed")
            report.data["keys"].append({"nick": seed.nick, "installed": False, "fingerprints": seed.keys})
            continue
        state = "revoked" if key.primary.revoked else ("expired" if key.primary.validity == "e" else "valid")
        report.info(f"{seed.nick}: {key.fingerprint} {key.primary.algorithm_name} "
                    f"created {_date(key.primary.created)} expires {_date(key.primary.expires)} [{state}]")
        for uid in key.uids:
            report.plain(f"      uid: {uid.text}")
        report.data["keys"].append({
            "nick": seed.nick, "installed": True, "fingerprint": key.fingerprint, "state": state,
            "algorithm": key.primary.algorithm_name, "created": key.primary.created,
            "expires": key.primary.expires, "uids": [u.text for u in key.uids],
            "subkeys": [s.fingerprint for s in key.subkeys],
        })
    return report


def run_remove_key(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Remove a seed's keys from the category keyring."""
    removed = refresh.remove_keys(ctx, args.category, args.nick)
    report = Report(data={"removed": removed})
    if removed:
        report.good(f"removed {', '.join(removed)} from {args.category}")
    else:
        report.warn(f"no key of {args.nick} is installed in {args.category}")
    return report


def run_export_keyring(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Export a category keyring for Portage or eclasses."""
    count = refresh.export_keyring(ctx, args.category, Path(args.output), armor=args.armor)
    return Report(data={"category": args.category, "output": args.output, "keys": count}).good(
        f"exported {count} keys of {args.category} to {args.output}")


def register(sub: SubParsers) -> None:
    """Register the key actions (and the trust journal's)."""
    register_journal(sub)
    sources = ("Sources are tried in order: WKD (advanced, then direct) for the seed's uid e-mail\n"
               "addresses, then each keyserver of [sources] keyservers. Whatever a source returns is\n"
               "checked in a quarantine keyring: only keys whose primary fingerprint the seed pins are\n"
               "installed; everything else is dropped and reported.")
    p = add_action(sub, "install-key", run_install_key,
                   examples=("gkeys install-key -C gentoo",
                             "gkeys install-key -C gentoo-devs -n larry"),
                   needs_lock=True, epilog=sources,
                   summary="fetch and install the keys the seeds pin")
    add_category(p, required=True)
    add_nick(p, help_text="only this seed")

    p = add_action(sub, "import-key", run_import_key,
                   examples=("gkeys import-key -C gentoo-devs -n larry -F larry.asc",
                             "gkeys import-key -C gentoo -n portage -F https://qa-reports.gentoo.org/output/service-keys.gpg"),
                   needs_lock=True,
                   summary="import a seed's key from a file or URL (fingerprint-checked)")
    add_category(p, required=True)
    add_nick(p, required=True)
    p.add_argument("-F", "--file", required=True, metavar="FILE|URL", help="key file or URL")

    p = add_action(sub, "refresh-key", run_refresh_key,
                   examples=("gkeys refresh-key",
                             "gkeys refresh-key -C gentoo --force",
                             "gkeys refresh-key -C gentoo-devs -n larry"),
                   needs_lock=True,
                   summary="refresh installed keys (new subkeys, expiry, revocations)",
                   epilog="At most once per [policy] refresh-interval (hours, default 24) unless --force.\n"
                          "A failed refresh only warns until the last good one is older than\n"
                          "[policy] max-refresh-age (days, default 30); then it fails with exit 3.\n"
                          "It also rewrites the emerge-webrsync keyrings setup-portage wrote (unchanged since)\n"
                          "from the refreshed keys; one it cannot rewrite is an error (exit 1).")
    add_category(p, help_text="category (default: every category with a keyring)")
    add_nick(p)
    p.add_argument("--force", action="store_true", help="refresh even if refreshed recently")

    p = add_action(sub, "list-key", run_list_key,
                   examples=("gkeys list-key -C gentoo",
                             "gkeys list-key -C gentoo-devs -n larry --json"),
                   summary="list installed keys of a category")
    add_category(p, required=True)
    add_nick(p)

    p = add_action(sub, "remove-key", run_remove_key,
                   examples=("gkeys remove-key -C gentoo-devs -n larry",
                             "gkeys remove-key -C test -n alice"),
                   needs_lock=True, summary="remove a seed's keys")
    add_category(p, required=True)
    add_nick(p, required=True)

    p = add_action(sub, "export-keyring", run_export_keyring,
                   examples=("gkeys export-keyring -C gentoo -o /usr/share/openpgp-keys/gentoo.asc",
                             "gkeys export-keyring -C gentoo-devs -o gentoo-devs.gpg --no-armor"),
                   summary="export a category keyring to a file")
    add_category(p, required=True)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="output file (written atomically)")
    p.add_argument("--armor", action=argparse.BooleanOptionalAction, default=True,
                   help="ASCII-armored output (default) or binary with --no-armor")


def _run_journal(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """``journal``: with Portage's DISTDIR, where ``journal ingest`` looks for what a build verified."""
    from gkeys_portage.portage.makeconf import portage_distdir

    return journal.run_journal(ctx, args, portage_distdir)


def _run_audit(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """``audit``: with Portage's DISTDIR, where ``--recheck`` looks for what a build verified."""
    from gkeys_portage.portage.makeconf import portage_distdir

    return journal.run_audit(ctx, args, portage_distdir)


def register_journal(sub: SubParsers) -> None:
    """Register the trust journal's actions: ``history``, ``audit``, ``journal`` (:mod:`gkeys_portage.ui.journal`)."""
    p = add_action(sub, "history", journal.run_history, summary="list the trust changes the journal holds",
                   description=journal.JOURNAL, epilog=journal.HISTORY_EPILOG)
    add_category(p, help_text="only this category's changes")
    p.add_argument("--since", metavar="DATE", help="only changes from DATE (YYYY-MM-DD, UTC) on")
    p = add_action(sub, "audit", _run_audit, summary="list what a key signed that was accepted (and recheck it)",
                   description=journal.JOURNAL, epilog=journal.AUDIT_EPILOG, verifies="key")
    p.add_argument("--key", required=True, metavar="FPR", help="the key's fingerprint (primary or subkey)")
    p.add_argument("--since", metavar="DATE", help="only acceptances from DATE (YYYY-MM-DD, UTC) on")
    p.add_argument("--recheck", action="store_true",
                   help="verify again, against today's keyrings, what is still on disk")
    p = add_action(sub, "journal", _run_journal,
                   summary="check the trust journal's hash chain, or take in what builds verified",
                   description=journal.JOURNAL, epilog=journal.VERIFY_EPILOG)
    p.add_argument("command", choices=("verify", "ingest"),
                   help="verify: check every link, name the first broken one; ingest: take in (as root) what "
                        "builds verified: each record in the spool verified again and journaled "
                        "(/usr/share/doc/gkeys-portage/journal.md)")
