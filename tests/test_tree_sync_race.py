"""A real second user races a real ``emerge --sync`` of a git repository under ``FEATURES=usersync`` (issue 46).

Laid out as Gentoo installs it: the repositories' directory is root's, the repository belongs to an
unprivileged user (created here: ``useradd --system``), git is served over HTTP on 127.0.0.1.  While root's
``emerge --sync`` runs, a process of that user plays every trick it can on what it can reach: it replaces
directories of the staging tree, the spare and the trash by symbolic links to a directory only root may read,
keeps descriptors into them from before, writes a filter, an fsmonitor and a hooks path into every ``.git/config``
it finds (each would write a file into that directory, which only root can), and rewrites a tracked live file
keeping its size and modification time.  Over the trials: nothing outside the tree changes owner, mode or
content, nothing the user configured runs as root, each sync either succeeds or refuses, and once the user
stops, one more sync leaves exactly the signed commit, every entry owned by the user.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import head, install_devs

from gkeys_portage.demo.tree_repo import PortageSandbox, RepoBuilder, serve_repo, sync_module_missing

pytestmark = pytest.mark.slow

USER = "gkeys-race"
TRIALS = 8

#: The attacker, run as the repository's owner: ``ATTACK location victim stop``.
ATTACK = r'''
import os, sys, time
location, victim, stop, mode = sys.argv[1:5]
rough = mode == "rough"  # also breaks the staging copy's .git while the sync user fetches (a refusal, no more)
parent, name = os.path.dirname(location), os.path.basename(location)
marker = f"echo ran >> {victim}/pwned-$(id -u)"
config = (f"[filter \"x\"]\n\tsmudge = sh -c '{marker}; cat'\n\tclean = sh -c '{marker}; cat'\n"
          f"[core]\n\tfsmonitor = sh -c '{marker}'\n\thooksPath = {victim}\n")
held = []

def attempt(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except OSError:
        pass

def poison(tree, live=False):
    git = os.path.join(tree, ".git")
    attempt(lambda: open(os.path.join(git, "config"), "a").write(config))
    attempt(os.makedirs, os.path.join(git, "info"), exist_ok=True)
    attempt(lambda: open(os.path.join(git, "info", "attributes"), "w").write("* filter=x\n"))
    for sub in (".git", ".git/objects", "dev-test", "dev-test/pkg", "eclass"):
        try:
            if len(held) < 200:
                held.append(os.open(os.path.join(tree, sub), os.O_RDONLY | os.O_DIRECTORY))
        except OSError:
            pass
    for sub in ("dev-test", "eclass", *((".git/refs", ".git/refs/remotes", ".git") if rough and not live else ())):
        path = os.path.join(tree, sub)
        attempt(os.rename, path, path + ".away")
        attempt(os.symlink, victim, path)

def through_held():
    for fd in held:
        attempt(os.symlink, victim, "pkg", dir_fd=fd)
        attempt(os.rename, "pkg", "pkg.away", src_dir_fd=fd, dst_dir_fd=fd)
        attempt(os.symlink, victim, "pkg", dir_fd=fd)
        attempt(lambda: os.close(os.open("planted", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)))

def edit_live():
    path = os.path.join(location, "dev-test", "pkg", "file1")
    try:
        st = os.stat(path)
        with open(path, "r+b") as handle:
            data = handle.read()
            handle.seek(0)
            handle.write(b"X" * len(data))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    except OSError:
        pass

while not os.path.exists(stop):
    try:
        names = os.listdir(parent)
    except OSError:
        names = []
    for entry in names:
        path = os.path.join(parent, entry)
        if entry.startswith(f".{name}.gkeys-"):
            poison(path)
            poison(os.path.join(path, "tree"))
            poison(os.path.join(path, "work"))
        elif entry in (f".{name}.gkeys.old", f".{name}.gkeys.trash"):
            poison(path)
    poison(location, live=True)
    through_held()
    edit_live()
    time.sleep(0.002)
'''


#: The owner, done racing, cleans its .git (``argv[3]``) and edits ``argv[2]`` in place: its size and
#: modification time put back.
EDIT = r'''
import os, sys
path, git = sys.argv[2:4]
config = open(os.path.join(git, "config")).read().split('[filter "x"]')[0]
open(os.path.join(git, "config"), "w").write(config)
if os.path.exists(os.path.join(git, "info", "attributes")):
    os.unlink(os.path.join(git, "info", "attributes"))
import subprocess, time
time.sleep(1.1)  # the owner's index, written now, is newer than every file: git re-reads none of them
subprocess.run(["git", "-C", os.path.dirname(git), "update-index", "-q", "--really-refresh"],
               env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}, check=True)
st = os.stat(path)
with open(path, "r+b") as handle:
    handle.write(b"X" * st.st_size)
os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
'''


def _race_user() -> tuple[int, int]:
    """The unprivileged user the race runs as (created if missing)."""
    if os.geteuid() != 0:
        pytest.skip("the race needs root: it runs emerge as root and the attacker as another user")
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                              capture_output=True, text=True, check=False)
        if made.returncode != 0:
            pytest.skip(f"cannot create the user {USER}: {made.stderr.strip()}")
        entry = pwd.getpwnam(USER)
    return entry.pw_uid, entry.pw_gid


def _python_for_anyone() -> str:
    """A Python every user may run (the test's own may sit in root's home)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", sys.executable):
        if os.path.exists(candidate) and subprocess.run(
                ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", candidate, "-c", ""],
                capture_output=True, check=False).returncode == 0:
            return candidate
    pytest.skip(f"no Python that {USER} may run")


