"""``gkeys verify-overlays`` and the ``postsync.d/gkeys-overlays`` hook end to end: real gpg, real HTTP.

The overlay list must be signed by an overlay-list key (here: the session key ``releng``, pinned as
``gentoo-infra/infra`` and named in ``[purposes] overlay-list``; the tests verify with category
gentoo-infra).  Every bad input of the issue is one row of a table: it must fail with a clear line
naming the repo or the line, exit 1 or 2, and leave the previous verified copy untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import PROJECT, GkeysEnv, shared_path
from overlays_helpers import GOOD, overlay_list, overlays_config, repo
from test_overlays_rules import BILLION_LAUGHS, XXE

from gkeys_portage.core.config import load_config
from gkeys_portage.core.errors import NotVerifiedError
from gkeys_portage.core.state import read_json
from gkeys_portage.demo.world import past
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.portage.overlays_hook import main as hook_main
from gkeys_portage.verify.overlays.verifier import OverlaySettings, load_list, verify_overlay_list
from gkeys_portage.verify.overlays.xmltree import OverlayXmlError

PREVIOUS = b"<!-- the previous verified copy -->\n"
HOOK = PROJECT / "hooks" / "postsync.d" / "gkeys-overlays"


@pytest.fixture
def infra(env: GkeysEnv) -> GkeysEnv:
    """releng's key pinned as gentoo-infra/infra and imported."""
    key = env.keys.keys["releng"]
    assert env.run("add-seed", "-C", "gentoo-infra", "-n", "infra", "-N", "Infra", "-K", key.fingerprint).code == 0
    keyfile = env.root / "infra.asc"
    keyfile.write_bytes(env.keys.public("releng"))
    result = env.run("import-key", "-C", "gentoo-infra", "-n", "infra", "-F", str(keyfile))
    assert result.code == 0, result.text
    env.write_config(extra=overlays_config())
    return env


def write_list(env: GkeysEnv, data: bytes, *, signer: str | None = "releng", signed: bytes | None = None,
               name: str = "repositories.xml") -> Path:
    """Write a list and (unless ``signer`` is None) its detached signature LIST.asc over ``signed`` or ``data``."""
    path = env.root / name
    path.write_bytes(data)
    if signer is not None:
        path.with_name(name + ".asc").write_bytes(env.keys.sign_bytes(signer, data if signed is None else signed,
                                                                      env.root))
    return path


def previous_copy(env: GkeysEnv) -> Path:
    """An output file that already holds a "previous verified copy"."""
    out = env.root / "verified" / "repositories.xml"
    out.parent.mkdir(exist_ok=True)
    out.write_bytes(PREVIOUS)
    return out


# -- good lists -------------------------------------------------------------------------------------

def test_good_list_is_verified_summarised_and_written(infra: GkeysEnv) -> None:
    out = previous_copy(infra)
    result = infra.run("verify-overlays", str(write_list(infra, GOOD)), "-o", str(out))
    assert result.code == 0, result.text
    assert "good signature by gentoo-infra/infra" in result.out
    assert "3 repositories (1 official); sources: git 2, mercurial 1, rsync 1" in result.out
    assert f"wrote the verified list to {out}" in result.out
    assert out.read_bytes() == GOOD
    again = infra.run("verify-overlays", str(infra.root / "repositories.xml"), "-o", str(out))
    assert again.code == 0 and "is already this list" in again.out
    assert "1 source uses an unauthenticated transport" in again.out
    verbose = infra.run("verify-overlays", str(infra.root / "repositories.xml"), "-v")
    assert "repo gamma: rsync source 'rsync://rsync.example.org/gamma': rsync:// has no authentication" in verbose.out


def test_json_document_has_the_same_facts(infra: GkeysEnv) -> None:
    result = infra.run("verify-overlays", str(write_list(infra, GOOD)), "--json", "-v")
    document = json.loads(result.out)
    assert result.code == 0 and document["ok"] is True and document["verified"] is True
    assert document["repos"] == 3 and document["sources"] == {"git": 2, "mercurial": 1, "rsync": 1}
    assert document["signatures"][0]["nick"] == "infra" and document["category"] == "gentoo-infra"
    assert [f["code"] for f in document["findings"]] == ["source:unauthenticated"]
    assert document["output"] is None and set(document["seconds"]) == {"signature", "parse", "checks", "total"}


