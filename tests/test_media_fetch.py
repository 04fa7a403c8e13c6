"""fetch-media and verify-media URL over HTTP on 127.0.0.1: latest files, quarantine, resume, faults."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from media_helpers import AUTOBUILDS, STAGE3, STAMP, digest_block, install_release_key, make_media, publish_latest

from gkeys_portage.demo.world import KeyFactory, RequestInfo, Response

FLAVOUR = "stage3-amd64-openrc"
FILE_PATH = f"/{AUTOBUILDS}/{STAMP}/{STAGE3}"


@pytest.fixture
def menv(env):  # type: ignore[no-untyped-def]
    """Category gentoo pins releng; the media section makes stalls quick to detect."""
    env.write_config(extra="[media]\nstall-timeout = 0.5\n")
    install_release_key(env)
    return env


def _quarantine(menv) -> Path:  # type: ignore[no-untyped-def]
    return Path(menv.state) / "state" / "quarantine" / "media"


def _fetch_latest(menv, dest: Path, *extra: str):  # type: ignore[no-untyped-def]
    return menv.run("fetch-media", "--latest", FLAVOUR, "--mirror", menv.server.url, "-d", str(dest), *extra)


def test_fetch_latest_verifies_then_installs(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "src")
    media.publish(menv.server)
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, f"{STAMP}/{STAGE3} {len(media.data)}")
    dest = tmp_path / "dest"
    result = _fetch_latest(menv, dest)
    assert result.code == 0, result.text
    assert (dest / STAGE3).read_bytes() == media.data
    assert {p.name for p in dest.iterdir()} == {STAGE3 + s for s in ("", ".asc", ".DIGESTS", ".sha256",
                                                                     ".CONTENTS.gz")}
    assert f"latest-{FLAVOUR}.txt: good signature by gentoo/releng" in result.out
    assert f"newest entry {STAMP}/{STAGE3}, {len(media.data)} bytes" in result.out
    assert f"{STAGE3}.DIGESTS.asc: not on the mirror; skipped" in result.out
    assert not (_quarantine(menv) / STAGE3).exists()  # moved, not copied


def test_fetch_url_json_and_verify_url(menv, keys: KeyFactory, tmp_path: Path) -> None:
    url = make_media(keys, tmp_path / "src").publish(menv.server)
    doc = json.loads(menv.run("--json", "fetch-media", url, "-d", str(tmp_path / "d")).out)
    assert doc["verified"] is True and str(tmp_path / "d" / STAGE3) in doc["installed"]
    result = menv.run("verify-media", url)
    assert result.code == 0, result.text
    assert f"{STAGE3}.DIGESTS, {STAGE3}.sha256: good signature by gentoo/releng" in result.out
    assert f"{STAGE3}.asc: not verified, not needed" in result.out
    assert not [p for p in _quarantine(menv).iterdir() if p.name.startswith("verify-")]  # private folder gone


def test_only_verified_siblings_are_installed(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """An unsigned .DIGESTS ("not signed; ignored") and a CONTENTS.gz that no signed statement lists are
    not installed beside the file: only what was verified reaches DIR; the rest leaves quarantine."""
    media = make_media(keys, tmp_path / "src", siblings=(".asc", ".CONTENTS.gz"))
    media.files[".DIGESTS"] = digest_block("SHA512", b"evil", STAGE3).encode()  # not signed
    url = media.publish(menv.server)
    dest = tmp_path / "dest"
    # only the .asc signs: bound by its date alone, an explicit opt-in since issue 23 item 1
    result = menv.run("fetch-media", "--bind-by-date", url, "-d", str(dest))
    assert result.code == 0, result.text
    assert f"{STAGE3}.DIGESTS: not signed; ignored" in result.text
    assert {p.name for p in dest.iterdir()} == {STAGE3, STAGE3 + ".asc"}
    assert not [p.name for p in _quarantine(menv).iterdir() if p.name.startswith(STAGE3)]


def _refused_fetch(menv, dest: Path, result, code: int, needle: str) -> None:  # type: ignore[no-untyped-def]
    assert result.code == code, result.text
    assert needle in result.err, result.err
    said = [ln for ln in result.err.splitlines() if ln.strip() and not ln.startswith(" * waiting for ")]  # issue 45
    assert len(said) == 1, result.err
    assert not dest.exists() or list(dest.iterdir()) == []  # nothing installed


def test_tampered_download_is_quarantined(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "src")
    media.data = media.data[:-1] + b"!"
    media.publish(menv.server)
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, f"{STAMP}/{STAGE3} {len(media.data)}")
    dest = tmp_path / "dest"
    _refused_fetch(menv, dest, _fetch_latest(menv, dest), 1, "SHA512 does not match")
    assert (_quarantine(menv) / (STAGE3 + ".rejected")).read_bytes() == media.data
    assert not (_quarantine(menv) / STAGE3).exists()  # the next run downloads afresh


@pytest.mark.parametrize("line", ["../../../../evil.tar.xz 10", "http://192.0.2.1/stage3.tar.xz 10",
                                  f"/{AUTOBUILDS}/{STAMP}/{STAGE3} 10"])
def test_latest_pointing_outside_the_mirror(menv, keys: KeyFactory, tmp_path: Path, line: str) -> None:
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, line)
    dest = tmp_path / "dest"
    _refused_fetch(menv, dest, _fetch_latest(menv, dest), 2, f"latest-{FLAVOUR}.txt line 3")


def test_latest_signed_by_an_unpinned_key(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "src")
    media.publish(menv.server)
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, f"{STAMP}/{STAGE3} {len(media.data)}", signer="mallory")
    dest = tmp_path / "dest"
    _refused_fetch(menv, dest, _fetch_latest(menv, dest), 1, f"latest-{FLAVOUR}.txt: signed by unknown key")
    assert FILE_PATH not in menv.server.log


def test_server_sends_more_than_announced(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "src")
    media.publish(menv.server)
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, f"{STAMP}/{STAGE3} {len(media.data) - 100}")
    dest = tmp_path / "dest"
    _refused_fetch(menv, dest, _fetch_latest(menv, dest), 2, "more than")
    # A server whose headers hide the size (no Content-Length, connection close) is cut off too.
    menv.server.routes[FILE_PATH] = lambda info: Response(200, media.data, {"Connection": "close",
                                                                            "Content-Length": ""})
    _refused_fetch(menv, dest, _fetch_latest(menv, dest), 2, "the server sent more than")


def test_stalled_download_times_out(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "src")
    media.publish(menv.server)
    menv.server.routes[FILE_PATH] = lambda info: Response(200, media.data, stall=2.0)
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, f"{STAMP}/{STAGE3} {len(media.data)}")
    dest = tmp_path / "dest"
    _refused_fetch(menv, dest, _fetch_latest(menv, dest), 3, "stalled (no data for 0.5 s)")


def test_dripping_download_is_cut_and_resumed(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """A mirror sending a byte every 0.2 s (each read well within the 0.5 s stall timeout) would hold the
    fetch for hours: each attempt is cut at the stall timeout plus what its bytes earn at 16 KiB/s, the
    run ends with exit 3 naming it, and the partial file is kept for the next run."""
    media = make_media(keys, tmp_path / "src")
    media.publish(menv.server)
    menv.server.routes[FILE_PATH] = lambda info: Response(200, media.data, drip=0.2)
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, f"{STAMP}/{STAGE3} {len(media.data)}")
    dest = tmp_path / "dest"
    started = time.monotonic()
    result = _fetch_latest(menv, dest)
    assert time.monotonic() - started < 30, "a dripping mirror held the fetch"
    _refused_fetch(menv, dest, result, 3, "too slow")
    partial = list(_quarantine(menv).rglob(STAGE3 + "*"))
    assert partial and 0 < partial[0].stat().st_size < len(media.data)


def test_partial_download_is_resumed(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "src")
    media.publish(menv.server)
    ranges: list[str] = []

    def record(info: RequestInfo) -> Response:
        ranges.append(info.headers.get("Range", ""))
        return Response(200, media.data)

    menv.server.routes[FILE_PATH] = record
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, f"{STAMP}/{STAGE3} {len(media.data)}")
    quarantine = _quarantine(menv)
    quarantine.mkdir(parents=True)
    half = len(media.data) // 2
    (quarantine / STAGE3).write_bytes(media.data[:half])
    dest = tmp_path / "dest"
    result = _fetch_latest(menv, dest)
    assert result.code == 0, result.text
    assert ranges == [f"bytes={half}-"]
    assert (dest / STAGE3).read_bytes() == media.data


def test_404_on_one_sibling_is_skipped(menv, keys: KeyFactory, tmp_path: Path) -> None:
    url = make_media(keys, tmp_path / "src", siblings=(".DIGESTS", ".CONTENTS.gz")).publish(menv.server)
    result = menv.run("fetch-media", url, "-d", str(tmp_path / "dest"))
    assert result.code == 0, result.text
    assert f"{STAGE3}.asc: not on the mirror; skipped" in result.out
    assert f"{STAGE3}.sha256: not on the mirror; skipped" in result.out


def test_404_on_all_signed_siblings_fails_before_downloading(menv, keys: KeyFactory, tmp_path: Path) -> None:
    url = make_media(keys, tmp_path / "src", siblings=(".CONTENTS.gz",)).publish(menv.server)
    dest = tmp_path / "dest"
    _refused_fetch(menv, dest, menv.run("fetch-media", url, "-d", str(dest)), 1, "nothing signed")
    assert FILE_PATH not in menv.server.log


def test_usage_errors(menv, tmp_path: Path) -> None:
    assert menv.run("fetch-media", "-d", str(tmp_path)).code == 2
    result = menv.run("fetch-media", "--latest", "../x", "--mirror", menv.server.url)
    assert result.code == 2 and "expected a name like" in result.err
    result = menv.run("fetch-media", "--latest", "stage3-amd64-nosuch", "--mirror", menv.server.url)
    assert result.code == 3 and "latest-stage3-amd64-nosuch.txt: not on the mirror" in result.err


def test_one_fetch_per_file_at_a_time(menv, keys: KeyFactory, tmp_path: Path) -> None:
    import fcntl
    import os

    url = make_media(keys, tmp_path / "src").publish(menv.server)
    quarantine = _quarantine(menv)
    quarantine.mkdir(parents=True)
    fd = os.open(quarantine / f".{STAGE3}.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        dest = tmp_path / "dest"
        _refused_fetch(menv, dest, menv.run("fetch-media", url, "-d", str(dest)), 2,
                       f"another fetch-media run is downloading {STAGE3}")
    finally:
        os.close(fd)


def test_older_latest_file_is_a_rollback(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "src")
    media.publish(menv.server)
    line = f"{STAMP}/{STAGE3} {len(media.data)}"
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, line, ts=1767289202)
    assert _fetch_latest(menv, tmp_path / "first").code == 0
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, line, ts=1767289202 - 86400)
    dest = tmp_path / "dest"
    _refused_fetch(menv, dest, _fetch_latest(menv, dest), 1, "ts=1767202802 is older than ts=1767289202")


def test_server_ignoring_range_restarts_cleanly(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "src")
    media.publish(menv.server)
    # An explicit Content-Length makes the loopback server ignore Range: a 200 with the whole file.
    menv.server.routes[FILE_PATH] = lambda info: Response(200, media.data, {"Content-Length": str(len(media.data))})
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, f"{STAMP}/{STAGE3} {len(media.data)}")
    quarantine = _quarantine(menv)
    quarantine.mkdir(parents=True)
    (quarantine / STAGE3).write_bytes(b"garbage from an older, different file")
    dest = tmp_path / "dest"
    result = _fetch_latest(menv, dest)
    assert result.code == 0, result.text
    assert (dest / STAGE3).read_bytes() == media.data


def test_connection_stalling_mid_body_resumes_in_the_same_run(menv, keys: KeyFactory, tmp_path: Path) -> None:
    media = make_media(keys, tmp_path / "src")
    media.publish(menv.server)
    half = len(media.data) // 2
    calls: list[str] = []

    def flaky(info: RequestInfo) -> Response:
        calls.append(info.headers.get("Range", ""))
        if len(calls) == 1:  # announce everything, send half, then go silent
            return Response(200, media.data[:half], {"Content-Length": str(len(media.data))})
        return Response(200, media.data)

    menv.server.routes[FILE_PATH] = flaky
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, f"{STAMP}/{STAGE3} {len(media.data)}")
    dest = tmp_path / "dest"
    result = _fetch_latest(menv, dest)
    assert result.code == 0, result.text
    assert calls == ["", f"bytes={half}-"]
    assert (dest / STAGE3).read_bytes() == media.data


@pytest.fixture
def other_filesystem(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A fresh directory on another filesystem than ``tmp_path`` (tmpfs /dev/shm), removed afterwards."""
    import shutil
    import tempfile

    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second filesystem (/dev/shm) to install across")
    folder = Path(tempfile.mkdtemp(prefix="gkeys-test-", dir=shm))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_install_across_filesystems_never_follows_a_planted_partial_symlink(
        menv, keys: KeyFactory, tmp_path: Path, other_filesystem: Path) -> None:
    """Issue 11 item 9: with -d DIR on another filesystem the files were copied to the predictable
    DIR/.NAME.partial with shutil.copyfile, which follows a symlink a local user planted there (the
    victim file was overwritten with the stage3).  Now the copy goes to a mkstemp file and is renamed."""
    url = make_media(keys, tmp_path / "src").publish(menv.server)
    dest = other_filesystem / "dest"
    dest.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    names = [STAGE3 + s for s in ("", ".asc", ".DIGESTS", ".sha256", ".CONTENTS.gz")]
    for name in names:
        (dest / f".{name}.partial").symlink_to(victim)
    (dest / (STAGE3 + ".asc")).symlink_to(victim)  # a planted final name is replaced, not written through
    result = menv.run("fetch-media", url, "-d", str(dest))
    assert result.code == 0, result.text
    assert victim.read_bytes() == b"precious"
    assert not (dest / (STAGE3 + ".asc")).is_symlink()
    assert (dest / STAGE3).read_bytes() == (tmp_path / "src" / STAGE3).read_bytes()
    left = {p.name for p in dest.iterdir()}
    assert left == set(names) | {f".{name}.partial" for name in names}  # only the planted links remain


