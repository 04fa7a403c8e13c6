"""Long waits speak (issue 45, item 2): a download that waits says so ("waiting for HOST, attempt 2 of 4") on
stderr, in text and in ``--json`` mode alike, instead of minutes of silence.  A real socket on 127.0.0.1 that
accepts connections and never answers; the ``env`` fixture's config has ``timeout = 2`` and ``retries = 1``, so
each attempt is cut after 2 s and the notice comes after 1 s (half the timeout)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import GkeysEnv


@pytest.fixture
def silent() -> Iterator[str]:
    """The URL of a server that accepts every connection and never sends a byte."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for connection in held:
        connection.close()
    listener.close()


@pytest.mark.slow
def test_a_mirror_that_never_answers_is_waited_for_out_loud(env: GkeysEnv, silent: str) -> None:
    host = silent.removeprefix("http://")
    argv = ["fetch-media", "--latest", "stage3-amd64-openrc", "--mirror", silent, "-d", str(env.root / "dest")]
    (env.root / "dest").mkdir()
    text = env.run(*argv)
    assert text.code == 3, text.text
    assert f" * waiting for {host}, attempt 1 of 2\n" in text.err, text.err
    assert f" * waiting for {host}, attempt 2 of 2 (attempt 1: timed out" in text.err, text.err
    as_json = env.run("--json", *argv)
    assert as_json.code == 3 and json.loads(as_json.out)["reason"] == "network", as_json.out  # stdout: one document
    assert f" * waiting for {host}, attempt 1 of 2\n" in as_json.err, as_json.err


def test_progress_where_bytes_flow_is_on_stderr_under_json_too(env: GkeysEnv, tmp_path: Path) -> None:
    """A pass over a file (MiB) says its progress on stderr in --json mode as in text; stdout is one document."""
    from media_helpers import install_release_key, make_media

    install_release_key(env)
    media = make_media(env.keys, tmp_path / "m", data=b"\0" * (8 << 20))
    for argv in (["verify-media", str(media.path)], ["--json", "verify-media", str(media.path)]):
        result = env.run(*argv)
        assert result.code == 0, result.text
        assert f" * verifying {media.name}: 8/8 MiB in " in result.err, result.err
    assert json.loads(result.out)["verified"] is True
