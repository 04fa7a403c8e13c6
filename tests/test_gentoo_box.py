"""A default Gentoo box, end to end (issue 42, item 6): an EPREFIX laid out as a fresh install (Portage's default
``FEATURES`` ``usersync userfetch userpriv``, ``/var/db/repos`` owned by root and ``gentoo`` by the portage user,
``make.conf`` with ``PKGDIR`` and ``DISTDIR``), gkeys laid out as its ebuild lays it out (the shipped
``/etc/gkeys/gkeys.conf``, Gentoo's key files under ``/usr/share/openpgp-keys``), and every step run as the one
before printed it.

Stand-ins, and why: the portage user is ``nobody``/``nogroup`` (a test never adds a user to the host's
``/etc/passwd``); the developers are test keys pinned beside the packaged roots the way docs/keys.md tells a user
to (``add-seed`` and a ``[keyrings]`` file): the real Gentoo keys expired in 2020 and nobody here holds their
secret halves; gkeys runs from this checkout (``PYTHONPATH``) through console scripts in ``${EPREFIX}/usr/bin``
made from ``[project.scripts]``, with the shipped config where the ebuild puts it (the hooks setup-portage installs
come from the checkout's ``hooks/``).
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from binpkg_helpers import portage_accepts, public_dir
from media_helpers import STAGE3, STAMP, make_media, publish_latest
from overlays_helpers import GOOD
from rsync_helpers import RsyncDaemon, free_port, make_tree

from gkeys_portage.demo.tree_repo import PACKAGE_PARENT, RepoBuilder, sync_module_missing
from gkeys_portage.demo.world import KeyFactory, LoopbackServer

__all__ = ["public_dir"]  # the fixture is used by name
PROJECT = Path(__file__).resolve().parent.parent
SHIPPED_CONFIG = PROJECT / "packaging" / "gkeys.conf"
PORTAGE_USER, PORTAGE_GROUP = "nobody", "nogroup"
#: category -> seed -> its purpose: the developers (no purpose: every seed counts for commits) and an infra
#: category whose keys sign release media and binary packages (releng) and Manifests (carol)
CATEGORIES = {"test-devs": {"alice": None, "bob": None},
              "test-infra": {"releng": "release-media", "carol": "repository"}}

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="a Gentoo box's root: chown to the portage user")]


class GentooBox:
    """An EPREFIX laid out as a fresh Gentoo install with gkeys installed, and a way to run its commands."""

    def __init__(self, base: Path, keys: KeyFactory, server: LoopbackServer) -> None:
        self.base, self.keys, self.server = base, keys, server
        self.eprefix = base / "eprefix"
        self.etc = self.eprefix / "etc" / "portage"
        self.repos = self.eprefix / "var" / "db" / "repos"
        self.gentoo = self.repos / "gentoo"
        self.home = base / "home"
        for path in (self.etc / "repos.conf", self.gentoo, self.home, self.eprefix / "etc/gkeys",
                     self.eprefix / "usr/share/openpgp-keys", self.eprefix / "var/cache/distfiles",
                     self.eprefix / "var/cache/binpkgs", self.eprefix / "var/tmp"):
            path.mkdir(parents=True, exist_ok=True)
        self.portage_ids = pwd.getpwnam(PORTAGE_USER).pw_uid, grp.getgrnam(PORTAGE_GROUP).gr_gid
        os.chown(self.gentoo, *self.portage_ids)  # /var/db/repos/gentoo: the portage user's (usersync drops to it)
        self.repos.chmod(0o755)
        for directory in (self.base, self.eprefix, self.eprefix / "var", self.eprefix / "var/db"):
            directory.chmod(0o755)  # the portage user can reach its repository
        (self.etc / "make.conf").write_text(
            # Portage's defaults (make.globals) spelled out: the box runs as a default Gentoo install does
            'FEATURES="usersync userfetch userpriv -news"\n'
            f'PKGDIR="{self.eprefix}/var/cache/binpkgs"\nDISTDIR="{self.eprefix}/var/cache/distfiles"\n'
            f'PORTAGE_TMPDIR="{self.eprefix}/var/tmp"\n'
            f'PORTAGE_USERNAME="{PORTAGE_USER}"\nPORTAGE_GRPNAME="{PORTAGE_GROUP}"\n')
        (self.eprefix / "share/portage").mkdir(parents=True)  # Portage's own defaults (make.globals, sets)
        (self.eprefix / "share/portage/config").symlink_to(Path(sys.prefix) / "share/portage/config")
        self.git_system, self.git_global = base / "gitconfig-system", base / "gitconfig-global"
        self.git_system.write_text("")
        self.git_global.write_text("")

    # ---- gkeys as the ebuild installs it ------------------------------------------------------------------

    def install_gkeys(self) -> None:
        """The commands in /usr/bin, the shipped config as /etc/gkeys/gkeys.conf, the developers' key file beside
        Gentoo's key files."""
        bindir = self.eprefix / "usr/bin"
        bindir.mkdir(parents=True, exist_ok=True)
        scripts = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]["scripts"]
        for program, entry in scripts.items():  # the console scripts, as the wheel's entry points make them
            module, function = entry.split(":")
            (bindir / program).write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import sys; from {module} import "
                                          f"{function}; sys.exit({function}())' \"$@\"\n")
            (bindir / program).chmod(0o755)
        shutil.copyfile(SHIPPED_CONFIG, self.eprefix / "etc/gkeys/gkeys.conf")
        for category, seeds in CATEGORIES.items():  # as Gentoo's sec-keys packages install theirs
            (self.eprefix / "usr/share/openpgp-keys" / f"{category}.asc").write_bytes(self.keys.public(*seeds))

    def configure(self, section: str, *lines: str) -> None:
        """Lines written under ``[section]`` of the installed gkeys.conf, as a user edits the shipped file (its
        header uncommented when the shipped file has it commented)."""
        conf = self.eprefix / "etc/gkeys/gkeys.conf"
        text = conf.read_text().replace(f"# [{section}]\n", f"[{section}]\n")
        header = f"[{section}]\n"
        assert header in text, section
        conf.write_text(text.replace(header, header + "".join(line + "\n" for line in lines), 1))

    # ---- running --------------------------------------------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """A root shell on the box: EPREFIX, Portage's config root, git's config in temp files."""
        return {"PATH": f"{self.eprefix}/usr/bin:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin:/usr/sbin"
                        ":/sbin",
                "HOME": str(self.home), "LC_ALL": "C.UTF-8", "EPREFIX": str(self.eprefix),
                "PORTAGE_CONFIGROOT": str(self.eprefix), "PORTAGE_OVERRIDE_EPREFIX": str(self.eprefix),
                "PYTHONPATH": str(PACKAGE_PARENT), "GIT_CONFIG_SYSTEM": str(self.git_system),
                "GIT_CONFIG_GLOBAL": str(self.git_global), "TMPDIR": str(self.base)}

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        """A command line as root types it into a shell on the box (``gkeys …``, ``emerge --sync``, ``a && b``)."""
        return subprocess.run(["bash", "-c", command], env=self.env, cwd=self.home, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=300, check=False)


