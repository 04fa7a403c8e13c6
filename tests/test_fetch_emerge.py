"""The fetch wrapper as Portage really runs it: ``emerge --fetchonly`` of a tiny ebuild in a temporary
overlay and Portage prefix, make.conf carrying the README's FETCH_WRAPPER line, distfiles served on
127.0.0.1.  The Manifest records exactly what the mirror serves, so Portage's own digest check passes
even for the tampered stage3: only the wrapper's signature check can stop it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import GkeysEnv
from fetch_helpers import Distfile, PortageRoot, portage_program
from media_helpers import AUTOBUILDS, STAGE3, STAMP, install_release_key, make_media

pytestmark = pytest.mark.slow


@pytest.fixture
def wrapper_root(env: GkeysEnv) -> PortageRoot:
    """A gentoo keyring pinning releng and a Portage prefix whose make.conf uses the wrapper."""
    if portage_program("emerge") is None:
        pytest.skip("emerge is not on PATH: Portage is not installed (pip install portage)")
    install_release_key(env)
    return PortageRoot(env.root / "portage", env.config)


def _stage3_and_plain(env: GkeysEnv, *, served: bytes | None = None) -> tuple[list[Distfile], bytes]:
    """A signed stage3 (served as ``served`` if given) and an unsigned ordinary distfile."""
    media = make_media(env.keys, env.root / "mirror")
    url = media.publish(env.server)
    data = served if served is not None else media.data
    if served is not None:
        env.server.publish(f"{AUTOBUILDS}/{STAMP}/{STAGE3}", served)
    plain = b"an ordinary distfile nobody signs\n"
    plain_url = env.server.publish("distfiles/helper-1.0.tar.gz", plain)
    return [Distfile(STAGE3, url, data), Distfile("helper-1.0.tar.gz", plain_url, plain)], media.data


def test_emerge_fetchonly_good_stage3(env: GkeysEnv, wrapper_root: PortageRoot) -> None:
    distfiles, signed = _stage3_and_plain(env)
    atom = wrapper_root.add_ebuild("stage3", "1", distfiles)
    result = wrapper_root.emerge("--fetchonly", atom)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verified, signed by gentoo/releng" in result.stdout + result.stderr
    assert (wrapper_root.distdir / STAGE3).read_bytes() == signed
    assert (wrapper_root.distdir / "helper-1.0.tar.gz").exists()
    assert not [p for p in wrapper_root.distdir.iterdir() if p.name.startswith(".gkeys-fetch")]


@pytest.mark.parametrize("style", ["FETCH_WRAPPER", "FETCHCOMMAND"])
def test_emerge_fetchonly_tampered_stage3(env: GkeysEnv, wrapper_root: PortageRoot, style: str) -> None:
    if style != "FETCH_WRAPPER":
        wrapper_root = PortageRoot(env.root / "portage-fetchcommand", env.config, wrapper=style)
    distfiles, signed = _stage3_and_plain(env, served=b"tampered stage3 " * 1000)
    atom = wrapper_root.add_ebuild("stage3", "1", distfiles)
    result = wrapper_root.emerge("--fetchonly", atom)
    text = result.stdout + result.stderr
    assert result.returncode != 0, text
    assert f"{STAGE3}: NOT verified, removed" in text
    assert "Couldn't download" in text  # Portage saw the wrapper fail and gave up on that file
    assert not any(p.name.startswith(STAGE3) for p in wrapper_root.distdir.iterdir())
    assert (wrapper_root.distdir / "helper-1.0.tar.gz").exists()  # other files pass through


def test_emerge_fetchonly_without_wrapper_accepts_tampered(env: GkeysEnv, tmp_path: Path) -> None:
    """Control: the same tampered stage3 gets through Portage when the wrapper is not configured."""
    if portage_program("emerge") is None:
        pytest.skip("emerge is not on PATH: Portage is not installed (pip install portage)")
    install_release_key(env)
    root = PortageRoot(tmp_path / "plain-portage", env.config, wrapper=None)
    distfiles, _ = _stage3_and_plain(env, served=b"tampered stage3 " * 1000)
    result = root.emerge("--fetchonly", root.add_ebuild("stage3", "1", distfiles))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (root.distdir / STAGE3).read_bytes() == b"tampered stage3 " * 1000
