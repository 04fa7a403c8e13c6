"""Reading git commits with machine formats only (design.md §6), through one hardened git environment.

Every git call runs with an explicit environment that ignores the system and global git config
(``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``), ``LC_ALL=C``, and explicit ``-c`` settings,
so a user's ``log.showSignature = true`` or an alias can never change what is parsed.  Commits are read
raw with ``git cat-file --batch`` and split here into the signed payload and the ``gpgsig`` header,
exactly as git itself does before it hands both to gpg.

Hardening (SECURITY.md, issue 11 items 7-8, issue 12 item 9):

* **Ownership is the boundary.**  A repository's own ``.git/config`` can make git run commands
  (``core.fsmonitor``, ``remote.*.uploadpack`` on a lazy fetch, ``core.sshCommand``,
  ``core.alternateRefsCommand``, ``credential.helper``, ...), so git runs only in a repository whose
  directory and git directory belong to the effective user, to the ``portage`` account or to a uid the
  caller names (Portage's sync user); ``safe.directory`` is set for that path only, and only when the
  owner found is not the effective user (else git's own check stays on).  Settings that would lift this
  (``GIT_CONFIG_PARAMETERS``, ``GIT_DIR``, ...) are refused in an extra environment.
* **Defence in depth** for repositories we do own: no replace objects (``--no-replace-objects`` and
  ``GIT_NO_REPLACE_OBJECTS``: a ``refs/replace`` ref must not swap the commit that is verified), no
  lazy fetch from a promisor remote (``GIT_NO_LAZY_FETCH``, honoured since the May 2024 security
  releases, e.g. 2.39.4), hooks and fsmonitor off, no submodule recursion (a hostile ``.gitmodules``
  must not stop every later fetch), and only the transports a sync needs (https, http, git, ssh;
  local paths/``file://`` only when named by the user, never from a submodule; never ``ext::`` or
  other remote helpers).
"""

from __future__ import annotations

import hashlib
import os
import pwd
import signal
import subprocess
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from gkeys_portage.core import children
from gkeys_portage.core.errors import BadInputError, UntrustedRepositoryError
from gkeys_portage.verify.git.spawn import SpawnSettings, file_size_limit

#: Environment variables passed through to git (network access for fetch/clone; nothing else).
PASSTHROUGH = ("PATH", "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "NO_PROXY",
               "all_proxy", "ALL_PROXY", "GIT_SSH_COMMAND", "GIT_SSH", "SSH_AUTH_SOCK", "GIT_SSL_CAINFO",
               "SSL_CERT_FILE", "SSL_CERT_DIR")

#: Settings of the hardened environment; they win over any extra environment.
HARDENED_ENV = {"LC_ALL": "C", "LANG": "C", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
                "GIT_TERMINAL_PROMPT": "0", "GIT_NO_REPLACE_OBJECTS": "1", "GIT_NO_LAZY_FETCH": "1"}

#: Variables an extra environment (``sync-git-env``) may not set: they change which repository, objects or
#: configuration git reads (``GIT_CONFIG_PARAMETERS`` could set ``safe.directory``).
REFUSED_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY", "GIT_INDEX_FILE",
               "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_REPLACE_REF_BASE", "GIT_GRAFT_FILE",
               "GIT_SHALLOW_FILE", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_EXEC_PATH",
               "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM", "GIT_PROTOCOL_FROM_USER",
               "GIT_ALLOW_PROTOCOL")
REFUSED_ENV_PREFIXES = ("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")

#: ``-c`` settings given to every git call (after ``safe.directory``, when that is set).
GIT_SETTINGS = ("log.showSignature=false", "core.quotePath=false", "color.ui=false", "advice.detachedHead=false",
                "gc.auto=0", "core.pager=cat", "core.hooksPath=/dev/null", "commit.gpgSign=false",
                "core.fsmonitor=false", "fetch.recurseSubmodules=false", "submodule.recurse=false",
                "protocol.allow=never", "protocol.https.allow=always", "protocol.http.allow=always",
                "protocol.git.allow=always", "protocol.ssh.allow=always", "protocol.file.allow=user")

#: Options of ``git clone`` and ``git fetch`` that keep them from touching submodules (issue 12 item 9).
NO_SUBMODULES = ("--no-recurse-submodules",)

SIGNATURE_HEADERS = (b"gpgsig", b"gpgsig-sha256")


