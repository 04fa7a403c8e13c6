"""Build signed git repositories commit by commit (for the demo, the tests and the benchmark).

Commits are made with plumbing: the tree comes from the index (``git write-tree``), the commit object
is written by hand and signed by a :class:`KeyFactory` key "at" any time (so expired, future and
pre-creation signatures can be made), then stored with ``git hash-object -t commit -w``.  The result
is byte-for-byte what ``git commit -S`` writes, but any header can also be forged.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.verify.gitobjects import git_environment

GARBAGE_SIGNATURE = b"-----BEGIN PGP SIGNATURE-----\n\niQEzBAABCAAdFiEEgarbagegarbagegarbage\n=AAAA\n" \
                    b"-----END PGP SIGNATURE-----\n"


class RepoBuilder:
    """A non-bare repository on branch ``master`` whose commits are signed by demo keys."""

    def __init__(self, path: Path, keys: KeyFactory, *, name: str = "test") -> None:
        self.path = path
        self.keys = keys
        self.env = git_environment()
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "master")
        self.files: dict[str, str] = {"profiles/repo_name": name + "\n", "metadata/layout.conf": "masters =\n"}
        self.counter = 0

    def git(self, *args: str, stdin: bytes | None = None) -> str:
        """Run git in the repository with the explicit environment; return stdout."""
        result = subprocess.run(["git", "-C", str(self.path), "-c", f"safe.directory={self.path}", *args],
                                input=stdin, capture_output=True, env=self.env, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"git {args[0]} failed: {result.stderr.decode(errors='replace')}")
        return result.stdout.decode()

    def head(self) -> str | None:
        """The current commit of master (None before the first commit)."""
        try:
            return self.git("rev-parse", "--verify", "--quiet", "refs/heads/master").strip() or None
        except RuntimeError:
            return None

    def commit(self, signer: str | None, *, message: str | None = None, files: Mapping[str, str] | None = None,
               parents: Sequence[str] | None = None, when: datetime | None = None,
               sign_when: datetime | None = None, signature: bytes | None = None, move: bool = True) -> str:
        """Make a commit signed by ``signer`` (None: unsigned) and move master to it.

        ``when`` sets the author/committer time, ``sign_when`` the signature time (default ``when``);
        ``signature`` replaces the real signature (forgery tests); ``parents`` defaults to master.
        """
        self.counter += 1
        changes = dict(files or {f"dev-test/pkg/file{self.counter}": f"change {self.counter}\n"})
        self.files.update(changes)
        for rel, text in changes.items():
            target = self.path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        self.git("add", "-A")
        tree = self.git("write-tree").strip()
        if parents is None:
            head = self.head()
            parents = [head] if head else []
        stamp = int(when.timestamp() if when else time.time())
        who = f"{signer or 'anonymous'} <{signer or 'anonymous'}@gentoo.org> {stamp} +0000"
        lines = [f"tree {tree}", *[f"parent {p}" for p in parents], f"author {who}", f"committer {who}"]
        body = (message or f"commit {self.counter} by {signer or 'nobody'}") + "\n"
        payload = ("\n".join(lines) + "\n\n" + body).encode()
        raw = payload
        if signature is None and signer is not None:
            signature = self.keys.sign_bytes(signer, payload, self.path.parent, armor=True,
                                             when=sign_when or when)
        if signature is not None:
            sig_lines = signature.decode().rstrip("\n").split("\n")
            header = "gpgsig " + "\n ".join(sig_lines)
            raw = ("\n".join([*lines, header]) + "\n\n" + body).encode()
        commit = self.git("hash-object", "-t", "commit", "-w", "--stdin", stdin=raw).strip()
        if move:
            self.git("update-ref", "refs/heads/master", commit)
            self.git("reset", "-q", "--hard", commit)
        return commit

    def force(self, commit: str) -> None:
        """Point master (and the work tree) at ``commit``: a force-push of rewritten history."""
        self.git("update-ref", "refs/heads/master", commit)
        self.git("reset", "-q", "--hard", commit)
