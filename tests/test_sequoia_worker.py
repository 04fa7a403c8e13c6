"""The second opinion's worker process (issue 44): Sequoia checks verify-tree's batches beside gpg, fail closed.

A batch large enough (or any batch once the worker runs) is checked by one ``sequoia_child.py --serve`` process
per run (:mod:`gkeys_portage.openpgp.second.worker`).  Its verdicts are the in-process ones: a fooled engine still
never verifies; a worker that fails, stalls or answers anything but one well-formed answer per signature is a
refusal of the whole batch; and the worker never outlives gkeys.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_second_opinion import MARK, fooled, home  # noqa: F401 - the fooled engine's fixtures

from gkeys_portage.core.errors import EnginesDisagreeError
from gkeys_portage.core.types import Category, Nick
from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.second import worker
from gkeys_portage.openpgp.sequoia import Opinion
from gkeys_portage.openpgp.verdict import Pin, PinSet, decide

PROJECT = Path(__file__).resolve().parent.parent
COMMIT = b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor a\n\nmessage\n"


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[worker._Pool]:
    """Workers of this test's own, asked for every batch however small (never one left by another test)."""
    own = worker._Pool(2)
    monkeypatch.setattr(worker, "_WORKER", own)
    monkeypatch.setattr(worker, "MIN_BATCH", 0)
    yield own
    own.close()


@pytest.mark.parametrize("started", ["by-a-batch", "by-a-long-run"])
def test_a_fooled_engine_never_verifies_a_batch_checked_in_the_worker(
        keys: KeyFactory, tmp_path: Path, home: tuple[GnuPG, PinSet], fresh: worker._Pool,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, started: str) -> None:
    gpg, pins = home
    if started == "by-a-long-run":  # verify-tree announces its range: the worker starts at once, for any batch
        monkeypatch.setattr(worker, "MIN_BATCH", 10**6)
        worker.expect(worker.MIN_RUN)
        assert fresh.running()
    signature = keys.sign_bytes("alice", COMMIT, tmp_path)
    good, bad, other = gpg.verify_detached_many([(signature, COMMIT), (signature, COMMIT + MARK),
                                                 (signature, COMMIT + b"x")])
    assert fresh.running(), "the batch was not checked in the worker: the test proves nothing"
    listing = {k.fingerprint: k for k in gpg.list_keys()}
    assert decide(good, pins, listing).signer.pin.nick == "alice"
    assert any(sig.valid for sig in bad.signatures), "the engine was not fooled: the test proves nothing"
    with pytest.raises(EnginesDisagreeError, match="Sequoia refuses it"):
        decide(bad, pins, listing)
    assert other.second is not None and other.second.opinion is Opinion.REFUSED  # gpg refuses it too


#: A worker that loads keyrings as asked and then answers a batch with ANSWER (one line, or none).
FAKE = """import json, sys
for line in sys.stdin:
    request = json.loads(line)
    if "certs" in request:
        print(json.dumps({"loaded": request["keyring"]}), flush=True)
    elif "items" in request:
        count, ident = len(request["items"]), request["id"]
        GOOD = {"valid": [["PRIMARY", "SIGNING"]], "said": []}
        ANSWER
"""


@pytest.mark.parametrize("answer", [
    "print('verified', flush=True)",
    "sys.exit(3)",
    "raise RuntimeError('no pysequoia here')",
    "print(json.dumps({'id': ident, 'answers': [GOOD] * (count - 1)}), flush=True)",
    "print(json.dumps({'id': ident, 'answers': [GOOD] * count, 'x': 1}), flush=True)",
    "print(json.dumps({'id': ident, 'answers': [{'valid': [['PRIMARY']], 'said': []}] * count}), flush=True)",
    "print(json.dumps({'id': ident, 'answers': [GOOD] * count}))\n"
    "        print(json.dumps({'answers': []}), flush=True)",
    "print(json.dumps({'id': ident, 'answers': [GOOD] * count}) + '\\n' * 5, flush=True)",
    "print(json.dumps({'id': ident - 1, 'answers': [GOOD] * count}), flush=True)",
    "print(json.dumps({'id': ident, 'answers': [{'valid': [['PRIMARY', 'SIGNING']], 'said': ['a' * 10**7]}] * count}))",
], ids=["garbled", "died", "raised", "one-answer-short", "extra-field", "half-a-signer", "two-answers",
        "trailing-lines", "stale", "too-long"])
