"""hooks/bashrc.d/gkeys.sh: the pre_src_unpack check driven by gkeys-verify.conf, run in bash with the
ebuild helper harness against real signatures and a real gkeys keyring (gentoo-devs: alice, bob)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import GkeysEnv
from eclass_helpers import HARNESS, PROJECT, Bash, Ebuild, installed_ebuild

SNIPPET = PROJECT / "hooks" / "bashrc.d" / "gkeys.sh"

CONF = """\
# ATOM                     CATEGORY[/NICK]     [DISTFILE-GLOB...]
app-misc/other             gentoo-devs
=app-misc/demo-2*          gentoo-devs/bob     *.tar.gz
app-misc/demo::elsewhere   gentoo-devs/bob     *.tar.gz
app-misc/d?mo              gentoo-devs/alice   demo-*.tar.gz   # comment
"""


@pytest.fixture
def ebuild(env: GkeysEnv) -> Ebuild:
    """gentoo-devs installed (alice, bob) and an empty build layout."""
    return installed_ebuild(env)


def run_hook(ebuild: Ebuild, conf: str = CONF, *, pv: str = "1.0", repo: str = "gentoo",
             a: str = "demo-1.0.tar.gz demo-1.0.patch", **environ: str) -> Bash:
    """Write the config, source the snippet and call pre_src_unpack for app-misc/demo-PV::REPO."""
    conf_path = ebuild.env.root / "gkeys-verify.conf"
    conf_path.write_text(conf)
    variables = {"GKEYS_VERIFY_CONF": str(conf_path), "CATEGORY": "app-misc", "PN": "demo", "PV": pv,
                 "P": f"demo-{pv}", "PF": f"demo-{pv}", "PORTAGE_REPO_NAME": repo, **environ}
    return ebuild.run("pre_src_unpack\necho REACHED", a=a, setup=f'source "{SNIPPET}"', environ=variables)


def distfiles(ebuild: Ebuild, signer: str | None = "alice", pv: str = "1.0") -> Path:
    """demo-PV.tar.gz (signed by ``signer`` unless None) and an unsigned patch."""
    path = ebuild.distfile(f"demo-{pv}.tar.gz")
    if signer:
        ebuild.sign(signer, path.name)
    ebuild.distfile(f"demo-{pv}.patch", b"--- a\n+++ b\n")
    return path


def test_listed_package_good_signature(ebuild: Ebuild) -> None:
    distfiles(ebuild)
    result = run_hook(ebuild)
    assert result.code == 0 and "REACHED" in result.out, result.err
    assert "verifying demo-1.0.tar.gz (gentoo-devs/alice)" in result.err
    assert "demo-1.0.patch" not in result.err  # not matched by the distfile glob


@pytest.mark.parametrize(("signer", "expected"), [(None, "no signature"), ("bob", "not pinned"),
                                                  ("mallory", "unknown key")])
def test_listed_package_refused(ebuild: Ebuild, signer: str | None, expected: str) -> None:
    distfiles(ebuild, signer)
    result = run_hook(ebuild)
    assert result.code == 1 and "REACHED" not in result.out
    assert expected in result.died and "demo-1.0.tar.gz" in result.died, result.err


def test_tampered_distfile_refused(ebuild: Ebuild) -> None:
    path = distfiles(ebuild)
    path.write_bytes(b"tampered")
    result = run_hook(ebuild)
    assert result.code == 1 and "NOT verified" in result.died, result.err


def test_version_and_repo_atoms(ebuild: Ebuild) -> None:
    """=app-misc/demo-2* and ::elsewhere pin bob; so bob's signature passes there and fails for 1.0."""
    distfiles(ebuild, "bob", pv="2.1")
    assert run_hook(ebuild, pv="2.1", a="demo-2.1.tar.gz").code == 0
    distfiles(ebuild, "bob")
    assert run_hook(ebuild, repo="elsewhere").code == 0
    refused = run_hook(ebuild)
    assert refused.code == 1 and "not pinned" in refused.died


def test_unlisted_package_and_switch_off_are_untouched(ebuild: Ebuild) -> None:
    distfiles(ebuild, "mallory")
    unlisted = run_hook(ebuild, conf="app-misc/other gentoo-devs\n")
    assert unlisted.code == 0 and "REACHED" in unlisted.out and "verifying" not in unlisted.err
    assert run_hook(ebuild, GKEYS_VERIFY="no").code == 0
    missing_conf = run_hook(ebuild, GKEYS_VERIFY_CONF=str(ebuild.env.root / "absent.conf"))
    assert missing_conf.code == 0


