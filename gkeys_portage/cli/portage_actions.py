"""CLI actions ``setup-portage``, ``doctor`` and ``status``: argument parsing and presentation of
:mod:`gkeys_portage.portage.setup`, :mod:`gkeys_portage.portage.doctor` and :mod:`gkeys_portage.portage.status`."""

from __future__ import annotations

import argparse
import os
import shlex
import time
from pathlib import Path

from gkeys_portage.cli.common import SubParsers, add_action
from gkeys_portage.core import invocation
from gkeys_portage.core.config import eprefix, load_config
from gkeys_portage.core.errors import UsageError
from gkeys_portage.core.types import parse_category
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.portage import doctor as portage_doctor
from gkeys_portage.portage import makeconfsteps
from gkeys_portage.portage import setup as portage_setup
from gkeys_portage.portage.confined import ConfinedRoot
from gkeys_portage.portage.status import Status, collect_status
from gkeys_portage.ui.output import Report
from gkeys_portage.verify.manifest.purpose import repository_keyring

SETUP_DESCRIPTION = """\
Wire Portage to gkeys in one command, with new files only:

  ${EROOT}/etc/portage/repo.postsync.d/gkeys-verify   hook (its #! line names this Python)
  ${EROOT}/etc/portage/postsync.d/gkeys-verify        hook: fails emerge --sync after a refusal
  ${EROOT}/etc/portage/postsync.d/gkeys-overlays      hook, with --overlays
  ${EROOT}/etc/portage/repos.conf/zz-gkeys.conf       the --repo repositories on sync-type = gkeys
                                                      (read last, so it wins)
  ${EROOT}/etc/portage/make.conf/gkeys-fetch.conf     FETCH_WRAPPER, with --fetch-wrapper (or
                                                      etc/portage/gkeys-fetch.conf to source from a
                                                      make.conf file, which is never edited)

An existing file with other content stops the install: it is reported and nothing is written (exit 1).
Paths are never followed through a symlink, and every directory down to etc/portage must belong to you
or root and be writable by nobody else.  Running it again changes nothing; --undo removes exactly the
files it created (while unchanged; recorded in gkeys' state: with --eroot R and no -c/--root, R's own
R/var/lib/gkeys/state) and the directories it made.
"""

SETUP_EPILOG = """\
examples:
  gkeys setup-portage --dry-run                 # show the files as a diff, write nothing
  gkeys setup-portage                           # ::gentoo verified (rsync stays rsync; else the git mirror)
  gkeys setup-portage --repo gentoo --fetch-wrapper --overlays
  gkeys setup-portage --repo guru --category guru   # an overlay: the category pinning its committers
  gkeys setup-portage --undo

exit status: 0 done (or nothing to do), 1 a file was in the way (nothing written), 2 bad input (a
repository that is not configured, does not sync with git or has no category; an unsafe path).
"""


def _eroot(args: argparse.Namespace) -> Path:
    return Path(args.eroot) if args.eroot else Path(eprefix() or "/")


def _setup_report(result: portage_setup.SetupResult, *, undo: bool, step_left: str | None = None) -> Report:
    """Text and JSON of setup-portage; ``step_left``: the make.conf command still to run (said as *the* step)."""
    report = Report(data={"action": "setup-portage", "undo": undo, "dry_run": result.dry_run,
                          "eroot": str(result.eroot), "ok": result.ok,
                          "created": [str(p) for p in result.created if p not in result.updated],
                          "updated": [str(p) for p in result.updated],
                          "unchanged": [str(p) for p in result.unchanged],
                          "removed": [str(p) for p in result.removed],
                          "left_alone": [{"path": str(p), "reason": why} for p, why in result.conflicts],
                          "notes": result.notes, "diff": result.diff})
    would = "would " if result.dry_run else ""
    if result.dry_run and result.diff:
        report.text_block(result.diff)
    for path in result.created:  # a file an earlier run wrote is updated (a re-run), not created
        report.good(f"{would}{'update' if path in result.updated else 'create'} {result.eroot / path}")
    for path in result.removed:
        report.good(f"{would}remove {result.eroot / path}")
    for path in result.unchanged:
        report.info(f"already in place: {result.eroot / path}")
    for path, why in result.conflicts:
        report.error(f"{result.eroot / path} {why}; left alone: compare with 'gkeys setup-portage --dry-run' "
                     "and merge it by hand" if not undo else f"{result.eroot / path} {why}; remove it by hand")
    for note in result.notes:
        (report.warn if note.startswith(("add ", "do this")) else report.info)(note)
    step = step_left if not undo and result.ok else None
    report.data["step_left"] = step
    if step:
        report.warn(f"one step left, setup-portage never edits make.conf: run  {step}  (make.conf then sources the "
                    "FETCH_WRAPPER fragment; until then Portage does not use it)")
    elif not (result.created or result.removed or result.conflicts) and not undo:
        report.good("nothing to do: Portage is already set up for gkeys")
    if undo and not (result.removed or result.conflicts or result.notes):
        report.good(f"nothing left to remove in {result.eroot}: the files setup-portage recorded are gone already "
                    "(its record is removed)")
    if not undo and result.ok and not result.dry_run:
        report.data["next_step"] = "gkeys doctor"  # --json carries it too, with the -c/--root/--eroot given
        report.info(("after that step, " if step else "next: ") + "'gkeys doctor' checks the whole set-up; "
                    "'emerge --sync' verifies from now on")
        if any(path == portage_setup.TIMER_LINK for path in result.created):
            report.info("keys are refreshed off the sync path by gkeys-refresh.timer, enabled from the next boot "
                        "(start it now: systemctl start gkeys-refresh.timer)")
    report.exit_code = 0 if result.ok else 1
    return report


