"""Evidence that a commit existed before its signer's authorization closed (issue 41 item 4; docs/tree.md).

A commit signed inside an authorization window that has closed since (a developer retired after signing it)
carries a date its signer wrote: whoever holds the retired key can sign a new commit with any date inside the
old window.  Such a commit counts only with evidence it existed before the window closed:

* it lies below the last verified revision (the record): it was verified here while the window was open, and
  is never checked again (:meth:`~gkeys_portage.verify.git.tree.TreeVerifier.plan`); the recorded tip itself,
  checked again for its age, counts the same;
* or a commit above it (a descendant: its hash names the commit's, so it cannot have been made first) is good,
  signed by a key authorized at its own date (an open window, or itself proven so), and that date lies before
  the window closed.  On Gentoo's sync repositories the mirror's merge commits, signed every hour by the
  mirror key, date every developer commit below them.

The walk is git's topological order, children before parents, so every commit's descendants in the range are
judged before it: each commit hands its parents the earliest trusted date seen at or above it, and only the
frontier (commits whose children were read but not themselves yet) is held, a few entries on a linear
history, never the whole range.
"""

from __future__ import annotations

from gkeys_portage.core.windows import stamp, unproven
from gkeys_portage.verify.git.commits import CommitVerdict
from gkeys_portage.verify.git.objects import Commit


class Evidence:
    """The earliest trusted date above each commit of a range walked children first."""

    def __init__(self, recorded: str | None = None) -> None:
        self.recorded = recorded  # the last verified revision: verified here before
        self.bounds: dict[str, int] = {}  # commit -> earliest trusted date of a commit above it

    def judge(self, commit: Commit, verdict: CommitVerdict) -> None:
        """Refuse ``verdict`` (good, but inside a closed window) unless a commit above it or the record shows
        it existed before the window closed; then pass the earliest trusted date on to its parents."""
        above = self.bounds.pop(commit.hash, None)
        if verdict.good and verdict.closed_since:
            if commit.hash == self.recorded:
                above = min(above if above is not None else verdict.signed, verdict.signed)
            elif above is None or above >= verdict.closed_since:
                assert verdict.window is not None
                shown = ("" if above is None else
                         f"; the earliest commit above it by a key authorized then is dated {stamp(above)}")
                verdict.reason = unproven(verdict.window, verdict.signed,
                                          f"{verdict.signer} ({verdict.fingerprint})").message + shown
                verdict.code = "signer-retired"
        trusted = verdict.signed if verdict.good else None
        value = min((v for v in (above, trusted) if v is not None), default=None)
        if value is None:
            return
        for parent in commit.parents:
            known = self.bounds.get(parent)
            self.bounds[parent] = value if known is None else min(known, value)