def test_the_real_list_verifies_with_warnings(infra: GkeysEnv) -> None:
    real = shared_path("fixtures", "real", "overlays", "repositories.xml").read_bytes()
    out = previous_copy(infra)
    result = infra.run("verify-overlays", str(write_list(infra, real)), "-o", str(out))
    assert result.code == 0, result.text
    assert "458 repositories (32 official); sources: cvs 1, git 896, mercurial 1, rsync 5" in result.out
    assert ("repositories.xml line 927, repo chloverlay: git source 'ssh://git@github.com:CCF100/chloverlay.git': "
            "port 'CCF100' is not a port number") in result.err
    assert "54 sources use an unauthenticated transport" in result.out
    assert out.read_bytes() == real


def test_list_and_signature_by_url(infra: GkeysEnv) -> None:
    url = infra.server.publish("overlays/repositories.xml", GOOD)
    infra.server.publish("overlays/repositories.xml.asc", infra.keys.sign_bytes("releng", GOOD, infra.root))
    assert infra.run("verify-overlays", url).code == 0
    infra.server.publish("elsewhere/repositories.xml", GOOD)
    missing = infra.run("verify-overlays", infra.server.url + "/elsewhere/repositories.xml")
    assert missing.code == 1 and "no signature at" in missing.err


def test_category_comes_from_the_config_and_must_have_pins(infra: GkeysEnv) -> None:
    path = write_list(infra, GOOD)
    infra.write_config(extra=overlays_config(category="overlay-signers"))
    result = infra.run("verify-overlays", str(path))
    assert result.code == 1 and "no pinned keys in category overlay-signers" in result.err
    assert infra.run("verify-overlays", str(path), "-C", "gentoo-infra").code == 0


def test_the_list_needs_an_overlay_list_key_not_the_git_mirror_key(env: GkeysEnv) -> None:
    """Issue 35 case 12, with the packaged purposes and the default category (no gkeys.conf settings): a
    throwaway key in the place of gentoo/mirror (Gentoo's mirror-signing key EF9538C9…, purpose git-mirror)
    signs a good list: refused naming both purposes, the output untouched; a category without an overlay-list
    seed is missing trust; the same list signed by gentoo/snapshot (the default overlay-list key) installs."""
    out = previous_copy(env)
    by_mirror = write_list(env, GOOD, signer="alice")
    for category in ("gentoo", "gentoo-infra"):  # the default category now, and the one before
        assert env.run("remove-seed", "-C", category, "-n", "mirror").code == 0
        env.pin_key(category, "mirror", "alice", name="Mirror")
        result = env.run("verify-overlays", str(by_mirror), "-C", category, "-o", str(out))
        assert result.code == 1, result.text
        assert out.read_bytes() == PREVIOUS
    assert ("signed by gentoo/mirror, the git-mirror key; overlay lists need overlay-list keys: "
            "gentoo/snapshot") in env.run("verify-overlays", str(by_mirror)).err
    env.pin_key("my-lists", "me", "bob", name="Me")
    result = env.run("verify-overlays", str(write_list(env, GOOD, signer="bob")), "-C", "my-lists")
    assert result.code == 1, result.text
    assert "category my-lists pins no overlay-list key" in result.err and "missing trust" in result.err
    assert "[purposes] overlay-list = my-lists/NICK" in result.err, result.err
    assert env.run("remove-seed", "-C", "gentoo", "-n", "snapshot").code == 0
    env.pin_key("gentoo", "snapshot", "releng", name="Snapshot")
    result = env.run("verify-overlays", str(write_list(env, GOOD)), "-o", str(out))
    assert result.code == 0, result.text
    assert "good signature by gentoo/snapshot" in result.out and out.read_bytes() == GOOD


# -- bad input: one row each --------------------------------------------------------------------------

def _tampered(env: GkeysEnv) -> Path:
    return write_list(env, GOOD.replace(b"https://github.com/example/good-overlay.git",
                                        b"https://evil.example/overlay.git"), signed=GOOD)


def _dangerous(url: str) -> Callable[[GkeysEnv], Path]:
    return lambda env: write_list(env, overlay_list(repo("fine"), repo("evil", sources=(("git", url),))))


