"""Fault injection on the state paths: a full disk and SIGKILL in the middle of update-seed.

After every fault: a clear error (or a dead process), the previous verified state intact and
working, and the next normal run succeeds.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PROJECT, GkeysEnv
from kill_helpers import kill_group_during


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs (root only; skipped where mounting is not allowed)."""
    mountpoint = tmp_path / "tiny"
    mountpoint.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mountpoint)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here; the simulated ENOSPC test covers this path")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def _fill(directory: Path) -> Path:
    filler = directory / "filler"
    with open(filler, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def _doc(env: GkeysEnv, nick: str) -> Path:
    doc = env.root / f"doc-{nick}"
    doc.write_bytes(b"doc")
    (env.root / f"doc-{nick}.asc").write_bytes(env.keys.sign(nick, doc))
    return doc


def test_full_disk_keeps_the_previous_state(env: GkeysEnv, tiny_disk: Path) -> None:
    env.state = tiny_disk / "state"
    env.write_config()
    env.config.write_text(env.config.read_text().replace(f"gkeysdir = {env.root / 'state'}",
                                                         f"gkeysdir = {env.state}"))
    env.install_devs("alice")
    before = env.snapshot()
    env.publish_seeds("gentoo-devs", ("alice", "bob", "carol"))
    for nick in ("bob", "carol"):
        env.server.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick)
    filler = _fill(tiny_disk)
    result = env.run("update-seed", "-C", "gentoo-devs")
    assert result.code != 0
    assert "Traceback" not in result.text and len(result.text.strip().splitlines()) == 1
    assert env.snapshot() == before
    assert env.run("verify", "-F", str(_doc(env, "alice")), "-C", "gentoo-devs").code == 0
    filler.unlink()
    fixed = env.run("update-seed", "-C", "gentoo-devs")
    assert fixed.code == 0, fixed.text
    assert env.run("verify", "-F", str(_doc(env, "carol")), "-C", "gentoo-devs").code == 0


def test_simulated_enospc_at_the_write_layer(env: GkeysEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    env.install_devs("alice")
    before = env.snapshot()
    env.publish_seeds("gentoo-devs", ("alice", "bob"))
    env.server.hkp[env.keys.keys["bob"].fingerprint] = env.keys.public("bob")

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("gkeys_portage.core.state.os.fsync", no_space)
    result = env.run("update-seed", "-C", "gentoo-devs")
    assert result.code == 2 and "No space left on device" in result.text
    assert env.snapshot() == before
    assert not list((env.state / "seeds").glob(".gkeys-tmp-*"))  # no temp file left behind
    monkeypatch.undo()
    assert env.run("update-seed", "-C", "gentoo-devs").code == 0


@pytest.mark.parametrize("delay", [0.05, 0.3, 0.6, 0.9])
def test_sigkill_during_update_seed(env: GkeysEnv, delay: float) -> None:
    env.install_devs("alice")
    env.publish_seeds("gentoo-devs", ("alice", "bob", "carol"))
    for nick in ("bob", "carol"):
        env.server.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick)
    env.server.latency = 0.5
    requests = len(env.server.log)
    process = subprocess.Popen([sys.executable, "-m", "gkeys_portage.cli.main", "-c", str(env.config),
                                "update-seed", "-C", "gentoo-devs"], cwd=PROJECT, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_group_during(process, delay, lambda: len(env.server.log) > requests)  # from its first request
    env.server.latency = 0
    # Whatever point it died at, the seeds parse, the keyring works, and a normal run completes.
    assert env.run("list-seed", "-C", "gentoo-devs").code == 0
    assert env.run("verify", "-F", str(_doc(env, "alice")), "-C", "gentoo-devs").code == 0
    fixed = env.run("update-seed", "-C", "gentoo-devs")
    assert fixed.code == 0, fixed.text
    assert env.run("verify", "-F", str(_doc(env, "carol")), "-C", "gentoo-devs").code == 0


def test_a_killed_writes_temp_file_goes_with_the_next_write_beside_it(tmp_path: Path) -> None:
    """A run killed between an atomic write's temp file and its rename left ``.NAME.XXXX.tmp`` for a day (the kill
    campaign found one in keyrings/); the temp file now names its owner and the next write in that directory by a
    later process removes it, never a live run's temp file nor a file of another name."""
    from gkeys_portage.core.state import TEMP_PREFIX

    dead = tmp_path / f"{TEMP_PREFIX}gentoo-devs.asc-999999999-1-gkdeadbeef"
    dead.write_bytes(b"half an export")
    alive = tmp_path / f"{TEMP_PREFIX}gentoo-devs.asc-{os.getpid()}-x-gkalive"
    alive.write_bytes(b"a live run's export")
    other = tmp_path / ".gentoo-devs.asc.lock"
    other.write_bytes(b"")
    code = ("import sys; from pathlib import Path; from gkeys_portage.core.state import atomic_write; "
            "atomic_write(Path(sys.argv[1]), b'new')")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "seeds.json")], cwd=PROJECT, check=True, timeout=60)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, other.name, "seeds.json"])
