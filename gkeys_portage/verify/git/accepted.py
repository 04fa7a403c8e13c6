"""Commits accepted by hand: the deliberate, journaled way past a refusal that must stand (issue 41 item 5).

A history can hold a commit every rule refuses (signed by a key compromised since, or by a retired key with
nothing to show its date).  Freezing the repository forever is no answer, and neither is a command that
changes nothing: ``gkeys verify-tree REPO --accept COMMIT --reason TEXT`` names the commits (full hashes, or
revisions and ``A..B`` ranges of REPO) and why.  Each one is kept in ``state/tree-accepted.json`` (a commit
hash names its content, so the record holds wherever the commit is met: the CLI, the sync module's staging
copy, the hooks) and journaled as ``tree-accepted-by-hand`` with the reason.  Nothing else changes: every
other commit is judged as before, and an accepted commit is never evidence for another one's date.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from gkeys_portage.core import journal
from gkeys_portage.core.errors import GkeysError, UsageError
from gkeys_portage.core.state import Layout, atomic_write_json, read_json
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.verify.git.objects import GitRepo
from gkeys_portage.verify.git.revisions import Revisions

RECORD = "tree-accepted"
MAX_RANGE = 10000  # commits one --accept range may name (a whole history is not accepted by hand)
HASH_RE = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


def accepted_commits(layout: Layout) -> set[str]:
    """The commit hashes accepted by hand so far."""
    data = read_json(layout.record(RECORD), {})
    return {str(k) for k in data} if isinstance(data, dict) else set()


def resolve(repo: GitRepo, specs: Sequence[str]) -> list[str]:
    """The commits named by ``specs``: a full hash as it is (it may be met in a sync's staging copy only), a
    revision of ``repo``, or an ``A..B`` range of it (at most :data:`MAX_RANGE` commits)."""
    found: list[str] = []
    for spec in specs:
        start, sep, end = spec.partition("..")
        try:
            if not sep:
                found.append(spec.lower() if HASH_RE.match(spec.lower()) else repo.resolve(spec))
                continue
            tip = repo.resolve(end)
            with Revisions(repo, tip, [repo.resolve(start)] if start else []) as listed:
                if len(listed) > MAX_RANGE:
                    raise UsageError(f"--accept {spec} names {len(listed)} commits, more than {MAX_RANGE}: name the "
                                     "refused commits themselves")
                found.extend(listed)
        except UsageError:
            raise
        except GkeysError as exc:
            raise UsageError(f"--accept {spec}: not a commit or A..B range of {repo.path} ({exc.message})") from exc
    return list(dict.fromkeys(found))


def accept(ctx: Gkeys, commits: Iterable[str], reason: str, where: str) -> list[str]:
    """Record ``commits`` as accepted by hand for ``reason`` (atomic, under the lock) and journal each one;
    return the ones that were not accepted before."""
    if not reason.strip():
        raise UsageError("--accept needs --reason TEXT: why these commits are accepted (it goes to the trust journal)")
    ctx.ensure_layout()
    with ctx.lock:
        data = read_json(ctx.layout.record(RECORD), {})
        records = data if isinstance(data, dict) else {}
        new = [c for c in commits if c not in records]
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        for commit in new:
            records[commit] = {"reason": reason, "repo": where, "accepted": stamp}
        if new:
            atomic_write_json(ctx.layout.record(RECORD), records)
    for commit in new:
        journal.record(ctx, "tree-accepted-by-hand", {"repo": where, "commit": commit, "reason": reason})
    return new
