"""Signed git repositories and a throwaway Portage for the demo and the tests.

Commits are made with plumbing: the tree comes from the index (``git write-tree``), the commit object
is written by hand and signed by a :class:`KeyFactory` key "at" any time (so expired, future and
pre-creation signatures can be made), then stored with ``git hash-object -t commit -w``.  The result
is byte-for-byte what ``git commit -S`` writes, but any header can also be forged.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

import gkeys_portage
from gkeys_portage.demo.world import KeyFactory, LoopbackServer
from gkeys_portage.verify.git.objects import GitRepo, git_environment

#: The directory holding this copy of ``gkeys_portage`` (PYTHONPATH for emerge and the hooks).
PACKAGE_PARENT = Path(gkeys_portage.__file__).resolve().parent.parent

GARBAGE_SIGNATURE = b"-----BEGIN PGP SIGNATURE-----\n\niQEzBAABCAAdFiEEgarbagegarbagegarbage\n=AAAA\n" \
                    b"-----END PGP SIGNATURE-----\n"


class RepoBuilder:
    """A non-bare repository on branch ``master`` whose commits are signed by demo keys."""

    def __init__(self, path: Path, keys: KeyFactory, *, name: str = "test", object_format: str = "sha1") -> None:
        self.path = path
        self.keys = keys
        self.env = git_environment()
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "master", f"--object-format={object_format}")
        #: the header git signs commits with in this object format
        self.signature_header = "gpgsig-sha256" if object_format == "sha256" else "gpgsig"
        self.files: dict[str, str] = {"profiles/repo_name": name + "\n", "metadata/layout.conf": "masters =\n"}
        self.counter = 0

    def git(self, *args: str, stdin: bytes | None = None) -> str:
        """Run git in the repository with the explicit environment; return stdout."""
        result = GitRepo(self.path).run(*args, stdin=stdin, check=False)  # the one hardened git door
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
               sign_when: datetime | None = None, signature: bytes | None = None, move: bool = True,
               header: str | None = None, index_only: Mapping[str, bytes] | None = None,
               author: str | None = None) -> str:
        """Make a commit signed by ``signer`` (None: unsigned) and move master to it.

        ``when`` sets the author/committer time, ``sign_when`` the signature time (default ``when``);
        ``signature`` replaces the real signature (forgery tests); ``parents`` defaults to master;
        ``header`` replaces the signature header's name (default: the object format's).
        ``index_only`` adds files that are never written here (e.g. a name no file system accepts); the
        work tree then stays at the previous commit.  ``author`` replaces the author's name and address.
        """
        self.counter += 1
        changes = dict(files or {f"dev-test/pkg/file{self.counter}": f"change {self.counter}\n"})
        self.files.update(changes)
        for rel, text in changes.items():
            target = self.path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        self.git("add", "-A")
        for rel, data in (index_only or {}).items():
            blob = self.git("hash-object", "-w", "--stdin", stdin=data).strip()
            self.git("update-index", "--add", "--cacheinfo", f"100644,{blob},{rel}")
        tree = self.git("write-tree").strip()
        if parents is None:
            head = self.head()
            parents = [head] if head else []
        stamp = int(when.timestamp() if when else time.time())
        name = signer or "anonymous"
        who = f"{author or f'{name} <{name}@gentoo.org>'} {stamp} +0000"
        lines = [f"tree {tree}", *[f"parent {p}" for p in parents], f"author {who}", f"committer {who}"]
        body = (message or f"commit {self.counter} by {signer or 'nobody'}") + "\n"
        payload = ("\n".join(lines) + "\n\n" + body).encode()
        raw = payload
        if signature is None and signer is not None:
            signature = self.keys.sign_bytes(signer, payload, self.path.parent, armor=True,
                                             when=sign_when or when)
        if signature is not None:
            sig_lines = signature.decode().rstrip("\n").split("\n")
            signed = f"{header or self.signature_header} " + "\n ".join(sig_lines)
            raw = ("\n".join([*lines, signed]) + "\n\n" + body).encode()
        commit = self.git("hash-object", "-t", "commit", "-w", "--stdin", stdin=raw).strip()
        if move:
            self.git("update-ref", "refs/heads/master", commit)
            if not index_only:
                self.git("reset", "-q", "--hard", commit)
        return commit

    def force(self, commit: str) -> None:
        """Point master (and the work tree) at ``commit``: a force-push of rewritten history."""
        self.git("update-ref", "refs/heads/master", commit)
        self.git("reset", "-q", "--hard", commit)


#: Run by :func:`sync_module_missing` in a child Python: one word, never a traceback.  A ``portage/``
#: directory without Portage (the leaf ``portage/sync/modules/gkeys``, if it was copied there by hand: its
#: distribution depends on Portage) is a namespace package: ``import portage.sync`` works but has no
#: ``module_names``.
SYNC_MODULE_PROBE = """\
try:
    import portage.sync as sync
except Exception as exc:
    print("no-portage", type(exc).__name__)
