"""gkeys-fetch called the way Portage calls it (in-process ``main``), with a real download command, real
release media signed by the session's releng key, a real gentoo keyring, and a loopback mirror."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from conftest import GkeysEnv
from fetch_helpers import write_downloader
from media_helpers import AUTOBUILDS, STAGE3, STAMP, MediaSet, install_release_key, make_media

from gkeys_portage.portage.fetch import DOWNLOAD_SUFFIX, FetchRequest, main, parse_request


class Wrapper:
    """A DISTDIR, a download command and the wrapper invoked as FETCH_WRAPPER or FETCHCOMMAND."""

    def __init__(self, env: GkeysEnv) -> None:
        self.env = env
        self.distdir = env.root / "distfiles"
        self.distdir.mkdir()
        self.downloader = write_downloader(env.root / "bin")

    def publish(self, media: MediaSet, *, data: bytes | None = None) -> str:
        """Serve ``media`` (optionally with other bytes than were signed); return its URL."""
        url = media.publish(self.env.server)
        if data is not None:
            self.env.server.publish(f"{AUTOBUILDS}/{STAMP}/{media.name}", data)
        return url

    def run(self, url: str, name: str, *, style: str = "wrapper", resume: bool = False) -> int:
        """Call ``main`` as Portage would for ``${DISTDIR}/${FILE}`` = DISTDIR/name."""
        target = str(self.distdir / name)
        command = [sys.executable, str(self.downloader), url, target] + (["--resume"] if resume else [])
        tail = [shlex.join(command)] if style == "wrapper" else command
        self.env.capsys.readouterr()
        return main(["-c", str(self.env.config), "--uri", url, "--file", target, "--", *tail])

    def output(self) -> str:
        """What the wrapper printed since the last run."""
        captured = self.env.capsys.readouterr()
        return captured.out + captured.err

    def leftovers(self) -> list[str]:
        """Files in DISTDIR (scratch folders must never stay behind)."""
        return sorted(p.name for p in self.distdir.iterdir())


@pytest.fixture
def wrapper(env: GkeysEnv) -> Wrapper:
    """A gentoo keyring pinning releng, and an empty DISTDIR."""
    install_release_key(env)
    return Wrapper(env)


@pytest.mark.parametrize("style", ["wrapper", "fetchcommand"])
def test_good_stage3_is_verified_and_kept(wrapper: Wrapper, style: str) -> None:
    media = make_media(wrapper.env.keys, wrapper.env.root / "mirror")
    url = wrapper.publish(media)
    name = STAGE3 + DOWNLOAD_SUFFIX  # Portage downloads to FILE.__download__ and renames it afterwards
    assert wrapper.run(url, name, style=style) == 0, wrapper.output()
    assert "verified, signed by gentoo/releng" in wrapper.output()
    assert (wrapper.distdir / name).read_bytes() == media.data
    assert wrapper.leftovers() == [name]


@pytest.mark.parametrize("case", ["tampered", "unpinned-signer", "no-signature", "digest-only-unsigned"])
def test_unverified_stage3_is_removed(wrapper: Wrapper, case: str) -> None:
    keys, mirror = wrapper.env.keys, wrapper.env.root / "mirror"
    if case == "unpinned-signer":
        media = make_media(keys, mirror, signer="mallory")
    elif case == "no-signature":
        media = make_media(keys, mirror, siblings=())
    elif case == "digest-only-unsigned":
        media = make_media(keys, mirror, siblings=())
        media.files[".DIGESTS"] = b"# SHA512 HASH\n" + b"0" * 128 + f"  {STAGE3}\n".encode()
    else:
        media = make_media(keys, mirror)
    url = wrapper.publish(media, data=media.data[:-1] + b"!" if case == "tampered" else None)
    assert wrapper.run(url, STAGE3) == 1
    text = wrapper.output()
    assert f"{STAGE3}: NOT verified, removed" in text, text
    assert wrapper.leftovers() == []


def test_tampered_reason_is_named(wrapper: Wrapper) -> None:
    media = make_media(wrapper.env.keys, wrapper.env.root / "mirror", siblings=(".DIGESTS",))
    url = wrapper.publish(media, data=b"evil" + media.data[4:])
    assert wrapper.run(url, STAGE3) == 1
    assert "does not match" in wrapper.output()


def test_other_files_pass_through_untouched(wrapper: Wrapper) -> None:
    url = wrapper.env.server.publish("distfiles/foo-1.0.tar.gz", b"not signed at all")
    assert wrapper.run(url, "foo-1.0.tar.gz") == 0
    assert (wrapper.distdir / "foo-1.0.tar.gz").read_bytes() == b"not signed at all"
    assert not any(p.endswith((".asc", ".DIGESTS", ".sha256")) for p in wrapper.env.server.log)
    assert "verified" not in wrapper.output()


def test_failed_download_keeps_partial_file_for_resume(wrapper: Wrapper) -> None:
    """A failed download is Portage's business: its status passes through and nothing is deleted."""
    partial = wrapper.distdir / (STAGE3 + DOWNLOAD_SUFFIX)
    partial.write_bytes(b"first half")
    status = wrapper.run(wrapper.env.server.url + f"/{AUTOBUILDS}/missing/{STAGE3}", partial.name, resume=True)
    assert status == 8  # the download command's own exit status
    assert partial.read_bytes() == b"first half"


