"""Reading git commits with machine formats only (design.md §6).

Every git call runs with an explicit environment that ignores the system and global git config
(``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``), ``LC_ALL=C``, and explicit ``-c`` settings,
so a user's ``log.showSignature = true`` or an alias can never change what is parsed.  Commits are read
raw with ``git cat-file --batch`` and split here into the signed payload and the ``gpgsig`` header,
exactly as git itself does before it hands both to gpg.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.core.errors import BadInputError
from gkeys_portage.verify.gitspawn import SpawnSettings, file_size_limit

#: Environment variables passed through to git (network access for fetch/clone; nothing else).
PASSTHROUGH = ("PATH", "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "NO_PROXY",
               "all_proxy", "ALL_PROXY", "GIT_SSH_COMMAND", "GIT_SSH", "SSH_AUTH_SOCK", "GIT_SSL_CAINFO",
               "SSL_CERT_FILE", "SSL_CERT_DIR")

#: ``-c`` settings given to every git call (after ``safe.directory``).
GIT_SETTINGS = ("log.showSignature=false", "core.quotePath=false", "color.ui=false", "advice.detachedHead=false",
                "gc.auto=0", "core.pager=cat", "core.hooksPath=/dev/null", "commit.gpgSign=false")

SIGNATURE_HEADERS = (b"gpgsig", b"gpgsig-sha256")


def git_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The explicit environment for git: no system/global config, C locale, no prompts."""
    env = {key: os.environ[key] for key in PASSTHROUGH if key in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update({"LC_ALL": "C", "LANG": "C", "TZ": "UTC", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
                "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "HOME": "/nonexistent"})
    if extra:
        env.update(extra)
    return env


def printable(text: str, limit: int = 300) -> str:
    """``text`` safe for a terminal line: control characters as ``\\xNN``, shortened in the middle.

    Paths and git messages can carry names an attacker chose (escape sequences, 300-byte components).
    """
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


class GitRepo:
    """Read-only access to one repository through plumbing commands."""

    def __init__(self, path: Path, *, extra_env: Mapping[str, str] | None = None,
                 spawn: SpawnSettings | None = None) -> None:
        self.path = Path(path).resolve()
        self.env = git_environment(extra_env)
        self.spawn = spawn or SpawnSettings()  # uid/gid/umask git runs with (Portage's sync-user)

    def command(self, *args: str) -> list[str]:
        """The full argv of a git call with the explicit settings."""
        settings: list[str] = ["-c", f"safe.directory={self.path}"]
        for setting in GIT_SETTINGS:
            settings += ["-c", setting]
        return ["git", "-C", str(self.path), *settings, *args]

    def run(self, *args: str, stdin: bytes | None = None, check: bool = True,
            max_file_size: int | None = None) -> subprocess.CompletedProcess[bytes]:
        """Run git; raise :class:`BadInputError` with git's first error line when ``check`` fails.

        ``max_file_size`` caps every file git writes (a fetched pack); exceeding it is always an error.
        """
        try:
            result = subprocess.run(self.command(*args), input=stdin, capture_output=True, env=self.env,
                                    check=False, timeout=3600, preexec_fn=file_size_limit(max_file_size),
                                    **self.spawn.run_kwargs())
        except (OSError, subprocess.SubprocessError) as exc:
            raise BadInputError(f"cannot run git: {exc}") from exc
        if check and result.returncode != 0:
            lines = [ln for ln in result.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
            causes = [ln for ln in lines if ln.startswith(("error: ", "fatal: "))]  # the cause, not a closing hint
            reason = printable((causes[0] if causes else lines[-1]).strip()) if lines else \
                f"exit status {result.returncode}"
            if max_file_size:  # git's helper (index-pack) dies of SIGXFSZ; git itself reports another error
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
        """Commits reachable from ``tip`` but not from ``exclude``, children before parents."""
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
            commits[name] = parse_commit(name, body)
        return commits
