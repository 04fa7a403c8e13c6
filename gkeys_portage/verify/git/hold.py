"""Root's hold on a git staging tree: what root verifies and checks out is root's alone, and proven by hash.

Under Portage's ``usersync`` git fetches as the repository's owner (normally ``portage``, the account every
build runs as), so the staging copy it fills is that user's until root takes it.  The *hold* is a directory
``.NAME.gkeys-*`` beside the location (root's, in root's ``/var/db/repos``) holding the staging tree ``tree``:

1. :func:`hold_directory`: the hold is mode 0711 while the sync user works in ``tree`` (its ``.git`` copied,
   the fetch; it can reach ``tree`` by name but create nothing beside it), 0700 otherwise.
2. :func:`take`: once the sync user's git has exited, the hold becomes 0700 and every directory of ``tree``
   root's with mode 0700, through :mod:`gkeys_portage.core.fs.fdtree` (no link followed, no mount crossed).  A
   process of the user holding a descriptor into the tree from before can no longer add, rename or remove a
   name in it (the kernel checks the directory's owner and mode at each call); it can still write a file it
   holds open, which the proof below catches.
3. :func:`root_git`: root's git never reads the user's ``.git``: it runs with a git directory of its own
   (``git``, beside ``tree`` in the hold: a configuration root wrote, no hooks, ``HEAD`` at the tip), reading
   the fetched objects through ``objects/info/alternates``, and with a copy of the user's index (a stat
   cache, nothing more).  No ``core.hooksPath``, ``core.fsmonitor``, filter, ``include.path`` or
   ``info/attributes`` the user wrote is ever seen by root's git.  Commit objects are hashed as they are read
   (:meth:`~gkeys_portage.verify.git.objects.GitRepo.read_commits`).
4. :mod:`~gkeys_portage.verify.git.proof`: after the checkout every file of the work tree is read through
   a descriptor, hashed as git hashes blobs, and the trees are hashed up to the top, which must be the tree
   the verified commit names.
   Nothing is trusted: not the object store (a pack rewritten in place), not the index, not a file shared
   with the live tree or the spare through a hard link and edited with its size and modification time put
   back.  The same walk gives root's new files to the tree's owner and digests every entry's identity (inode,
   size, modification and *change* time, mode, owner): the *inventory*, recorded with the revision, which a
   later sync compares before it trusts the live tree without a swap.  A write after the
   proof changes a change time, which no user can set back.
5. :func:`give`: last, after every check, the directories go back to the owner with the mode Portage gives
   them, by descriptor.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.core.errors import BadInputError, UsageError
from gkeys_portage.core.fs import fdtree
from gkeys_portage.verify.git.objects import GitRepo
from gkeys_portage.verify.git.spawn import SpawnSettings

TREE = "tree"
GIT = "git"
SPARE = "spare"
WORK = "work"
#: The largest ``shallow`` or ``HEAD`` file of the user's ``.git`` root reads (as data).
_SMALL = 64 << 20
_CHUNK = 1 << 20
_BRANCH = re.compile(rb"[A-Za-z0-9_+-][A-Za-z0-9._+-]*(/[A-Za-z0-9_+-][A-Za-z0-9._+-]*)*")


@dataclass
class Hold:
    """A hold directory (``top``), the staging tree in it, and whom the tree goes back to."""

    top: Path
    spawn: SpawnSettings
    owner: tuple[int, int] = (0, 0)
    top_mode: int = 0o755
    dir_mode: int = 0o755
    taken: bool = False
    removed: list[str] = field(default_factory=list)

    @property
    def tree(self) -> Path:
        """The staging tree."""
        return self.top / TREE

    @property
    def git_dir(self) -> Path:
        """Root's own git directory for the staging tree."""
        return self.top / GIT

    def open(self, name: str = TREE) -> int:
        """A descriptor of ``name`` in the hold (opened without following a link)."""
        top = fdtree.open_dir(self.top)
        try:
            return fdtree.open_dir(name, top)
        finally:
            os.close(top)

    def reach(self, mode: int) -> None:
        """Set the hold's own mode: 0711 lets the sync user reach ``tree`` by name, 0700 keeps it out."""
        fd = fdtree.open_dir(self.top)
        try:
            os.fchmod(fd, mode if self.spawn.switches_user else 0o700)
        finally:
            os.close(fd)