else:
    names = getattr(sync, "module_names", None)
    print("no-portage" if names is None else "yes" if "gkeys" in names else "no-module")
"""


def sync_module_missing(environ: dict[str, str] | None = None) -> str | None:
    """None if ``emerge`` is on PATH and Portage offers ``sync-type = gkeys``; else the reason why not."""
    if shutil.which("emerge") is None:
        return "emerge is not on PATH: Portage is not installed (pip install portage), so there is no emerge to run"
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_PARENT)} if environ is None else environ
    probe = subprocess.run([sys.executable, "-c", SYNC_MODULE_PROBE], capture_output=True, text=True, env=env,
                           cwd="/", check=False)
    return probe_reason(probe.stdout)


def probe_reason(answer: str) -> str | None:
    """What :data:`SYNC_MODULE_PROBE` printed, as None (the module is there) or one line saying why not."""
    word = answer.split()[:1]
    if word == ["yes"]:
        return None
    if word == ["no-portage"]:
        return "Portage is not importable by this Python (pip install portage), so there is no sync module to test"
    return ("the gkeys sync module is not installed in Portage's portage/sync/modules/gkeys "
            "(pip install ./portage-sync-module beside Portage installs it)")


class PortageSandbox:
    """A PORTAGE_CONFIGROOT and EPREFIX in a temp dir, and ``emerge --sync`` run in it.

    Git's system and global config are temp files (Portage's ``git config --system --add
    safe.directory`` lands there, never in /etc/gitconfig); ``PYTHONPATH`` points at this copy of
    gkeys_portage so the installed sync-module shim and the hooks run this code.
    """

    def __init__(self, base: Path, gkeys_config: Path) -> None:
        self.base = base
        self.config_root = base / "config-root"
        self.eprefix = base / "eprefix"
        self.repos = base / "repos"
        self.etc = self.config_root / "etc" / "portage"
        (self.etc / "repos.conf").mkdir(parents=True)
        self.repos.mkdir()
        self.git_system = base / "gitconfig-system"
        self.git_global = base / "gitconfig-global"
        self.git_system.write_text("")
        self.git_global.write_text("")
        (self.etc / "make.conf").write_text(
            f'PKGDIR="{self.eprefix}/packages"\nDISTDIR="{self.eprefix}/distfiles"\n'
            f'PORTAGE_TMPDIR="{self.eprefix}/tmp"\n')
        self.env = {**os.environ, "PORTAGE_CONFIGROOT": str(self.config_root),
                    "PORTAGE_OVERRIDE_EPREFIX": str(self.eprefix),
                    "PORTAGE_USERNAME": pwd.getpwuid(os.getuid()).pw_name,
                    "PORTAGE_GRPNAME": grp.getgrgid(os.getgid()).gr_name, "GIT_CONFIG_SYSTEM": str(self.git_system),
                    "GIT_CONFIG_GLOBAL": str(self.git_global), "GKEYS_CONFIG": str(gkeys_config),
                    "PYTHONPATH": str(PACKAGE_PARENT), "HOME": str(base), "FEATURES": "-news"}

    def location(self, name: str) -> Path:
        """Where repository ``name`` is synced to."""
        return self.repos / name

    def add_repo(self, name: str, uri: str, sync_type: str, **options: str) -> Path:
        """Write repos.conf for one repository (``sync_gkeys_policy="all"`` -> ``sync-gkeys-policy = all``)."""
        lines = [f"[DEFAULT]\nmain-repo = {name}\n", f"[{name}]", f"location = {self.location(name)}",
                 f"sync-type = {sync_type}", f"sync-uri = {uri}", "auto-sync = yes"]
        lines += [f"{key.replace('_', '-')} = {value}" for key, value in options.items()]
        (self.etc / "repos.conf" / f"{name}.conf").write_text("\n".join(lines) + "\n")
        return self.location(name)

    def install_hooks(self, hooks: Path) -> None:
        """Symlink the gkeys hooks (``hooks/`` of the source tree) into the config root."""
        for kind in ("repo.postsync.d", "postsync.d"):
            (self.etc / kind).mkdir(exist_ok=True)
            (self.etc / kind / "gkeys-verify").symlink_to(hooks / kind / "gkeys-verify")

    def sync(self, *repos: str) -> subprocess.CompletedProcess[str]:
        """``emerge --sync [repos]``; stdout and stderr together in ``.stdout``."""
        return subprocess.run(["emerge", "--sync", *repos], env=self.env, cwd=self.base, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=300, check=False)


def serve_repo(server: LoopbackServer, repo: Path, name: str) -> str:
    """Publish a repository's ``.git`` on the loopback server for git's dumb HTTP protocol; return its URL.

    Call again after every change upstream.
    """
    git_dir = repo / ".git"
    GitRepo(repo).run("update-server-info")
    for path in git_dir.rglob("*"):
        if path.is_file():
            server.publish(f"{name}/{path.relative_to(git_dir).as_posix()}", path.read_bytes())
    return f"{server.url}/{name}"
