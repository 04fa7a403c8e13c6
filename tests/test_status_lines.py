"""gpg's status output is split at LF only, as gpg writes it.

A user id (or any text gpg copies into a status line) may hold U+0085 (UTF-8 ``C2 85``) or other characters
that Python's ``str.splitlines`` treats as line breaks; gpg escapes only control characters below 0x20.
A key in the keyring that is *not* pinned must not be able to print a fake ``VALIDSIG`` of a pinned key.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gkeys_portage.core.errors import BadInputError, NotVerifiedError, SignerNotPinnedError
from gkeys_portage.core.types import Category, Nick
from gkeys_portage.demo.world import DemoKey, KeyFactory
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.status import expect_signers, parse_status
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


# -- issue 34 case 2: a notation name written unescaped (gpg-sq 0.13.1) forges another pin's VALIDSIG ---------------

def _injected_notation(keys: KeyFactory) -> str:
    """A notation name whose newlines, written unescaped, give alice's VALIDSIG to the signature it sits in and
    move the engine's real VALIDSIG onto an invented unknown signer (ignored)."""
    alice = keys.keys["alice"]
    now = int(time.time())
    return (f"a\n[GNUPG:] VALIDSIG {alice.signing_subkey} 2026-01-01 {now} 0 4 0 22 10 00 {alice.fingerprint}\n"
            f"[GNUPG:] NEWSIG\n[GNUPG:] ERRSIG 0123456789ABCDEF 22 10 00 {now} 9 "
            "0123456789ABCDEF0123456789ABCDEF01234567\n[GNUPG:] NOTATION_NAME x@example.org")


@pytest.fixture(scope="module")
def notation_forgery(keys: KeyFactory, tmp_path_factory: pytest.TempPathFactory) -> tuple[GnuPG, bytes, bytes]:
    """A verifying home holding alice and bob; bob's signature whose notation name carries status lines."""
    home = tmp_path_factory.mktemp("notation-home")
    gpg = GnuPG(home)
    gpg.import_keys(keys.public("alice", "bob"))
    data = tmp_path_factory.mktemp("notation-work") / "payload"
    data.write_bytes(b"payload\n")
    signed = keys.gpg.run(["--local-user", keys.keys["bob"].signing_subkey + "!", "--sig-notation",
                           _injected_notation(keys) + "=v", "--detach-sign", "--output", "-", str(data)])
    assert signed.returncode == 0 and signed.stdout, signed.stderr
    return gpg, signed.stdout, data.read_bytes()


@pytest.mark.parametrize("path", ["single", "multifile"])
def test_a_notation_name_cannot_make_one_pinned_signer_another(keys: KeyFactory, path: str, tmp_path: Path,
                                                               notation_forgery: tuple[GnuPG, bytes, bytes]) -> None:
    gpg, signature, data = notation_forgery
    if path == "single":
        report = gpg.verify_detached(signature, data)
    else:
        [report] = gpg.verify_detached_many([(signature, data)], scratch=str(tmp_path))
    with pytest.raises(NotVerifiedError, match="notation name carries control characters"):
        _decide(keys, gpg, report)


def _recorded_forgery(keys: KeyFactory) -> list[str]:
    """What gpg-sq 0.13.1 wrote for that signature (recorded), bob's real VALIDSIG last."""
    bob = keys.keys["bob"]
    return [f"[GNUPG:] {line}" for line in (
        "NEWSIG bob@gentoo.org", f"GOODSIG {bob.signing_subkey[-16:]} Bob <bob@gentoo.org>",
        *_injected_notation(keys).replace("[GNUPG:] ", "").replace("a\n", "NOTATION_NAME a\n", 1).split("\n"),
        "NOTATION_FLAGS 0 1", "NOTATION_DATA v",
        f"VALIDSIG {bob.signing_subkey} 2026-01-01 {int(time.time())} 0 4 0 22 10 00 {bob.fingerprint}")]


def test_a_forged_status_stream_is_refused_whatever_it_says(keys: KeyFactory,
                                                             notation_forgery: tuple[GnuPG, bytes, bytes]) -> None:
    gpg, _signature, _data = notation_forgery
    report = parse_status(_recorded_forgery(keys))
    assert report.anomalies  # the notation broke its line; alice's VALIDSIG does not name bob's GOODSIG key
    with pytest.raises(BadInputError, match="status output does not fit the signature"):
        _decide(keys, gpg, report)


def test_verdicts_must_match_the_signature_packets_in_number_and_order(keys: KeyFactory) -> None:
    alice, bob = keys.keys["alice"], keys.keys["bob"]
    now = int(time.time())

    def good(key: DemoKey) -> list[str]:
        return ["[GNUPG:] NEWSIG", f"[GNUPG:] GOODSIG {key.signing_subkey[-16:]} x",
                f"[GNUPG:] VALIDSIG {key.signing_subkey} 2026-01-01 {now} 0 4 0 22 10 00 {key.fingerprint}"]

    both = [*good(alice), *good(bob)]
    assert not expect_signers(parse_status(both), [alice.signing_subkey[-16:], bob.signing_subkey[-16:]]).anomalies
    assert expect_signers(parse_status(both), [bob.signing_subkey[-16:], alice.signing_subkey[-16:]]).anomalies
    assert expect_signers(parse_status(both), [alice.signing_subkey[-16:]]).anomalies
    assert expect_signers(parse_status(good(alice)), [bob.signing_subkey[-16:]]).anomalies
    carriage = parse_status([*good(alice)[:2], good(alice)[2] + "\r\x1b[2K"])
    assert carriage.anomalies
