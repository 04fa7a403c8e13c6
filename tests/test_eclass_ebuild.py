"""gkeys-verify.eclass under real Portage: ``ebuild foo-1.0.ebuild clean unpack`` in a temporary prefix
(the same one the fetch-wrapper tests use), with the eclass in the overlay's eclass/ directory, the
distfile and its signature fetched from 127.0.0.1, and Portage's own die, phases and unpack."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import GkeysEnv
from eclass_helpers import ECLASSDIR, Ebuild, installed_ebuild, tarball
from fetch_helpers import Distfile, PortageRoot, portage_program

pytestmark = pytest.mark.slow

EBUILD = """\
EAPI=8
inherit gkeys-verify
DESCRIPTION="gkeys-verify eclass test"
HOMEPAGE="https://example.org"
SRC_URI="{url}
	verify-sig? ( {url}.asc )"
LICENSE="GPL-2"
SLOT="0"
KEYWORDS="amd64"
RESTRICT="mirror"
GKEYS_VERIFY_CATEGORY=gentoo-devs
GKEYS_VERIFY_NICK=alice
"""


class RealEbuild:
    """app-misc/foo-1.0 using the eclass, in a Portage prefix whose make.conf points gkeys at the test."""

    def __init__(self, env: GkeysEnv, shim: Ebuild, signer: str, *, served: bytes | None = None) -> None:
        self.root = PortageRoot(env.root / "portage", env.config, wrapper=None)
        (self.root.repo / "eclass").mkdir()
        shutil.copy(ECLASSDIR / "gkeys-verify.eclass", self.root.repo / "eclass")
        data = tarball(text=b"hello from upstream\n")
        signed = env.root / "foo-1.0.tar.gz"
        signed.write_bytes(data)
        signature = env.keys.sign(signer, signed)
        data = served if served is not None else data
        url = env.server.publish("upstream/foo-1.0.tar.gz", data)
        env.server.publish("upstream/foo-1.0.tar.gz.asc", signature)
        self.root.add_ebuild("foo", "1.0", [Distfile("foo-1.0.tar.gz", url, data),
                                            Distfile("foo-1.0.tar.gz.asc", url + ".asc", signature)])
        self.path = self.root.repo / "app-misc" / "foo" / "foo-1.0.ebuild"
        self.path.write_text(EBUILD.format(url=url))
        # Portage's unpack calls gtar where it exists under that name only; give it tar.
        tools = env.root / "tools"
        tools.mkdir()
        (tools / "gtar").symlink_to(shutil.which("tar") or "/bin/tar")
        self.tools = tools
        self.make_conf = self.root.eprefix / "etc" / "portage" / "make.conf"
        self.base_conf = self.make_conf.read_text() + (f'GKEYS_VERIFY_CONFIG="{env.config}"\n'
                                                       f'GKEYS_VERIFY_COMMAND="{shim.bin / "gkeys"}"\n')

    def unpack(self, use: str) -> subprocess.CompletedProcess[str]:
        """``ebuild foo-1.0.ebuild clean unpack`` with USE=``use``."""
        self.make_conf.write_text(self.base_conf + f'USE="{use}"\n')
        return self.root.portage_command("ebuild", str(self.path), "clean", "unpack", path=str(self.tools))

    @property
    def unpacked(self) -> Path:
        """The file the tarball holds, once unpacked."""
        return self.root.base / "tmp" / "portage" / "app-misc" / "foo-1.0" / "work" / "hello.txt"


@pytest.fixture
def shim(env: GkeysEnv) -> Ebuild:
    """gentoo-devs installed (alice, bob) and the gkeys shim on disk."""
    if portage_program("ebuild") is None:
        pytest.skip("ebuild is not on PATH: Portage is not installed (pip install portage)")
    return installed_ebuild(env)


def test_real_unpack_verifies_then_unpacks(env: GkeysEnv, shim: Ebuild) -> None:
    real = RealEbuild(env, shim, "alice")
    result = real.unpack("verify-sig")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Verifying foo-1.0.tar.gz with gkeys gentoo-devs/alice" in result.stdout + result.stderr
    assert real.unpacked.read_bytes() == b"hello from upstream\n"


@pytest.mark.parametrize(("signer", "served", "expected"), [
    ("bob", None, "not pinned by the seeds (gentoo-devs/alice)"),
    ("alice", tarball(text=b"evil\n"), "BAD signature by gentoo-devs/alice"),
])
def test_real_unpack_dies(env: GkeysEnv, shim: Ebuild, signer: str, served: bytes | None, expected: str) -> None:
    real = RealEbuild(env, shim, signer, served=served)
    result = real.unpack("verify-sig")
    text = result.stdout + result.stderr
    assert result.returncode != 0
    assert expected in text and "failed (unpack phase)" in text, text
    assert not real.unpacked.exists()


def test_real_unpack_use_flag_off(env: GkeysEnv, shim: Ebuild) -> None:
    real = RealEbuild(env, shim, "mallory")
    result = real.unpack("-verify-sig")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Verifying" not in result.stdout + result.stderr
    assert real.unpacked.exists()