#: the state of a root below ``--eroot R`` (R's own gkeys state, where setup-portage then keeps its record)
EROOT_STATE = Path("var/lib/gkeys/state")


def record_dir(ctx: Gkeys, args: argparse.Namespace, *, create: bool) -> Path:
    """Where setup-portage keeps its record: with ``--eroot R`` and neither ``-c``, ``--root`` nor
    ``$GKEYS_CONFIG``, R's own gkeys state (``R/var/lib/gkeys/state``, beside what it describes, never the running
    system's; its directories checked as setup-portage checks ``etc/portage``); otherwise the state of the
    configuration in use."""
    if args.eroot and not args.config and not args.root and "GKEYS_CONFIG" not in os.environ:
        with ConfinedRoot(Path(args.eroot)) as root:
            fd = root.directory(EROOT_STATE / portage_setup.RECORDS, create=create)
            if fd is not None:
                os.close(fd)
        return Path(args.eroot) / EROOT_STATE
    if create:
        ctx.ensure_layout()
    return ctx.layout.state_dir


def known_category(ctx: Gkeys, category: str) -> str:
    """``category`` if gkeys can have its seeds (installed, packaged, with a ``[seedurls]`` URL or an
    ``[authority-seeds]`` line); otherwise a :class:`UsageError` listing those (doctor could only send the user to
    an ``update-seed`` that fails)."""
    cat = parse_category(category)
    known = set(ctx.seeds.categories()) | set(ctx.config.seedurls) | set(ctx.config.authority.sources)
    if cat in known:
        return cat
    raise UsageError(f"unknown category {cat!r} for --category: gkeys knows {', '.join(sorted(known)) or 'none'} "
                     "(installed, packaged, or with a seed URL); add its seed URL to [seedurls] in the config and "
                     f"'gkeys update-seed -C {cat}' first, or pin its keys with 'gkeys add-seed -C {cat} ...'")


