"""What is on disk, not only what HEAD says: work-tree checks and the one way to restore a revision.

A verdict about a repository drawn from ``HEAD`` alone is wrong whenever the work tree holds files
that HEAD does not: a ``git merge`` or ``git reset --hard`` that failed part-way (a path component
over 255 bytes, a full disk) writes new files and rewrites tracked ones but leaves HEAD where it was.
So a verified tree is "HEAD verified *and* the work tree equals HEAD *and* no fetched tip is left
outside HEAD", and putting a tree back means ``reset --hard`` plus ``clean -ffdx``, checked afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from gkeys_portage.core.errors import BadInputError
from gkeys_portage.verify.git.objects import GitRepo, printable

#: ``-c`` settings for the status check: nothing cached or delegated may hide a change.  The inode change
#: time is not compared (git's ``core.trustctime=false``, meant for "something outside Git" changing it):
#: every sync hard-links the tree into its staging copy and removes the old tree's links, each of which
#: changes the change time of every file, and comparing it made git re-read and hash every file of the tree
#: at each check (seconds for ``::gentoo``).  Content, size, mode, inode and modification time still count:
#: what a killed or failed checkout writes is a new file or a new modification time.
_STATUS_SETTINGS = ("-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false", "-c", "status.relativePaths=false",
                    "-c", "core.trustctime=false")


def _excluding(names: Sequence[str]) -> list[str]:
    """Pathspecs: the whole tree but the top-level entries ``names``."""
    return ["--", ":(top)", *(f":(top,literal,exclude){name}" for name in names)] if names else []


def worktree_changes(repo: GitRepo, exclude: Sequence[str] = ()) -> list[str]:
    """Every path where the work tree or index differs from HEAD (modified, untracked or ignored), except
    below the top-level entries ``exclude`` (what Portage keeps as the user's)."""
    result = repo.run(*_STATUS_SETTINGS, "--no-optional-locks", "status", "--porcelain", "-z",
                      "--untracked-files=all", "--ignored", "--no-renames", *_excluding(exclude))
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


def require_clean(repo: GitRepo, exclude: Sequence[str] = ()) -> None:
    """Raise :class:`BadInputError` unless the work tree is exactly HEAD (``exclude``: as for
    :func:`worktree_changes`)."""
    changes = worktree_changes(repo, exclude)
    if changes:
        raise BadInputError(f"the work tree at {repo.path} is not the checked-out revision: "
                            f"{describe_changes(changes)}")


def restore_revision(repo: GitRepo, revision: str, keep: Sequence[str] = (), *, trust_ctime: bool = True) -> None:
    """Put index and work tree at ``revision`` unconditionally, remove every other file, check the result.

    ``keep`` names top-level directories left alone (the user's ``distfiles``, ``local``, ``packages`` of a
    volatile repository) -- except the files in them that a fetched, unverified tip tracks and ``revision``
    does not: a merge that failed part-way wrote those, not the user.
    ``trust_ctime=False`` lets the reset skip files whose inode change time alone differs from the index (a
    work tree hard-linked from another, where every link changed it; the check never compares it either).
    The check comes first: ``clean -ffdx`` (a second walk of the tree) runs only if it finds something.
    Raises :class:`BadInputError` if git fails or the tree still differs afterwards.
    """
    planted = _fetched_paths(repo, revision, keep)
    repo.run(*([] if trust_ctime else ["-c", "core.trustctime=false"]), "reset", "--hard", "--quiet",
             "--no-recurse-submodules", revision)
    for path in planted:
        with contextlib.suppress(FileNotFoundError):
            (repo.path / path).unlink()
    if repo.resolve("HEAD") != repo.resolve(revision):
        raise BadInputError(f"{repo.path}: HEAD did not move to {revision[:12]}")
    if worktree_changes(repo, keep):  # one walk of the tree when nothing is left to clean, two otherwise
        repo.run("clean", "-ffdxq", *(f"--exclude=/{name}" for name in keep))
        require_clean(repo, keep)


def _fetched_paths(repo: GitRepo, revision: str, keep: Sequence[str]) -> list[str]:
    """Files below ``keep`` that HEAD or a fetched tip tracks and ``revision`` does not (git wrote them)."""
    if not keep:
        return []
    tips: set[str] = set()
    for name in ("HEAD", "FETCH_HEAD", "@{upstream}"):
        with contextlib.suppress(BadInputError):
            tips.add(repo.resolve(name))

    def tracked(commit: str) -> set[str]:
        out = repo.run("ls-tree", "-r", "-z", "--name-only", "--full-tree", commit, "--", *keep).stdout
        return {item.decode("utf-8", "surrogateescape") for item in out.split(b"\0") if item}

    wanted = tracked(revision)
    return sorted({path for tip in tips - {revision} for path in tracked(tip)} - wanted)