def test_a_worker_that_fails_or_garbles_is_a_refusal_of_the_whole_batch(
        keys: KeyFactory, tmp_path: Path, fresh: worker._Pool, monkeypatch: pytest.MonkeyPatch,
        answer: str) -> None:
    gpg = GnuPG(tmp_path / "home")
    gpg.import_keys(keys.public("alice"))
    alice = keys.keys["alice"]
    pins = PinSet.of([Pin(Category("gentoo-devs"), Nick("alice"), alice.fingerprint)])
    script = tmp_path / "worker.py"
    script.write_text(FAKE.replace("ANSWER", answer).replace("PRIMARY", alice.fingerprint)
                      .replace("SIGNING", alice.signing_subkey))
    monkeypatch.setattr(worker, "CHILD", script)
    signature = keys.sign_bytes("alice", COMMIT, tmp_path)
    reports = gpg.verify_detached_many([(signature, COMMIT), (signature, COMMIT)])
    listing = {k.fingerprint: k for k in gpg.list_keys()}
    for report in reports:
        assert report.second is not None and report.second.opinion is Opinion.REFUSED
        assert "worker process" in report.second.said
    if answer.startswith(("sys.exit", "raise")):  # the refusal says how it ended, and why
        assert re.search(r"exit status (3|1: RuntimeError: no pysequoia here)\)", reports[0].second.said)
        with pytest.raises(EnginesDisagreeError, match="Sequoia refuses it"):
            decide(report, pins, listing)
    assert not any(one.running() for one in fresh.idle)  # a worker that failed is ended; the next batch starts it again


def test_a_worker_answering_well_is_heard(keys: KeyFactory, tmp_path: Path, fresh: worker._Pool,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The control of the test above: the same fake worker, answering one well-formed answer per signature."""
    gpg = GnuPG(tmp_path / "home")
    gpg.import_keys(keys.public("alice"))
    alice = keys.keys["alice"]
    script = tmp_path / "worker.py"
    script.write_text(FAKE.replace("ANSWER", "print(json.dumps({'id': ident, 'answers': [GOOD] * count}), flush=True)")
                      .replace("PRIMARY", alice.fingerprint).replace("SIGNING", alice.signing_subkey))
    monkeypatch.setattr(worker, "CHILD", script)
    report, = gpg.verify_detached_many([(keys.sign_bytes("alice", COMMIT, tmp_path), COMMIT)])
    assert report.second is not None and report.second.accepts(alice.fingerprint, alice.signing_subkey)


def test_a_stalled_worker_is_a_refusal_within_the_timeout(
        keys: KeyFactory, tmp_path: Path, fresh: worker._Pool, monkeypatch: pytest.MonkeyPatch) -> None:
    gpg = GnuPG(tmp_path / "home")
    gpg.import_keys(keys.public("alice"))
    script = tmp_path / "worker.py"
    script.write_text(FAKE.replace("ANSWER", "__import__('time').sleep(60)"))
    monkeypatch.setattr(worker, "CHILD", script)
    monkeypatch.setattr(worker, "TIMEOUT", 1.0)
    started = time.monotonic()
    report, = gpg.verify_detached_many([(keys.sign_bytes("alice", COMMIT, tmp_path), COMMIT)])
    assert time.monotonic() - started < 30
    assert report.second is not None and report.second.opinion is Opinion.REFUSED
    assert "no answer within 1 s" in report.second.said


#: gkeys checking one batch in the worker, then waiting to be killed (prints the worker's process id).
HOLDER = """import sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.second import worker
worker.MIN_BATCH = 0
gpg = GnuPG(Path(sys.argv[2]))
gpg.verify_detached_many([(Path(sys.argv[3]).read_bytes(), Path(sys.argv[4]).read_bytes())])
print(worker._WORKER.idle[0].process.pid, flush=True)
time.sleep(120)
"""


def test_the_worker_ends_when_gkeys_is_killed(keys: KeyFactory, tmp_path: Path) -> None:
    gpg = GnuPG(tmp_path / "home")
    gpg.import_keys(keys.public("alice"))
    (tmp_path / "sig").write_bytes(keys.sign_bytes("alice", COMMIT, tmp_path))
    (tmp_path / "data").write_bytes(COMMIT)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(PROJECT), str(tmp_path / "home"),
                               str(tmp_path / "sig"), str(tmp_path / "data")], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None
        pid = int(holder.stdout.readline())
        assert _alive(pid)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "Sequoia's worker outlived the gkeys that started it"


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and os.path.exists(f"/proc/{pid}")


def test_the_worker_of_a_run_ends_with_it(fresh: worker._Pool) -> None:
    """One worker per run: a sync inside emerge leaves no idle Sequoia process behind for the rest of emerge."""
    with worker.run(worker.MIN_RUN):
        assert fresh.running()
        started = fresh.idle[0]
        with started.lock:  # its start, in the background, is done
            process = started.process
    assert not fresh.running()
    assert process is not None and process.poll() is not None
    with worker.run(worker.MIN_RUN - 1):  # a short range: batches stay in-process
        assert not fresh.running()