def _snapshot(top: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every entry under ``top``: owner, group, mode and a digest of its content (or link target)."""
    found = {}
    for path in [top, *top.rglob("*")]:
        st = path.lstat()
        if stat.S_ISREG(st.st_mode):
            content = hashlib.sha256(path.read_bytes()).hexdigest()
        elif stat.S_ISLNK(st.st_mode):
            content = os.readlink(path)
        else:
            content = ""
        found[str(path.relative_to(top))] = (st.st_uid, st.st_gid, st.st_mode, content)
    return found


def _files(tree: Path) -> dict[str, tuple[str, bytes]]:
    """The work tree (``.git`` left out): each entry's kind and content (or link target)."""
    found = {}
    for path in tree.rglob("*"):
        rel = path.relative_to(tree)
        if rel.parts[0] == ".git":
            continue
        if path.is_symlink():
            found[rel.as_posix()] = ("link", os.fsencode(os.readlink(path)))
        elif path.is_file():
            found[rel.as_posix()] = ("exec" if path.stat().st_mode & 0o100 else "file", path.read_bytes())
    return found


@pytest.fixture
def race_root(env: Any) -> Iterator[tuple[PortageSandbox, Path, tuple[int, int]]]:
    """A Portage root laid out as Gentoo's: root's repositories directory, a repository another user owns."""
    if missing := sync_module_missing():
        pytest.skip(missing)
    ids = _race_user()
    base = Path(tempfile.mkdtemp(prefix="gkeys-race-"))
    base.chmod(0o755)
    try:
        sandbox = PortageSandbox(base / "portage", env.config)
        (sandbox.eprefix / "tmp").mkdir(parents=True)
        yield sandbox, base, ids
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_racing_tree_owner_never_steers_root_nor_keeps_an_edit(
        env: Any, race_root: tuple[PortageSandbox, Path, tuple[int, int]]) -> None:
    portage_root, base, (uid, gid) = race_root
    python = _python_for_anyone()
    victim = base / "victim"
    (victim / "sub").mkdir(parents=True)
    victim.chmod(0o700)
    (victim / "secret").write_text("root's only\n")
    (victim / "secret").chmod(0o600)
    (victim / "sub" / "file").write_text("root's too\n")
    (victim / "index.lock").write_text("a lock file root must not remove\n")
    before = _snapshot(victim)
    repos_before = portage_root.repos.lstat()

    install_devs(env, ("alice",))
    up = RepoBuilder(base / "upstream", env.keys)
    up.commit("alice", files={"eclass/a.eclass": "# a\n", "dev-test/pkg/file1": "one\n"})
    uri = serve_repo(env.server, up.path, "race.git")
    location = portage_root.add_repo("test", uri, "gkeys", sync_gkeys_policy="all")
    location.mkdir(mode=0o755)
    os.chown(location, uid, gid)
    portage_root.env["FEATURES"] = "-news usersync"
    result = portage_root.sync("test")
    assert result.returncode == 0, result.stdout

    outcomes = []
    started = time.monotonic()
    for trial in range(TRIALS):
        verified = head(location)
        up.commit("alice", files={f"dev-test/pkg/file{trial + 2}": f"{trial}\n", "eclass/a.eclass": f"# {trial}\n"})
        serve_repo(env.server, up.path, "race.git")
        stop = base / f"stop-{trial}"
        attacker = subprocess.Popen([python, "-c", ATTACK, str(location), str(victim), str(stop),
                                     "rough" if trial % 3 == 2 else "gentle"],
                                    user=uid, group=gid, extra_groups=[], cwd="/", stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.05)
            result = portage_root.sync("test")
        finally:
            stop.touch()
            attacker.wait(timeout=30)
        outcomes.append(result.returncode)
        assert _snapshot(victim) == before, f"trial {trial}: root changed a file outside the tree\n{result.stdout}"
        assert "Traceback" not in result.stdout and "internal error" not in result.stdout, result.stdout
        if result.returncode == 0:
            assert head(location) == up.head(), result.stdout
        else:
            assert "NOT updated" in result.stdout and head(location) in (verified, up.head()), result.stdout
    assert time.monotonic() - started < 240

    result = portage_root.sync("test")  # the owner stopped racing: one sync brings the signed commit
    assert result.returncode == 0, result.stdout
    assert _files(location) == _files(up.path)
    edited = location / "dev-test" / "pkg" / "file1"
    subprocess.run([python, "-c", "import sys; exec(sys.argv[1])", EDIT, str(edited), str(location / ".git")],
                   user=uid, group=gid, extra_groups=[], cwd="/", check=True)
    result = portage_root.sync("test")  # nothing new upstream: the in-place edit must not stay
    assert result.returncode == 0, result.stdout
    assert head(location) == up.head()
    assert _files(location) == _files(up.path)
    assert {(p.lstat().st_uid, p.lstat().st_gid) for p in [location, *location.rglob("*")]} == {(uid, gid)}
    assert _snapshot(victim) == before
    repos_after = portage_root.repos.lstat()
    assert (repos_after.st_uid, repos_after.st_gid, repos_after.st_mode) == \
        (repos_before.st_uid, repos_before.st_gid, repos_before.st_mode)
    assert not [p for p in base.rglob("pwned-*")]
    print(f"race outcomes (exit status per trial): {outcomes}")
