"""Issue 17 end to end with real Portage: GPKGs built and signed by Portage itself, a ``file://``
binary repository, and ``emerge --getbinpkgonly`` with ``FEATURES=binpkg-request-signature`` and
``PORTAGE_TRUST_HELPER=gkeys-trust-helper`` (which builds the home Portage verifies with, as
``nobody``).  The pinned key's package installs; a same-category key's, an unknown key's and a
tampered package are refused; a getuto-style home accepts the same-category key's package."""

from __future__ import annotations

import gzip
import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from binpkg_helpers import getuto_home, install_gentoo, public_dir
from conftest import PROJECT, GkeysEnv
from fetch_helpers import PortageRoot

from gkeys_portage.core.config import load_config
from gkeys_portage.core.types import Category
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.refresh import record_refresh

__all__ = ["public_dir"]  # the fixture is used by name

PACKAGES = {"hello": "releng", "snap": "alice", "evil": "mallory"}   # package -> signing key


def _trust_helper(folder: Path) -> Path:
    """The console script ``gkeys-trust-helper`` as pip would install it (runs this working tree)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "gkeys-trust-helper"
    path.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(PROJECT)!r})\n"
                    "from gkeys_portage.portage.binpkg import main\nsys.exit(main())\n")
    path.chmod(0o755)
    return path


def _append(root: PortageRoot, *lines: str) -> None:
    conf = root.eprefix / "etc" / "portage" / "make.conf"
    conf.write_text(conf.read_text() + "\n".join(lines) + "\n")


def _gpkg(pkgdir: Path, package: str) -> Path:
    return pkgdir / "app-misc" / package / f"{package}-1-1.gpkg.tar"


def _tamper_manifest(path: Path) -> None:
    """Change one digest letter of the clearsigned Manifest inside the GPKG (sizes unchanged)."""
    members = []
    with tarfile.open(path) as outer:
        for member in outer.getmembers():
            handle = outer.extractfile(member)
            data = handle.read() if handle else b""
            if member.name.endswith("/Manifest"):
                at = data.index(b"DATA image.tar") + len(b"DATA image.tar ")
                at = data.index(b" ", at) + 1
                at = data.index(b" ", at) + 1   # first letter of the first digest
                data = data[:at] + (b"0" if data[at:at + 1] != b"0" else b"1") + data[at + 1:]
            members.append((member, data))
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as outer:
        for member, data in members:
            outer.addfile(member, io.BytesIO(data) if member.isfile() else None)


def _refresh_index(binhost: Path) -> None:
    """Put the tampered file's size and digests into the Packages index (so only the signature speaks)."""
    index = binhost / "Packages"
    text = index.read_text()
    blocks = text.split("\n\n")
    for i, block in enumerate(blocks):
        if "CPV: app-misc/hello-1" not in block:
            continue
        data = _gpkg(binhost, "hello").read_bytes()
        lines = []
        for line in block.splitlines():
            key = line.split(":", 1)[0]
            if key == "SIZE":
                line = f"SIZE: {len(data)}"
            elif key in ("MD5", "SHA1", "SHA256", "SHA512", "BLAKE2B"):
                line = f"{key}: {hashlib.new(key.lower() if key != 'BLAKE2B' else 'blake2b', data).hexdigest()}"
            lines.append(line)
        blocks[i] = "\n".join(lines)
    index.write_text("\n\n".join(blocks))
    (binhost / "Packages.gz").write_bytes(gzip.compress(index.read_bytes()))   # Portage prefers this one