def run_setup_portage(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """setup-portage."""
    eroot = _eroot(args)
    if args.category and not args.undo:
        known_category(ctx, args.category)
    record = portage_setup.record_path(record_dir(ctx, args, create=not (args.undo or args.dry_run)), eroot)
    if args.undo:
        refusal = undo_refusal(eroot, record)
        if refusal is not None:
            return refusal
        return _setup_report(portage_setup.undo(eroot, record=record, dry_run=args.dry_run), undo=True)
    result = portage_setup.setup(eroot, args.repo or ["gentoo"], record=record, fetch_wrapper=args.fetch_wrapper,
                                 overlays=args.overlays, category=args.category, dry_run=args.dry_run,
                                 keyrings=lambda category: repository_keyring(ctx, category))
    step = makeconfsteps.fetch_step(eroot) if args.fetch_wrapper else None
    return _setup_report(result, undo=False, step_left=step)


def undo_refusal(eroot: Path, record: Path) -> Report | None:
    """A refusal (exit 1, nothing removed) while make.conf still ``source``s a file ``--undo`` would remove:
    Portage would fail on every command; the line is named with the command that takes it out."""
    if not record.exists():
        return None
    lines = [(file, line) for name in portage_setup.read_record(record, eroot).files
             for file, line in makeconfsteps.sourcing_lines(eroot, eroot / name)]
    if not lines:
        return None
    report = Report(data={"action": "setup-portage", "undo": True, "eroot": str(eroot), "ok": False,
                          "sourced_by": [{"file": str(f), "line": line} for f, line in lines]})
    for file, line in lines:
        report.error(f"{file} still has the line '{line}': --undo would remove the file it sources and Portage would "
                     f"then fail on every command; nothing removed. Take the line out first: "
                     f"{makeconfsteps.unsource_command(file, line)}")
    report.exit_code = 1
    return report


DOCTOR_DESCRIPTION = """\
Report everything that would make verification fail or be skipped on this system, each finding with
the command that fixes it: seeds or keys missing or older than [policy] max-refresh-age, keys expiring
within 30 days, git repositories without the gkeys hooks or with shallow clone-depth/sync-depth,
hooks that are not executable, FETCH_WRAPPER not running gkeys-fetch, gpg missing or older than 2.2, the
second opinion (Sequoia, pysequoia) turned off with [gpg] second-opinion = no or not installed, a
clock behind the newest verification recorded, keyrings the portage user cannot read.

With --eroot and without -c, the configuration is ${EROOT}/etc/gkeys/gkeys.conf when it exists.
"""

DOCTOR_EPILOG = """\
exit status: 0 nothing is wrong, 1 at least one finding, 2 bad input.
--json: {"eroot", "ok", "checked": [...], "findings": [{"code", "subject", "message", "fix", "fix_note"}]}
  fix: the command that fixes it (null when the fix is prose only: edit a file, set the clock);
  fix_note: the whole fix as the text prints it, when it says more than the command (else null)
"""


def run_doctor(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """doctor."""
    eroot = _eroot(args)
    own_config = eroot / "etc/gkeys/gkeys.conf"
    if args.eroot and not args.config and "GKEYS_CONFIG" not in os.environ and own_config.is_file():
        ctx = Gkeys(load_config(own_config, Path(args.root) if args.root else None))
        invocation.use_config(str(own_config))  # its fixes must act on that config too (the output door adds it)
    diagnosis = portage_doctor.diagnose(ctx, eroot, portage_user=args.portage_user)
    report = Report(data={"action": "doctor", **diagnosis.to_json()})
    for line in diagnosis.checked:
        report.info(f"checked {line}")
    for finding in diagnosis.findings:
        report.error(f"{finding.code}: {finding.subject}: {finding.message}; fix: {finding.fix}")
    if diagnosis.ok:
        report.good("nothing would make verification fail or be skipped")
    else:
        again = "gkeys doctor" + (f" --eroot {shlex.quote(args.eroot)}" if args.eroot else "")
        report.error(f"{len(diagnosis.findings)} finding(s); run the fixes above, then '{again}' again")
    report.exit_code = 0 if diagnosis.ok else 1
    return report


STATUS_DESCRIPTION = """\
One screen of what gkeys knows, read from its state and repos.conf (nothing is fetched):
every category with its seeds, installed pinned keys, next expiry, last refresh and when each key
source last answered; every repository with its sync type, what verifies it, and the last verified
git revision or high-water mark (the newest verified Manifest TIMESTAMP or snapshot); the OpenPGP
engine, and whether the second opinion is on (Sequoia confirms every signature GnuPG accepts); and how
many findings 'gkeys doctor' has.
"""

STATUS_EPILOG = """\
examples:
  gkeys status
  gkeys --json status
  gkeys status --eroot /mnt/gentoo --no-doctor

exit status: 0 (status reports; 'gkeys doctor' judges), 2 bad input.
"""


def _when(epoch: float | None, fmt: str = "%Y-%m-%d %H:%M") -> str:
    return time.strftime(fmt + " UTC", time.gmtime(epoch)) if epoch is not None else "never"


def render_status(status: Status, eroot: Path | None = None) -> Report:
    """Text and JSON of ``gkeys status`` (``eroot``: where Portage's configuration was looked for)."""
    report = Report(data={"action": "status", **status.to_json()})
    if eroot is not None:
        report.data["eroot"] = str(eroot)
    report.plain("categories (seeds, pinned keys installed, next expiry, last refresh; last answer per source):")
    for cat in status.categories:
        expiry = _when(cat.next_expiry, "%Y-%m-%d") if cat.next_expiry else "none"
        if cat.expired:  # list-key says [expired] and doctor keys:expired for these
            since = min((when for when in cat.expired.values() if when is not None), default=None)
            expiry += f" ({len(cat.expired)} expired" + (f" {_when(since, '%Y-%m-%d')})" if since else ")")
        # a source is asked by a refresh (every source, every key); an install stops at the first that answers
        unasked = "no refresh yet" if cat.last_refresh is None else "never"
        sources = ", ".join(f"{source} {_when(when) if when is not None else unasked}"
                            for source, when in cat.sources.items()) or "no sources"
        report.plain(f"  {cat.name:<16} {cat.seeds} seeds, {cat.keys} keys, next expiry {expiry}, refreshed "
                     f"{_when(cat.last_refresh)}; {sources}")
        for who, window in cat.retired.items():  # kept to judge their past signatures (authorization windows)
            report.plain(f"  {'':<16} retired: {who}, authorized {window}")
    report.plain("repositories (sync type, verified by; last verified revision or high-water mark):")
    for repo in status.repositories:
        if repo.mark:
            last = f"high-water mark {repo.mark['timestamp']} from {repo.mark['source']}"
        elif repo.revision:
            last = f"last verified revision {repo.revision[:12]}"
        else:
            last = "nothing verified yet"
        line = f"  {repo.name:<16} {repo.sync_type or '-'} ({repo.verified_by}); {last}"
        (report.warn if repo.verified_by == "nothing" else report.plain)(line)
    if not status.repositories and eroot is not None:
        where = eroot / portage_setup.ETC / "repos.conf"
        report.plain(f"  none: {where} configures no repository"
                     + (" (it does not exist)" if not where.exists() else "")
                     + "; for Portage in another root: gkeys status --eroot DIR")
    if status.engine:
        report.plain(f"OpenPGP engine: {status.engine}")
    else:
        report.warn(f"OpenPGP engine: cannot run: {status.engine_error}")
    state, said = status.second_opinion
    (report.plain if state == "on" else report.warn)(f"second opinion: {said}")
    if status.doctor_error:
        report.warn(f"doctor could not run: {status.doctor_error}")
    elif status.doctor_findings is None:
        report.info("doctor: not run (--no-doctor)")
    elif status.doctor_findings:
        report.warn(f"doctor: {status.doctor_findings} finding(s): run 'gkeys doctor' for them and their fixes")
    else:
        report.good("doctor: no findings")
    return report


def run_status(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """status."""
    return render_status(collect_status(ctx, _eroot(args), doctor=not args.no_doctor), _eroot(args))


def add_eroot(parser: argparse.ArgumentParser) -> None:
    """``--eroot DIR``."""
    parser.add_argument("--eroot", metavar="DIR",
                        help="the root whose etc/portage is set up (default: ${EPREFIX}/, i.e. / on Gentoo)")


def register(sub: SubParsers) -> None:
    """Register setup-portage, status and doctor."""
    p = add_action(sub, "setup-portage", run_setup_portage, summary="install the hooks and repos.conf that make "
                   "Portage verify with gkeys", description=SETUP_DESCRIPTION, epilog=SETUP_EPILOG)
    add_eroot(p)
    p.add_argument("--dry-run", action="store_true", help="show what would be written (a diff); write nothing")
    p.add_argument("--repo", action="append", metavar="NAME",
                   help="repository to switch to sync-type = gkeys (repeatable; default: gentoo)")
    p.add_argument("--category", metavar="CAT", help="the gkeys category whose keys sign the commits of the "
                   "--repo repositories other than gentoo (required for an overlay whose repos.conf section sets no "
                   "sync-gkeys-category: its committers are not Gentoo developers)")
    p.add_argument("--fetch-wrapper", action="store_true", help="also set FETCH_WRAPPER to gkeys-fetch "
                   "(release media verified after download)")
    p.add_argument("--overlays", action="store_true", help="also install the gkeys-overlays postsync hook "
                   "(the overlay list refreshed and verified)")
    p.add_argument("--undo", action="store_true", help="remove what setup-portage installed (unchanged files only)")
    p = add_action(sub, "status", run_status, summary="one screen: categories, keys, sources and repositories",
                   description=STATUS_DESCRIPTION, epilog=STATUS_EPILOG)
    add_eroot(p)
    p.add_argument("--no-doctor", action="store_true", help="do not count doctor's findings (faster)")
    p = add_action(sub, "doctor", run_doctor,
                   examples=("gkeys doctor",
                             "gkeys doctor --eroot /mnt/gentoo",
                             "gkeys --json doctor --portage-user portage"),
                   summary="report what would make verification fail or be skipped",
                   description=DOCTOR_DESCRIPTION, epilog=DOCTOR_EPILOG)
    add_eroot(p)
    p.add_argument("--portage-user", metavar="USER",
                   help="the user Portage fetches and builds as, who must read the keyrings (default: make.conf's "
                        "PORTAGE_USERNAME, else portage)")
