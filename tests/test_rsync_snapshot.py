"""``gkeys verify-snapshot``: webrsync-shaped snapshots served over HTTP on 127.0.0.1, signed by throwaway keys."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rsync_helpers import CATEGORY, make_snapshot, pin_repository_keys


@pytest.fixture
def pinned(env: Any) -> Any:
    return pin_repository_keys(env)


def _publish(env: Any, path: Path) -> str:
    env.server.publish(f"snapshots/{path.name}", path.read_bytes())
    sig = path.with_name(path.name + ".gpgsig")
    if sig.exists():
        env.server.publish(f"snapshots/{sig.name}", sig.read_bytes())
    return f"{env.server.url}/snapshots/{path.name}"


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)


def test_good_snapshot_over_http_then_an_older_one_is_refused(pinned: Any, tmp_path: Path) -> None:
    made, dest = tmp_path / "made", tmp_path / "distfiles"
    made.mkdir()
    today = _now()
    url = _publish(pinned, make_snapshot(made, pinned.keys, "infra", today))
    result = pinned.run("--json", "verify-snapshot", url, "-C", CATEGORY, "-d", str(dest))
    assert result.code == 0, result.text
    data = json.loads(result.out)
    assert data["signer"]["nick"] == "snapshot" and data["timestamp"] == today.isoformat()
    assert (dest / f"gentoo-{today:%Y%m%d}.tar.xz").is_file()

    older = today - timedelta(days=1)
    old = make_snapshot(made, pinned.keys, "infra", older)
    url = _publish(pinned, old)
    result = pinned.run("verify-snapshot", url, "-C", CATEGORY, "-d", str(dest))
    assert result.code == 1, result.text
    assert f"{older:%Y-%m-%d %H:%M:%S}" in result.text and f"{today:%Y-%m-%d %H:%M:%S}" in result.text, result.text
    assert "older than" in result.text and url in result.text
    assert not (dest / old.name).exists() and not (dest / (old.name + ".gpgsig")).exists(), "a refused download stays"


@pytest.mark.parametrize("case", ["developer-key", "never-pinned", "unsigned", "renamed", "stale", "tampered"])
def test_refused_snapshots(pinned: Any, tmp_path: Path, case: str) -> None:
    made = tmp_path / "made"
    made.mkdir()
    now = _now()
    signer = {"developer-key": "alice", "never-pinned": "mallory", "unsigned": None}.get(case, "infra")
    when = now - timedelta(days=3) if case in ("stale", "renamed") else now
    path = make_snapshot(made, pinned.keys, signer, when, name_date=now if case == "renamed" else None)
    if case == "tampered":
        path.write_bytes(path.read_bytes()[:-1] + bytes([path.read_bytes()[-1] ^ 1]))
    result = pinned.run("verify-snapshot", str(path), "-C", CATEGORY)
    assert result.code == 1, result.text
    expected = {"developer-key": "need repository keys: infra-test/snapshot", "never-pinned": "gentoo-",
                "unsigned": "no signature", "renamed": "renamed", "stale": "--max-age",
                "tampered": "BAD signature"}[case]
    assert expected in result.text, result.text
    assert "Traceback" not in result.text
    status = pinned.run("--json", "verify-snapshot", str(path), "-C", CATEGORY, "--no-record")
    assert status.code == 1


def test_max_age_override_and_date_bound(pinned: Any, tmp_path: Path) -> None:
    made = tmp_path / "made"
    made.mkdir()
    path = make_snapshot(made, pinned.keys, "infra", _now() - timedelta(days=3))
    assert pinned.run("verify-snapshot", str(path), "-C", CATEGORY, "--max-age", "100").code == 0
    bad = made / "gentoo-latest.tar.xz"
    bad.write_bytes(path.read_bytes())
    result = pinned.run("verify-snapshot", str(bad), "-C", CATEGORY)
    assert result.code == 2 and "dated" in result.text, result.text


def _day_after(day: datetime) -> datetime:
    """00:45 UTC on the day after ``day``: when emerge-webrsync says day D's snapshot is made."""
    return datetime.combine(day.date() + timedelta(days=1), datetime.min.time(), UTC) + timedelta(minutes=45)


def test_a_snapshot_made_at_0045_the_next_day_is_verified_as_emerge_webrsync_does(pinned: Any,
                                                                                   tmp_path: Path) -> None:
    """Day D's snapshot has a timestamp.x of D+1 00:45 UTC (emerge-webrsync's is_snapshot_fresh accepts D..D+2);
    a time before D or after D+2 00:00 is still a renamed snapshot."""
    made = tmp_path / "made"
    made.mkdir()
    day = _now() - timedelta(days=2)
    path = make_snapshot(made, pinned.keys, "infra", _day_after(day), name_date=day)
    assert path.name == f"gentoo-{day:%Y%m%d}.tar.xz"
    result = pinned.run("verify-snapshot", str(path), "-C", CATEGORY, "--max-age", "100", "--no-record")
    assert result.code == 0, result.text
    late = make_snapshot(made, pinned.keys, "infra", _day_after(day) + timedelta(days=1), name_date=day)
    result = pinned.run("verify-snapshot", str(late), "-C", CATEGORY, "--max-age", "100", "--no-record")
    assert result.code == 1 and "renamed" in result.text and "emerge-webrsync" in result.text, result.text