def _portage(root: PortageRoot, *argv: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """Run ``emerge`` in ``root`` with extra environment (Portage reads its variables from there too)."""
    environment = root.environment()
    environment.update(extra_env)
    command = Path(sys.executable).parent / "emerge"
    return subprocess.run([sys.executable, str(command), *argv], env=environment, cwd=root.base,
                          capture_output=True, text=True, timeout=300, check=False)


def _build_binhosts(env: GkeysEnv, base: Path) -> dict[str, Path]:
    """Portage builds and signs one GPKG per package (its own ``binpkg-signing``), one binhost each."""
    builder = PortageRoot(base / "builder", env.config, wrapper=None)
    for package in PACKAGES:
        builder.add_ebuild(package, "1", [])
    # The builder signs but does not check (its own verification home is not the point here).
    _append(builder, 'BINPKG_FORMAT="gpkg"', 'BINPKG_COMPRESS="gzip"',
            'FEATURES="${FEATURES} buildpkg binpkg-signing binpkg-ignore-signature"',
            f'BINPKG_GPG_SIGNING_GPG_HOME="{env.keys.home}"',
            'BINPKG_GPG_SIGNING_BASE_COMMAND="gpg --sign --armor [PORTAGE_CONFIG]"')
    binhosts = {}
    for package, signer in PACKAGES.items():
        binhosts[package] = base / f"binhost-{package}"
        result = _portage(builder, "--oneshot", "--buildpkgonly", f"=app-misc/{package}-1",
                          PKGDIR=str(binhosts[package]), BINPKG_GPG_SIGNING_KEY=env.keys.keys[signer].fingerprint)
        assert result.returncode == 0, result.stdout + result.stderr
        assert _gpkg(binhosts[package], package).is_file()
    return binhosts


def _consumer(base: Path, env: GkeysEnv, binhost: Path) -> PortageRoot:
    """A prefix whose only binary repository is ``binhost`` (file://), signatures required."""
    root = PortageRoot(base, env.config, wrapper=None)
    (root.eprefix / "etc" / "portage" / "binrepos.conf").write_text(
        f"[test-binhost]\nsync-uri = file://{binhost}\nlocation = {base / 'binhost-cache'}\n"
        "verify-signature = true\n")
    _append(root, f'PKGDIR="{base / "pkgdir"}"', 'FEATURES="${FEATURES} binpkg-request-signature"')
    return root


def _installed(root: PortageRoot, package: str) -> bool:
    return (root.eprefix / "var" / "db" / "pkg" / "app-misc" / f"{package}-1").is_dir()


def test_emerge_getbinpkgonly_trusts_only_the_binpkg_pins(env: GkeysEnv, public_dir: Path, tmp_path: Path) -> None:
    install_gentoo(env)
    record_refresh(Gkeys(load_config(env.config)), Category("gentoo"))
    binhosts = _build_binhosts(env, tmp_path)
    shutil.copytree(binhosts["hello"], tmp_path / "binhost-tampered")
    binhosts["tampered"] = tmp_path / "binhost-tampered"
    _tamper_manifest(_gpkg(binhosts["tampered"], "hello"))
    _refresh_index(binhosts["tampered"])

    home = public_dir / "gnupg"
    helper = _trust_helper(tmp_path / "bin")
    run_env = {"PORTAGE_TRUST_HELPER": str(helper), "BINPKG_GPG_VERIFY_GPG_HOME": str(home),
               "GKEYS_CONFIG": str(env.config)}
    outcomes = {}
    for case, package in (("hello", "hello"), ("snap", "snap"), ("evil", "evil"), ("tampered", "hello")):
        root = _consumer(tmp_path / f"consumer-{case}", env, binhosts[case])
        result = _portage(root, "--getbinpkgonly", "--oneshot", f"=app-misc/{package}-1", **run_env)
        outcomes[case] = (result.returncode, _installed(root, package), result.stdout + result.stderr)
    assert home.is_symlink()                              # the helper ran, as Portage runs it
    assert outcomes["hello"][:2] == (0, True), outcomes["hello"][2]
    for case in ("snap", "evil", "tampered"):
        code, installed, text = outcomes[case]
        assert code != 0 and not installed, (case, text)
        assert "GnuPG verification failed" in text or "verification failed" in text, (case, text)
    assert "NO_PUBKEY" in outcomes["snap"][2]          # the snapshot key is simply not in the home
    assert "BADSIG" in outcomes["tampered"][2]

    # Control: a home trusting every key of the category (getuto's set) accepts the snapshot key's package.
    control = getuto_home(env, public_dir / "getuto", ["releng", "alice"])
    root = _consumer(tmp_path / "consumer-control", env, binhosts["snap"])
    result = _portage(root, "--getbinpkgonly", "--oneshot", "=app-misc/snap-1", PORTAGE_TRUST_HELPER="",
                      BINPKG_GPG_VERIFY_GPG_HOME=str(control))
    assert result.returncode == 0 and _installed(root, "snap"), result.stdout + result.stderr
