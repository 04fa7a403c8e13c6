"""The Gentoo ebuild (issue 14, item 5): a real ``ebuild … clean install`` (Gentoo's distutils-r1 eclasses, the
PyPI Portage ``ebuild`` command) of the sdist this checkout builds, and the image holds every installed file."""

from __future__ import annotations

import io
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


def test_versioned_and_live_ebuilds_differ_only_in_their_source() -> None:
    assert __version__ == VERSION
    versioned = (PACKAGE / f"gkeys-portage-{VERSION}.ebuild").read_text()
    live = (PACKAGE / "gkeys-portage-9999.ebuild").read_text()
    source_lines = re.compile(r"^(inherit |SRC_URI=|KEYWORDS=|EGIT_REPO_URI=)")
    assert [line for line in versioned.splitlines() if not source_lines.match(line)] == \
        [line for line in live.splitlines() if not source_lines.match(line)]
    assert 'SRC_URI="' in versioned and "${P}.tar.gz" in versioned and "git-r3" in live
    assert re.search(r"^EAPI=8$", versioned, re.M) and "DISTUTILS_USE_PEP517=setuptools" in versioned
    for atom in ("app-crypt/gnupg", "dev-vcs/git", "sys-apps/portage", "dev-python/python-gnupg",
                 "dev-python/requests", "dev-python/defusedxml"):
        assert atom in versioned, atom
    assert "installfiles.py etc" in versioned  # the /etc files come from the one list
    assert ET.parse(PACKAGE / "metadata.xml").getroot().tag == "pkgmetadata"


def release_tarball(tmp_path: Path) -> Path:
    """The sdist of this checkout, as the release tarball ``gkeys-portage-VERSION.tar.gz`` (top dir ``${P}``)."""
    source = tmp_path / "src"
    shutil.copytree(PROJECT, source, ignore=shutil.ignore_patterns(".git", "__pycache__", "build", "*.egg-info"))
    dist = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-c", f"from setuptools import build_meta as b; print(b.build_sdist("
                            f"{str(dist)!r}))"], cwd=source, check=True, capture_output=True, text=True)
    sdist = dist / built.stdout.strip().splitlines()[-1]
    name = f"gkeys-portage-{VERSION}"
    tarball = tmp_path / f"{name}.tar.gz"
    with tarfile.open(sdist) as src, tarfile.open(tarball, "w:gz") as out:
        for member in src.getmembers():
            data = src.extractfile(member) if member.isfile() else None
            member.name = name + member.name[member.name.index("/"):] if "/" in member.name else name
            out.addfile(member, io.BytesIO(data.read()) if data else None)
    return tarball


@pytest.mark.slow
def test_try_ebuild_installs_every_file(tmp_path: Path) -> None:
    script = shared_path("gentoo-eclasses", "try-ebuild.sh")
    if subprocess.run([sys.executable, "-c", TOOLS], capture_output=True, check=False).returncode != 0:
        pytest.skip(f"{sys.executable} lacks portage/gpep517/installer/setuptools/wheel (pip install '.[test]')")
    tarball = release_tarball(tmp_path)
    result = subprocess.run(["bash", str(script), str(PACKAGE / f"gkeys-portage-{VERSION}.ebuild"), str(tarball)],
                            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "TRY_EBUILD_PYTHON": sys.executable,
                                 "HOME": str(tmp_path), "TMPDIR": str(tmp_path)},
                            capture_output=True, text=True, check=False, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    image = {line[2:].split(" -> ")[0] for line in result.stdout.splitlines() if line[:2] in ("f ", "l ")}
    pyver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = f"/usr/lib/{pyver}/site-packages"
    expected = {f"{site}/gkeys_portage/__init__.py", f"{site}/gkeys_portage/installfiles.py",
                f"{site}/gkeys_portage/portage/sync_module.py", f"{site}/gkeys_portage/data/gentoo.seeds",
                f"{site}/portage/sync/modules/gkeys/__init__.py", f"{site}/portage/sync/modules/gkeys/gkeyssync.py"}
    for script_name in installfiles.PROGRAMS:
        expected |= {f"/usr/bin/{script_name}", f"/usr/lib/python-exec/{pyver}/{script_name}"}
    missing = sorted(expected - image)
    for item in installfiles.DATA_FILES:
        where = "/" + item.target if item.group == "etc" else "/usr/" + item.target
        if not any(f"{where}/{item.name}{suffix}" in image for suffix in MAN_SUFFIXES):
            missing.append(f"{where}/{item.name}")
    assert not missing, (missing, sorted(image))
    assert f"{site}/portage/__init__.py" not in image and f"{site}/portage/sync/__init__.py" not in image
