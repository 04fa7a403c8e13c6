"""CLI actions ``verify-tree`` (git commit signatures against the developer keyring) and ``verify-snapshot``
(an emerge-webrsync snapshot of the tree against the pinned repository key)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from gkeys_portage.cli.common import SubParsers, add_action, add_category
from gkeys_portage.core.errors import EXIT_NOT_VERIFIED, BadInputError, UsageError
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.ui.output import Message, Report
from gkeys_portage.verify.git import accepted
from gkeys_portage.verify.git.markers import clear_marker, failure_markers
from gkeys_portage.verify.git.tree import POLICIES, TreeOptions, TreeReport, TreeVerifier, journal_tree, open_repo
from gkeys_portage.verify.manifest.snapshot import DEFAULT_SNAPSHOT_MAX_AGE, fetch_and_verify, verify_snapshot

DESCRIPTION = """\
Verify the OpenPGP signature of every commit of a git repository (e.g. the Gentoo tree).

A commit passes only if it carries a gpgsig header, GnuPG calls the signature good (and Sequoia, the
second opinion, agrees: engines-disagree otherwise), and the signer's PRIMARY key fingerprint is
pinned by a seed of one of the categories (-C, repeatable; default gentoo-devs).
Merge commits are checked like any other.  A key that expired after the commit was signed is
fine; a revoked key, a signature older than its key, or one dated in the future is not.  Each
signature is judged at its own time: a subkey revoked as superseded (a rotation) keeps the commits it
signed before its revocation; a compromised key fails them all.  For seeds derived from an authority
(GLEP 79) a key signs only inside its authorization windows: after a retirement its commits are
refused (signer-retired), and one dated inside a window that has closed since needs evidence it was
made before (it lies below the last verified revision, or below a commit signed then by a key
authorized then): a stolen retired key cannot backdate a commit on top.

Without --range the commits checked are those between the last verified revision recorded for
this repository and REV (default HEAD); a repository never verified before is checked according
to --policy: 'top' checks only the top commit, 'all' its whole history.  When everything passed,
REV is recorded as the last verified revision (atomically), so the next run checks only new
commits.  If the recorded revision is no longer an ancestor (upstream rewrote verified history,
e.g. a force-push), nothing is accepted and the run fails.  A refused run records the newest commit
whose whole history passed (the first good ancestor).  Commits that must stay refused (a compromised
key's) are passed only by name: --accept COMMIT --reason TEXT, kept and journaled, honoured by every
later check (the sync module and the hooks too).
"""

EPILOG = """\
config ([tree] section, all optional):
  category = gentoo-devs gentoo-infra   who may sign commits (space-separated: any of them)
  top-category = gentoo-infra          who may also sign the top commit only
                                       (the sync repositories need gentoo-infra in category,
                                       since mirror commits lie between two syncs)
  policy = top                  first run: top | all

examples:
  gkeys verify-tree /var/db/repos/gentoo -C gentoo-devs -C gentoo-infra
  gkeys verify-tree /var/db/repos/gentoo --policy all
  gkeys --json verify-tree /var/db/repos/gentoo -T gentoo-infra
  gkeys verify-tree --clear-marker myoverlay   # emerge --sync fails for a repository you removed
  gkeys verify-tree ~/gentoo --accept 48c45d84560f --reason "compromised key; checked by hand"

exit status: 0 every commit verified, 1 a commit was refused (each is named with its author and
the reason, plus the newest good ancestor), 2 bad input (not a git repository, no seeds).
"""


SNAPSHOT_DESCRIPTION = """\
Verify an emerge-webrsync snapshot (gentoo-YYYYMMDD.tar.xz and its .gpgsig).

The signature must come from the category's pinned repository key (the seed 'snapshot', Gentoo's
ebuild repository key DCD05B71...); the release-media and mirror keys pinned in the same category do
not count.  The file name is not signed, so the date is read from inside the signed archive
(metadata/timestamp.x) and must fall in emerge-webrsync's window for the day the name says (day D's
snapshot is made at about 00:45 UTC on D+1: D 00:00 to D+2 00:00 UTC).  That time must not be older
than the newest snapshot verified before for the repository (the high-water mark in gkeys' state: a
mirror serving an old snapshot is refused) nor older than the maximum age (a frozen mirror).

