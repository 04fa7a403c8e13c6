"""Issue 43 item 10: the distfiles ``gkeys-verify.eclass`` verifies inside a build reach ``gkeys audit``.

A build runs ``gkeys verify -F`` read-only (``GKEYS_READ_ONLY_KEYRINGS=1``), in Portage's sandbox, usually as the
``portage`` user (here ``nobody``/``nogroup``, as in tests/test_gentoo_box.py): it leaves one record per verdict in
the journal spool the eclass allowed with ``addwrite``; root takes the spool in (``gkeys journal ingest``, or any
gkeys command as root), verifies each file again and journals its own verdict, or the claim as unconfirmed.
Forged and malformed records are refused, removed and never trusted."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import PROJECT, GkeysEnv
from eclass_helpers import installed_ebuild
from test_fetch_unprivileged import as_nobody, shared_env  # noqa: F401 - the fixture

from gkeys_portage.cli.main import main as gkeys_main
from gkeys_portage.core import journal
from gkeys_portage.core.state import Layout
from gkeys_portage.verify import spool

ATOM = {"CATEGORY": "app-misc", "PF": "demo-1.0", "PORTAGE_REPO_NAME": "gentoo"}


def _entries(env: GkeysEnv, *kinds: str) -> list[dict[str, Any]]:
    return [e for e in (json.loads(line) for path in journal.JournalPaths.of(Layout(env.state)).files()
                        for line in path.read_text().splitlines()) if e["kind"] in kinds]


def _make_spool(env: GkeysEnv) -> Path:
    made = spool.ensure_spool(Layout(env.state), group="nogroup")
    assert made is not None and made.stat().st_mode & 0o7777 == spool.SPOOL_MODE and made.stat().st_uid == 0
    return made


def test_the_eclass_leaves_each_verdict_for_root_which_verifies_it_again_and_audit_lists_it(
        env: GkeysEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real eclass path (a build without userpriv runs as root, read-only, in the sandbox): ``addwrite`` of the
    spool, one record naming the real distfile (the build's ``${DISTDIR}`` holds links to it, as Portage's does);
    ``gkeys audit`` as root takes it in, verifies it again, lists it with its provenance, the same facts in text
    and ``--json``."""
    ebuild = installed_ebuild(env)
    where = _make_spool(env)
    monkeypatch.setenv("DISTDIR", str(ebuild.distdir))  # root's Portage's DISTDIR
    path = ebuild.distfile("demo-1.0.tar.gz")
    sig = ebuild.sign("alice", path.name)
    shadow = env.root / "build" / "shadow-distdir"  # ${PORTAGE_BUILDDIR}/distdir: a link per distfile
    shadow.mkdir()
    for real in (path, sig):
        (shadow / real.name).symlink_to(real)
    run = ebuild.run(f'gkeys-verify_verify_detached "{shadow / path.name}" "{shadow / sig.name}"', environ={
        "DISTDIR": str(shadow), "GKEYS_VERIFY_SPOOL": str(where), "CATEGORY": "app-misc", "PF": "demo-1.0",
        "PORTAGE_REPO_NAME": "gentoo"})
    assert run.code == 0, run.err
    assert f"ADDWRITE: {where}" in run.err
    (record,) = [p for p in where.iterdir()]
    assert not _entries(env, "file-accepted")  # the build wrote no journal: only its record
    claim = json.loads(record.read_text())
    assert (claim["file"], claim["signature"], claim["verdict"], claim["atom"]) == (
        str(path), str(sig), "accepted", "app-misc/demo-1.0::gentoo")

    alice = env.keys.keys["alice"].fingerprint
    doc = json.loads(env.run("--json", "audit", "--key", alice).out)
    assert not list(where.iterdir())  # taken in
    (artifact,) = doc["artifacts"]
    (hit,) = artifact["accepted"]
    assert (artifact["artifact"], artifact["subject"]) == ("signed file", str(path))
    assert "reported by a build as root for app-misc/demo-1.0::gentoo, verified again by root" in hit["detail"]
    assert "emerge -1 =app-misc/demo-1.0" in hit["next_step"]
    (entry,) = _entries(env, "file-accepted")
    assert entry["data"]["reported_by"]["user"] == "root" and entry["data"]["confirmed"] is True
    text = env.run("audit", "--key", alice)
    assert hit["detail"].split("verify -F")[1] in text.out and f"signed file {path}" in text.out, text.out


