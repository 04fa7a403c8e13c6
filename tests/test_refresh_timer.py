"""The daily key refresh off the sync path: systemd ``gkeys-refresh.service`` + ``.timer`` and a cron.daily
script, listed in installfiles.py (so the wheel, the ebuild and the sdist carry them), checked by systemd's
own parser and run for real against the loopback keyserver."""

from __future__ import annotations

import configparser
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gkeys_portage import installfiles

PROJECT = Path(__file__).resolve().parent.parent
SERVICE, TIMER = (PROJECT / unit for unit in installfiles.REFRESH_UNITS)
CRON = PROJECT / installfiles.REFRESH_CRON
GKEYS = Path(sys.executable).with_name("gkeys")


def _unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


def test_units_and_cron_script_are_installed_files() -> None:
    targets = {item.source: (item.target, item.group, item.executable) for item in installfiles.DATA_FILES}
    for unit in installfiles.REFRESH_UNITS:
        assert targets[unit] == ("lib/systemd/system", "systemd", False)  # systemd_dounit, ${EPREFIX} in paths
    assert targets[installfiles.REFRESH_CRON] == ("etc/cron.daily", "etc", True)
    assert os.access(CRON, os.X_OK), "the ebuild installs executable sources with doexe"
    assert "[[ -x ${src} ]]" in (PROJECT / "packaging/gentoo/app-crypt/gkeys-portage/gkeys-portage-9999.ebuild"
                                 ).read_text()


def test_timer_is_daily_randomized_and_catches_up() -> None:
    timer, service = _unit(TIMER), _unit(SERVICE)
    assert timer["Timer"]["OnCalendar"] == "daily" and timer["Timer"]["Persistent"] == "true"
    assert timer["Timer"]["RandomizedDelaySec"].rstrip("h").isdigit() and timer["Timer"]["RandomizedDelaySec"] != "0"
    assert timer["Install"]["WantedBy"] == "timers.target"
    assert service["Service"]["Type"] == "oneshot"
    assert shlex.split(service["Service"]["ExecStart"])[1:] == ["-q", "refresh-key"]


def test_the_service_may_rewrite_the_webrsync_keyrings() -> None:
    """refresh-key rewrites the keyrings setup-portage wrote for emerge-webrsync; ProtectSystem=full makes /etc
    read-only, so the unit must give that directory back, or the daily refresh could never bring them up to date."""
    from gkeys_portage.portage.setup import WEBRSYNC_KEYRINGS

    service = _unit(SERVICE)["Service"]
    assert service["ProtectSystem"] in ("full", "strict")
    writable = [path.lstrip("-") for path in service.get("ReadWritePaths", "").split()]
    assert "/" + WEBRSYNC_KEYRINGS.as_posix() in writable, writable


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_accepts_the_units(tmp_path: Path) -> None:
    for unit in (SERVICE, TIMER):
        text = unit.read_text().replace("/usr/bin/gkeys", str(GKEYS))  # verify checks the program exists
        (tmp_path / unit.name).write_text(text)
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / TIMER.name),
                             str(tmp_path / SERVICE.name)], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


def _refreshed(env: Any) -> dict[str, float]:
    return json.loads((env.state / "state" / "refresh.json").read_text())


def _pinned(env: Any) -> Any:
    env.pin_key("timer-test", "alice", "alice")
    env.server.hkp[env.keys.keys["alice"].fingerprint] = env.keys.public("alice")
    return env


def test_the_service_command_refreshes_every_category(env: Any) -> None:
    _pinned(env)
    command = shlex.split(_unit(SERVICE)["Service"]["ExecStart"])
    result = subprocess.run([str(GKEYS), *command[1:]], env={**os.environ, "GKEYS_CONFIG": str(env.config)},
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "timer-test" in _refreshed(env)


def test_the_cron_script_refreshes_every_category(env: Any) -> None:
    _pinned(env)
    environ = {**os.environ, "GKEYS_CONFIG": str(env.config), "GKEYS_REFRESH_DELAY": "0",
               "PATH": f"{GKEYS.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run([str(CRON)], env=environ, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "timer-test" in _refreshed(env)