def test_install_into_an_unusable_destination_is_one_line(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """A directory planted under the file's name (or a DIR that is a file) is one line, exit 2, no traceback;
    the verified file stays in quarantine."""
    url = make_media(keys, tmp_path / "src").publish(menv.server)
    dest = tmp_path / "dest"
    (dest / STAGE3).mkdir(parents=True)
    result = menv.run("fetch-media", url, "-d", str(dest))
    assert result.code == 2, result.text
    assert "cannot install" in result.err and "Traceback" not in result.text
    assert len([ln for ln in result.err.splitlines() if ln.strip()]) == 1, result.err
    assert (_quarantine(menv) / STAGE3).exists()


def test_latest_listing_another_product_is_refused(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """Issue 11 item 5: asking for stage3-amd64-hardened-openrc installed the 2020 stage3-i686-musl that a
    (genuinely signed) other product's latest file, served under the asked-for name, pointed at."""
    old_stamp = "20200101T000000Z"
    musl = make_media(keys, tmp_path / "musl", f"stage3-i686-musl-{old_stamp}.tar.xz")
    musl.publish(menv.server, f"{AUTOBUILDS}/{old_stamp}")
    flavour = "stage3-amd64-hardened-openrc"
    publish_latest(keys, menv.server, tmp_path, flavour, f"{old_stamp}/{musl.name} {len(musl.data)}", ts=1867289202)
    dest = tmp_path / "dest"
    result = menv.run("fetch-media", "--latest", flavour, "--mirror", menv.server.url, "-d", str(dest))
    _refused_fetch(menv, dest, result, 1, f"lists no {flavour}-<stamp> file (it lists '{musl.name}')")
    assert f"/{AUTOBUILDS}/{old_stamp}/{musl.name}" not in menv.server.log  # nothing downloaded


def test_newer_list_naming_an_older_build_is_a_rollback(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """The ts rollback record cannot be sidestepped by a newer-ts list (e.g. a combined list) whose entry for
    NAME is an older build than the one installed before."""
    media = make_media(keys, tmp_path / "src")
    media.publish(menv.server)
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, f"{STAMP}/{STAGE3} {len(media.data)}", ts=1767289202)
    assert _fetch_latest(menv, tmp_path / "first").code == 0
    old_stamp = "20251201T170000Z"
    old = make_media(keys, tmp_path / "old", f"{FLAVOUR}-{old_stamp}.tar.xz")
    old.publish(menv.server, f"{AUTOBUILDS}/{old_stamp}")
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, f"{old_stamp}/{old.name} {len(old.data)}",
                   ts=1767289202 + 86400)
    dest = tmp_path / "dest"
    _refused_fetch(menv, dest, _fetch_latest(menv, dest), 1, f"built {old_stamp}, before the build {STAMP}")


def test_old_release_served_under_a_newer_name_is_not_installed(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """Issue 11 item 4 end to end: an old release with its genuine .asc under a newer name, DIGESTS and .sha256
    answering 404, was "verified (1 signed sibling(s), 0 digest(s) matched)" and installed."""
    newer_stamp = "20271201T170321Z"
    name = f"{FLAVOUR}-{newer_stamp}.tar.xz"
    old = make_media(keys, tmp_path / "src", name, siblings=(".asc",))
    url = old.publish(menv.server, f"{AUTOBUILDS}/{newer_stamp}")
    dest = tmp_path / "dest"
    _refused_fetch(menv, dest, menv.run("fetch-media", url, "-d", str(dest)), 1, f"{name}: not bound to its name")
    assert f"/{AUTOBUILDS}/{newer_stamp}/{name}" not in menv.server.log  # refused before the download
    _refused_fetch(menv, dest, menv.run("fetch-media", "--bind-by-date", url, "-d", str(dest)), 1,
                   "before the build stamp 20271201T170321Z")
    assert (_quarantine(menv) / (name + ".rejected")).exists()
    result = menv.run("--json", "fetch-media", "--allow-unnamed", url, "-d", str(dest))
    assert result.code == 0, result.text
    assert json.loads(result.out)["name"]["rule"] == "allowed-unnamed"
    assert (dest / name).read_bytes() == old.data


def test_destination_another_user_could_write_is_refused(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """The same class as the planted .partial symlink: in a DIR another local user owns, or anyone may write
    without the sticky bit, the verified files could be swapped after the check; refused, one line, nothing
    installed (the verified file stays in quarantine)."""
    import os

    url = make_media(keys, tmp_path / "src").publish(menv.server)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    result = menv.run("fetch-media", url, "-d", str(open_dir))
    _refused_fetch(menv, open_dir, result, 2, "is world-writable")
    assert f"/{AUTOBUILDS}/{STAMP}/{STAGE3}" not in menv.server.log  # refused before the download
    open_dir.chmod(0o1777)  # sticky, like /tmp: nobody can rename over another user's file
    assert menv.run("fetch-media", url, "-d", str(open_dir)).code == 0
    below = open_dir / "sub"  # a parent anyone may write to (without sticky bit) could swap ``sub`` itself
    open_dir.chmod(0o777)
    _refused_fetch(menv, below, menv.run("fetch-media", url, "-d", str(below)), 2, f"{open_dir} is world-writable")
    if os.getuid() == 0:
        foreign = tmp_path / "foreign"
        foreign.mkdir()
        os.chown(foreign, 65534, 65534)
        result = menv.run("fetch-media", url, "-d", str(foreign / "mine"))
        _refused_fetch(menv, foreign, result, 2, f"{foreign} is owned by uid 65534")
        own = tmp_path / "own"
        own.mkdir()
        link = tmp_path / "link"  # a symlink another user owns, and may re-point after the check
        link.symlink_to(own)
        os.lchown(link, 65534, 65534)
        result = menv.run("fetch-media", url, "-d", str(link))
        _refused_fetch(menv, own, result, 2, f"{link} is a symlink owned by uid 65534")


def test_unbindable_file_is_refused_before_its_download(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """Only an .asc on the mirror and no build stamp in the name: no rule could bind the file to its name, so
    the (multi-GB) file is never requested; with --allow-unnamed it is fetched and installed."""
    name = "install-amd64-minimal.iso"
    media = make_media(keys, tmp_path / "src", name, siblings=(".asc",))
    url = media.publish(menv.server)
    dest = tmp_path / "dest"
    _refused_fetch(menv, dest, menv.run("fetch-media", url, "-d", str(dest)), 1, f"{name}: not bound to its name")
    assert f"/{AUTOBUILDS}/{STAMP}/{name}" not in menv.server.log
    assert menv.run("fetch-media", "--allow-unnamed", url, "-d", str(dest)).code == 0
    assert (dest / name).read_bytes() == media.data


def test_asc_only_is_bound_by_the_sized_entry_of_the_signed_latest_list(menv, keys: KeyFactory,
                                                                         tmp_path: Path) -> None:
    """Issue 23 item 1: only an .asc beside the stage3, DIGESTS and .sha256 answering 404.  fetch-media URL
    refuses it before the download (a date names no file); fetch-media --latest binds it by the signed
    latest list's entry, which names the file and its size (rule listed-in-latest); an entry without a size
    does not bind it."""
    media = make_media(keys, tmp_path / "src", siblings=(".asc",))
    url = media.publish(menv.server)
    dest = tmp_path / "dest"
    _refused_fetch(menv, dest, menv.run("fetch-media", url, "-d", str(dest)), 1,
                   f"there is no {STAGE3}.DIGESTS or {STAGE3}.sha256")
    assert FILE_PATH not in menv.server.log
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, f"{STAMP}/{STAGE3}")  # no size
    _refused_fetch(menv, dest, _fetch_latest(menv, dest), 1, f"{STAGE3}: not bound to its name")
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, f"{STAMP}/{STAGE3} {len(media.data)}", ts=1767289203)
    result = _fetch_latest(menv, dest, "--json")
    assert result.code == 0, result.text
    doc = json.loads(result.out)
    assert doc["name"]["rule"] == "listed-in-latest", doc["name"]
    assert f"latest-{FLAVOUR}.txt (signed) names {STAGE3} with its size" in doc["name"]["detail"]
    assert (dest / STAGE3).read_bytes() == media.data


def test_redirect_loop_on_the_download_is_not_retried(menv, keys: KeyFactory, tmp_path: Path) -> None:
    """The big download and every other HTTP call share one retry loop (core.http): too many redirects is
    final there, not a transient failure worth three more rounds of redirects."""
    media = make_media(keys, tmp_path / "src")
    media.publish(menv.server)
    menv.server.routes[FILE_PATH] = lambda info: Response(302, b"", {"Location": FILE_PATH})
    publish_latest(keys, menv.server, tmp_path, FLAVOUR, f"{STAMP}/{STAGE3} {len(media.data)}")
    dest = tmp_path / "dest"
    _refused_fetch(menv, dest, _fetch_latest(menv, dest), 3, "too many redirects")
    assert menv.server.log.count(FILE_PATH) == 6  # one attempt: the request and five redirects
