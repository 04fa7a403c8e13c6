"""A real ``rsync --daemon`` on 127.0.0.1 and Manifest trees signed with gemato's own tools.

* :class:`RsyncDaemon` serves one module, ``gentoo``, whose path is a symlink the test points at any tree
  (each connection resolves it afresh), so "the mirror now serves yesterday's tree" is one call; a hostile
  mirror that serves another tree to each connection is :meth:`RsyncDaemon.serve_in_turn`.
* :func:`make_tree` writes a small ebuild repository and signs it: with ``gemato create -p ebuild -s -t``
  (the key from the session :class:`KeyFactory` home) for a tree stamped now, and with gemato's library
  (``set_timestamp``) for a tree stamped in the past.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from gkeys_portage.demo.world import KeyFactory

_SIGN_AT = """\
import sys
from datetime import datetime
import gemato.openpgp, gemato.profile, gemato.recursiveloader
root, fpr, when = sys.argv[1:4]
env = gemato.openpgp.OpenPGPSystemEnvironment()
m = gemato.recursiveloader.ManifestRecursiveLoader(
    root + "/Manifest", allow_create=True, sign_openpgp=True, openpgp_keyid=fpr, openpgp_env=env,
    profile=gemato.profile.get_profile_by_name("ebuild"), max_jobs=1)