BAD: list[tuple[str, Callable[[GkeysEnv], Path], int, str]] = [
    ("signature by another key", lambda e: write_list(e, GOOD, signer="mallory"), 1,
     "repositories.xml: signed by unknown key"),
    ("unsigned list", lambda e: write_list(e, GOOD, signer=None), 1, "repositories.xml.asc: no such file"),
    ("tampered after signing", _tampered, 1, "BAD signature"),
    ("XXE", lambda e: write_list(e, XXE), 2, "repositories.xml line 2: a DOCTYPE with an internal subset"),
    ("billion laughs", lambda e: write_list(e, BILLION_LAUGHS), 2, "line 2: a DOCTYPE with an internal subset"),
    ("deeply nested", lambda e: write_list(e, b'<repositories version="1.0">' + b"<repo>" * 100_000), 2,
     "line 1: elements nested deeper than 16 levels"),
    ("duplicate names, different sources",
     lambda e: write_list(e, overlay_list(repo("dup"), repo("dup", sources=(("git", "https://evil.example/d"),)))),
     1, "line 12, repo dup: repository name is used again (first at line 3) with different sources"),
    ("file:///etc", _dangerous("file:///etc"), 1, "repo evil: git source 'file:///etc'"),
    ("ext::sh -c", _dangerous("ext::sh -c touch% /tmp/pwned"), 1, "repo evil: git source 'ext::sh -c"),
    ("--upload-pack", _dangerous("--upload-pack=touch /tmp/pwned"), 1, "repo evil: git source '--upload-pack"),
    ("invalid quality", lambda e: write_list(e, overlay_list(repo("q", quality="best"))), 1,
     "line 3, repo q: quality='best' is not one of"),
    ("invalid status", lambda e: write_list(e, overlay_list(repo("s", status="semi"))), 1,
     "line 3, repo s: status='semi' is not one of"),
    ("non-UTF-8 bytes", lambda e: write_list(e, GOOD.replace(b"alpha overlay", b"alpha \xff overlay")), 2,
     "repositories.xml line 5: not valid UTF-8 (byte 0xff"),
    ("empty file", lambda e: write_list(e, b""), 2, "repositories.xml: empty file"),
    ("source split by a comment", _dangerous("srv<!-- eselect-repository reads 'srv' -->:x/y"), 1,
     "line 19, repo evil: a comment inside <source>"),
]