@contextlib.contextmanager
def hold_directory(parent: Path, prefix: str, spawn: SpawnSettings, like: Path | None) -> Iterator[Hold]:
    """A new hold in ``parent`` named ``prefix*``; its ``tree`` has the owner and mode of ``like`` (else those
    Portage would choose) and the sync user may reach it (0711).  Removed on the way out (by descriptor)."""
    parent.mkdir(parents=True, exist_ok=True)
    top = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    hold = Hold(top, spawn)
    try:
        os.mkdir(hold.tree, 0o700)
        spawn.prepare_directory(hold.tree, like=like if like is not None and like.is_dir() else None)
        st = os.lstat(hold.tree)
        umask = spawn.umask if spawn.umask is not None else 0o022
        hold.owner, hold.top_mode, hold.dir_mode = (st.st_uid, st.st_gid), stat.S_IMODE(st.st_mode), 0o777 & ~umask
        hold.reach(0o711)
        yield hold
    finally:
        remove(parent, top.name, hold.removed)


def remove(parent: Path, name: str, left: list[str] | None = None) -> None:
    """Remove ``parent/name`` by descriptor (never a link followed, never a mount crossed); what stays is named
    in ``left`` (a warning for the caller), never raised."""
    try:
        fd = fdtree.open_dir(parent)
    except OSError:
        return
    try:
        fdtree.remove_tree(fd, name)
    except OSError as exc:
        if left is not None:
            left.append(f"{parent / name} ({exc.strerror or exc}): remove it with rm -rf --one-file-system "
                        f"{parent / name}")
    finally:
        os.close(fd)


def _mount_point(path: str) -> UsageError:
    return UsageError(f"{path} is a mount point inside the repository: a verified update replaces the whole tree "
                      "in one rename, which cannot carry a mount point; mount it outside the repository and sync "
                      "again")


def _directories(top: int, owner: tuple[int, int], mode: int, *, locks: bool = False) -> None:
    """Give every directory under the open directory ``top`` (closed afterwards) ``owner`` and ``mode``, top down.

    Each level is opened once, without following a link (``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's
    descriptor), must be on ``top``'s device (a mount point refuses), gets its owner and mode through that
    descriptor and only then is listed: what it holds is read when nobody else can change it any more (take) or
    after it was proven (give).  Only directories are looked at (the listing's ``d_type``: no ``stat`` per file);
    with ``locks`` the lock files a killed git left in ``.git`` are removed."""
    device = os.fstat(top).st_dev
    depth = fdtree.Limits().depth
    stack: list[tuple[int, str, Iterator[str]]] = [(top, "", _subdirectories(top, "", locks))]
    try:
        while stack:
            fd, rel, pending = stack[-1]
            name = next(pending, None)
            if name is None:
                os.close(fd)
                stack.pop()
                continue
            path = f"{rel}/{name}" if rel else name
            if len(stack) > depth:
                raise fdtree.LimitExceeded(f"{path[:120]}...: too deep")
            try:
                child = os.open(name, fdtree.DIRECTORY_FLAGS, dir_fd=fd)
            except (FileNotFoundError, NotADirectoryError) as exc:
                raise fdtree.Changed(path) from exc
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # a link where the listing saw a directory
                    raise fdtree.Changed(path) from exc
                raise
            stack.append((child, path, iter(())))
            st = os.fstat(child)
            if st.st_dev != device:
                raise _mount_point(path)
            if (st.st_uid, st.st_gid) != owner:
                os.fchown(child, *owner)
            if stat.S_IMODE(st.st_mode) != mode:
                os.fchmod(child, mode)
            stack[-1] = (child, path, _subdirectories(child, path, locks))
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _subdirectories(fd: int, rel: str, locks: bool) -> Iterator[str]:
    """The names of the directories in ``fd`` (by ``d_type``); with ``locks``, ``*.lock`` files in ``.git`` and
    below are removed on the way."""
    in_git = locks and (rel == ".git" or rel.startswith(".git/"))
    with os.scandir(fd) as listing:
        entries = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in listing]
    for name, is_dir in entries:
        if not is_dir and in_git and name.endswith(".lock"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)
    return iter([name for name, is_dir in entries if is_dir])


def _self_owner() -> tuple[int, int]:
    """This process's user and group (root's under Portage; a test's or a user's own sync otherwise)."""
    return os.geteuid(), os.getegid()


def take(hold: Hold) -> None:
    """Make the hold and every directory of its tree root's alone (0700), by descriptor; refuse a mount point.
    Lock files a killed git left in the copied ``.git`` are removed (they would block the owner's next git)."""
    hold.reach(0o700)
    top = fdtree.open_dir(hold.top)
    try:
        fdtree.set_owner_mode(top, TREE, fdtree.lstat_at(top, TREE), _self_owner(), 0o700)
        tree = fdtree.open_dir(TREE, top)
    finally:
        os.close(top)

    _directories(tree, _self_owner(), 0o700, locks=True)
    hold.taken = True