def test_a_clearsigned_message_a_build_verified_is_confirmed_by_root(env: GkeysEnv,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``gkeys-verify_verify_message`` (``verify -F FILE -o OUT``) leaves a message record; root reads the message
    once, through its descriptor, and verifies those bytes as a message (its text, not the whole file)."""
    ebuild = installed_ebuild(env)
    where = _make_spool(env)
    monkeypatch.setenv("DISTDIR", str(ebuild.distdir))
    ebuild.distfile("demo-1.0-SHA256SUMS", b"0123  demo-1.0.tar.gz\n")
    sums = ebuild.sign("alice", "demo-1.0-SHA256SUMS", clearsign=True)
    sums.write_bytes(b"leading text outside the signed part\n" + sums.read_bytes())
    run = ebuild.run(f'gkeys-verify_verify_message "{sums}" "{ebuild.temp / "sums"}"',
                     environ={"GKEYS_VERIFY_SPOOL": str(where), **ATOM})
    assert run.code == 0, run.err
    (record,) = [json.loads(p.read_text()) for p in where.iterdir()]
    assert (record["file"], record["signature"], record["message"]) == (str(sums), "inline", True)
    done = json.loads(env.run("--json", "journal", "ingest").out)
    assert (done["confirmed"], done["unconfirmed"], done["refused"]) == ([str(sums)], [], []), done
    (entry,) = _entries(env, "file-accepted")
    assert entry["data"]["confirmed"] is True and entry["data"]["signature"] == "inline"


def test_a_build_as_an_unprivileged_user_is_confirmed_by_root_or_journaled_unconfirmed(
        shared_env: GkeysEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """``verify -F`` as ``nobody`` (the portage user's stand-in) writes a record into the 3770 spool and nothing
    else; root confirms the file still there and journals the one gone as unconfirmed, both under the key."""
    env = shared_env
    where = _make_spool(env)
    files = env.root / "distfiles"
    files.mkdir(mode=0o755)
    monkeypatch.setenv("DISTDIR", str(files))
    kept, gone, changed = files / "foo-1.0.tar.gz", files / "bar-1.0.tar.gz", files / "baz-1.0.tar.gz"
    for data in (kept, gone, changed):
        data.write_bytes(f"release {data.name}\n".encode())
        (files / f"{data.name}.asc").write_bytes(env.keys.sign("releng", data))
    assert env.run("verify", "-F", str(kept), "-C", "gentoo").code == 0  # warm-up as root (journaled by root)
    before = len(_entries(env, "file-accepted"))
    log = env.root / "child.log"
    os.environ.update({**ATOM, spool.VARIABLE: str(where), journal.READ_ONLY_VARIABLE: "1"})
    try:
        for data in (kept, gone, changed):
            assert as_nobody(lambda d=data: gkeys_main(["-c", str(env.config), "verify", "-F", str(d), "-C",  # type: ignore[misc]
                                                        "gentoo"]), log) == 0, log.read_text()
    finally:
        for name in (*ATOM, spool.VARIABLE, journal.READ_ONLY_VARIABLE):
            os.environ.pop(name)
    nobody = pwd.getpwnam("nobody").pw_uid
    assert sorted(p.stat().st_uid for p in where.iterdir()) == [nobody, nobody, nobody]
    gone.unlink()
    changed.write_bytes(b"not what the build verified\n")
    result = env.run("--json", "journal", "ingest")
    assert result.code == 0, result.text
    done = json.loads(result.out)
    assert (done["confirmed"], sorted(done["unconfirmed"]), done["rejected"]) == (
        [str(kept)], [str(gone), str(changed)], []), done
    (confirmed,) = _entries(env, "file-accepted")[before:]
    assert confirmed["data"]["reported_by"]["user"] == "nobody"
    reported = {e["data"]["file"]: e["data"] for e in _entries(env, "file-reported")}
    assert [r["confirmed"] for r in reported.values()] == [False, False]
    assert (reported[str(gone)]["why"], reported[str(changed)]["why"]) == (
        "the file is gone", "the file changed since the build verified it")
    releng = env.keys.keys["releng"].fingerprint
    doc = json.loads(env.run("--json", "audit", "--key", releng).out)
    kinds = {(a["artifact"], a["subject"]) for a in doc["artifacts"]}
    assert {("signed file", str(kept)), ("signed file (reported by a build, unconfirmed)", str(gone))} <= kinds
    text = env.run("audit", "--key", releng).out
    assert f"signed file (reported by a build, unconfirmed) {gone}" in text
    assert "reported by a build as nobody for app-misc/demo-1.0::gentoo; NOT confirmed: the file is gone" in text
    rechecked = json.loads(env.run("--json", "audit", "--key", releng, "--recheck").out)["recheck"]
    assert {(r["subject"], r["status"]) for r in rechecked} == {(str(kept), "verifies"), (str(gone), "gone"),
                                                               (str(changed), "replaced")}


def test_forged_malformed_and_foreign_records_are_refused_removed_and_never_trusted(env: GkeysEnv,
                                                                                    tmp_path: Path) -> None:
    """Each entry that is not a record a build user wrote is named in a warning, journaled as refused, removed;
    no acceptance comes of it and the command goes on."""
    ebuild = installed_ebuild(env)
    where = _make_spool(env)
    path = ebuild.distfile("demo-1.0.tar.gz")
    ebuild.sign("alice", path.name)
    alice = env.keys.keys["alice"].fingerprint
    good = {"version": 1, "time": 1.0, "atom": "", "verdict": "accepted", "file": str(path), "signature":
            str(path) + ".asc", "message": False, "category": "gentoo-devs", "nick": "", "sha256": "0" * 64,
            "size": 1, "signers": [alice], "code": ""}
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(good))
    forged = {
        "1-1-0000000a.json": json.dumps({**good, "file": "relative/path"}),
        "1-1-0000000b.json": "{not json",
        "1-1-0000000c.json": json.dumps({**good, "extra": 1}),
        "1-1-0000000d.json": json.dumps(good) + " " * spool.MAX_RECORD,
        "1-1-0000000f.json": json.dumps({**good, "category": "../x"}),
        "not-a-record": "x",
    }
    for name, text in forged.items():
        (where / name).write_text(text)
    linked = tmp_path / "linked.json"  # one link of its own: only O_NOFOLLOW refuses the symlink to it
    linked.write_text(json.dumps(good))
    (where / "1-1-00000010.json").symlink_to(linked)
    (where / "1-1-00000011.json").write_text(json.dumps(good))
    os.chown(where / "1-1-00000011.json", 54321, 54321)  # a user outside the spool's group
    os.link(target, where / "1-1-00000012.json")  # a hard link to a file elsewhere
    os.mkfifo(where / "1-1-00000013.json")
    result = env.run("--json", "journal", "ingest")
    assert result.code == 0, result.text
    rejected = json.loads(result.out)["rejected"]
    assert len(rejected) == 10, rejected
    for name in [*forged, "1-1-00000010.json", "1-1-00000011.json", "1-1-00000012.json", "1-1-00000013.json"]:
        assert f"{where / name}: refused" in result.err, (name, result.err)
    assert not list(where.iterdir()) and target.exists()
    assert not _entries(env, "file-accepted", "file-reported") and len(_entries(env, "spool-refused")) == 10


def test_a_full_spool_takes_no_more_and_the_build_goes_on(shared_env: GkeysEnv, tmp_path: Path) -> None:
    """A spool holding MAX_RECORDS names takes no more records: one warning, the verification still succeeds."""
    env = shared_env
    where = _make_spool(env)
    for number in range(spool.MAX_RECORDS):
        (where / f"{number}-1-00000000.json").write_text("{}")
    files = env.root / "files"
    files.mkdir(mode=0o755)
    data = files / "foo-1.0.tar.gz"
    data.write_bytes(b"release\n")
    (files / "foo-1.0.tar.gz.asc").write_bytes(env.keys.sign("releng", data))
    os.environ.update({spool.VARIABLE: str(where), journal.READ_ONLY_VARIABLE: "1"})
    try:
        result = env.run("verify", "-F", str(data), "-C", "gentoo")
    finally:
        os.environ.pop(spool.VARIABLE)
        os.environ.pop(journal.READ_ONLY_VARIABLE)
    assert result.code == 0 and "is full" in result.err, result.text
    assert len(list(where.iterdir())) == spool.MAX_RECORDS


# -- root never acts on a path the build user can change (SECURITY.md row 394) ----------------------------------


def _claim(env: GkeysEnv, where: Path, number: int, file: Path | str, signature: Path | str, sha256: str) -> str:
    """A well-formed record owned by nobody (a member of the spool's group), naming ``file`` and ``signature``."""
    name = f"2-1-{number:08x}.json"
    (where / name).write_text(json.dumps({
        "version": 1, "time": 2.0, "atom": "app-misc/demo-1.0", "verdict": "accepted", "file": str(file),
        "signature": str(signature), "message": False, "category": "gentoo", "nick": "", "sha256": sha256,
        "size": 1, "signers": [env.keys.keys["releng"].fingerprint], "code": ""}))
    nobody = pwd.getpwnam("nobody")
    os.chown(where / name, nobody.pw_uid, nobody.pw_gid)
    return name


def _apart(env: GkeysEnv, distdir: Path, *argv: str,
           meanwhile: Callable[[int], None] | None = None) -> dict[str, Any]:
    """``gkeys --json ARGV`` (default ``journal ingest``) as root in a child process with Portage's DISTDIR,
    killed after 20 s: a root that blocks on a FIFO fails the test instead of hanging it (``meanwhile``: run in a
    thread with the child's pid)."""
    child = subprocess.Popen([sys.executable, "-m", "gkeys_portage.cli.main", "-c", str(env.config), "--json",
                              *(argv or ("journal", "ingest"))], env={**os.environ, "DISTDIR": str(distdir),
                                                                      "PYTHONPATH": str(PROJECT)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    helper = threading.Thread(target=meanwhile, args=(child.pid,), daemon=True) if meanwhile else None
    if helper:
        helper.start()
    try:
        out, err = child.communicate(timeout=20)
    finally:
        with contextlib.suppress(ProcessLookupError):  # with whatever it started (a gpg blocked on a FIFO)
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        if helper:
            helper.join()
    assert child.returncode in (0, 1) and "Traceback" not in err, err
    return json.loads(out)


def _why(env: GkeysEnv) -> dict[str, str]:
    return {e["data"]["file"]: e["data"]["why"] for e in _entries(env, "file-reported")}


def test_root_opens_a_claim_only_below_distdir_never_through_a_link_a_fifo_or_a_file_its_owner_cannot_read(
        shared_env: GkeysEnv) -> None:
    """Each claim names a path the build user chose: one outside DISTDIR (a good signature, old code confirmed
    it), one through a symlinked directory to a root-only file, a root-only file in DISTDIR (both an oracle: root
    hashed them on the build's behalf), a symlink to /dev/zero, a FIFO, a good file whose signature is a FIFO (old
    code blocked forever opening it).  Root confirms none, journals each as unconfirmed with why, never blocks."""
    env = shared_env
    where = _make_spool(env)
    distdir, outside, secret_dir = (env.root / name for name in ("distfiles", "elsewhere", "root-only"))
    for directory in (distdir, outside):
        directory.mkdir(mode=0o755)
    secret_dir.mkdir(mode=0o700)
    good = outside / "foo-1.0.tar.gz"
    good.write_bytes(b"release\n")
    (outside / "foo-1.0.tar.gz.asc").write_bytes(env.keys.sign("releng", good))
    secret = secret_dir / "secret"
    secret.write_bytes(b"root only\n")
    kept = distdir / "kept-1.0.tar.gz"
    kept.write_bytes(b"release\n")
    (distdir / "kept-1.0.tar.gz.asc").write_bytes(env.keys.sign("releng", kept))
    (distdir / "private").write_bytes(b"root only\n")
    (distdir / "private").chmod(0o600)
    (distdir / "link").symlink_to(secret_dir)
    (distdir / "zero").symlink_to("/dev/zero")
    os.mkfifo(distdir / "fifo")
    os.mkfifo(distdir / "fifo.asc")
    sha = {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in (good, secret, kept)}
    cases = {
        good: (good.with_name(good.name + ".asc"), sha[good], "not a file below Portage's DISTDIR"),
        distdir / "link" / "secret": (secret.with_name("secret.asc"), sha[secret],
                                      "link is not a directory below DISTDIR"),
        distdir / "private": (distdir / "private.asc", sha[secret], "nobody may not read it"),
        distdir / "zero": (distdir / "zero.asc", "0" * 64, "cannot be opened as a file"),
        distdir / "fifo": (distdir / "fifo.asc", "0" * 64, "not a regular file (a FIFO"),
        kept: (distdir / "fifo.asc", sha[kept], f"its signature {distdir / 'fifo.asc'}: it is not a regular file"),
        distdir / ".." / "elsewhere" / good.name: (good.with_name(good.name + ".asc"), sha[good],
                                                   "not a file below Portage's DISTDIR"),
    }
    for number, (file, (signature, digest, _)) in enumerate(cases.items()):
        _claim(env, where, number, file, signature, digest)
    done = _apart(env, distdir)
    assert (done["confirmed"], done["refused"], done["rejected"]) == ([], [], []), done
    why = _why(env)
    for file, (_, _, expected) in cases.items():
        assert expected in why[str(file)], (file, why[str(file)])
    assert not _entries(env, "file-accepted", "file-refused") and not list(where.iterdir())
    # audit --recheck opens the claims the same way: never the FIFO, the link or the file outside DISTDIR
    rechecked = _apart(env, distdir, "audit", "--key", env.keys.keys["releng"].fingerprint, "--recheck")["recheck"]
    assert {r["subject"]: r["status"] for r in rechecked} == {str(file): "not rechecked" for file in cases}, rechecked
    for result in rechecked:
        assert cases[Path(result["subject"])][2] in result["why"], result


def test_a_claimed_file_swapped_for_a_fifo_or_another_file_again_and_again_never_blocks_or_misleads_root(
        shared_env: GkeysEnv) -> None:
    """While root takes in claims on one distfile, the build user replaces it, as fast as it can, by a FIFO, the
    signed release and another file (between root's check and its open, old code opened the FIFO and blocked
    forever; between its hash and gpg's read, it verified another file than it hashed): root never hangs, and
    what it journals is about the one inode it opened: confirmed with the release's digest, or unconfirmed with
    why, never refused because another file came in between."""
    env = shared_env
    where = _make_spool(env)
    distdir = env.root / "distfiles"
    distdir.mkdir(mode=0o755)
    path = distdir / "swap-1.0.tar.gz"
    path.write_bytes(b"release\n")
    (distdir / "swap-1.0.tar.gz.asc").write_bytes(env.keys.sign("releng", path))
    sha = hashlib.sha256(b"release\n").hexdigest()
    for number in range(24):
        _claim(env, where, number, path, distdir / "swap-1.0.tar.gz.asc", sha)
    stop = threading.Event()

    def swap() -> None:
        scratch = distdir / ".next"
        while not stop.is_set():
            for content in (None, b"release\n", b"another file\n"):
                if content is None:
                    os.mkfifo(scratch)
                else:
                    scratch.write_bytes(content)
                os.replace(scratch, path)

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    try:
        done = _apart(env, distdir)
    finally:
        stop.set()
        swapper.join()
    assert (done["refused"], len(done["confirmed"]) + len(done["unconfirmed"])) == ([], 24), done
    assert not _entries(env, "file-refused")
    assert {e["data"]["sha256"] for e in _entries(env, "file-accepted")} <= {sha}
    reasons = {e["data"]["why"] for e in _entries(env, "file-reported")}
    assert reasons <= {"the file changed since the build verified it", "the file was written to while root verified it",
                       "it is not a regular file (a FIFO, a device or a socket)"}, reasons


def test_root_verifies_the_inode_it_hashed_even_when_the_name_is_replaced_meanwhile(shared_env: GkeysEnv) -> None:
    """The moment root has the claimed distfile open, the build user replaces the name by another file (old code
    hashed one file and had gpg read the name again: it verified the other file, and journaled a refusal of the
    release the build had accepted).  Root verifies what it hashed, through its descriptor: confirmed with the
    release's digest, or unconfirmed because the file it holds was unlinked meanwhile; never refused."""
    env = shared_env
    where = _make_spool(env)
    distdir = env.root / "distfiles"
    distdir.mkdir(mode=0o755)
    path = distdir / "big-1.0.tar.gz"
    release = b"release\n" * (2 << 20)  # 16 MiB: root holds it open a while
    path.write_bytes(release)
    (distdir / "big-1.0.tar.gz.asc").write_bytes(env.keys.sign("releng", path))
    sha = hashlib.sha256(release).hexdigest()
    _claim(env, where, 1, path, distdir / "big-1.0.tar.gz.asc", sha)
    swapped: list[bool] = []

    def replace_when_open(pid: int) -> None:
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd")):
                    (distdir / ".other").write_bytes(b"another file\n")
                    os.replace(distdir / ".other", path)
                    swapped.append(True)
                    return
            time.sleep(0.0005)

    done = _apart(env, distdir, meanwhile=replace_when_open)
    assert swapped and done["refused"] == [] and not _entries(env, "file-refused"), done
    accepted = [e["data"]["sha256"] for e in _entries(env, "file-accepted")]
    reported = [e["data"]["why"] for e in _entries(env, "file-reported")]
    assert accepted == [sha] or reported == ["the file was written to while root verified it"], (accepted, reported)
