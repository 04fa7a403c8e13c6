"""Shared by the eclass and bashrc tests: a DISTDIR/WORKDIR/T layout, signing helpers, and a way to run
eclass or hook code in bash with tests/eclass_harness.sh, calling ``gkeys`` from PATH (a shim that runs
this working tree's entry point), exactly as an ebuild environment would."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from conftest import GkeysEnv

PROJECT = Path(__file__).resolve().parent.parent
HARNESS = PROJECT / "tests" / "eclass_harness.sh"
ECLASSDIR = PROJECT / "eclass-helpers"
DATA = b"upstream release tarball contents\n" * 100


@dataclass
class Bash:
    """Outcome of one harness run."""

    code: int
    out: str
    err: str

    @property
    def died(self) -> str:
        """The die message (empty if the script did not die)."""
        lines = [line for line in self.err.splitlines() if line.startswith("DIE: ")]
        return lines[-1][5:] if lines else ""


class Ebuild:
    """A DISTDIR / WORKDIR / T layout plus a way to run eclass code in the harness."""

    def __init__(self, env: GkeysEnv) -> None:
        self.env = env
        base = env.root / "build"
        self.distdir, self.workdir, self.temp, self.bin = (base / d for d in ("distdir", "work", "temp", "bin"))
        for directory in (self.distdir, self.workdir, self.temp, self.bin):
            directory.mkdir(parents=True, exist_ok=True)
        shim = self.bin / "gkeys"
        shim.write_text(f'#!/bin/sh\nPYTHONPATH="{PROJECT}" exec python3 -m gkeys_portage.cli.main "$@"\n')
        shim.chmod(0o755)

    def distfile(self, name: str, data: bytes = DATA) -> Path:
        """Write a distfile."""
        path = self.distdir / name
        path.write_bytes(data)
        return path

    def sign(self, nick: str, name: str, *, suffix: str = ".asc", clearsign: bool = False) -> Path:
        """Sign a distfile as ``nick``: FILE+suffix (detached) or the clearsigned copy."""
        signature = self.env.keys.sign(nick, self.distdir / name, clearsign=clearsign)
        path = self.distdir / (name + suffix)
        path.write_bytes(signature)
        return path

    def run(self, body: str, *, a: str = "", use: str = "verify-sig", category: str = "gentoo-devs",
            nick: str = "", extra: str = "", setup: str = "inherit gkeys-verify",
            environ: dict[str, str] | None = None) -> Bash:
        """Source the harness and the eclass (or ``setup``), then run ``body`` in bash."""
        script = (f'source "{HARNESS}"\n{setup}\n'
                  f'GKEYS_VERIFY_CATEGORY={category}\nGKEYS_VERIFY_NICK={nick}\n{extra}\n{body}\n')
        environ = {
            "PATH": f"{self.bin}:{os.environ['PATH']}", "HOME": os.environ["HOME"], "LC_ALL": "C",
            "ECLASSDIR": str(ECLASSDIR), "DISTDIR": str(self.distdir), "WORKDIR": str(self.workdir),
            "T": str(self.temp), "TMPDIR": str(self.temp), "A": a, "USE": use, "EAPI": "8",
            "GKEYS_VERIFY_CONFIG": str(self.env.config), **(environ or {}),
        }
        proc = subprocess.run(["bash", "-c", script], env=environ, capture_output=True, text=True, timeout=120,
                              check=False)
        return Bash(proc.returncode, proc.stdout, proc.stderr)


def installed_ebuild(env: GkeysEnv) -> Ebuild:
    """gentoo-devs installed (alice, bob) and an empty build layout."""
    env.install_devs("alice", "bob")
    return Ebuild(env)


def tarball(member: str = "hello.txt", text: bytes = b"hello\n") -> bytes:
    """A small .tar.gz with one file."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo(member)
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
    return buffer.getvalue()
