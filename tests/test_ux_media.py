"""Issue 15 item 5: ``fetch-media`` as a user sees it, on a terminal (python's pty module) and in a log."""

from __future__ import annotations

import hashlib
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROJECT
from media_helpers import AUTOBUILDS, STAGE3, STAMP, install_release_key, make_media, publish_latest

from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.ui.output import final_line, progress_line

FLAVOUR = "stage3-amd64-openrc"
DATA = hashlib.sha512(b"big").digest() * (8 * 16384)  # 8 MiB: more than the five units a bar needs


@pytest.fixture
def mirror(env, keys: KeyFactory, tmp_path: Path):  # type: ignore[no-untyped-def]
    install_release_key(env)
    media = make_media(keys, tmp_path / "src", data=DATA)
    media.publish(env.server)
    publish_latest(keys, env.server, tmp_path, FLAVOUR, f"{STAMP}/{STAGE3} {len(DATA)}")
    return env


def _argv(env, dest: Path) -> list[str]:  # type: ignore[no-untyped-def]
    return [sys.executable, "-m", "gkeys_portage.cli.main", "-c", str(env.config), "fetch-media", "--latest",
            FLAVOUR, "--mirror", env.server.url, "-d", str(dest)]


def _environ() -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("NOCOLOR", "NO_COLOR")}
    return {**environ, "PYTHONPATH": str(PROJECT), "TERM": "xterm"}


def _on_pty(argv: list[str]) -> str:
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal, env=_environ())
        os.close(terminal)
        chunks = []
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=300) == 0, b"".join(chunks).decode(errors="replace")
    finally:
        os.close(controller)
    return b"".join(chunks).decode(errors="replace")


def test_on_a_terminal_a_bar_after_the_choice_then_already_verified(mirror, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    dest = tmp_path / "dest"
    shown = _on_pty(_argv(mirror, dest))
    chosen = shown.index("newest entry")
    bar = shown.index(f"\r * downloading {FLAVOUR}")
    assert chosen < bar, shown  # what was chosen, and its signature verdict, before the download
    assert shown.index(f"latest-{FLAVOUR}.txt: good signature") < bar
    assert "100%  8/8 MiB" in shown and "MiB/s" in shown and f"\r * verifying {FLAVOUR}" in shown
    assert shown.count("good signature by") == 2  # the latest file once, the three siblings once
    assert (dest / STAGE3).read_bytes() == DATA

    mirror.server.log.clear()
    again = _on_pty(_argv(mirror, dest))
    assert f"{STAGE3}: already verified in {dest}; nothing downloaded" in again
    assert f"/{AUTOBUILDS}/{STAMP}/{STAGE3}" not in mirror.server.log  # not downloaded again
    assert f"downloading {FLAVOUR}" not in again and f"\r * verifying {FLAVOUR}" in again


def test_in_a_log_one_final_line_and_no_carriage_returns(mirror, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = subprocess.run(_argv(mirror, tmp_path / "dest"), capture_output=True, text=True, env=_environ(),
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stdout + result.stderr and "\x1b[" not in result.stdout + result.stderr
    finals = [line for line in result.stderr.splitlines() if line.startswith(f" * downloading {FLAVOUR}: ")]
    assert len(finals) == 1 and finals[0].startswith(f" * downloading {FLAVOUR}: 8/8 MiB in "), result.stderr


def test_progress_line_shapes() -> None:
    line = progress_line("downloading x", 45, 100, 9.0, unit="MiB", width=80)
    assert len(line) <= 80 and " 45%  45/100 MiB  5.0 MiB/s  ETA 0:11" in line and "[" in line
    assert progress_line("x", 100, 100, 4.0, unit="MiB").endswith("in 0:04")
    assert final_line("downloading x", 270, 22.0, unit="MiB") == " * downloading x: 270/270 MiB in 0:22 (12.3 MiB/s)"