m.update_entries_for_directory()
m.set_timestamp(datetime.fromisoformat(when))
m.save_manifests(force=True)
"""


#: The greeting the test daemon prints to every client, as rsync.gentoo.org's mirrors do.
MOTD = "This is a Gentoo rsync mirror on 127.0.0.1 (a test daemon).\n"


def stop_rsync_processes(marker: Path) -> None:
    """SIGKILL every rsync process whose command line names ``marker`` (a directory of this test: only processes
    the test started, e.g. the children a killed sync or the daemon forked, which outlive their parents)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if words and words[0].endswith(b"rsync") and any(str(marker).encode() in word for word in words):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RsyncDaemon:
    """``rsync --daemon --no-detach`` on 127.0.0.1 serving module ``gentoo`` (read only, no chroot)."""

    def __init__(self, base: Path) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.link = base / "served"
        self.port = free_port()
        conf = base / "rsyncd.conf"
        motd = base / "motd"  # Gentoo's mirrors greet every client (rsync prints it on stdout): as they do
        motd.write_text(MOTD)
        conf.write_text(f"use chroot = no\npid file = {base}/rsyncd.pid\nlog file = {base}/rsyncd.log\n"
                        f"motd file = {motd}\n"
                        f"[gentoo]\npath = {self.link}\nread only = yes\ntimeout = 60\n"
                        f"pre-xfer exec = {self._queue_script(base)}\n")
        self.process = subprocess.Popen(["rsync", "--daemon", "--no-detach", f"--config={conf}",
                                         "--address=127.0.0.1", f"--port={self.port}"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        self.close()
        raise RuntimeError("rsync --daemon did not start")

    @property
    def url(self) -> str:
        """``rsync://127.0.0.1:PORT/gentoo``."""
        return f"rsync://127.0.0.1:{self.port}/gentoo"

    def serve(self, tree: Path) -> None:
        """Serve ``tree`` from now on (the module path is swapped atomically)."""
        tmp = self.link.with_name(f".served-{time.monotonic_ns()}")
        tmp.symlink_to(tree)
        os.replace(tmp, self.link)

    def _queue_script(self, base: Path) -> Path:
        """The daemon's ``pre-xfer exec`` script: it runs once per connection, after the module's path was resolved
        for that connection, and points the link at the next queued tree (so the *next* connection gets it)."""
        self.queue = base / "queue"
        script = base / "next-tree"
        script.write_text(f"#!/bin/sh\nq={self.queue}\n[ -s \"$q\" ] || exit 0\nnext=$(head -n 1 \"$q\")\n"
                          f"tail -n +2 \"$q\" > \"$q.new\" && mv \"$q.new\" \"$q\"\n"
                          f"ln -sfn \"$next\" {self.link}.next && mv -T {self.link}.next {self.link}\n")
        script.chmod(0o755)
        return script

    def serve_in_turn(self, *trees: Path) -> None:
        """Serve ``trees[0]`` to the next connection, ``trees[1]`` to the one after, and so on; the last one stays."""
        self.serve(trees[0])
        self.queue.write_text("".join(f"{tree}\n" for tree in trees[1:]))

    def close(self) -> None:
        """Stop the daemon and the children it forked per connection (the process group of the daemon this
        helper started, by its id: a client killed mid-transfer leaves its connection's child waiting)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        stop_rsync_processes(self.link.parent)  # a connection's child that left the group


BASE_FILES = {
    "profiles/repo_name": "gentoo\n",
    "profiles/categories": "dev-test\n",
    "metadata/layout.conf": "masters =\nthin-manifests = true\nsign-manifests = false\n",
    "dev-test/pkg/pkg-1.ebuild": "EAPI=8\nSLOT=0\nKEYWORDS=\"amd64\"\n",
}


def make_tree(path: Path, keys: KeyFactory, signer: str | None, *, files: Mapping[str, str] | None = None,
              when: datetime | None = None) -> Path:
    """Write a small ebuild repository at ``path`` (BASE_FILES + ``files``; files already there with that content
    are left alone) and sign its Manifests as
    ``signer`` with gemato (unsigned Manifests when None), stamped ``when`` (default now; its files then get that
    time too); return ``path``."""
    for rel, text in {**BASE_FILES, **(files or {})}.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text() != text:  # an unchanged file keeps its time (rsync's quick check)
            target.write_text(text)
    env = {**os.environ, "GNUPGHOME": str(keys.home)}
    if signer is None:
        command = ["gemato", "create", "-q", "-p", "ebuild", "-S", "-t", str(path)]
    elif when is None:
        command = ["gemato", "create", "-q", "-p", "ebuild", "-k", keys.keys[signer].fingerprint, "-s", "-t",
                   str(path)]
    else:
        command = [sys.executable, "-c", _SIGN_AT, str(path), keys.keys[signer].fingerprint, when.isoformat()]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"signing the tree failed: {result.stderr}")
    if when is not None:  # a tree of that time has files of that time (rsync's quick check compares them)
        for item in path.rglob("*"):
            os.utime(item, (when.timestamp(), when.timestamp()), follow_symlinks=False)
    return path


CATEGORY = "infra-test"
#: gkeys.conf lines that give CATEGORY's seed ``snapshot`` the repository purpose.
PURPOSES = f"[purposes]\nrepository = {CATEGORY}/snapshot\n"


def pin_repository_keys(env: Any) -> Any:
    """Pin ``infra`` as CATEGORY's repository key (seed ``snapshot``, given that purpose in gkeys.conf) and
    ``alice`` as a developer of the same category (no purpose); return ``env``."""
    env.write_config(PURPOSES)
    if "infra" not in env.keys.keys:
        env.keys.create("infra", name="Infra", email="infrastructure@gentoo.org")
    env.pin_key(CATEGORY, "snapshot", "infra", name="Gentoo ebuild repository signing key")
    env.pin_key(CATEGORY, "alice", "alice")
    return env


def make_snapshot(folder: Path, keys: KeyFactory, signer: str | None, when: datetime, *,
                  name_date: datetime | None = None) -> Path:
    """A webrsync-shaped snapshot ``gentoo-YYYYMMDD.tar.xz`` (named for ``name_date``, default ``when``) of a
    tree whose ``metadata/timestamp.x`` says ``when``, with a detached armored ``.gpgsig`` by ``signer``."""
    tree = folder / f"tree-{time.monotonic_ns()}" / "gentoo"
    for rel, text in {**BASE_FILES, "metadata/timestamp.x": f"{int(when.timestamp())} {when:%a %d %b %Y %H:%M:%S} "
                      "+0000\n", "metadata/timestamp.chk": f"{when:%a, %d %b %Y %H:%M:%S} +0000\n"}.items():
        target = tree / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    path = folder / f"gentoo-{(name_date or when):%Y%m%d}.tar.xz"
    with tarfile.open(path, "w:xz") as archive:
        archive.add(tree, arcname="gentoo")
    if signer is not None:
        path.with_name(path.name + ".gpgsig").write_bytes(keys.sign(signer, path, armor=True))
    return path


def deep_tree(root: Path, levels: int) -> Path:
    """``root/d/d/…/f`` ``levels`` directories deep, built through descriptors (the path passes PATH_MAX)."""
    root.mkdir(parents=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    os.close(fd)
    return root
