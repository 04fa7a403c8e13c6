"""The Gentoo ebuild (issue 14, item 5): a real ``ebuild … clean install`` (Gentoo's distutils-r1 eclasses, the
PyPI Portage ``ebuild`` command) of the sdist this checkout builds, and the image holds every installed file."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import shared_path

from gkeys_portage import __version__, installfiles

PROJECT = Path(__file__).resolve().parent.parent
PACKAGE = PROJECT / "packaging" / "gentoo" / "app-crypt" / "gkeys-portage"
VERSION = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]["version"]
TOOLS = "import portage, gpep517, installer, setuptools, wheel"
MAN_SUFFIXES = ("", ".bz2", ".gz", ".xz", ".zst")


def _outside_the_source_block(text: str) -> list[str]:
    """The ebuild's lines but its source block (``HOMEPAGE=`` up to ``LICENSE=``), its ``inherit`` line and
    ``pkg_nofetch`` (a tarball the user puts into DISTDIR)."""
    lines = re.sub(r"\npkg_nofetch\(\) \{\n.*?\n\}\n\n", "\n", text, flags=re.S).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("HOMEPAGE="))
    end = next(i for i, line in enumerate(lines) if line.startswith("LICENSE="))
    return [line for line in lines[:start] + lines[end:] if not line.startswith("inherit ")]


def test_versioned_and_live_ebuilds_differ_only_in_their_source() -> None:
    assert __version__ == VERSION
    versioned = (PACKAGE / f"gkeys-portage-{VERSION}.ebuild").read_text()
    live = (PACKAGE / "gkeys-portage-9999.ebuild").read_text()
    assert _outside_the_source_block(versioned) == _outside_the_source_block(live)
    assert 'SRC_URI="${P}.tar.gz"' in versioned and 'RESTRICT="fetch"' in versioned and "pkg_nofetch()" in versioned
    assert "make-overlay.sh" in versioned  # pkg_nofetch names the recipe that makes the tarball
    assert "git-r3" in live and "EGIT_OVERRIDE_REPO_PROJ_GKEYS_PORTAGE" in live  # the user's URL, git-r3's way
    assert re.search(r"^EAPI=8$", versioned, re.M) and "DISTUTILS_USE_PEP517=setuptools" in versioned
    for atom in ("app-crypt/gnupg", "dev-vcs/git", "sys-apps/portage", "dev-python/python-gnupg",
                 "dev-python/requests", "dev-python/defusedxml", ">=dev-python/pysequoia-0.1.35"):
        assert atom in versioned, atom
    assert not (PROJECT / "packaging" / "gentoo" / "dev-python").exists(), "::gentoo packages dev-python/pysequoia"
    assert 'IUSE="ldap"' in versioned and re.search(r"ldap\? \( >=dev-python/ldap3-[\d.]+\[", versioned)
    assert re.search(r'^RESTRICT\+=" test"$', versioned, re.M)
    reason = versioned[:versioned.index('RESTRICT+=" test"')].rsplit("\n\n", 1)[-1]
    assert all(word in reason for word in ("gpg", "git", "rsync", "slapd", "127.0.0.1")), reason
    assert "installfiles.py etc" in versioned and "installfiles.py systemd" in versioned  # the one list
    assert "systemd_dounit" in versioned and "ExecStart=${EPREFIX}/" in versioned
    assert 'docompress -x "/usr/share/doc/${PF}"' in versioned and "DOCS=()" in versioned
    root = ET.parse(PACKAGE / "metadata.xml").getroot()
    assert root.tag == "pkgmetadata" and root.find("use/flag[@name='ldap']") is not None


# A stand-in for ::gentoo's systemd.eclass, which the shared test repository does not hold: the function the ebuild
# calls, installing where the real one does (${EPREFIX}/usr/lib/systemd/system).
SYSTEMD_ECLASS = """\
systemd_get_systemunitdir() { echo "${EPREFIX}/usr/lib/systemd/system"; }
systemd_dounit() { ( insopts -m 0644; insinto /usr/lib/systemd/system; doins "$@" ) }
"""


def make_overlay(tmp_path: Path) -> Path:
    """The local overlay ``packaging/make-overlay.sh`` builds from this checkout."""
    overlay = tmp_path / "overlay"
    result = subprocess.run(["bash", str(PROJECT / "packaging" / "make-overlay.sh"), "--python", sys.executable,
                             "--git-url", "file:///srv/gkeys-portage.git", str(overlay)],
                            capture_output=True, text=True, check=False, timeout=300,
                            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path),
                                 "TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr
    return overlay


def test_make_overlay_writes_an_overlay_with_the_tarball_and_its_manifest(tmp_path: Path) -> None:
    overlay = make_overlay(tmp_path)
    assert (overlay / "profiles" / "repo_name").read_text().strip() == "gkeys-portage-local"
    assert "masters = gentoo" in (overlay / "metadata" / "layout.conf").read_text()
    tarball = overlay / "distfiles" / f"gkeys-portage-{VERSION}.tar.gz"
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    top = f"gkeys-portage-{VERSION}"
    assert {f"{top}/setup.py", f"{top}/{installfiles.SAMPLE_CONFIG}", f"{top}/docs/portage.md"} <= names
    assert {name.split("/")[0] for name in names} == {top}
    data = tarball.read_bytes()
    manifest = (overlay / "app-crypt" / "gkeys-portage" / "Manifest").read_text()
    assert manifest == (f"DIST {tarball.name} {len(data)} BLAKE2B {hashlib.blake2b(data).hexdigest()} "
                        f"SHA512 {hashlib.sha512(data).hexdigest()}\n")
    live = (overlay / "app-crypt" / "gkeys-portage" / "gkeys-portage-9999.ebuild").read_text()
    assert 'EGIT_REPO_URI="file:///srv/gkeys-portage.git"' in live


@pytest.mark.slow
def test_try_ebuild_manifest_and_install_from_the_local_overlay(tmp_path: Path) -> None:
    """Issue 42: 'ebuild … manifest' and 'install' of the overlay make-overlay.sh builds (real eclasses, the PyPI
    Portage); the Manifest it writes is the overlay's, and the image holds every installed file."""
    shared = shared_path("gentoo-eclasses", "try-ebuild.sh").parent
    if subprocess.run([sys.executable, "-c", TOOLS], capture_output=True, check=False).returncode != 0:
        pytest.skip(f"{sys.executable} lacks portage/gpep517/installer/setuptools/wheel (pip install '.[test]')")
    overlay = make_overlay(tmp_path)
    eclasses = tmp_path / "gentoo-eclasses"
    shutil.copytree(shared, eclasses, ignore=shutil.ignore_patterns("distfiles", "sample-src"))
    (eclasses / "eclass" / "systemd.eclass").write_text(SYSTEMD_ECLASS)
    package = overlay / "app-crypt" / "gkeys-portage"
    tarball = overlay / "distfiles" / f"gkeys-portage-{VERSION}.tar.gz"
    result = subprocess.run(["bash", str(eclasses / "try-ebuild.sh"), str(package / f"gkeys-portage-{VERSION}.ebuild"),
                             str(tarball), "manifest", "clean", "install"],
                            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "TRY_EBUILD_PYTHON": sys.executable,
                                 "TRY_EBUILD_KEEP": "1", "HOME": str(tmp_path), "TMPDIR": str(tmp_path)},
                            capture_output=True, text=True, check=False, timeout=600)
    kept = re.search(r"^work dir kept: (\S+)$", result.stderr, re.M)
    assert kept, result.stderr[-3000:]
    work = Path(kept.group(1))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (work / "repo" / "app-crypt" / "gkeys-portage" / "Manifest").read_text() == \
        (package / "Manifest").read_text(), "ebuild … manifest writes the Manifest make-overlay.sh wrote"
    image = {line[2:].split(" -> ")[0] for line in result.stdout.splitlines() if line[:2] in ("f ", "l ")}
    pyver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = f"/usr/lib/{pyver}/site-packages"
    expected = {f"{site}/gkeys_portage/__init__.py", f"{site}/gkeys_portage/installfiles.py",
                f"{site}/gkeys_portage/portage/sync_module.py", f"{site}/gkeys_portage/data/gentoo.seeds",
                f"{site}/portage/sync/modules/gkeys/__init__.py", f"{site}/portage/sync/modules/gkeys/gkeyssync.py",
                "/usr/share/doc/gkeys-portage"}  # the link to ${PF}, the name messages and man pages give
    for script_name in installfiles.PROGRAMS:
        expected |= {f"/usr/bin/{script_name}", f"/usr/lib/python-exec/{pyver}/{script_name}"}
    missing = sorted(expected - image)
    for item in installfiles.DATA_FILES:
        where = {"etc": "/" + item.target, "systemd": "/usr/lib/systemd/system"}.get(item.group, "/usr/" + item.target)
        where = where.replace(f"/usr/{installfiles.DOC_DIR}", f"/usr/share/doc/gkeys-portage-{VERSION}")
        if not any(f"{where}/{item.name}{suffix}" in image for suffix in MAN_SUFFIXES):
            missing.append(f"{where}/{item.name}")
    assert not missing, (missing, sorted(image))
    assert f"{site}/portage/__init__.py" not in image and f"{site}/portage/sync/__init__.py" not in image
    eprefix = work / "eprefix"
    unit = (work / "tmp" / "portage" / "app-crypt" / f"gkeys-portage-{VERSION}" / "image" / str(eprefix).lstrip("/")
            / "usr/lib/systemd/system/gkeys-refresh.service").read_text()
    assert f"\nExecStart={eprefix}/usr/bin/gkeys " in unit and f"\nReadWritePaths=-{eprefix}/etc/" in unit
    shutil.rmtree(work)
