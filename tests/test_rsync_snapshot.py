"""``gkeys verify-snapshot``: webrsync-shaped snapshots served over HTTP on 127.0.0.1, signed by throwaway keys."""

from __future__ import annotations

import json
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