FILE is read once, into a private copy that the signature, the date and the digest are all taken
from.  FILE may be a URL: the snapshot and its .gpgsig are downloaded into a private directory under
gkeys' state, verified there, and only then moved into -d DIR (renamed into place: a symlink there is
replaced, never followed); a refused snapshot never reaches DIR.
"""

SNAPSHOT_EPILOG = """\
config ([snapshot] section, all optional):
  category = gentoo      whose repository key signs snapshots
  max-age = 48           hours (snapshots are made daily; 0 = no maximum)

examples:
  gkeys verify-snapshot /var/cache/distfiles/gentoo-20261204.tar.xz
  gkeys verify-snapshot https://distfiles.gentoo.org/snapshots/gentoo-20261204.tar.xz -d /var/tmp
  gkeys --json verify-snapshot gentoo-20261204.tar.xz -C gentoo --max-age 72

exit status: 0 verified, 1 not verified (unsigned, wrong signer, renamed, older than the last one,
too old), 2 bad input, 3 network failure.
"""


def render(report: TreeReport, policy: str | None = None, *, root_commit: bool = False) -> Report:
    """Turn a tree report into output lines and JSON; under ``policy`` top, a first run says that the history
    below the top commit was not checked, and how to check it (``root_commit``: the top has no parent, so
    there is no history below it).  A refusal names the first refused commit's own code as ``reason`` and
    the command that shows it as ``next_step``, the same in the text."""
    out = Report(data=report.to_json())
    for level, text in report.describe():
        out.messages.append(Message(level, text))
    top_only = policy == "top" and report.base is None and report.checked == 1 and not root_commit
    out.data["history_checked"] = not top_only
    if top_only:
        every = f"gkeys verify-tree {shlex.quote(str(report.repo))} --range ..{report.tip[:12]}"
        out.info(f"policy top: only the top commit {report.tip[:12]} was checked, not the history below it; "
                 f"to check every commit up to it: {every} (or --policy all on a first run)")
    if not report.ok:
        out.exit_code = EXIT_NOT_VERIFIED
        first = report.bad[0]
        step = f"git -C {shlex.quote(str(report.repo))} log --show-signature -1 {first.commit}"
        out.info(f"next: see the first refused commit: {step}")
        out.data.update(reason=first.code or "not-verified", next_step=step)
    return out


def clear_failure_marker(ctx: Gkeys, repo_name: str) -> Report:
    """Remove the hook's failure marker of ``repo_name`` (a repository that is gone, or fixed by hand)."""
    if clear_marker(ctx.layout, repo_name):
        return Report(data={"cleared": repo_name}).good(
            f"removed the failure marker of {repo_name}; emerge --sync no longer fails for it")
    names = sorted(marker.get("repo", "") for marker in failure_markers(ctx.layout))
    known = ", ".join(names) if names else "none"
    raise BadInputError(f"no failure marker for repository {repo_name} (repositories with a marker: {known})")


