"""Many detached signatures checked from memory by a few ``gpg --verify --multifile`` runs.

The tree verifier's fast path (:meth:`GnuPG.verify_detached_many`): each item gets its own verdict in
order, whatever the split into gpg runs; what the strict parser refuses never reaches gpg; gpg's
status output stays capped although it now goes to a file; nothing is left in the scratch directory.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.openpgp import multifile as gpg_multifile
from gkeys_portage.openpgp import process as gpg_module
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.status import SigOutcome, StatusReport


def _outcomes(reports: list[StatusReport]) -> list[str]:
    """``good``/``bad``/``refused`` per report (refused: no signature reached a verdict)."""
    names = []
    for report in reports:
        if not report.signatures:
            assert report.failures, "a report without signatures must say why"
            names.append("refused")
        else:
            names.append("good" if all(s.outcome is SigOutcome.GOOD for s in report.signatures) else "bad")
    return names


@pytest.fixture
def verifier(tmp_path: Path, keys: KeyFactory) -> GnuPG:
    gpg = GnuPG(tmp_path / "home")
    gpg.import_keys(keys.public("alice", "bob"))
    return gpg


def _signed(keys: KeyFactory, tmp_path: Path, nick: str, data: bytes) -> bytes:
    path = tmp_path / f"data-{nick}-{len(data)}"
    path.write_bytes(data)
    return keys.sign(nick, path)


def _items(keys: KeyFactory, tmp_path: Path) -> tuple[list[tuple[bytes, bytes]], list[str]]:
    one, two = b"tree 1\n\nfirst commit\n", b"tree 2\n\nsecond commit, longer\n"
    by_alice, by_bob = _signed(keys, tmp_path, "alice", one), _signed(keys, tmp_path, "bob", two)
    message = tmp_path / "mail"
    message.write_bytes(b"any text alice ever signed\n")
    elsewhere = keys.sign("alice", message)  # a good signature, but over other bytes
    items = [(by_alice, one), (by_bob, two), (by_alice, two), (b"not a signature", one), (elsewhere, one),
             (by_bob, two)]
    return items, ["good", "good", "bad", "refused", "bad", "good"]


@pytest.mark.parametrize(("jobs", "parts"), [(1, 1), (2, 0), (2, 3), (4, 6)])
def test_each_item_gets_its_own_verdict_in_order_however_the_runs_are_split(
        verifier: GnuPG, keys: KeyFactory, tmp_path: Path, jobs: int, parts: int) -> None:
    items, expected = _items(keys, tmp_path)
    assert _outcomes(verifier.verify_detached_many(items, jobs=jobs, parts=parts)) == expected


def test_the_files_api_reads_each_file_once_and_checks_those_bytes(
        verifier: GnuPG, keys: KeyFactory, tmp_path: Path) -> None:
    items, expected = _items(keys, tmp_path)
    pairs = []
    for index, (signature, data) in enumerate(items):
        (tmp_path / f"{index}.asc").write_bytes(signature)
        (tmp_path / str(index)).write_bytes(data)
        pairs.append((tmp_path / f"{index}.asc", tmp_path / str(index)))
    (tmp_path / "1").unlink()  # unreadable data: that item alone is refused
    reports = verifier.verify_many_multifile(pairs, jobs=2)
    assert _outcomes(reports) == [expected[0], "refused", *expected[2:]]


def test_status_output_over_the_cap_is_refused_never_good(
        verifier: GnuPG, keys: KeyFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    items, _ = _items(keys, tmp_path)
    monkeypatch.setattr(gpg_multifile, "MULTIFILE_OUTPUT_PER_FILE", 16)
    reports = verifier.verify_detached_many(items, jobs=2)
    assert _outcomes(reports) == ["refused"] * len(items)
    assert any("more output" in failure for report in reports for failure in report.failures)


def test_nothing_is_left_in_the_scratch_directory(verifier: GnuPG, keys: KeyFactory, tmp_path: Path) -> None:
    items, _ = _items(keys, tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    verifier.verify_detached_many(items, jobs=2, scratch=str(scratch))
    assert list(scratch.iterdir()) == []
    assert verifier.verify_detached_many([]) == []


def _left_by_killed_runs(parent: Path, prefix: str) -> tuple[Path, Path, Path]:
    """Under ``parent``: a ``prefix`` directory two days old (a killed run's), a fresh one (a running one's) and
    an old directory of another name; returns them in that order."""
    day_ago = time.time() - 25 * 3600
    old, fresh, other = parent / f"{prefix}killed", parent / f"{prefix}running", parent / "someone-else"
    (old / "home").mkdir(parents=True)
    (old / "home" / "0").write_bytes(b"payload")
    fresh.mkdir()
    other.mkdir()
    for path in (old, other):
        os.utime(path, (day_ago, day_ago))
    return old, fresh, other


def test_scratch_of_killed_runs_is_removed_after_a_day(tmp_path: Path) -> None:
    """A SIGKILLed verification leaves its private directory (in /dev/shm: memory until reboot); the next
    run removes this user's directories older than a day, and nothing else."""
    from gkeys_portage.openpgp.multifile import SCRATCH_PREFIX, remove_stale_scratch

    old, fresh, other = _left_by_killed_runs(tmp_path, SCRATCH_PREFIX)
    assert remove_stale_scratch(str(tmp_path)) == 1
    assert not old.exists() and fresh.is_dir() and other.is_dir()


