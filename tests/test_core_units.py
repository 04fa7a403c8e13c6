"""Unit tests of the core parsers and validators (no gpg needed except where stated)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REAL, shared_path

from gkeys_portage.core.config import load_config
from gkeys_portage.core.errors import BadInputError, ConfigError, SeedFormatError
from gkeys_portage.core.types import Fingerprint, parse_fingerprint
from gkeys_portage.keys.seeds import convert_old_seeds, dump_seeds, parse_seeds
from gkeys_portage.keys.sources import candidate_locations, keyserver_base, wkd_hash, zbase32
from gkeys_portage.openpgp.colons import parse_colons
from gkeys_portage.openpgp.status import SigOutcome, parse_status

FPR = "A93B16B16998A428D54D96C60E2548BBC607E5AE"
SUB = "C287167569B3C1F9E9CED677A41DBBD9151C3FC7"

# --- fingerprints -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [FPR, FPR.lower(), "0x" + FPR, " ".join(FPR[i:i + 4] for i in range(0, 40, 4)),
                                  "AB" * 32])
def test_fingerprint_accepts_full_fingerprints(text: str) -> None:
    assert parse_fingerprint(text) == text.replace(" ", "").upper().removeprefix("0X")


@pytest.mark.parametrize("text", ["", "C607E5AE", "0E2548BBC607E5AE", FPR[:-1], FPR + "0", "G" * 40, "AB" * 21])
def test_fingerprint_refuses_key_ids_and_garbage(text: str) -> None:
    with pytest.raises(BadInputError):
        parse_fingerprint(text)


# --- status lines -------------------------------------------------------------------------------

GOOD_LINES = [
    "[GNUPG:] NEWSIG",
    "[GNUPG:] KEY_CONSIDERED 155D7466912D97381EA7C24A6FD7280E2D0342FA 0",
    "[GNUPG:] SIG_ID abc 2026-12-03 1796287281",
    "[GNUPG:] GOODSIG 72F04101AF2690F5 Alice <alice@gentoo.org>",
    "[GNUPG:] VALIDSIG A02DA33B53E8CEC227618EDE72F04101AF2690F5 2026-12-03 1796287281 0 4 0 22 10 00 "
    "155D7466912D97381EA7C24A6FD7280E2D0342FA",
    "[GNUPG:] TRUST_UNDEFINED 0 pgp",
]


def test_status_good_signature_records_primary_and_time() -> None:
    report = parse_status(GOOD_LINES)
    (sig,) = report.signatures
    assert sig.outcome is SigOutcome.GOOD and sig.valid
    assert sig.primary_fingerprint == "155D7466912D97381EA7C24A6FD7280E2D0342FA"
    assert sig.signing_fingerprint == "A02DA33B53E8CEC227618EDE72F04101AF2690F5"
    assert sig.created == 1796287281 and sig.user_id == "Alice <alice@gentoo.org>"


def test_status_errsig_no_pubkey_and_bad_and_multiple() -> None:
    lines = [
        "[GNUPG:] NEWSIG",
        "[GNUPG:] ERRSIG 72F04101AF2690F5 22 10 00 1796287281 9 A02DA33B53E8CEC227618EDE72F04101AF2690F5",
        "[GNUPG:] NO_PUBKEY 72F04101AF2690F5",
        "[GNUPG:] NEWSIG",
        "[GNUPG:] BADSIG 1111111111111111 Bob",
        "[GNUPG:] NEWSIG",
        "[GNUPG:] ERRSIG 2222222222222222 99 10 00 1796287281 4",
    ]
    kinds = [s.outcome for s in parse_status(lines).signatures]
    assert kinds == [SigOutcome.NO_PUBKEY, SigOutcome.BAD, SigOutcome.ERROR]


def test_status_validsig_without_result_is_never_good() -> None:
    report = parse_status([line for line in GOOD_LINES if "GOODSIG" not in line])
    assert [s.outcome for s in report.signatures] == [SigOutcome.ERROR]


def test_status_ignores_non_status_lines_and_flags_garbage() -> None:
    report = parse_status(["gpg: no valid OpenPGP data found.", "[GNUPG:] NODATA 1", "[GNUPG:] NODATA 2"])
    assert report.signatures == [] and report.no_data


# --- colon listings -----------------------------------------------------------------------------

COLONS = """\
tru::1:1796287281:0:3:1:5
pub:u:255:22:6FD7280E2D0342FA:1796287270:1859359270::u:::cSC:::::ed25519:::0:
fpr:::::::::155D7466912D97381EA7C24A6FD7280E2D0342FA:
uid:u::::1796287270::HASH::Alice \\x3a Co <alice@gentoo.org>::::::::::0:
sub:r:255:22:72F04101AF2690F5:1796287271:1859359271:::::s:::::ed25519::
fpr:::::::::A02DA33B53E8CEC227618EDE72F04101AF2690F5:
"""


def test_colons_parse_keys_subkeys_and_uids() -> None:
    (key,) = parse_colons(COLONS)
    assert key.fingerprint == "155D7466912D97381EA7C24A6FD7280E2D0342FA"
    assert key.uids[0].text == "Alice : Co <alice@gentoo.org>"
    (sub,) = key.subkeys
    assert sub.revoked and sub.can("s") and not sub.can("e")
    assert key.primary.algorithm_name == "ed25519" and key.primary.expires == 1859359270


def test_colons_drop_keys_without_fingerprint() -> None:
    assert parse_colons("pub:u:255:22:6FD7280E2D0342FA:1796287270:::u:::cSC:\n") == []


# --- seeds --------------------------------------------------------------------------------------


def _seed_obj(**changes: object) -> dict[str, object]:
    seed: dict[str, object] = {"nick": "alice", "name": "Alice", "keydir": "alice", "keys": [FPR],
                               "fingerprint": [FPR, SUB], "uid": ["Alice <alice@gentoo.org>"]}
    seed.update(changes)
    return seed


def test_real_developer_seeds_load_and_round_trip() -> None:
    raw = shared_path("fixtures", "real", "seeds", "gentoo-devs.seeds").read_bytes()
    seeds = parse_seeds(raw, "gentoo-devs.seeds")
    assert len(seeds) == 164
    # Only formatting may differ: Python 2's json wrote "," with a trailing space.
    assert [ln.rstrip() for ln in dump_seeds(seeds).decode().splitlines()] == \
        [ln.rstrip() for ln in raw.decode().splitlines()]


@pytest.mark.parametrize(("obj", "message"), [
    ({"alice": _seed_obj(keys=["C607E5AE"])}, "invalid fingerprint"),
    ({"alice": _seed_obj(fingerprint=[FPR[:39]])}, "invalid fingerprint"),
    ({"alice": _seed_obj(keys=FPR)}, "expected list"),
    ({"alice": _seed_obj(name=5)}, "expected str"),
    ({"alice": _seed_obj(nick="bob")}, "does not match"),
    ({"alice": _seed_obj(keys=[])}, "lists no fingerprint"),
    ({"alice": {k: v for k, v in _seed_obj().items() if k != "uid"}}, "missing field"),
    ({"alice": _seed_obj(extra=1)}, "unknown field"),
    ([1, 2], "JSON object"),
])
def test_seed_validation_errors_are_one_clear_line(obj: object, message: str) -> None:
    with pytest.raises(SeedFormatError) as info:
        parse_seeds(json.dumps(obj), "x.seeds")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_seed_duplicate_nick_and_bad_json_refused() -> None:
    one = json.dumps(_seed_obj())
    with pytest.raises(SeedFormatError, match="duplicate key 'alice'"):
        parse_seeds(f'{{"alice": {one}, "alice": {one}}}')
    with pytest.raises(SeedFormatError, match="not valid JSON"):
        parse_seeds(b'{"alice": ')
    with pytest.raises(SeedFormatError, match="not UTF-8"):
        parse_seeds(b"\xff\xfe{}")


@pytest.mark.parametrize(("name", "label"), [("developer.seeds.pipe-2013", "2013 pipe"),
                                             ("developer.seeds.json-v1-2014", "2014 JSON v1")])
def test_old_seed_formats_get_a_conversion_hint(name: str, label: str) -> None:
    raw = shared_path("fixtures", "real", "seeds-old", name).read_bytes()
    with pytest.raises(SeedFormatError) as info:
        parse_seeds(raw, name)
    assert label in str(info.value) and "gkeys convert-seed" in str(info.value)
    converted = convert_old_seeds(raw)
    assert len(converted) > 100
    parse_seeds(dump_seeds(converted))  # the conversion is a valid current-format file


# --- WKD and keyservers -------------------------------------------------------------------------


def test_wkd_hash_matches_the_draft_example() -> None:
    # draft-koch-openpgp-webkey-service: "Joe.Doe@Example.ORG" -> iy9q119eutrkn8s1mk4r39qejnbu3n5q
    assert wkd_hash("Joe.Doe") == "iy9q119eutrkn8s1mk4r39qejnbu3n5q"
    assert zbase32(b"\x00") == "yy"


def test_keyserver_urls_and_source_order() -> None:
    assert keyserver_base("hkp://keys.example.org") == "http://keys.example.org:11371"
    assert keyserver_base("hkps://keys.example.org") == "https://keys.example.org"
    with pytest.raises(ConfigError):
        keyserver_base("ldap://keys.example.org")
    config = load_config(None, Path("/tmp/x"))
    config.sources.keyservers = ["hkps://a.example", "hkp://b.example"]
    kinds = [loc.kind for loc in candidate_locations(Fingerprint(FPR), ["alice@gentoo.org"], config.sources)]
    assert kinds == ["wkd-advanced", "wkd-direct", "keyserver", "keyserver"]


# --- config -------------------------------------------------------------------------------------


def test_config_reads_contract_keys_and_root_wins(tmp_path: Path) -> None:
    conf = tmp_path / "gkeys.conf"
    conf.write_text("[base]\ngkeysdir = /somewhere\n[seedurls]\nfoo = https://example.org/foo.seeds ; comment\n"
                    "[verify-seeds]\nfoo = gentoo gkeys\n[sources]\nkeyservers = hkps://a hkp://b\nwkd = no\n"
                    "timeout = 7\nretries = 1\n[sign]\ncategory = sign\nnick = me\n")
    config = load_config(conf, None)
    assert config.gkeysdir == Path("/somewhere")
    assert config.seedurls["foo"] == "https://example.org/foo.seeds"
    assert config.verify_seeds["foo"] == ("gentoo", "gkeys")
    assert config.sources.keyservers == ["hkps://a", "hkp://b"] and not config.sources.wkd
    assert config.sources.timeout == 7 and config.sign_nick == "me"
    assert load_config(conf, tmp_path / "root").gkeysdir == tmp_path / "root"


@pytest.mark.parametrize("text", ["[verify-seeds]\nfoo = onlyone\n", "[sources]\ntimeout = soon\n",
                                  "[sources]\nwkd = perhaps\n", "not an ini file\n"])
def test_config_errors_are_clear(tmp_path: Path, text: str) -> None:
    conf = tmp_path / "gkeys.conf"
    conf.write_text(text)
    with pytest.raises(ConfigError):
        load_config(conf, None)


def test_missing_explicit_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.conf", None)


def test_real_fixture_dir_is_referenced_not_copied() -> None:
    assert not (Path(__file__).parent / "fixtures" / "real").exists()
    assert REAL.name == "real"


def test_multifile_status_is_matched_by_file_name_never_by_position() -> None:
    from gkeys_portage.openpgp.multifile import split_file_status

    good = GOOD_LINES[1:]
    lines = ["[GNUPG:] FILE_START 1 /t/b.sig", *good, "[GNUPG:] FILE_DONE",  # a.sig skipped by gpg
             "[GNUPG:] FILE_START 1 /t/c.sig", "[GNUPG:] NEWSIG", "[GNUPG:] BADSIG 1111111111111111 X",
             "[GNUPG:] FILE_DONE", "[GNUPG:] FILE_START 1 /t/d.sig", *good]  # d.sig never finished
    reports = split_file_status(lines, ["/t/a.sig", "/t/b.sig", "/t/c.sig", "/t/d.sig"])
    assert [len(r.signatures) for r in reports] == [0, 1, 1, 0]
    assert reports[1].signatures[0].outcome is SigOutcome.GOOD
    assert reports[2].signatures[0].outcome is SigOutcome.BAD
    assert reports[0].failures and reports[3].failures


# -- issue 15 item 4: typos in gkeys.conf are errors, with the nearest valid name ---------------------

@pytest.mark.parametrize(("text", "message"), [
    ("[policy]\nmax-seed-ages = 7\n", "[policy] unknown key 'max-seed-ages' (did you mean 'max-seed-age'?)"),
    ("[tree]\npolcy = all\n", "[tree] unknown key 'polcy' (did you mean 'policy'?)"),
    ("[polcy]\nclock-skew = 5\n", "unknown section '[polcy]' (did you mean '[policy]'?)"),
    ("[sources]\nzzz = 1\n", "[sources] unknown key 'zzz' (valid: backoff, keyservers,"),
    ("[DEFAULT]\nmax-seed-ages = 7\n", "[DEFAULT] unknown key 'max-seed-ages' (did you mean 'max-seed-age'?)"),
])
def test_unknown_config_keys_are_errors_naming_the_nearest(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "gkeys.conf"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config(path, tmp_path)
    assert raised.value.exit_code == 2
    assert f"config {path}: " in raised.value.message and message in raised.value.message


def test_category_sections_take_any_key(tmp_path: Path) -> None:
    path = tmp_path / "gkeys.conf"
    path.write_text("[seedurls]\nmy-overlay = https://example.org/x.seeds\n"
                    "[verify-seeds]\nmy-overlay = gentoo gkeys\n[tree]\npolicy = all\n")
    assert load_config(path, tmp_path).seedurls["my-overlay"] == "https://example.org/x.seeds"  # type: ignore[index]


def test_a_reworded_error_keeps_its_class_and_fields() -> None:
    """A verifier that names the sibling an error is about re-raises the same error: an EngineError (which
    needs its capability) once came out as 'internal error: TypeError' from verify-media on gpg-sq."""
    from gkeys_portage.core.errors import EngineError
    from gkeys_portage.verify.media.verifier import checked

    def fails() -> Any:
        raise EngineError("gpg-sq cannot verify: it lacks multifile", capability="MULTIFILE", next_step="set x")

    with pytest.raises(EngineError) as caught:
        checked("stage3.tar.xz.asc", fails)
    assert caught.value.message == "stage3.tar.xz.asc: gpg-sq cannot verify: it lacks multifile"
    assert str(caught.value) == caught.value.message
    assert caught.value.capability == "MULTIFILE" and caught.value.next_step == "set x"
    assert caught.value.exit_code == EngineError.exit_code