def clear(hold: Hold, keep: Sequence[str] = (".git",)) -> None:
    """Remove every top-level entry of the taken tree but ``keep`` (what anyone put there before the take)."""
    tree = hold.open()
    try:
        for name in fdtree.names(tree):
            if os.fsdecode(name) not in keep:
                fdtree.remove_tree(tree, name)
    finally:
        os.close(tree)


def move_entries(src: int, dst: int, skip: Sequence[str] = ()) -> bool:
    """Move every top-level entry of the directory ``src`` but ``skip`` into ``dst`` (renames by descriptor);
    False if there was none.  A mount point among them refuses."""
    device = os.fstat(src).st_dev
    moved = False
    for name in fdtree.names(src):
        if os.fsdecode(name) in skip:
            continue
        try:
            st = fdtree.lstat_at(src, name)
        except FileNotFoundError:
            continue
        if st.st_dev != device:
            raise _mount_point(os.fsdecode(name))
        os.rename(name, name, src_dir_fd=src, dst_dir_fd=dst)
        moved = True
    return moved


def adopt(hold: Hold, parent: Path, spare_name: str, skip: Sequence[str]) -> bool:
    """Move the spare ``parent/spare_name`` into the hold (one rename in root's directory), then its top-level
    entries but ``skip`` into the tree; the rest stays at ``hold.top / SPARE`` for the caller to discard.
    False when nothing was moved into the tree."""
    parent_fd = fdtree.open_dir(parent)
    top = fdtree.open_dir(hold.top)
    try:
        st = fdtree.lstat_at(parent_fd, spare_name)
        if not stat.S_ISDIR(st.st_mode):
            return False
        os.rename(spare_name, SPARE, src_dir_fd=parent_fd, dst_dir_fd=top)
        spare = fdtree.open_dir(SPARE, top, expect=st)
        tree = fdtree.open_dir(TREE, top)
        try:
            return move_entries(spare, tree, skip)
        finally:
            os.close(spare)
            os.close(tree)
    finally:
        os.close(top)
        os.close(parent_fd)


def _read_small(dir_fd: int, name: str) -> bytes | None:
    """The bytes of the regular file ``name`` of ``dir_fd`` (None if absent), at most :data:`_SMALL`."""
    try:
        fd = os.open(name, fdtree.READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadInputError(f"{name} in the fetched .git is not a regular file")
        data = b""
        while chunk := os.read(fd, _CHUNK):
            data += chunk
            if len(data) > _SMALL:
                raise BadInputError(f"{name} in the fetched .git is larger than {_SMALL >> 20} MiB")
        return data
    finally:
        os.close(fd)


def _write(dir_fd: int, name: str, data: bytes, mode: int = 0o644) -> None:
    """Write a new file ``name`` in ``dir_fd`` (root's), replacing what was there by a rename."""
    temp = f".{name}.gkeys-new"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp, dir_fd=dir_fd)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def root_git(hold: Hold, tip: str, extra_env: dict[str, str] | None = None) -> GitRepo:
    """Root's git for the taken tree: its own git directory (config, ``HEAD`` at ``tip``), the fetched objects
    through alternates, copies of the user's ``shallow`` (checked: object names only) and index."""
    if not hold.taken:
        raise BadInputError("internal: the staging tree was not taken before root's git ran in it")
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", tip):
        raise BadInputError(f"the fetched top {tip[:80]!r} is not a commit name")
    os.mkdir(hold.git_dir, 0o700)
    for sub in ("objects", "objects/info", "refs", "refs/heads", "refs/tags"):
        os.mkdir(hold.git_dir / sub, 0o700)
    sha256 = len(tip) == 64
    config = (f"[core]\n\trepositoryformatversion = {1 if sha256 else 0}\n\tfilemode = true\n\tbare = false\n"
              + ("[extensions]\n\tobjectformat = sha256\n" if sha256 else ""))
    (hold.git_dir / "config").write_text(config)
    (hold.git_dir / "HEAD").write_text(tip + "\n")
    (hold.git_dir / "objects" / "info" / "alternates").write_text(f"{hold.tree / '.git' / 'objects'}\n")
    dot_git = _open_dot_git(hold)
    git_fd = fdtree.open_dir(hold.git_dir)
    try:
        shallow = _read_small(dot_git, "shallow")
        if shallow:
            if any(not re.fullmatch(rb"[0-9a-f]{%d}" % len(tip), line) for line in shallow.splitlines()):
                raise BadInputError("the fetched .git/shallow holds something other than commit names")
            _write(git_fd, "shallow", shallow)
        with contextlib.suppress(FileNotFoundError, fdtree.Changed):
            fdtree.copy_file(dot_git, "index", git_fd, "index", mode=0o600)
    finally:
        os.close(git_fd)
        os.close(dot_git)
    return GitRepo(hold.tree, git_dir=hold.git_dir, extra_env=extra_env,
                   spawn=SpawnSettings(umask=hold.spawn.umask))