def test_gpg_killed_by_a_signal_is_not_verified() -> None:
    """A gpg killed from outside (the OOM killer) may have reported a good signature and stopped before the
    bad one after it: its report must not count, whatever it printed so far."""
    from gkeys_portage.openpgp.process import GpgResult
    from gkeys_portage.openpgp.signatures import signature_verdict
    from gkeys_portage.openpgp.status import parse_status

    fpr = "A" * 40
    status = parse_status([("NEWSIG", ""), ("GOODSIG", f"{fpr[-16:]} alice"),
                           ("VALIDSIG", f"{fpr} 2026-01-01 1767225600 0 4 0 22 10 00 {fpr}")])
    assert status.signatures  # what gpg had said before it died
    killed = signature_verdict(GpgResult(returncode=-9, status=status, stdout=b"", stderr=""), "verifying")
    assert not killed.signatures and "killed by signal 9" in killed.failures[0]
    assert signature_verdict(GpgResult(returncode=2, status=status, stdout=b"", stderr=""), "verifying").signatures


def test_prepared_batches_are_written_ahead_and_removed_whatever_happens(
        verifier: GnuPG, keys: KeyFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tree verifier writes the next batch (``prepare_detached_many``) while gpg checks the current one
    (``verify_prepared``): the verdicts are those of the one-call API, and the private directory goes away
    after the check, after a gpg failure, and when writing fails half-way."""
    items, expected = _items(keys, tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    first = verifier.prepare_detached_many(items, scratch=str(scratch))
    second = verifier.prepare_detached_many(list(reversed(items)), scratch=str(scratch))
    assert len(list(scratch.iterdir())) == 2  # both written before gpg runs
    assert _outcomes(verifier.verify_prepared(first)) == expected
    assert _outcomes(verifier.verify_prepared(second)) == list(reversed(expected))
    assert list(scratch.iterdir()) == []

    failing = verifier.prepare_detached_many(items, scratch=str(scratch))
    monkeypatch.setattr(verifier, "program", str(tmp_path / "no-such-gpg"))
    with pytest.raises(gpg_module.GpgError):
        verifier.verify_prepared(failing)
    assert list(scratch.iterdir()) == []
    monkeypatch.undo()

    written: list[str] = []

    def write_then_fail(path: str, data: bytes) -> None:
        if len(written) == 3:
            raise OSError(28, "No space left on device")
        written.append(path)
        Path(path).write_bytes(data)

    monkeypatch.setattr(gpg_multifile, "_write_new", write_then_fail)
    with pytest.raises(OSError):
        verifier.prepare_detached_many(items, scratch=str(scratch))
    assert written and list(scratch.iterdir()) == []


def test_the_probe_homes_of_killed_runs_are_removed_at_the_next_probe(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Every engine probe works in a throwaway home under $TMPDIR; a run killed during its probes leaves them.
    The first probe of a run removes this user's probe homes older than a day, and nothing else."""
    from gkeys_portage.openpgp import engine

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    old, running, other = _left_by_killed_runs(tmp_path, engine.PROBE_PREFIX)
    engine.forget("gpg")
    try:
        assert engine.probe("gpg").banner
    finally:
        engine.forget("gpg")
    assert not old.exists() and running.is_dir() and other.is_dir()