def wait_for_port(port: int) -> None:
    """Until something listens on 127.0.0.1:``port`` (10 s at most)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def printed_next(output: str) -> str:
    """The command a run printed as the next step (``next: 'gkeys …'``)."""
    marker = "next: '"
    assert marker in output, output
    return output.split(marker, 1)[1].split("' ", 1)[0]


class Steps:
    """The box's steps in order: each must succeed (a failure names the step, its exit status and its output)."""

    def check(self, name: str, result: subprocess.CompletedProcess[str], ok: bool) -> bool:
        """True if the step succeeded; anything else fails the test."""
        assert result.returncode == 0 and ok, f"{name}: exit {result.returncode}\n{result.stdout[-4000:]}"
        return True


@pytest.fixture
def box(public_dir: Path, keys: KeyFactory, server: LoopbackServer) -> GentooBox:
    """The box, where the portage user can reach its repositories and Portage's verification home (pytest's
    tmp_path is 0700)."""
    box = GentooBox(public_dir / "box", keys, server)
    box.install_gkeys()
    return box


def test_a_default_gentoo_box_end_to_end(box: GentooBox, keys: KeyFactory, server: LoopbackServer,
                                         tmp_path: Path) -> None:
    missing = sync_module_missing()
    if missing:
        pytest.skip(missing)
    steps = Steps()
    # Pinned beside the packaged roots as docs/keys.md tells a user: the developers (tree commits) and an infra
    # category (release media, Manifests, binary packages, each key given its purpose by add-seed), seeds by hand,
    # their keys from a file, the first key source of each category; no key source beyond loopback.
    box.configure("keyrings", *(f"{category} = {box.eprefix}/usr/share/openpgp-keys/{category}.asc"
                                for category in CATEGORIES))
    box.configure("sources", "keyservers = http://127.0.0.1:9", "wkd = no", "timeout = 1", "retries = 1")
    box.configure("media", "category = test-infra")
    box.configure("binpkg", "category = test-infra", "nicks = releng")
    box.configure("overlays", "category = test-infra", f"url = {server.url}/overlays/repositories.xml")
    for category, seeds in CATEGORIES.items():
        for nick, purpose in seeds.items():
            added = box.run(f"gkeys add-seed -C {category} -n {nick} -N {nick} -K {keys.keys[nick].fingerprint}"
                            + (f" --purpose {purpose}" if purpose else ""))
            assert added.returncode == 0, added.stdout
        installed = box.run(f"gkeys install-key -C {category}")  # offline: from the [keyrings] file
        assert installed.returncode == 0, installed.stdout
    box.configure("purposes", "overlay-list = test-infra/carol")  # carol's second purpose, by hand
    # update-seed as a fresh install runs it, offline: every category of the shipped config (the four Gentoo ones:
    # the shipped file used to turn gentoo-devs off), each source's cause and the offline way named; it cannot
    # install Gentoo's real keys here (their key files are not on this machine), so it exits 3 (network).
    update = box.run("gkeys update-seed")
    assert update.returncode == 3, update.stdout
    assert [line.split()[2] for line in update.stdout.splitlines() if " * update-seed " in line] == \
        ["gentoo", "gentoo-auth", "gentoo-devs", "gentoo-infra"], update.stdout
    assert "Offline first install" in update.stdout and "127.0.0.1:9: connection refused" in update.stdout

    # The mirrors on 127.0.0.1: ::gentoo over git (developer commits), an rsync repository (signed Manifests)
    upstream = RepoBuilder(tmp_path / "upstream", keys, name="gentoo")
    upstream.commit("alice")
    upstream.commit("bob")
    git_port = free_port()
    git_uri = f"git://127.0.0.1:{git_port}/upstream"  # the mirror is down until the daemon starts (below)
    git_daemon: subprocess.Popen[bytes] | None = None
    rsyncd = RsyncDaemon(tmp_path / "rsyncd")
    try:
        rsyncd.serve(make_tree(tmp_path / "rsync-tree", keys, "carol",
                               files={"profiles/repo_name": "test-rsync\n"}))
        rsync_location = box.repos / "test-rsync"
        rsync_location.mkdir()
        os.chown(rsync_location, *box.portage_ids)
        (box.etc / "repos.conf" / "gentoo.conf").write_text(
            f"[DEFAULT]\nmain-repo = gentoo\n[gentoo]\nlocation = {box.gentoo}\nsync-type = git\n"
            f"sync-uri = {git_uri}\nauto-sync = yes\nsync-gkeys-category = test-devs\n"
            "sync-gkeys-top-category = test-devs\n")
        (box.etc / "repos.conf" / "test-rsync.conf").write_text(  # an rsync repository on gkeys (docs/portage.md)
            f"[test-rsync]\nlocation = {rsync_location}\nsync-type = gkeys\nsync-uri = {rsyncd.url}\n"
            "auto-sync = yes\nsync-gkeys-category = test-infra\n")

        # setup-portage, then doctor as it printed it, then each fix doctor printed, as printed
        # the overlay list, served with carol's signature (the postsync hook fetches it after every sync)
        server.publish("overlays/repositories.xml", GOOD)
        server.publish("overlays/repositories.xml.asc", keys.sign_bytes("carol", GOOD, tmp_path))
        setup = box.run("gkeys setup-portage --overlays")
        assert setup.returncode == 0, setup.stdout
        doctor = box.run(printed_next(setup.stdout))
        assert f"{box.etc}/" in doctor.stdout and "checked repos.conf: 0 repositories" not in doctor.stdout, \
            doctor.stdout
        for fix in [line.split("; fix: ", 1)[1] for line in doctor.stdout.splitlines() if "; fix: " in line]:
            done = box.run(fix)
            assert done.returncode == 0, (fix, done.stdout)
        doctor = box.run(printed_next(setup.stdout))
        assert doctor.returncode == 0 and "nothing would make verification fail" in doctor.stdout, doctor.stdout
        assert " user: keyring readability not checked" not in doctor.stdout  # make.conf's portage user was

        # emerge --sync, as a default box runs it (usersync: the sync drops to the portage user). First with the
        # mirror down: nothing installed, and /var/db/repos/gentoo still the portage user's (else Portage makes it
        # again, as root, and every later sync runs as root)
        down = box.run("emerge --sync gentoo")
        assert down.returncode != 0 and "nothing installed" in down.stdout, down.stdout
        assert box.gentoo.is_dir() and box.gentoo.stat().st_uid == box.portage_ids[0], \
            "a failed first clone took /var/db/repos/gentoo away from the portage user (usersync lost)"
        git_daemon = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={tmp_path}",
                                       "--listen=127.0.0.1", f"--port={git_port}", str(tmp_path)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_for_port(git_port)
        sync = box.run("emerge --sync gentoo")
        if steps.check("emerge --sync over git", sync, (box.gentoo / ".git").is_dir()):
            assert box.run(f"git -c safe.directory='*' -C {box.gentoo} rev-parse HEAD").stdout.strip() == \
                upstream.head()
            # usersync: Portage ran the sync as the repository's owner, the portage user
            assert {path.stat().st_uid for path in box.gentoo.rglob("*")} == {box.portage_ids[0]}
        overlays = box.eprefix / "var/lib/gkeys/overlays/repositories.xml"
        if steps.check("the postsync hook (overlay list)", sync, overlays.is_file()):
            assert f"wrote the verified list to {overlays}" in sync.stdout + down.stdout or \
                f"{overlays} is already this list" in sync.stdout, sync.stdout  # Portage ran it after both syncs
            assert all(f"<name>{name}</name>".encode() in overlays.read_bytes() for name in ("alpha", "beta", "gamma"))
        sync = box.run("emerge --sync test-rsync")
        if steps.check("emerge --sync over rsync", sync, (rsync_location / "Manifest").is_file()):
            assert (rsync_location / "dev-test/pkg/pkg-1.ebuild").is_file()
            assert {path.stat().st_uid for path in rsync_location.rglob("*")} == {box.portage_ids[0]}
    finally:
        rsyncd.close()
        if git_daemon is not None:
            os.killpg(git_daemon.pid, signal.SIGTERM)  # the daemon this test started, by its id
            git_daemon.wait(10)

    # fetch-media --latest from a loopback mirror, as the README's first steps show
    media = make_media(keys, tmp_path / "media-mirror", STAGE3)
    media.publish(server)
    publish_latest(keys, server, tmp_path, "stage3-amd64-openrc", f"{STAMP}/{STAGE3} {len(media.data)}")
    target = box.base / "mnt-gentoo"
    fetched = box.run(f"gkeys fetch-media --latest stage3-amd64-openrc --mirror {server.url} -d {target}")
    if steps.check("fetch-media --latest", fetched, (target / STAGE3).is_file()):
        assert (target / STAGE3).read_bytes() == media.data

    # Portage's binary-package check, through the trust helper (PORTAGE_TRUST_HELPER runs it as Portage does)
    helper = box.run("gkeys-trust-helper")
    if steps.check("gkeys-trust-helper", helper, (box.etc / "gnupg").is_dir()):
        data = b"a binary package's Manifest\n"
        assert portage_accepts(box.etc / "gnupg", keys.sign_bytes("releng", data, tmp_path), data)
        assert not portage_accepts(box.etc / "gnupg", keys.sign_bytes("alice", data, tmp_path), data)