def test_resumed_download_is_verified_as_a_whole(wrapper: Wrapper) -> None:
    media = make_media(wrapper.env.keys, wrapper.env.root / "mirror")
    url = wrapper.publish(media)
    partial = wrapper.distdir / (STAGE3 + DOWNLOAD_SUFFIX)
    partial.write_bytes(media.data[:1000])
    assert wrapper.run(url, partial.name, resume=True) == 0, wrapper.output()
    assert partial.read_bytes() == media.data
    partial.write_bytes(b"X" * 1000)  # a bad first part from an earlier mirror: the whole file fails
    assert wrapper.run(url, partial.name, resume=True) == 1
    assert not partial.exists()


def test_patterns_from_config(wrapper: Wrapper) -> None:
    wrapper.env.write_config(extra="[fetch]\npatterns = install-*.iso\n")
    media = make_media(wrapper.env.keys, wrapper.env.root / "mirror")
    url = wrapper.publish(media, data=b"tampered but not a configured pattern")
    assert wrapper.run(url, STAGE3) == 0
    iso = make_media(wrapper.env.keys, wrapper.env.root / "mirror", name=f"install-amd64-minimal-{STAMP}.iso")
    iso_url = wrapper.publish(iso, data=b"tampered iso")
    assert wrapper.run(iso_url, iso.name) == 1
    assert not (wrapper.distdir / iso.name).exists()


def test_renamed_distfile_uses_upstream_name(wrapper: Wrapper) -> None:
    """SRC_URI="URL -> local-name": the siblings and DIGESTS speak of the URL's name."""
    media = make_media(wrapper.env.keys, wrapper.env.root / "mirror")
    url = wrapper.publish(media)
    assert wrapper.run(url, "stage3-local-copy.tar.xz") == 0, wrapper.output()


@pytest.mark.parametrize(("argv", "message"), [
    (["--uri", "http://127.0.0.1/x", "--file", "/tmp/x", "--"], "no fetch command"),
    (["--uri", "http://127.0.0.1/x", "--file", "/tmp/x", "--", "wget 'unbalanced"], "cannot split"),
])
def test_usage_errors(wrapper: Wrapper, argv: list[str], message: str) -> None:
    wrapper.env.capsys.readouterr()
    assert main(["-c", str(wrapper.env.config), *argv]) == 2
    assert message in wrapper.output()
    assert main(["--uri", "x"]) == 2  # --file is required


def test_parse_request_styles() -> None:
    joined = parse_request(["--uri", "u", "--file", "/d/f", "--", "wget -O '/d/a b' u"])
    words = parse_request(["--uri", "u", "--file", "/d/f", "--", "wget", "-O", "/d/a b", "u"])
    assert joined.command == words.command == ["wget", "-O", "/d/a b", "u"]
    assert FetchRequest("https://m/x/stage3-a.tar.xz", Path("/d/s" + DOWNLOAD_SUFFIX), []).names == \
        ["s", "stage3-a.tar.xz"]
