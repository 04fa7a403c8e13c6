"""Key purposes for release media (issue 23 item 2): the packaged gentoo category pins the release keys beside
the ebuild-repository (snapshot) key, and a good signature by the snapshot key must not pass as a stage3."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from media_helpers import AUTOBUILDS, STAGE3, STAMP, digest_block, install_release_key, make_media, publish_latest

from gkeys_portage.core.config import load_config
from gkeys_portage.core.errors import ConfigError
from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.keys.purposes import DEFAULT_PURPOSES, Purpose, describe_signer, purpose_pins, purpose_table
from gkeys_portage.openpgp.verdict import Pin, PinSet

SNAPSHOT = "gentoo-20260101.tar.xz"


def tree_snapshot() -> bytes:
    """A webrsync-shaped tree snapshot: gentoo/metadata/timestamp.chk and one ebuild, as a .tar.xz."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        for name, text in (("gentoo/metadata/timestamp.chk", "Thu, 01 Jan 2026 00:45:01 +0000\n"),
                           ("gentoo/app-misc/hello/hello-1.ebuild", "EAPI=8\nSLOT=0\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1767228301
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def menv(env):  # type: ignore[no-untyped-def]
    """Category gentoo pins releng (release media) and, as gentoo/snapshot, bob's key (the repository key)."""
    install_release_key(env)
    env.pin_key("gentoo", "snapshot", "bob")
    return env


def _snapshot_as_stage3(keys: KeyFactory, folder: Path, *, digests: bool) -> Path:
    """The snapshot's bytes under a stage3 name, its .gpgsig as the .asc (and, with ``digests``, a DIGESTS
    listing it, clearsigned by the snapshot key too)."""
    data = tree_snapshot()
    siblings = (".asc", ".DIGESTS") if digests else (".asc",)
    return make_media(keys, folder, STAGE3, data, signer="bob", siblings=siblings,
                      digests_text=digest_block("SHA512", data, STAGE3)).path


@pytest.mark.parametrize("digests", [True, False])
def test_tree_snapshot_signed_by_the_snapshot_key_is_not_a_stage3(menv, keys: KeyFactory, tmp_path: Path,
                                                                  digests: bool) -> None:
    """Both the detached .asc and a DIGESTS listing the file are good signatures by a pinned gentoo key; the
    key is the repository key, so the file is refused naming both purposes (it used to be verified)."""
    path = _snapshot_as_stage3(keys, tmp_path / "m", digests=digests)
    result = menv.run("verify-media", "--allow-unnamed", str(path))
    assert result.code == 1, result.text
    assert "signed by gentoo/snapshot, the repository key and the overlay-list key; release media need " \
           "release-media keys: gentoo/releng, gentoo/weekly" in result.err
    assert len([ln for ln in result.err.splitlines() if ln.strip()]) == 1 and "Traceback" not in result.err


def test_a_release_key_signature_still_verifies_beside_the_snapshot_key(menv, keys: KeyFactory,
                                                                        tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "m")
    result = menv.run("--json", "verify-media", str(media.path))
    assert result.code == 0, result.text
    assert {s["nick"] for s in json.loads(result.out)["signatures"]} == {"releng"}


def test_latest_list_signed_by_the_snapshot_key_is_refused(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """fetch-media --latest: a latest-*.txt clearsigned by the repository key chooses nothing."""
    media = make_media(keys, tmp_path / "src")
    media.publish(menv.server)
    publish_latest(keys, menv.server, tmp_path, "stage3-amd64-openrc", f"{STAMP}/{STAGE3} {len(media.data)}",
                   signer="bob")
    dest = tmp_path / "dest"
    result = menv.run("fetch-media", "--latest", "stage3-amd64-openrc", "--mirror", menv.server.url, "-d", str(dest))
    assert result.code == 1, result.text
    assert "signed by gentoo/snapshot, the repository key" in result.err
    assert f"/{AUTOBUILDS}/{STAMP}/{STAGE3}" not in menv.server.log and not dest.exists()


def test_purposes_section_reassigns_a_seed(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """[purposes] release-media replaces the default list: naming gentoo/snapshot there makes it a release key."""
    path = _snapshot_as_stage3(keys, tmp_path / "m", digests=True)
    menv.write_config(extra="[purposes]\nrelease-media = gentoo/releng gentoo/snapshot\n")
    result = menv.run("verify-media", str(path))
    assert result.code == 0, result.text


def test_a_category_without_purposes_keeps_every_seed(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """A user's own category (no seed of it has a purpose): any of its seeds signs media, as before."""
    menv.pin_key("mine", "bob", "bob")
    path = _snapshot_as_stage3(keys, tmp_path / "m", digests=True)
    result = menv.run("verify-media", "-C", "mine", str(path))
    assert result.code == 0, result.text


@pytest.mark.parametrize("extra, needle", [
    ("[purposes]\nrelease-media = gentoo/releng\nreleases = gentoo/weekly\n", "unknown key 'releases'"),
    ("[purposes]\nrepository = gentoo-snapshot\n", "[purposes] repository: 'gentoo-snapshot' is not category/nick"),
    ("[purposes]\ngit-mirror =\n", "[purposes] git-mirror: empty"),
])
def test_purposes_typos_are_config_errors(menv, extra: str, needle: str) -> None:
    menv.write_config(extra=extra)
    result = menv.run("list-cats")
    assert result.code == 2, result.text
    assert needle in result.err and "Traceback" not in result.err


def test_purpose_pins_restricts_only_categories_with_purposes(tmp_path: Path) -> None:
    """The API another verifier (rsync Manifests: Purpose.REPOSITORY) uses, on constructed pins."""
    conf = tmp_path / "gkeys.conf"
    conf.write_text(f"[base]\ngkeysdir = {tmp_path}\n")
    config = load_config(conf)
    fprs = {nick: f"{n:040X}" for n, nick in enumerate(("releng", "weekly", "snapshot", "mirror", "alice"), 1)}
    pins = PinSet.of([Pin("gentoo", nick, fprs[nick]) for nick in ("releng", "weekly", "snapshot", "mirror")]  # type: ignore[arg-type]
                     + [Pin("mine", "alice", fprs["alice"])])  # type: ignore[arg-type]
    kept, scope = purpose_pins(config, pins, Purpose.REPOSITORY)
    assert {(p.category, p.nick) for p in kept.pins.values()} == {("gentoo", "snapshot"), ("mine", "alice")}
    assert {p.nick for p in scope.excluded.pins.values()} == {"releng", "weekly", "mirror"}
    table = purpose_table(config)
    assert table == dict(DEFAULT_PURPOSES)
    assert describe_signer(table, pins.pins[fprs["mirror"]]) == "gentoo/mirror, the git-mirror key"  # type: ignore[index]
    assert describe_signer(table, pins.pins[fprs["alice"]]) == "mine/alice"  # type: ignore[index]
    conf.write_text(f"[base]\ngkeysdir = {tmp_path}\n[purposes]\nrepository = gentoo/releng, gentoo/x\n")
    assert [str(r) for r in purpose_table(load_config(conf))[Purpose.REPOSITORY]] == ["gentoo/releng", "gentoo/x"]
    conf.write_text(f"[base]\ngkeysdir = {tmp_path}\n[purposes]\nrepository = releng\n")
    with pytest.raises(ConfigError):
        purpose_table(load_config(conf))
