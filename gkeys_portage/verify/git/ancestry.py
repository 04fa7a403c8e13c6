"""The first good ancestor of a refused range: where a user can reset to.

It is the newest commit on the tip's first-parent line whose whole history in the range is good.  The
verifier keeps no parent lists while it checks (a million commits' would take ~250 MiB): only when
something was refused does this ask git again, once parents-first to mark every commit that has a
refused one in its history, once along the first-parent line.  Memory grows with the commits marked,
not with the range.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

from gkeys_portage.verify.git.revisions import Revisions


def _lines(listing: IO[bytes]) -> Iterator[list[str]]:
    with listing:
        for line in listing:
            yield line.decode("ascii").split()


def first_good_ancestor(revisions: Revisions, bad: set[str], *, below: bool) -> str | None:
    """The newest commit on ``revisions.tip``'s first-parent line whose history in the range holds no
    commit of ``bad``.

    History below the range was verified before when ``below`` is set (the range starts at a recorded
    revision), so when no commit of the range qualifies the answer is the first commit below it on that
    line; otherwise None.
    """
    if not bad:
        return revisions.tip if len(revisions) or below else None
    if revisions.only_tip and not below:
        return None  # the tip is the range, and it was refused
    tainted: set[str] = set()
    for commit, *parents in _lines(revisions.listing("--reverse", "--parents")):  # parents before children
        if commit in bad or any(parent in tainted for parent in parents):
            tainted.add(commit)
    current: str | None = None
    for commit, *parents in _lines(revisions.listing("--first-parent", "--parents")):
        if commit not in tainted:
            return commit
        current = parents[0] if parents else None
    return current if below else None