def run_verify_tree(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Verify the commits of a repository and record the verified top (or clear a hook's marker)."""
    if args.clear_marker:
        return clear_failure_marker(ctx, args.clear_marker)
    if not args.repo:
        raise UsageError("verify-tree: give the repository path REPO (or --clear-marker NAME)")
    if args.accept and not (Path(args.repo) / ".git").exists() and not Path(args.repo, "HEAD").exists():
        # a first clone that was refused left no repository: full hashes are accepted for the next sync
        commits = [c.lower() for c in args.accept]
        if not all(accepted.HASH_RE.match(c) for c in commits):
            raise UsageError(f"{args.repo} is not a git repository: --accept takes full commit hashes there")
        new = accepted.accept(ctx, commits, args.reason or "", str(Path(args.repo)))
        return Report(data={"accepted": new}).good(
            f"accepted {len(new)} commit(s) by hand for {args.repo} (journaled); the next sync lets them pass")
    repo = open_repo(Path(args.repo))  # "not a git repository" comes first, before any seed or keyring problem
    options = TreeOptions.from_config(ctx, category=args.category, top_category=args.top_category,
                                      policy=args.policy)
    verifier = TreeVerifier(ctx, options)
    report = verifier.verify_repo(Path(args.repo), revision=args.rev, commit_range=args.range,
                                  record=not args.no_record, progress=args.console.progress("commits verified"),
                                  accept=args.accept or (), reason=args.reason or "")
    if not report.ok or (not args.no_record and not args.range):  # a revision recorded as verified is accepted
        journal_tree(ctx, report, options, report.repo)
    tip = repo.read_commits([report.tip]).get(report.tip) if report.checked == 1 and report.base is None else None
    return render(report, options.policy, root_commit=tip is not None and not tip.parents)


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://", "file://"))


def run_verify_snapshot(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Verify (after downloading, for a URL) one snapshot; raise the repository's high-water mark."""
    category = args.category or ctx.config.get("snapshot", "category", "gentoo")
    max_age = args.max_age if args.max_age is not None else ctx.config.number("snapshot", "max-age",
                                                                              DEFAULT_SNAPSHOT_MAX_AGE)
    if max_age < 0:
        raise UsageError(f"--max-age {max_age:g}: expected hours (0 for no maximum)")
    signature = Path(args.signature) if args.signature else None
    if _is_url(args.file):
        verified = fetch_and_verify(ctx, args.file, Path(args.dest), category, signature=signature, repo=args.repo,
                                    max_age_hours=max_age, record=not args.no_record)
    else:
        verified = verify_snapshot(ctx, Path(args.file), category, signature=signature, repo=args.repo,
                                   max_age_hours=max_age, record=not args.no_record)
    path = verified.path
    signer = verified.signer
    return Report(data=verified.to_json()).good(
        f"{path.name}: signed by {signer.pin.category}/{signer.pin.nick} ({signer.pin.fingerprint}), tree of "
        f"{verified.timestamp:%Y-%m-%d %H:%M:%S} UTC: verified")


def register(sub: SubParsers) -> None:
    """Register verify-tree and verify-snapshot."""
    p = add_action(sub, "verify-snapshot", run_verify_snapshot, verifies="file",
                   summary="verify an emerge-webrsync snapshot", description=SNAPSHOT_DESCRIPTION,
                   epilog=SNAPSHOT_EPILOG)
    p.add_argument("file", metavar="FILE", help="gentoo-YYYYMMDD.tar.xz (a path or a URL)")
    add_category(p, help_text="category whose repository key signs snapshots (default: [snapshot] category, "
                              "else gentoo)")
    p.add_argument("-s", "--signature", metavar="SIG", help="the signature (default: FILE.gpgsig)")
    p.add_argument("-d", "--dest", default=".", metavar="DIR", help="where a URL is downloaded to (default: .)")
    p.add_argument("--repo", default="gentoo", metavar="NAME",
                   help="the repository whose high-water mark applies (default: gentoo)")
    p.add_argument("--max-age", type=float, metavar="HOURS",
                   help=f"refuse a snapshot older than this (default: [snapshot] max-age, else "
                        f"{DEFAULT_SNAPSHOT_MAX_AGE:g}; 0 = no maximum)")
    p.add_argument("--no-record", action="store_true", help="do not raise the high-water mark")
    p = add_action(sub, "verify-tree", run_verify_tree, verifies="repo",
                   summary="verify the signatures of git commits",
                   description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("repo", metavar="REPO", nargs="?", help="path of the git repository")
    p.add_argument("--clear-marker", metavar="NAME",
                   help="remove the failure marker the git sync hooks left for repository NAME (one that is "
                        "gone, or repaired by hand) and exit")
    p.add_argument("--range", metavar="A..B", help="check exactly the commits of A..B (nothing is recorded)")
    p.add_argument("--rev", default="HEAD", metavar="REV", help="the revision to verify up to (default HEAD)")
    p.add_argument("--policy", choices=POLICIES, default=None,
                   help="first run without a record: top = top commit only, all = whole history "
                        "(default: [tree] policy, else top)")
    p.add_argument("-C", "--category", action="append", metavar="CAT",
                   help="category whose pinned keys may sign commits; repeat it (or give a space-separated "
                        "list) to accept any of several (default: [tree] category, else gentoo-devs)")
    p.add_argument("-T", "--top-category", metavar="CAT",
                   help="category whose keys may also sign the top commit (a mirror's key)")
    p.add_argument("--no-record", action="store_true", help="do not record the verified revision")
    p.add_argument("--accept", action="append", metavar="COMMIT",
                   help="accept this refused commit (a full hash, a revision or an A..B range; repeat it) by hand, "
                        "recorded and journaled with --reason; every later check lets it pass")
    p.add_argument("--reason", metavar="TEXT", help="why the --accept commits are accepted (required with --accept)")
