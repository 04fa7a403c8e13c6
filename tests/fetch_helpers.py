"""Helpers for the fetch-wrapper tests: a download command that needs neither wget nor curl, and a
throwaway Portage installation root (EPREFIX, make.conf, a one-ebuild repository, DISTDIR) in which a
real ``emerge --fetchonly`` runs unprivileged and never touches /etc, ~ or the system's Portage state."""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
LAUNCHER = PROJECT / "hooks" / "fetch" / "gkeys-fetch"

#: ``python3 DOWNLOADER URL FILE [--resume]``: what FETCHCOMMAND / RESUMECOMMAND run in the tests.
DOWNLOADER = '''\
import os, sys, urllib.error, urllib.request
url, out = sys.argv[1], sys.argv[2]
start = os.path.getsize(out) if "--resume" in sys.argv[3:] and os.path.exists(out) else 0
request = urllib.request.Request(url, headers={"Range": f"bytes={start}-"} if start else {})
try:
    with urllib.request.urlopen(request, timeout=30) as response:
        mode = "ab" if start and response.status == 206 else "wb"
        with open(out, mode) as handle:
            while chunk := response.read(1 << 16):
                handle.write(chunk)
except (OSError, urllib.error.URLError) as exc:
    sys.stderr.write(f"download failed: {exc}\\n")
    sys.exit(8)
'''


def write_downloader(folder: Path) -> Path:
    """Write the download script into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "download.py"
    path.write_text(DOWNLOADER)
    return path


def subprocess_environment(home: Path) -> dict[str, str]:
    """A minimal environment: this interpreter first on PATH, this working tree importable, a temp HOME,
    git's system and global config pointed at temp files (never /etc/gitconfig or ~/.gitconfig)."""
    pythonpath = os.pathsep.join(p for p in (str(PROJECT), os.environ.get("PYTHONPATH", "")) if p)
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', os.defpath)}",
        "HOME": str(home), "LC_ALL": "C", "PYTHONPATH": pythonpath, "PYTHONDONTWRITEBYTECODE": "1",
        "GIT_CONFIG_SYSTEM": str(home / "gitconfig-system"), "GIT_CONFIG_GLOBAL": str(home / "gitconfig-global"),
    }


@dataclass
class Distfile:
    """One SRC_URI entry: where it is served and the bytes the Manifest records for it."""

    name: str
    url: str
    data: bytes

    def manifest_line(self) -> str:
        """``DIST name size BLAKE2B hex SHA512 hex``."""
        return (f"DIST {self.name} {len(self.data)} BLAKE2B {hashlib.blake2b(self.data).hexdigest()} "
                f"SHA512 {hashlib.sha512(self.data).hexdigest()}\n")