@pytest.mark.parametrize(("make", "code", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_input_is_refused_and_the_previous_copy_kept(infra: GkeysEnv, make: Callable[[GkeysEnv], Path],
                                                         code: int, message: str) -> None:
    out = previous_copy(infra)
    result = infra.run("verify-overlays", str(make(infra)), "-o", str(out))
    assert result.code == code, result.text
    assert message in result.err, result.text
    assert f"{out} left unchanged" in result.err
    assert "Traceback" not in result.text and "wrote" not in result.out
    assert out.read_bytes() == PREVIOUS


def test_an_older_signed_list_is_not_installed_over_a_newer_one(infra: GkeysEnv) -> None:
    out = infra.root / "verified" / "repositories.xml"
    newer = write_list(infra, GOOD)  # signed 5 minutes "from now" (within the allowed clock skew)
    newer.with_name("repositories.xml.asc").write_bytes(infra.keys.sign_bytes(
        "releng", GOOD, infra.root, when=datetime.fromtimestamp(time.time() + 300, UTC)))
    assert infra.run("verify-overlays", str(newer), "-o", str(out)).code == 0
    old = overlay_list(repo("alpha"), repo("removed-since", sources=(("git", "https://x.example/r.git"),)))
    path = write_list(infra, old, name="old.xml")  # signed now: older than the installed list
    assert infra.run("verify-overlays", str(path)).code == 0  # verifying alone is fine
    result = infra.run("verify-overlays", str(path), "-o", str(out))
    assert result.code == 1 and "refusing to roll back" in result.err
    assert out.read_bytes() == GOOD
    assert infra.run("verify-overlays", str(path), "-o", str(infra.root / "elsewhere.xml")).code == 0


def test_a_list_signed_longer_ago_than_max_age_is_refused(infra: GkeysEnv) -> None:
    infra.pin_key("gentoo-infra", "old", "expired", name="Old")
    path = write_list(infra, GOOD, signer=None)
    path.with_name("repositories.xml.asc").write_bytes(infra.keys.sign_bytes("expired", GOOD, infra.root,
                                                                             when=past(700)))
    out = previous_copy(infra)
    infra.write_config(extra=overlays_config("max-age = 30\n", signers="infra old"))
    refused = infra.run("verify-overlays", str(path), "-o", str(out))
    assert refused.code == 1, refused.text
    assert "more than 30 days ago ([overlays] max-age)" in refused.err and f"{out} left unchanged" in refused.err
    assert out.read_bytes() == PREVIOUS
    assert infra.run("verify-overlays", str(path)).code == 1  # verifying alone is refused too
    infra.write_config(extra=overlays_config("max-age = 0\n", signers="infra old"))
    assert infra.run("verify-overlays", str(path), "-o", str(out)).code == 0  # 0 (the default): off
    assert out.read_bytes() == GOOD


def test_the_rollback_floor_is_recorded_when_the_bytes_are_already_installed(infra: GkeysEnv) -> None:
    real = infra.root / "verified"
    real.mkdir()
    (infra.root / "alias").symlink_to(real)
    out = real / "repositories.xml"
    out.write_bytes(GOOD)  # copied there by hand: the same bytes, but no record yet
    newer = write_list(infra, GOOD, signer=None)
    newer.with_name("repositories.xml.asc").write_bytes(infra.keys.sign_bytes(
        "releng", GOOD, infra.root, when=datetime.fromtimestamp(time.time() + 300, UTC)))
    first = infra.run("verify-overlays", str(newer), "-o", str(infra.root / "alias" / "repositories.xml"))
    assert first.code == 0 and "is already this list" in first.out, first.text
    record = read_json(infra.state / "state" / "overlays.json", {})
    assert list(record) == [str(out.resolve())] and record[str(out.resolve())]["signed"] > time.time() + 200
    old = overlay_list(repo("alpha"), repo("removed-since", sources=(("git", "https://x.example/r.git"),)))
    path = write_list(infra, old, name="old.xml")  # signed now: older than the list already there
    for spelling in (out, infra.root / "alias" / "repositories.xml", infra.root / "alias" / ".." / "verified"
                     / "repositories.xml"):
        result = infra.run("verify-overlays", str(path), "-o", str(spelling))
        assert result.code == 1 and "refusing to roll back" in result.err, result.text
    assert out.read_bytes() == GOOD


def test_a_200_mb_list_is_refused_without_reading_it_all(infra: GkeysEnv) -> None:
    huge = infra.root / "huge.xml"
    with open(huge, "wb") as handle:
        handle.truncate(200 * 1024 * 1024)  # sparse: costs no disk
    huge.with_name("huge.xml.asc").write_bytes(b"not even looked at")
    ctx = Gkeys(load_config(infra.config, None))
    tracemalloc.start()
    try:
        with pytest.raises(Exception, match="larger than 16777216 bytes"):
            load_list(ctx, str(huge), None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 40 * 1024 * 1024, f"read {peak} bytes"
    out = previous_copy(infra)
    result = infra.run("verify-overlays", str(huge), "-o", str(out))
    assert result.code == 2 and "larger than 16777216 bytes" in result.err
    assert out.read_bytes() == PREVIOUS


def test_a_download_over_the_size_limit_is_refused(infra: GkeysEnv) -> None:
    big = overlay_list(*(repo(f"r{i}") for i in range(20)))
    url = infra.server.publish("big/repositories.xml", big)
    infra.server.publish("big/repositories.xml.asc", infra.keys.sign_bytes("releng", big, infra.root))
    infra.write_config(extra=overlays_config("max-size = 0.004\n"))  # ~4 KB
    result = infra.run("verify-overlays", url)
    assert result.code == 2 and "larger than 4194 bytes" in result.err


def test_a_too_large_or_empty_signature_leaves_the_list_unverified(infra: GkeysEnv) -> None:
    big = b"-----BEGIN PGP SIGNATURE-----\n" + b"A" * (1024 * 1024) + b"\n-----END PGP SIGNATURE-----\n"
    url = infra.server.publish("sig/repositories.xml", GOOD)
    infra.server.publish("sig/repositories.xml.asc", big)
    out = previous_copy(infra)
    for argv in ((url,), (str(write_list(infra, GOOD, signer=None)), "-s", str(write_list(infra, big, signer=None,
                                                                                          name="big.asc")))):
        result = infra.run("verify-overlays", *argv, "-o", str(out))
        assert result.code == 1, result.text  # not verified; not "an unacceptable XML document" (exit 2)
        assert "signature" in result.err and "larger than 1048576 bytes" in result.err, result.text
        assert "XML" not in result.err and f"{out} left unchanged" in result.err
    empty = infra.run("verify-overlays", str(infra.root / "repositories.xml"), "-s",
                      str(write_list(infra, b" \n", signer=None, name="empty.asc")), "-o", str(out))
    assert empty.code == 1 and "empty.asc: empty file" in empty.err, empty.text
    assert out.read_bytes() == PREVIOUS


def test_library_raises_precise_errors(infra: GkeysEnv) -> None:
    ctx = Gkeys(load_config(infra.config, None))
    with pytest.raises(NotVerifiedError):
        verify_overlay_list(ctx, load_list(ctx, str(_tampered(infra)), None), "gentoo-infra")
    with pytest.raises(OverlayXmlError, match="line 2"):
        verify_overlay_list(ctx, load_list(ctx, str(write_list(infra, XXE)), None), "gentoo-infra")
    bad = verify_overlay_list(ctx, load_list(ctx, str(_dangerous("file:///etc")(infra)), None), "gentoo-infra")
    assert not bad.ok and [f.repo for f in bad.overlays.errors] == ["evil"]


# -- the postsync.d hook --------------------------------------------------------------------------

def _hook_config(env: GkeysEnv, out: Path) -> None:
    env.write_config(extra=overlays_config(f"url = {env.server.url}/overlays/repositories.xml\noutput = {out}\n"))


def test_hook_script_refreshes_then_keeps_the_copy_when_upstream_is_tampered(infra: GkeysEnv) -> None:
    out = infra.root / "state" / "overlays" / "repositories.xml"
    _hook_config(infra, out)
    infra.server.publish("overlays/repositories.xml", GOOD)
    infra.server.publish("overlays/repositories.xml.asc", infra.keys.sign_bytes("releng", GOOD, infra.root))
    environ = {**os.environ, "GKEYS_CONFIG": str(infra.config), "PYTHONPATH": str(PROJECT)}
    # emerge may be run from anywhere: a module planted in the working directory must not be imported.
    hostile = infra.root / "cwd"
    hostile.mkdir()
    (hostile / "gnupg.py").write_text("import sys\nsys.exit(0)\n")
    (hostile / "gkeys_portage.py").write_text("import sys\nsys.exit(0)\n")
    first = subprocess.run([sys.executable, str(HOOK)], env=environ, capture_output=True, text=True, timeout=120,
                           check=False, cwd=hostile)
    assert first.returncode == 0, first.stdout + first.stderr
    assert out.read_bytes() == GOOD
    infra.server.publish("overlays/repositories.xml", GOOD.replace(b"alpha", b"omega"))
    second = subprocess.run([sys.executable, str(HOOK)], env=environ, capture_output=True, text=True, timeout=120,
                            check=False, cwd=hostile)
    assert second.returncode == 1
    assert "BAD signature" in second.stderr and f"{out} left unchanged" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1, second.stderr
    assert out.read_bytes() == GOOD


def test_hook_fails_on_network_errors_and_on_refused_lists(infra: GkeysEnv, capsys: pytest.CaptureFixture[str]) -> None:
    out = previous_copy(infra)
    _hook_config(infra, out)
    assert hook_main(["-c", str(infra.config)]) == 3  # nothing published: 404
    assert f"{out} left unchanged" in capsys.readouterr().err
    evil = overlay_list(repo("evil", sources=(("git", "ext::sh -c id"),)))
    infra.server.publish("overlays/repositories.xml", evil)
    infra.server.publish("overlays/repositories.xml.asc", infra.keys.sign_bytes("releng", evil, infra.root))
    assert hook_main(["-c", str(infra.config)]) == 1
    assert "refused, 1 error" in capsys.readouterr().err
    assert out.read_bytes() == PREVIOUS


def test_settings_defaults(env: GkeysEnv) -> None:
    settings = OverlaySettings.from_config(load_config(env.config, None))
    assert settings.category == "gentoo"
    assert settings.url == "https://api.gentoo.org/overlays/repositories.xml"
    assert settings.signature_url == settings.url + ".asc"
    assert settings.output == env.state / "overlays" / "repositories.xml"
    env.write_config(extra="[overlays]\nmax-size = -1\n")
    assert env.run("verify-overlays", "x.xml").code == 2


def test_hook_counts_url_warnings_and_lists_them_with_v(infra: GkeysEnv, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 15 item 6: 33 ssh:// warnings on every sync became one count line; -v lists them; errors stay loud."""
    sources = tuple(("git", f"ssh://git@github.com:user{n}/repo.git") for n in range(33))
    noisy = overlay_list(repo("noisy", sources=sources))
    out = previous_copy(infra)
    _hook_config(infra, out)
    infra.server.publish("overlays/repositories.xml", noisy)
    infra.server.publish("overlays/repositories.xml.asc", infra.keys.sign_bytes("releng", noisy, infra.root))
    assert hook_main(["-c", str(infra.config)]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "33 source URL warnings" in err and "-v lists them" in err
    assert out.read_bytes() == noisy
    assert hook_main(["-c", str(infra.config), "-v"]) == 0
    assert capsys.readouterr().err.count("is not a port number") == 33
    # the command a user runs by hand still lists every warning
    assert infra.run("verify-overlays", "-c", str(infra.config)).err.count("is not a port number") == 33
