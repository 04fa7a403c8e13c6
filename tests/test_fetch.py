"""gkeys-fetch called the way Portage calls it (in-process ``main``), with a real download command, real
release media signed by the session's releng key, a real gentoo keyring, and a loopback mirror."""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from conftest import GkeysEnv
from fetch_helpers import LAUNCHER, subprocess_environment, write_downloader
from media_helpers import AUTOBUILDS, STAGE3, STAMP, MediaSet, install_release_key, make_media

from gkeys_portage.demo.world import Response
from gkeys_portage.portage import fetch as fetch_module
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
    # journaled once, under the name Portage renames the download to, never the scratch link (issue 43 item 12)
    accepted = [json.loads(line)["data"]["file"] for line in (wrapper.env.state / "state" / "journal" /
                "journal.jsonl").read_text().splitlines() if '"media-accepted"' in line]
    assert accepted == [str(wrapper.distdir / STAGE3)], accepted


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
    # journaled under DISTDIR/FILE and the URL, never the .gkeys-fetch-PID scratch link (issue 43 item 12)
    refused = [json.loads(line)["data"] for line in (wrapper.env.state / "state" / "journal" /
               "journal.jsonl").read_text().splitlines() if '"media-refused"' in line]
    assert [(r["file"], r["url"]) for r in refused] == [(str(wrapper.distdir / STAGE3), url)], refused


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


def test_failed_download_without_file_passes_status(wrapper: Wrapper) -> None:
    """A failed download that left no file is Portage's business: its status passes through."""
    status = wrapper.run(wrapper.env.server.url + f"/{AUTOBUILDS}/missing/{STAGE3}", STAGE3 + DOWNLOAD_SUFFIX)
    assert status == 8  # the download command's own exit status
    assert wrapper.leftovers() == []


def test_failed_download_with_unverifiable_partial_file_is_removed(wrapper: Wrapper) -> None:
    """A file left by a failed download is verified too (Portage may accept it on Manifest digests alone);
    a partial one does not verify, so it is removed (and downloaded afresh, not resumed); the command's
    status passes through."""
    partial = wrapper.distdir / (STAGE3 + DOWNLOAD_SUFFIX)
    partial.write_bytes(b"first half")
    status = wrapper.run(wrapper.env.server.url + f"/{AUTOBUILDS}/missing/{STAGE3}", partial.name, resume=True)
    assert status == 8  # the download command's own exit status
    assert not partial.exists()
    assert "NOT verified, removed" in wrapper.output()


def _failing_command(wrapper: Wrapper, url: str, target: Path) -> list[str]:
    """A fetch command that downloads the whole file, then exits 3."""
    download = shlex.join([sys.executable, str(wrapper.downloader), url, str(target)])
    return ["sh", "-c", f"{download}; exit 3"]


@pytest.mark.parametrize("tampered", [False, True])
def test_failed_command_leaving_complete_file_is_verified(wrapper: Wrapper, tampered: bool) -> None:
    """The command exits non-zero but the file is complete: Portage would accept it on its Manifest digests
    whatever the status, so it is verified: kept (status passed on) if good, removed if not."""
    media = make_media(wrapper.env.keys, wrapper.env.root / "mirror")
    url = wrapper.publish(media, data=media.data[:-1] + b"!" if tampered else None)
    target = wrapper.distdir / (STAGE3 + DOWNLOAD_SUFFIX)
    wrapper.env.capsys.readouterr()
    status = main(["-c", str(wrapper.env.config), "--uri", url, "--file", str(target), "--",
                   *_failing_command(wrapper, url, target)])
    assert status == 3, wrapper.output()
    if tampered:
        assert not target.exists()
        assert "NOT verified, removed" in wrapper.output()
    else:
        assert target.read_bytes() == media.data
        assert "verified, signed by gentoo/releng" in wrapper.output()
    assert wrapper.leftovers() == ([] if tampered else [target.name])