@pytest.mark.parametrize("verdict", ["refused", "verified"])
def test_a_symlink_or_a_file_planted_in_dir_is_never_written_through(pinned: Any, tmp_path: Path,
                                                                      verdict: str) -> None:
    """-d DIR holds the snapshot's name as a symlink to a victim file (and its .gpgsig as a partial file):
    a refused snapshot leaves both as they were, a verified one replaces the entries, never their targets."""
    made, dest = tmp_path / "made", tmp_path / "distfiles"
    made.mkdir()
    dest.mkdir()
    signer = "mallory" if verdict == "refused" else "infra"
    snapshot = make_snapshot(made, pinned.keys, signer, _now())
    url = _publish(pinned, snapshot)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    (dest / snapshot.name).symlink_to(victim)
    partial = dest / (snapshot.name + ".gpgsig")
    partial.write_bytes(b"earlier bytes\n")
    result = pinned.run("verify-snapshot", url, "-C", CATEGORY, "-d", str(dest), "--no-record")
    assert victim.read_bytes() == b"precious\n", "the mirror's bytes went through the symlink"
    if verdict == "refused":
        assert result.code == 1, result.text
        assert (dest / snapshot.name).is_symlink() and partial.read_bytes() == b"earlier bytes\n"
    else:
        assert result.code == 0, result.text
        assert not (dest / snapshot.name).is_symlink()
        assert (dest / snapshot.name).read_bytes() == snapshot.read_bytes()
        assert partial.read_bytes() == (made / partial.name).read_bytes(), "appended to, not replaced"


#: The "writer of the snapshot's directory": an audit hook that, once armed with a path, swaps another file
#: in under that name just before the path is opened a second time by this process (a hook cannot be
#: removed, so it is installed by the first test that needs it, once, and disarmed after each use).
_SWAP: dict[str, str] = {}
_HOOKED: list[bool] = []


def _swap_before_second_open(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or not _SWAP or not args or str(args[0]) != _SWAP["path"]:
        return
    if _SWAP.setdefault("opened", "") == "":
        _SWAP["opened"] = "once"
        return
    path, evil = _SWAP.pop("path"), _SWAP.pop("evil")
    _SWAP.clear()
    os.replace(evil, path)


def test_the_signature_date_and_digest_are_taken_from_the_same_bytes(pinned: Any, tmp_path: Path) -> None:
    """A file swapped under FILE's name between two reads changes nothing: FILE is read once (a private copy),
    so the reported digest is that of the signed bytes."""
    made = tmp_path / "made"
    made.mkdir()
    good = make_snapshot(made, pinned.keys, "infra", _now())
    signed = hashlib.sha256(good.read_bytes()).hexdigest()
    other = tmp_path / "other"
    other.mkdir()
    evil = make_snapshot(other, pinned.keys, None, _now() + timedelta(minutes=20))
    if not _HOOKED:
        sys.addaudithook(_swap_before_second_open)
        _HOOKED.append(True)
    _SWAP.update(path=str(good), evil=str(evil))
    try:
        result = pinned.run("--json", "verify-snapshot", str(good), "-C", CATEGORY, "--no-record")
    finally:
        _SWAP.clear()
    assert result.code == 0, result.text
    assert json.loads(result.out)["sha256"] == signed, "verified one file, reported another's digest"


def test_a_dir_other_users_can_write_is_refused_before_the_download(pinned: Any, tmp_path: Path) -> None:
    """-d DIR world-writable without the sticky bit: another user could swap the verified files after the check,
    so nothing is downloaded into it (fetch-media's rule, row 46)."""
    made, dest = tmp_path / "made", tmp_path / "shared"
    made.mkdir()
    dest.mkdir()
    dest.chmod(0o777)
    url = _publish(pinned, make_snapshot(made, pinned.keys, "infra", _now()))
    result = pinned.run("verify-snapshot", url, "-C", CATEGORY, "-d", str(dest), "--no-record")
    assert result.code == 2 and "world-writable" in result.text and "-d DIR" in result.text, result.text
    assert not any(dest.iterdir())
    asked = [line for line in pinned.server.log if "/snapshots/" in line]
    assert not asked, f"the mirror was asked first: {asked}"  # refused before the download, not after it
