"""What a verified revision may put on disk: no symlink out of the repository, no submodule.

A signature covers a commit's tree, and git checks out only what a tree can say: regular files with mode
0644 or 0755 (written as 0666 or 0777 minus the umask Portage gives git, ``sync-umask``, 022 by default; never
setuid, setgid or sticky, never an owner), directories (0777 minus the umask), symlinks (mode 120000: the
link's target is the blob) and gitlinks (160000: a submodule's commit, from another repository that nobody
verified).  git itself refuses a path named ``.git`` in any case or spelling and never writes through a
symlinked directory.  So the checks left to gkeys, made on the tree before a single file is written:

* a **symlink** whose target is absolute, or whose target leaves the repository once every symlink of the
  tree on the way is followed (``../../etc/shadow``, ``a -> ..`` then ``a/../x``), or a chain of more than
  40 links: refused.  Portage and ebuilds read through the tree's symlinks as root.
* a **gitlink** (submodule): refused.  gkeys never checks submodules out, so the directory would stay empty
  while the revision says otherwise.

``.gitattributes`` files in a revision are signed content; what they can change on checkout (line endings,
``ident``) is decided by that content alone.  Filters (``filter=``) need a driver in git's configuration,
which the hardened environment does not read from the system or the user (:mod:`.objects`).
"""

from __future__ import annotations

from collections import deque

from gkeys_portage.core.errors import BadInputError
from gkeys_portage.verify.git.objects import GitRepo, printable

SYMLINK = "120000"
GITLINK = "160000"
MAX_HOPS = 40  # as the kernel's limit on symlinks followed in one path lookup


def _resolve(path: str, links: dict[str, str]) -> bool:
    """True when ``path`` (and every symlink on the way, found in ``links``) stays inside the tree."""
    todo = deque(path.split("/"))
    stack: list[str] = []
    hops = 0
    while todo:
        part = todo.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return False
            stack.pop()
            continue
        stack.append(part)
        target = links.get("/".join(stack))
        if target is None:
            continue
        hops += 1
        if hops > MAX_HOPS or target.startswith("/"):
            return False
        stack.pop()
        todo.extendleft(reversed(target.split("/")))
    return True


def unsafe_entries(repo: GitRepo, revision: str) -> list[str]:
    """Each entry of ``revision``'s tree that gkeys does not check out, as ``"PATH: why"`` (empty: all fine)."""
    listing = repo.run("ls-tree", "-r", "-z", "--full-tree", revision).stdout
    found: list[str] = []
    symlinks: dict[str, str] = {}  # path -> blob id, then path -> target
    special = (GITLINK.encode("ascii") + b" ", SYMLINK.encode("ascii") + b" ")
    # ::gentoo lists 170,000 entries: only gitlinks and symlinks are looked at (a mode leads each entry)
    for entry in [item for item in listing.split(b"\0") if item[:7] in special]:
        meta, _, name = entry.partition(b"\t")
        fields = meta.decode("ascii", "replace").split()
        path = name.decode("utf-8", "surrogateescape")
        if fields[0] == GITLINK:
            found.append(f"{printable(path, 120)}: a submodule (gitlink), which gkeys does not check out")
        elif fields[0] == SYMLINK:
            symlinks[path] = fields[2]
    if symlinks:
        blobs = repo.run("cat-file", "--batch", stdin=("\n".join(symlinks.values()) + "\n").encode()).stdout
        targets = [body.decode("utf-8", "surrogateescape") for body in _batch_bodies(blobs, len(symlinks))]
        symlinks = dict(zip(symlinks, targets, strict=True))
        for path, target in symlinks.items():
            if not _resolve(path, symlinks):
                found.append(f"{printable(path, 120)}: a symlink to {printable(target, 120)}, outside the repository")
    return found


def _batch_bodies(out: bytes, count: int) -> list[bytes]:
    """The object bodies of ``git cat-file --batch`` output, in order."""
    bodies: list[bytes] = []
    pos = 0
    while pos < len(out) and len(bodies) < count:
        end = out.index(b"\n", pos)
        header = out[pos:end].split(b" ")
        if len(header) != 3:
            raise BadInputError(f"object {header[0].decode('ascii', 'replace')} is missing")
        size = int(header[2])
        bodies.append(out[end + 1:end + 1 + size])
        pos = end + 1 + size + 1
    return bodies


def require_safe_contents(repo: GitRepo, revision: str) -> None:
    """Raise :class:`BadInputError` naming the first entries of ``revision`` gkeys refuses to check out."""
    found = unsafe_entries(repo, revision)
    if found:
        more = f" (and {len(found) - 2} more)" if len(found) > 2 else ""
        raise BadInputError(f"revision {revision[:12]} is signed but holds what gkeys never checks out: "
                            f"{'; '.join(found[:2])}{more}; its signer must remove it upstream")
