"""What is on disk, not only what HEAD says: work-tree checks and the one way to restore a revision.

A verdict about a repository drawn from ``HEAD`` alone is wrong whenever the work tree holds files
that HEAD does not: a ``git merge`` or ``git reset --hard`` that failed part-way (a path component
over 255 bytes, a full disk) writes new files and rewrites tracked ones but leaves HEAD where it was.
So a verified tree is "HEAD verified *and* the work tree equals HEAD *and* no fetched tip is left
outside HEAD", and putting a tree back means ``reset --hard`` plus ``clean -ffdx``, checked afterwards.
"""

from __future__ import annotations

import contextlib

from gkeys_portage.core.errors import BadInputError
from gkeys_portage.verify.git.objects import GitRepo, printable

#: ``-c`` settings for the status check: nothing cached or delegated may hide a change.
_STATUS_SETTINGS = ("-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false", "-c", "status.relativePaths=false")


def worktree_changes(repo: GitRepo) -> list[str]:
    """Every path where the work tree or index differs from HEAD (modified, untracked or ignored)."""
    result = repo.run(*_STATUS_SETTINGS, "--no-optional-locks", "status", "--porcelain", "-z",
                      "--untracked-files=all", "--ignored", "--no-renames")
    entries = [item for item in result.stdout.split(b"\0") if item]
    return [entry[3:].decode("utf-8", "replace") for entry in entries]


def describe_changes(changes: list[str], limit: int = 3) -> str:
    """``"2 paths differ from HEAD (a, b)"`` for a message."""
    shown = ", ".join(printable(c, 80) for c in changes[:limit]) + (", ..." if len(changes) > limit else "")
    return f"{len(changes)} path{'s' if len(changes) != 1 else ''} differ from HEAD ({shown})"


def unmerged_fetch(repo: GitRepo, head: str) -> str | None:
    """A fetched tip (``FETCH_HEAD`` or the upstream branch) that is not part of ``head``, if any."""
    fetched: list[str] = []
    for name in ("FETCH_HEAD", "@{upstream}"):
        with contextlib.suppress(BadInputError):
            fetched.append(repo.resolve(name))
    for tip in fetched:
        if tip != head and not repo.is_ancestor(tip, head):
            return tip
    return None


def require_clean(repo: GitRepo) -> None:
    """Raise :class:`BadInputError` unless the work tree is exactly HEAD."""
    changes = worktree_changes(repo)
    if changes:
        raise BadInputError(f"the work tree at {repo.path} is not the checked-out revision: "
                            f"{describe_changes(changes)}")


def restore_revision(repo: GitRepo, revision: str) -> None:
    """Put index and work tree at ``revision`` unconditionally, remove every other file, check the result.

    Raises :class:`BadInputError` if git fails or the tree still differs afterwards.
    """
    repo.run("reset", "--hard", "--quiet", "--no-recurse-submodules", revision)
    repo.run("clean", "-ffdxq")
    if repo.resolve("HEAD") != repo.resolve(revision):
        raise BadInputError(f"{repo.path}: HEAD did not move to {revision[:12]}")
    require_clean(repo)
