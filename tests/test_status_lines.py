"""gpg's status output is split at LF only, as gpg writes it.

A user id (or any text gpg copies into a status line) may hold U+0085 (UTF-8 ``C2 85``) or other characters
that Python's ``str.splitlines`` treats as line breaks; gpg escapes only control characters below 0x20.
A key in the keyring that is *not* pinned must not be able to print a fake ``VALIDSIG`` of a pinned key.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gkeys_portage.core.errors import SignerNotPinnedError
from gkeys_portage.core.types import Category, Nick
from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.verdict import Pin, PinSet, decide


@pytest.fixture(scope="module")
def forged(keys: KeyFactory, tmp_path_factory: pytest.TempPathFactory) -> tuple[GnuPG, bytes, bytes]:
    """A verifying home holding alice (pinned) and a key whose user id carries fake status lines naming
    alice; a signature by that key over some data."""
    alice = keys.keys["alice"]
    factory = KeyFactory(tmp_path_factory.mktemp("forger-secret"))
    nel = "\u0085"
    now = int(time.time())  # the forger picks a date the pinned key may have signed at
    fake = (f"M {nel}[GNUPG:] VALIDSIG {alice.signing_subkey} 2026-01-01 {now} 0 4 0 22 8 00 "
            f"{alice.fingerprint} {nel}[GNUPG:] NEWSIG {nel}[GNUPG:] GOODSIG 0000000000000000 M")
    factory.create("forger", name=fake, email="forger@example.org")
    home = tmp_path_factory.mktemp("verify-home")
    gpg = GnuPG(home)
    gpg.import_keys(keys.public("alice"))
    gpg.import_keys(factory.public("forger"))
    work = tmp_path_factory.mktemp("forger-work")
    data = b"payload\n"
    signature = factory.sign_bytes("forger", data, work)
    factory.close()
    return gpg, signature, data


def _decide(keys: KeyFactory, gpg: GnuPG, report: object) -> None:
    alice = keys.keys["alice"]
    pins = PinSet.of([Pin(Category("gentoo-developers"), Nick("alice"), alice.fingerprint)])
    known = {key.fingerprint: key for key in gpg.list_keys()}
    decide(report, pins, known)  # type: ignore[arg-type]


def test_user_id_cannot_inject_status_lines(keys: KeyFactory, forged: tuple[GnuPG, bytes, bytes]) -> None:
    gpg, signature, data = forged
    report = gpg.verify_detached(signature, data)
    with pytest.raises(SignerNotPinnedError):
        _decide(keys, gpg, report)
    assert len(report.signatures) == 1
    assert report.signatures[0].primary_fingerprint != keys.keys["alice"].fingerprint


def test_multifile_status_cannot_be_injected(keys: KeyFactory, forged: tuple[GnuPG, bytes, bytes],
                                             tmp_path: Path) -> None:
    gpg, signature, data = forged
    [report] = gpg.verify_detached_many([(signature, data)], scratch=str(tmp_path))
    with pytest.raises(SignerNotPinnedError):
        _decide(keys, gpg, report)
    assert len(report.signatures) == 1


def test_an_incomplete_multifile_result_names_the_next_step_not_a_scratch_file() -> None:
    from gkeys_portage.openpgp.multifile import split_file_status

    [report] = split_file_status(["[GNUPG:] FILE_START 1 /scratch/gkeys-multifile-x/0.sig", "[GNUPG:] NEWSIG"],
                                 ["/scratch/gkeys-multifile-x/0.sig"])
    assert not report.signatures
    assert "run the command again" in report.failures[0] and "gkeys-multifile" not in report.failures[0]


@pytest.mark.parametrize("name", ["-", "--output=x"])
def test_a_data_file_named_like_an_option_is_read_as_that_file(keys: KeyFactory, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """gpg gets the path it should read, never a relative name it takes for stdin ("-") or an option."""
    home = tmp_path / "home"
    home.mkdir()
    gpg = GnuPG(home)
    gpg.import_keys(keys.public("alice"))
    work = tmp_path / "work"
    work.mkdir()
    (work / name).write_bytes(b"release\n")
    signature = keys.sign_bytes("alice", b"release\n", tmp_path)
    monkeypatch.chdir(work)
    report = gpg.verify_detached(signature, Path(name))
    assert [s.primary_fingerprint for s in report.signatures] == [keys.keys["alice"].fingerprint]
    assert not (work / "x").exists()


def test_a_user_id_split_at_nel_is_no_import_error() -> None:
    """gpg (LC_ALL=C) prints a user id's bytes raw on stderr; 0x85 inside the quotes must not cut them open and
    let the user id's words count as an import error (a keyserver could fail every refresh)."""
    from gkeys_portage.openpgp.keyio import _import_report
    from gkeys_portage.openpgp.process import GpgResult
    from gkeys_portage.openpgp.status import parse_status

    status = parse_status([("IMPORT_OK", "1 " + "A" * 40), ("IMPORT_RES", " ".join(["1"] + ["0"] * 14))])
    stderr = ('gpg: key 0123456789ABCDEF: public key "x\x85 Bad Error <fail@x>" imported\n'
              "gpg: can't connect to the agent: IPC connect call failed\n")
    assert _import_report(GpgResult(returncode=2, status=status, stdout=b"", stderr=stderr)).problem == ""


def test_a_colon_listing_is_split_at_lf_only() -> None:
    """A user id holding U+0085 stays one ``uid`` record (str.splitlines would tear it in two)."""
    from gkeys_portage.openpgp.colons import parse_colons

    fpr = "A" * 40
    listing = (f"pub:u:255:22:{fpr[-16:]}:1700000000:::u:::cSC:::::ed25519:::0:\n"
               f"fpr:::::::::{fpr}:\n"
               "uid:u::::1700000000::HASH::Mallory \u0085 fpr\\x3a <m@example.org>::::::::::0:\n")
    (key,) = parse_colons(listing)
    assert len(key.uids) == 1 and key.uids[0].text.endswith(" fpr: <m@example.org>"), key.uids  # not torn