def _open_dot_git(hold: Hold) -> int:
    tree = hold.open()
    try:
        return fdtree.open_dir(".git", tree)
    finally:
        os.close(tree)


def tree_of(repo: GitRepo, commit: str) -> str:
    """The tree a commit names, read from its hash-checked object."""
    raw = repo.read_commits([commit])[commit].raw
    first = raw.split(b"\n", 1)[0]
    if not first.startswith(b"tree ") or not re.fullmatch(rb"[0-9a-f]{%d}" % len(commit), first[5:]):
        raise BadInputError(f"commit {commit[:12]} names no tree")
    return first[5:].decode("ascii")


def discard_paths(hold: Hold, paths: Sequence[str]) -> None:
    """Remove ``paths`` (relative to the tree) from the taken tree, by descriptor, so a checkout writes them
    afresh; a path below one that is not a directory is skipped."""
    tree = hold.open()
    try:
        for path in paths:
            *dirs, name = os.fsencode(path).split(b"/")
            fd = os.dup(tree)
            try:
                for part in dirs:
                    child = fdtree.open_dir(part, fd)
                    os.close(fd)
                    fd = child
                fdtree.remove_tree(fd, name)
            except (FileNotFoundError, NotADirectoryError, fdtree.Changed):
                continue
            except OSError as exc:
                if exc.errno != errno.ELOOP:  #: a link where a directory was, removed with its parent's entry
                    raise
            finally:
                os.close(fd)
    finally:
        os.close(tree)


# -- after every check --------------------------------------------------------------------------------


def finish_git_dir(hold: Hold, tip: str) -> None:
    """Put root's index into the tree's ``.git`` and point its branch (or a detached ``HEAD``) at ``tip``."""
    dot_git = _open_dot_git(hold)
    git_fd = fdtree.open_dir(hold.git_dir)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.rename("index", "index", src_dir_fd=git_fd, dst_dir_fd=dot_git)
            _own(dot_git, "index", hold.owner)
        head = (_read_small(dot_git, "HEAD") or b"").strip()
        branch = head[len(b"ref: refs/heads/"):] if head.startswith(b"ref: refs/heads/") else b""
        if branch and _BRANCH.fullmatch(branch) and not any(
                part.endswith(b".lock") for part in branch.split(b"/")):
            fd = fdtree.open_dir("refs", dot_git)
            try:
                for part in [b"heads", *branch.split(b"/")[:-1]]:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o700, dir_fd=fd)
                    child = fdtree.open_dir(part, fd)
                    os.close(fd)
                    fd = child
                name = os.fsdecode(branch.split(b"/")[-1])
                if stat.S_ISDIR(_lstat_or_none(fd, name)):
                    fdtree.remove_tree(fd, name)
                _write(fd, name, tip.encode() + b"\n")
                _own(fd, name, hold.owner)
            finally:
                os.close(fd)
        else:
            _write(dot_git, "HEAD", tip.encode() + b"\n")
            _own(dot_git, "HEAD", hold.owner)
    finally:
        os.close(git_fd)
        os.close(dot_git)


def _own(dir_fd: int, name: str, owner: tuple[int, int]) -> None:
    """Give the regular file ``name`` root just wrote in ``dir_fd`` to ``owner``, by descriptor."""
    fdtree.set_owner_mode(dir_fd, name, fdtree.lstat_at(dir_fd, name), owner, None)


def _lstat_or_none(dir_fd: int, name: str) -> int:
    try:
        return fdtree.lstat_at(dir_fd, name).st_mode
    except FileNotFoundError:
        return 0


def give(hold: Hold) -> None:
    """Give the tree's directories back to its owner with the mode Portage gives them, by descriptor (its files
    went back in the proof, root's ``.git`` files in :func:`finish_git_dir`); then the hold is reachable again
    (0711)."""
    _directories(hold.open(), hold.owner, hold.dir_mode)
    top = fdtree.open_dir(hold.top)
    try:
        fdtree.set_owner_mode(top, TREE, fdtree.lstat_at(top, TREE), hold.owner, hold.top_mode)
    finally:
        os.close(top)
    hold.taken = False
    hold.reach(0o711)
