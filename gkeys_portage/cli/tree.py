"""CLI action ``verify-tree``: git commit signatures against the developer keyring."""

from __future__ import annotations

import argparse
from pathlib import Path

from gkeys_portage.cli.common import SubParsers, add_action
from gkeys_portage.core.errors import EXIT_NOT_VERIFIED, BadInputError, UsageError
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.ui.output import Message, Report
from gkeys_portage.verify.git.markers import clear_marker, failure_markers
from gkeys_portage.verify.git.tree import POLICIES, TreeOptions, TreeReport, TreeVerifier, open_repo

DESCRIPTION = """\
Verify the OpenPGP signature of every commit of a git repository (e.g. the Gentoo tree).

A commit passes only if it carries a gpgsig header, GnuPG calls the signature good, and the
signer's PRIMARY key fingerprint is pinned by a seed of one of the categories (-C, repeatable;
default gentoo-devs).
Merge commits are checked like any other.  A key that expired after the commit was signed is
fine; a revoked key, a signature older than its key, or one dated in the future is not.  A revoked
signing subkey fails every commit it signed, even those made before the revocation (GnuPG reports
them revoked); the refusal says when and why it was revoked, and for a key rotation (superseded,
after the commit) how to start from the top commit instead (--policy top, on a first run).

Without --range the commits checked are those between the last verified revision recorded for
this repository and REV (default HEAD); a repository never verified before is checked according
to --policy: 'top' checks only the top commit, 'all' its whole history.  When everything passed,
REV is recorded as the last verified revision (atomically), so the next run checks only new
commits.  If the recorded revision is no longer an ancestor (upstream rewrote verified history,
e.g. a force-push), nothing is accepted and the run fails.
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
  gkeys verify-tree ~/gentoo --range origin/master~50..origin/master
  gkeys --json verify-tree /var/db/repos/gentoo -T gentoo-infra
  gkeys verify-tree --clear-marker myoverlay   # emerge --sync fails for a repository you removed

exit status: 0 every commit verified, 1 a commit was refused (each is named with its author and
the reason, plus the newest good ancestor), 2 bad input (not a git repository, no seeds).
"""


def render(report: TreeReport) -> Report:
    """Turn a tree report into output lines and JSON."""
    out = Report(data=report.to_json())
    for level, text in report.describe():
        out.messages.append(Message(level, text))
    if not report.ok:
        out.exit_code = EXIT_NOT_VERIFIED
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
    open_repo(Path(args.repo))  # "not a git repository" comes first, before any seed or keyring problem
    options = TreeOptions.from_config(ctx, category=args.category, top_category=args.top_category,
                                      policy=args.policy)
    verifier = TreeVerifier(ctx, options)
    report = verifier.verify_repo(Path(args.repo), revision=args.rev, commit_range=args.range,
                                  record=not args.no_record, progress=args.console.progress("commits verified"))
    return render(report)


def register(sub: SubParsers) -> None:
    """Register verify-tree."""
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