def portage_program(name: str) -> list[str] | None:
    """How to run Portage's ``name`` (emerge, ebuild): beside this Python, run by it (so that it is this Python's
    Portage), else as found on PATH (``shutil.which``, as tests/conftest.py looks for ``emerge``); None if
    neither has it."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return [sys.executable, str(beside)]
    found = shutil.which(name)
    return [found] if found else None


class PortageRoot:
    """A Portage prefix in a temp dir (``PORTAGE_OVERRIDE_EPREFIX``, also the ``PORTAGE_CONFIGROOT``) with
    repository ``gkeystest``."""

    def __init__(self, base: Path, gkeys_config: Path, *, wrapper: str | None = "FETCH_WRAPPER") -> None:
        """``wrapper``: ``FETCH_WRAPPER`` (the README's line), ``FETCHCOMMAND`` (gkeys-fetch around both
        FETCHCOMMAND and RESUMECOMMAND, the README's older-Portage lines) or None (no gkeys at all)."""
        self.base = base
        self.eprefix = base / "eprefix"
        self.repo = base / "repo"
        self.distdir = base / "distfiles"
        self.home = base / "home"
        config = self.eprefix / "etc" / "portage"
        for folder in (config, self.eprefix / "share" / "portage", self.distdir, base / "tmp",
                       self.repo / "profiles" / "default", self.repo / "metadata"):
            folder.mkdir(parents=True, exist_ok=True)
        # make.globals and the default sets come from the installed Portage (read-only, via a symlink).
        installed = Path(sys.prefix) / "share" / "portage" / "config"
        (self.eprefix / "share" / "portage" / "config").symlink_to(installed)
        (self.repo / "profiles" / "repo_name").write_text("gkeystest\n")
        (self.repo / "profiles" / "categories").write_text("app-misc\n")
        (self.repo / "profiles" / "default" / "make.defaults").write_text('ARCH="amd64"\nACCEPT_KEYWORDS="amd64"\n')
        (self.repo / "profiles" / "default" / "eapi").write_text("8\n")
        (self.repo / "metadata" / "layout.conf").write_text(
            "masters =\nthin-manifests = true\nsign-manifests = false\nmanifest-hashes = BLAKE2B SHA512\n")
        (config / "make.profile").symlink_to(self.repo / "profiles" / "default")
        self.repos_conf = f"[DEFAULT]\nmain-repo = gkeystest\n[gkeystest]\nlocation = {self.repo}\n"
        (config / "repos.conf").write_text(self.repos_conf)
        downloader = write_downloader(base / "bin")
        gkeys_fetch = (f'{LAUNCHER} -c {gkeys_config} --uri \\"\\${{URI}}\\" '
                       f'--file \\"\\${{DISTDIR}}/\\${{FILE}}\\" --')
        fetch = f'python3 {downloader} \\"\\${{URI}}\\" \\"\\${{DISTDIR}}/\\${{FILE}}\\"'
        if wrapper == "FETCHCOMMAND":
            fetch = f"{gkeys_fetch} {fetch}"
        lines = [
            f'DISTDIR="{self.distdir}"',
            f'PORTAGE_TMPDIR="{base / "tmp"}"',
            f'PORTAGE_USERNAME="{pwd.getpwuid(os.getuid()).pw_name}"',
            f'PORTAGE_GRPNAME="{grp.getgrgid(os.getgid()).gr_name}"',
            'FEATURES="-sandbox -usersandbox -userpriv -userfetch -network-sandbox -ipc-sandbox -pid-sandbox '
            '-mount-sandbox -news"',
            'GENTOO_MIRRORS=""',
            f'FETCHCOMMAND="{fetch}"',
            f'RESUMECOMMAND="{fetch} --resume"',
        ]
        if wrapper == "FETCH_WRAPPER":  # the README's line, with the launcher's path and the test's config
            lines.append(f'FETCH_WRAPPER="{gkeys_fetch}"')
        (config / "make.conf").write_text("\n".join(lines) + "\n")

    def add_ebuild(self, package: str, version: str, distfiles: list[Distfile]) -> str:
        """Write app-misc/PACKAGE-VERSION fetching ``distfiles`` (with a Manifest); return its atom."""
        folder = self.repo / "app-misc" / package
        folder.mkdir(parents=True, exist_ok=True)
        src_uri = " ".join(f"{d.url} -> {d.name}" if not d.url.endswith("/" + d.name) else d.url for d in distfiles)
        (folder / f"{package}-{version}.ebuild").write_text(
            f'EAPI=8\nDESCRIPTION="fetch wrapper test"\nHOMEPAGE="https://example.org"\nSRC_URI="{src_uri}"\n'
            'LICENSE="GPL-2"\nSLOT="0"\nKEYWORDS="amd64"\nRESTRICT="mirror"\n')
        (folder / "Manifest").write_text("".join(d.manifest_line() for d in distfiles))
        return f"=app-misc/{package}-{version}"

    def environment(self) -> dict[str, str]:
        """The environment for Portage's commands: this prefix as EPREFIX and as config root, our repos."""
        env = subprocess_environment(self.home)
        env.update({"PORTAGE_OVERRIDE_EPREFIX": str(self.eprefix), "PORTAGE_CONFIGROOT": str(self.eprefix),
                    "PORTAGE_REPOSITORIES": self.repos_conf})
        return env

    def portage_command(self, name: str, *argv: str, path: str = "") -> subprocess.CompletedProcess[str]:
        """Run the installed Portage command ``name`` (emerge, ebuild) in this prefix; ``path`` is put
        first on PATH.  Nothing outside ``base`` is written."""
        env = self.environment()
        if path:
            env["PATH"] = f"{path}:{env['PATH']}"
        command = portage_program(name)
        assert command is not None, f"Portage's {name} is not installed (the test should have been skipped)"
        return subprocess.run([*command, *argv], env=env, cwd=self.base, capture_output=True,
                              text=True, timeout=300, check=False)

    def emerge(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run ``emerge`` in this prefix."""
        return self.portage_command("emerge", *argv)