def test_signal_handlers_installed_and_restored(wrapper: Wrapper, monkeypatch: pytest.MonkeyPatch) -> None:
    """During main() SIGTERM and SIGHUP raise SystemExit(128+N); afterwards the old handlers are back."""
    seen: dict[int, object] = {}

    def command_probe(command: Sequence[str], **_watch: object) -> int:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            seen[signum] = signal.getsignal(signum)
            with pytest.raises(SystemExit) as exited:
                signal.raise_signal(signum)
            assert exited.value.code == 128 + signum
        return 8

    def sentinel(signum: int, _frame: object) -> None:  # never let a signal end pytest itself
        raise RuntimeError(f"signal {signum} reached the handler in place before main()")

    monkeypatch.setattr(fetch_module, "run_command", command_probe)  # the real command is not the point here
    saved = {signum: signal.signal(signum, sentinel) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        assert wrapper.run(wrapper.env.server.url + "/none/" + STAGE3, STAGE3) == 8, wrapper.output()
        assert set(seen) == {signal.SIGTERM, signal.SIGHUP}
        assert all(handler is not sentinel for handler in seen.values())
        assert all(signal.getsignal(signum) is sentinel for signum in saved)  # restored after main()
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def test_sigterm_during_verification_removes_the_file(wrapper: Wrapper, tmp_path: Path) -> None:
    """The launcher in its own process, SIGTERM while it waits for a slow sibling: the complete but
    unverified file is removed and the exit status is 128+15 (Python's default would leave the file)."""
    media = make_media(wrapper.env.keys, wrapper.env.root / "mirror")
    url = wrapper.publish(media)
    wrapper.env.server.routes[f"/{AUTOBUILDS}/{STAMP}/{STAGE3}.asc"] = \
        lambda info: Response(200, media.files[".asc"], stall=3.0)
    target = wrapper.distdir / STAGE3
    command = shlex.join([sys.executable, str(wrapper.downloader), url, str(target)])
    proc = subprocess.Popen([sys.executable, str(LAUNCHER), "-c", str(wrapper.env.config), "--uri", url,
                             "--file", str(target), "--", command],
                            env=subprocess_environment(tmp_path / "home"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (target.exists() and target.stat().st_size == len(media.data)):
            assert proc.poll() is None and time.monotonic() < deadline, "the download did not complete"
            time.sleep(0.05)
        time.sleep(0.3)  # the command has exited; the wrapper waits for the stalled .asc
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, output
    assert not target.exists()
    assert wrapper.leftovers() == []


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


def test_asc_only_media_must_be_bound_to_its_name(wrapper: Wrapper) -> None:
    """Issue 11 item 4 in the wrapper: an .asc made before the build stamp in the name is refused and the file
    removed; ``[fetch] allow-unnamed = yes`` accepts it."""
    name = "stage3-amd64-openrc-20271201T170321Z.tar.xz"
    media = make_media(wrapper.env.keys, wrapper.env.root / "mirror", name=name, siblings=(".asc",))
    url = wrapper.publish(media)
    assert wrapper.run(url, name) == 1
    assert "not bound to its name" in wrapper.output()
    assert not (wrapper.distdir / name).exists()
    wrapper.env.write_config(extra="[fetch]\nallow-unnamed = yes\n")
    assert wrapper.run(url, name) == 0
    assert "verified, signed by gentoo/releng (name not bound by anything signed" in wrapper.output()
    assert (wrapper.distdir / name).read_bytes() == media.data
    wrapper.env.write_config(extra="[fetch]\nallow-unnamed = maybe\n")
    assert wrapper.run(url, name) == 2
    assert "[fetch] allow-unnamed: expected yes or no" in wrapper.output()


def test_asc_made_after_the_build_stamp_binds_only_with_bind_by_date(wrapper: Wrapper) -> None:
    """Issue 23 item 1 in the wrapper: an .asc made after the build stamp binds a date, not a name (a genuine
    build of another product passes it): refused and removed by default, kept only with ``[fetch]
    bind-by-date = yes``, said so in the verified line."""
    media = make_media(wrapper.env.keys, wrapper.env.root / "mirror", siblings=(".asc",))
    url = wrapper.publish(media)
    assert wrapper.run(url, media.name) == 1
    said = wrapper.output()
    assert "not bound to its name" in said and "[fetch] bind-by-date = yes" in said
    assert not (wrapper.distdir / media.name).exists()
    wrapper.env.write_config(extra="[fetch]\nbind-by-date = yes\n")
    assert wrapper.run(url, media.name) == 0
    assert "(name bound by a date, not a name; [fetch] bind-by-date)" in wrapper.output()
    assert (wrapper.distdir / media.name).read_bytes() == media.data
    wrapper.env.write_config(extra="[fetch]\nbind-by-date = perhaps\n")
    assert wrapper.run(url, media.name) == 2
    assert "[fetch] bind-by-date: expected yes or no" in wrapper.output()


def test_media_signed_by_a_pinned_key_of_another_purpose_is_removed(wrapper: Wrapper) -> None:
    """Issue 23 item 2 in the wrapper: gentoo/snapshot (the repository key) is pinned beside gentoo/releng; a
    stage3 whose .asc and DIGESTS it signed is refused and removed, naming both purposes."""
    wrapper.env.pin_key("gentoo", "snapshot", "bob")
    media = make_media(wrapper.env.keys, wrapper.env.root / "mirror", signer="bob", siblings=(".asc", ".DIGESTS"))
    url = wrapper.publish(media)
    assert wrapper.run(url, media.name) == 1
    said = wrapper.output()
    assert ("signed by gentoo/snapshot, the repository key and the overlay-list key; release media need "
            "release-media keys") in said, said
    assert not (wrapper.distdir / media.name).exists()


def test_renamed_media_from_a_distfiles_mirror_is_marked_by_config(wrapper: Wrapper) -> None:
    """Issue 12 item 6: SRC_URI="…/stage3-….tar.xz -> gentoo-stage3.tar.xz" fetched from a Gentoo distfiles
    mirror: the URI there names only the local name, so no media pattern matched and the file passed
    unverified.  ``[fetch] renamed`` marks such local names as media: the mirror's copy (no signed sibling
    beside it) is refused and removed, so Portage goes on to the upstream URI, where it verifies."""
    local = "gentoo-stage3.tar.xz"
    media = make_media(wrapper.env.keys, wrapper.env.root / "mirror")
    upstream = wrapper.publish(media)
    on_mirror = wrapper.env.server.publish(f"distfiles/{local}", b"not what releng signed")
    assert wrapper.run(on_mirror, local) == 0  # the limit without configuration: passed through untouched
    (wrapper.distdir / local).unlink()
    wrapper.env.write_config(extra="[fetch]\nrenamed = gentoo-stage3*.tar.*\n")
    assert wrapper.run(on_mirror, local) == 1
    assert f"{local}: NOT verified, removed: nothing signed {local}" in wrapper.output()
    assert not (wrapper.distdir / local).exists()
    assert wrapper.run(upstream, local) == 0, wrapper.output()  # verified under the upstream name
    assert (wrapper.distdir / local).read_bytes() == media.data
    assert wrapper.leftovers() == [local]


@pytest.mark.parametrize("tool", ["wget", "curl"])
def test_a_404_is_a_failed_download_not_an_attack(wrapper: Wrapper, tool: str) -> None:
    """Issue 15 item 2: wget leaves a 0-byte file on a 404 (curl -f none): "download failed", the command's
    status passed on, the empty file removed, and not one signature looked up."""
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    url = wrapper.env.server.url + f"/{AUTOBUILDS}/missing/{STAGE3}"
    target = wrapper.distdir / (STAGE3 + DOWNLOAD_SUFFIX)
    command = (["wget", "-q", "-t", "1", "-O", str(target), url] if tool == "wget"
               else ["curl", "-s", "-f", "-o", str(target), url])
    expected = subprocess.run(command, check=False).returncode  # the tool's own status for a 404
    assert expected != 0
    target.unlink(missing_ok=True)
    wrapper.env.server.log.clear()
    wrapper.env.capsys.readouterr()
    status = main(["-c", str(wrapper.env.config), "--uri", url, "--file", str(target), "--", *command])
    output = wrapper.output()
    assert status == expected
    assert f"{STAGE3}: download failed (the fetch command exited {expected})" in output, output
    assert "NOT verified" not in output and "signed" not in output
    assert wrapper.leftovers() == []
    assert [path for path in wrapper.env.server.log if not path.endswith(STAGE3)] == []


def test_an_empty_download_that_claims_success_is_a_failed_download(wrapper: Wrapper) -> None:
    url = wrapper.env.server.publish(f"{AUTOBUILDS}/{STAMP}/{STAGE3}", b"")
    wrapper.env.server.log.clear()
    assert wrapper.run(url, STAGE3 + DOWNLOAD_SUFFIX) == 1
    output = wrapper.output()
    assert "download failed (the fetch command reported success but wrote nothing)" in output, output
    assert wrapper.leftovers() == [] and [p for p in wrapper.env.server.log if not p.endswith(STAGE3)] == []