def git_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The explicit environment for git: no system/global config, C locale, no prompts, no replace objects.

    ``extra`` (e.g. Portage's ``sync-git-env``) is added, but may not set a variable of
    :data:`REFUSED_ENV`, and cannot change the hardened settings.
    """
    env = {key: os.environ[key] for key in PASSTHROUGH if key in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update({"TZ": "UTC", "GIT_ASKPASS": "true", "HOME": "/nonexistent"})
    for key in extra or {}:
        if key in REFUSED_ENV or key.startswith(REFUSED_ENV_PREFIXES):
            raise BadInputError(f"the git environment may not set {key} (it changes which repository or "
                                "configuration git reads); remove it from sync-git-env")
    if extra:
        env.update(extra)
    env.update(HARDENED_ENV)
    return env


#: Accounts whose repositories git may run in besides the effective user's: Portage's ``portage`` user, the
#: owner of a ``FEATURES=usersync`` tree.  Whoever can write a Portage tree already runs code as root (ebuild
#: phases, eclasses), so obeying that account's repository configuration gives it nothing new.
PORTAGE_ACCOUNTS = ("portage",)


def account_uids(*names: str) -> frozenset[int]:
    """The uids of those of the named local accounts that exist."""
    uids = set()
    for name in names:
        try:
            uids.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            continue
    return frozenset(uids)


def _owner_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _git_dir_of(path: Path) -> Path | None:
    """The git directory of the work tree (or bare repository) at ``path``; None if it has none yet."""
    dot_git = path / ".git"
    if dot_git.is_file():  # a "gitdir: DIR" file (worktrees, submodules)
        text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
        if not text.startswith("gitdir:"):
            return dot_git
        return (path / text[len("gitdir:"):].strip()).resolve()
    if os.path.lexists(dot_git):
        return dot_git.resolve()  # a symlinked .git: git reads (and checks) the target
    return path if (path / "objects").is_dir() and (path / "HEAD").exists() else None


def repository_owners(path: Path, owners: Collection[int]) -> frozenset[int]:
    """The owners of the work tree at ``path``, its ``.git`` and its git directory, checked against the
    effective user and ``owners``; raise :class:`UntrustedRepositoryError` (one line with the next step)
    if any of them belongs to someone else.  A path that does not exist yet is fine (a clone creates it)."""
    allowed = {os.geteuid(), *owners}
    places = [path, path / ".git"]
    try:
        git_dir = _git_dir_of(path) if path.is_dir() else None
    except OSError as exc:
        raise UntrustedRepositoryError(f"cannot read {path / '.git'}: {exc.strerror}") from exc
    if git_dir is not None:
        places.append(git_dir)
    seen: set[int] = set()
    for place in places:
        try:
            uid = os.lstat(place).st_uid
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UntrustedRepositoryError(f"cannot inspect {place}: {exc.strerror}") from exc
        if uid not in allowed:
            raise UntrustedRepositoryError(
                f"{place} is owned by {_owner_name(uid)}, not by {_owner_name(os.geteuid())}: gkeys does not run "
                "git in a repository another user owns (git would obey that user's repository configuration); "
                f"run the command as that user, or `chown -R {os.geteuid()} {path}` if you trust it")
        seen.add(uid)
    return frozenset(seen)


def object_id(kind: str, body: bytes, length: int = 40) -> str:
    """The git object id of ``body`` as an object of ``kind`` (SHA-1 for ``length`` 40, SHA-256 for 64)."""
    hasher = hashlib.sha256() if length == 64 else hashlib.sha1()  # noqa: S324 - git's object names
    hasher.update(b"%s %d\0" % (kind.encode("ascii"), len(body)))
    hasher.update(body)
    return hasher.hexdigest()


def _own_git_dir(git_dir: Path) -> frozenset[int]:
    """The owner of a git directory apart from its work tree: it must be the effective user's (root's own)."""
    uid = os.lstat(git_dir).st_uid
    if uid != os.geteuid():
        raise UntrustedRepositoryError(f"{git_dir} is owned by {_owner_name(uid)}, not by {_owner_name(os.geteuid())}: "
                                       "gkeys runs git with a git directory apart only in one it made itself")
    return frozenset({uid})


def printable(text: str, limit: int = 300) -> str:
    """``text`` safe for a terminal line: control characters as ``\\xNN``, shortened in the middle.

    Paths and git messages can carry names an attacker chose (escape sequences, 300-byte components).
    """
    if not text.isprintable():  # the common case (an author, a summary) needs no pass per character
        text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return text if len(text) <= limit else text[: limit // 2] + "..." + text[-(limit // 2):]


@dataclass
class Commit:
    """A raw commit object split the way git splits it for signature verification."""

    hash: str
    raw: bytes
    parents: list[str] = field(default_factory=list)
    author: str = ""
    summary: str = ""
    signature: bytes | None = None
    payload: bytes = b""

    @property
    def short(self) -> str:
        """The abbreviated hash (12 hex digits)."""
        return self.hash[:12]


#: What a commit carries as its signature when its signature headers are malformed (never an armor block).
INVALID_SIGNATURE = b"(more than one signature header)\n"


def parse_commit(commit_hash: str, raw: bytes) -> Commit:
    """Split a raw commit object: headers, the OpenPGP signature header, the signed payload.

    The payload is the object with every signature header (and its continuation lines) removed,
    which is what the signer signed.  The signature is the header value of ``gpgsig`` (SHA-1
    repositories) or ``gpgsig-sha256`` (SHA-256 repositories) with the continuation spaces removed.
    """
    wanted = b"gpgsig-sha256" if len(commit_hash) == 64 else b"gpgsig"
    head, sep, body = raw.partition(b"\n\n")
    commit = Commit(hash=commit_hash, raw=raw)
    kept: list[bytes] = []
    signature: list[bytes] | None = None
    duplicated = False  # git would verify a concatenation of both; never guess which one counts
    in_signature = False  # inside a signature header (its continuation lines are dropped too)
    collect: list[bytes] | None = None  # where continuation lines of the wanted header go
    for line in head.split(b"\n"):
        if line.startswith(b" ") and in_signature:
            if collect is not None:
                collect.append(line[1:])
            continue
        in_signature, collect = False, None
        name, _, value = line.partition(b" ")
        if name in SIGNATURE_HEADERS:
            in_signature = True
            if name == wanted:
                duplicated = signature is not None
                signature = collect = [value]
            continue
        kept.append(line)  # continuation lines of other headers (mergetag) stay in the payload
        if name == b"parent":
            commit.parents.append(value.decode("ascii", "replace"))
        elif name == b"author":
            commit.author = value.decode("utf-8", "replace").rsplit(" ", 2)[0]
    commit.payload = b"\n".join(kept) + sep + body
    if duplicated:
        commit.signature = INVALID_SIGNATURE
    elif signature is not None:
        commit.signature = b"\n".join(signature) + b"\n"
    commit.summary = body.split(b"\n", 1)[0].decode("utf-8", "replace")[:80]
    return commit


def _hit_file_size_cap(lines: Sequence[str], returncode: int) -> bool:
    """Whether git failed because a file reached RLIMIT_FSIZE: its helper died of SIGXFSZ (``unpack-objects died
    of signal 25``; under clone, fetch-pack only sees ``invalid index-pack output``), or a write got EFBIG."""
    xfsz = int(signal.SIGXFSZ)
    return returncode in (-xfsz, 128 + xfsz) or any(
        f"died of signal {xfsz}" in line or "invalid index-pack output" in line or "File too large" in line
        for line in lines)


class GitRepo:
    """Read-only access to one repository through plumbing commands, in the hardened environment.

    Git runs only in a repository owned by the effective user, the ``portage`` account
    (:data:`PORTAGE_ACCOUNTS`), the user git runs as (``spawn``: Portage's sync-user / usersync /
    sync-umask) or one of ``owners``; every call checks the ownership first (:func:`repository_owners`).
    """

    def __init__(self, path: Path, *, extra_env: Mapping[str, str] | None = None,
                 owners: Collection[int] = (), spawn: SpawnSettings | None = None,
                 git_dir: Path | None = None) -> None:
        self.path = Path(path).resolve()
        #: a git directory apart from the work tree (root's own, :mod:`.hold`): git reads no ``.git`` in it
        self.git_dir = Path(git_dir).resolve() if git_dir is not None else None
        self.env = git_environment(extra_env)
        self.spawn = spawn or SpawnSettings()  # uid/gid/umask git runs with (Portage's sync-user)
        spawn_uids = frozenset({self.spawn.uid}) if self.spawn.uid is not None else frozenset()
        self.owners = frozenset(owners) | spawn_uids | account_uids(*PORTAGE_ACCOUNTS)

    def command(self, *args: str, safe_directory: bool = False) -> list[str]:
        """The full argv of a git call with the explicit settings.

        ``safe_directory`` sets git's ``safe.directory`` for this path only: for a repository whose owner
        was checked and is not the effective user.  Otherwise git's own ownership check stays on as a
        second guard.
        """
        settings: list[str] = ["-c", f"safe.directory={self.path}"] if safe_directory else []
        for setting in GIT_SETTINGS:
            settings += ["-c", setting]
        where = [f"--git-dir={self.git_dir}", f"--work-tree={self.path}"] if self.git_dir is not None else []
        return ["git", "--no-replace-objects", "-C", str(self.path), *where, *settings, *args]

    def run(self, *args: str, stdin: bytes | None = None, check: bool = True,
            max_file_size: int | None = None, stdout: IO[bytes] | None = None) -> subprocess.CompletedProcess[bytes]:
        """Run git; raise :class:`BadInputError` with git's first error line when ``check`` fails, and
        :class:`UntrustedRepositoryError` (before git starts) for a repository another user owns.

        ``max_file_size`` caps every file git writes (a fetched pack); exceeding it is always an error.
        ``stdout`` is a file git's output goes to instead of memory (a whole history's ``rev-list``).
        """
        runs_as = self.spawn.uid if self.spawn.switches_user and self.spawn.uid is not None else os.geteuid()
        foreign = (_own_git_dir(self.git_dir) if self.git_dir is not None else
                   repository_owners(self.path, self.owners)) - {runs_as}
        try:
            result = subprocess.run(children.tied(self.command(*args, safe_directory=bool(foreign))), input=stdin,
                                    stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE, env=self.env,
                                    check=False, timeout=3600,
                                    preexec_fn=children.preexec_for(file_size_limit(max_file_size)),
                                    **self.spawn.run_kwargs())
        except (OSError, subprocess.SubprocessError) as exc:
            raise BadInputError(f"cannot run git: {exc}") from exc
        if check and result.returncode != 0:
            lines = [ln for ln in result.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
            causes = [ln for ln in lines if ln.startswith(("error: ", "fatal: "))]  # the cause, not a closing hint
            reason = printable((causes[0] if causes else lines[-1]).strip()) if lines else \
                f"exit status {result.returncode}"
            if max_file_size and _hit_file_size_cap(lines, result.returncode):
                reason += f" (every file git may write here is capped at {max_file_size // 1048576} MiB)"
            raise BadInputError(f"git {args[0]} failed in {self.path}: {reason}")
        return result

    def is_repository(self) -> bool:
        """True if the path is the top of a git work tree (or a bare repository)."""
        if not self.path.is_dir():
            return False
        result = self.run("rev-parse", "--git-dir", check=False)
        return result.returncode == 0

    def resolve(self, revision: str) -> str:
        """The full commit hash of ``revision``."""
        result = self.run("rev-parse", "--verify", "--quiet", "--end-of-options", revision + "^{commit}",
                          check=False)
        text = result.stdout.decode("ascii", "replace").strip()
        if result.returncode != 0 or not text:
            raise BadInputError(f"{self.path}: no commit {revision!r}")
        return text

    def has_commit(self, commit_hash: str) -> bool:
        """True if the object exists and is a commit."""
        result = self.run("cat-file", "-t", commit_hash, check=False)
        return result.returncode == 0 and result.stdout.strip() == b"commit"

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        """True if ``ancestor`` is reachable from ``descendant`` (or equal)."""
        result = self.run("merge-base", "--is-ancestor", ancestor, descendant, check=False)
        if result.returncode not in (0, 1):
            raise BadInputError(f"git merge-base failed in {self.path}")
        return result.returncode == 0

    def is_shallow(self) -> bool:
        """True for a shallow clone (history below its shallow commits is missing)."""
        return self.run("rev-parse", "--is-shallow-repository").stdout.strip() == b"true"

    def rev_list(self, tip: str, exclude: Iterable[str] = ()) -> list[str]:
        """Commits reachable from ``tip`` but not from ``exclude``, children before parents, in memory
        (a whole history is better read as :class:`~gkeys_portage.verify.git.revisions.Revisions`)."""
        args = ["rev-list", "--topo-order", tip, *[f"^{e}" for e in exclude], "--"]
        return self.run(*args).stdout.decode("ascii").split()

    def read_commits(self, hashes: Sequence[str]) -> dict[str, Commit]:
        """Read many commit objects with one ``git cat-file --batch``."""
        if not hashes:
            return {}
        out = self.run("cat-file", "--batch", stdin=("\n".join(hashes) + "\n").encode("ascii")).stdout
        commits: dict[str, Commit] = {}
        pos = 0
        while pos < len(out):
            end = out.index(b"\n", pos)
            header = out[pos:end].decode("ascii", "replace").split(" ")
            if len(header) != 3:
                raise BadInputError(f"{self.path}: object {header[0]} is missing")
            name, kind, size = header[0], header[1], int(header[2])
            body = out[end + 1 : end + 1 + size]
            pos = end + 1 + size + 1
            if kind != "commit":
                raise BadInputError(f"{self.path}: {name} is a {kind}, not a commit")
            if object_id("commit", body, len(name)) != name:  # an object file rewritten in place: never trusted
                raise BadInputError(f"{self.path}: the object {name} does not hash to its name (the object store "
                                    f"was changed); remove {self.path} and sync again to clone afresh")
            commits[name] = parse_commit(name, body)
        return commits
