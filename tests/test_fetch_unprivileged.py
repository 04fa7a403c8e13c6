"""Verification as Portage's unprivileged user: with FEATURES=userfetch (and userpriv for src_unpack)
Portage runs the fetch wrapper and the ebuild phases as ``portage``, who cannot open root's 0700 GnuPG
homes.  Such a reader verifies against the exported keyring in a private throwaway home; still pinned,
still failing closed.  The test forks after warming up every import (this interpreter lives under
/root, which ``nobody`` cannot read) and drops to ``nobody`` in the child.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import GkeysEnv
from media_helpers import AUTOBUILDS, STAGE3, STAMP, install_release_key, make_media

from gkeys_portage.cli.main import main as gkeys_main
from gkeys_portage.demo.world import KeyFactory, LoopbackServer
from gkeys_portage.portage.fetch import main as fetch_main

SYSTEM_PYTHON = Path("/usr/bin/python3")
DOWNLOAD = "import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not SYSTEM_PYTHON.exists(),
                                reason="needs root (to drop to nobody) and /usr/bin/python3")


def as_nobody(call: Callable[[], int], log: Path) -> int:
    """Run ``call`` in a forked child as nobody (output to ``log``); its exit status."""
    nobody = pwd.getpwnam("nobody")
    (log.parent / "tmp").mkdir(mode=0o777, exist_ok=True)
    (log.parent / "tmp").chmod(0o777)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 1
        try:
            with open(log, "w") as out:
                os.dup2(out.fileno(), 1)
                os.dup2(out.fileno(), 2)
                sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__  # not pytest's capture objects
                os.setgroups([])
                os.setgid(nobody.pw_gid)
                os.setuid(nobody.pw_uid)
                os.environ["HOME"] = os.environ["TMPDIR"] = str(log.parent / "tmp")
                tempfile.tempdir = None  # the reader's throwaway home goes there, not into /tmp
                status = call()
                sys.stdout.flush()
                sys.stderr.flush()
        finally:
            os._exit(status)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.fixture
def shared_env(server: LoopbackServer, keys: KeyFactory, capsys: pytest.CaptureFixture[str]) -> Iterator[GkeysEnv]:
    """A gkeys root that nobody can traverse (pytest's own tmp dirs are root-only), gentoo pinning releng."""
    root = Path(tempfile.mkdtemp(prefix="gkeys-unpriv-"))
    root.chmod(0o755)
    try:
        env = GkeysEnv(root, server, keys, capsys)
        install_release_key(env)
        yield env
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _wrapper(env: GkeysEnv, url: str, target: Path) -> Callable[[], int]:
    command = shlex.join([str(SYSTEM_PYTHON), "-c", DOWNLOAD, url, str(target)])
    return lambda: fetch_main(["-c", str(env.config), "--uri", url, "--file", str(target), "--", command])


def test_fetch_wrapper_as_nobody(shared_env: GkeysEnv) -> None:
    env = shared_env
    keyring_home = env.state / "keyrings" / "gentoo"
    assert keyring_home.stat().st_mode & 0o777 == 0o700 and keyring_home.stat().st_uid == 0
    distdir = env.root / "distfiles"
    distdir.mkdir(mode=0o777)
    distdir.chmod(0o777)
    media = make_media(env.keys, env.root / "mirror")
    url = media.publish(env.server)
    assert _wrapper(env, url, distdir / "warm-up" / STAGE3)() != 0  # imports everything (then fails: no dir)

    log = env.root / "child.log"
    assert as_nobody(_wrapper(env, url, distdir / STAGE3), log) == 0, log.read_text()
    assert "verified, signed by gentoo/releng" in log.read_text()
    assert (distdir / STAGE3).read_bytes() == media.data

    tampered = make_media(env.keys, env.root / "mirror", name=STAGE3.replace("openrc", "musl"))
    tampered_url = tampered.publish(env.server)
    env.server.publish(f"{AUTOBUILDS}/{STAMP}/{tampered.name}", tampered.data[:-1] + b"!")
    assert as_nobody(_wrapper(env, tampered_url, distdir / tampered.name), log) == 1, log.read_text()
    assert "NOT verified, removed" in log.read_text()
    assert not (distdir / tampered.name).exists()


def test_gkeys_verify_as_nobody(shared_env: GkeysEnv) -> None:
    """The eclass and the bashrc snippet call ``gkeys verify`` in src_unpack (userpriv)."""
    env = shared_env
    files = env.root / "files"
    files.mkdir(mode=0o755)
    data = files / "foo-1.0.tar.gz"
    data.write_bytes(b"upstream release\n")
    (files / "foo-1.0.tar.gz.asc").write_bytes(env.keys.sign("releng", data))
    forged = files / "bar-1.0.tar.gz"
    forged.write_bytes(b"upstream release\n")
    (files / "bar-1.0.tar.gz.asc").write_bytes(env.keys.sign("mallory", forged))
    assert env.run("verify", "-F", str(data), "-C", "gentoo").code == 0  # warm-up as root
    log = env.root / "child.log"
    assert as_nobody(lambda: gkeys_main(["-c", str(env.config), "verify", "-F", str(data), "-C", "gentoo"]),
                     log) == 0, log.read_text()
    assert "good signature by gentoo/releng" in log.read_text()
    assert as_nobody(lambda: gkeys_main(["-c", str(env.config), "verify", "-F", str(forged), "-C", "gentoo"]),
                     log) == 1
    assert "unknown key" in log.read_text()