def test_unsupported_atom_dies(ebuild: Ebuild) -> None:
    """>=, <, ~ and ! atoms used to warn and count as no match, so the package they meant built unverified."""
    distfiles(ebuild, "bob")
    for atom in (">=app-misc/demo-1", "<app-misc/demo-2", "~app-misc/demo-1.0", "!app-misc/demo"):
        result = run_hook(ebuild, conf=f"{atom} gentoo-devs/alice\napp-misc/demo gentoo-devs/bob *.gz\n")
        assert result.code == 1 and "REACHED" not in result.out, result.err
        assert f"atom '{atom}' is not supported" in result.died and "=category/package-version" in result.died


def test_last_line_without_newline_is_read(ebuild: Ebuild) -> None:
    """A last line without a trailing newline used to be dropped: the package then built unverified."""
    distfiles(ebuild, "mallory")
    result = run_hook(ebuild, conf="app-misc/other gentoo-devs\napp-misc/demo gentoo-devs/alice")
    assert result.code == 1 and "REACHED" not in result.out, result.err
    assert "unknown key" in result.died
    distfiles(ebuild, "alice")
    good = run_hook(ebuild, conf="app-misc/demo gentoo-devs/alice *.tar.gz")
    assert good.code == 0 and "verifying demo-1.0.tar.gz (gentoo-devs/alice)" in good.err, good.err


@pytest.mark.parametrize("globs", ["*.zip", "demo-9*"])
def test_matched_line_selecting_no_distfile_dies(ebuild: Ebuild, globs: str) -> None:
    """A matched line whose globs select none of ${A} used to check nothing and succeed."""
    distfiles(ebuild)
    result = run_hook(ebuild, conf=f"app-misc/demo gentoo-devs/alice {globs}\n")
    assert result.code == 1 and "REACHED" not in result.out, result.err
    assert "nothing verified" in result.died and "app-misc/demo" in result.died
    only_signatures = run_hook(ebuild, conf="app-misc/demo gentoo-devs/alice\n", a="demo-1.0.tar.gz.asc")
    assert only_signatures.code == 1 and "nothing verified" in only_signatures.died, only_signatures.err


def test_unreadable_config_dies(ebuild: Ebuild) -> None:
    """A config that exists but cannot be read used to turn every check off silently."""
    distfiles(ebuild)
    folder = ebuild.env.root / "conf-dir"
    folder.mkdir()  # exists, but is no readable file
    result = run_hook(ebuild, GKEYS_VERIFY_CONF=str(folder))
    assert result.code == 1 and "REACHED" not in result.out, result.err
    assert "exists but cannot be read" in result.died


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_unreadable_config_dies_as_unprivileged_user() -> None:
    """0600 root config, hook run as nobody (FEATURES=userpriv): dies instead of skipping every check."""
    with tempfile.TemporaryDirectory() as base:
        Path(base).chmod(0o755)
        conf = Path(base) / "gkeys-verify.conf"
        conf.write_text("app-misc/demo gentoo-devs/alice\n")
        conf.chmod(0o600)
        script = (f'source "{HARNESS}"\nsource "{SNIPPET}"\nCATEGORY=app-misc PN=demo A=demo-1.0.tar.gz\n'
                  'pre_src_unpack\necho REACHED\n')
        proc = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "bash", "-c", script],
                              env={"PATH": "/usr/bin:/bin", "LC_ALL": "C", "GKEYS_VERIFY_CONF": str(conf)},
                              capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1 and "REACHED" not in proc.stdout, proc.stderr
    assert "exists but cannot be read" in proc.stderr


def test_existing_pre_src_unpack_is_kept(ebuild: Ebuild) -> None:
    conf = ebuild.env.root / "gkeys-verify.conf"
    conf.write_text(CONF)
    result = ebuild.run("pre_src_unpack", setup=f'pre_src_unpack() {{ echo MINE; }}\nsource "{SNIPPET}"',
                        environ={"GKEYS_VERIFY_CONF": str(conf)})
    assert result.out.strip() == "MINE"
