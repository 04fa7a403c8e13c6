"""Key checks on constructed colon listings: specs, codes, levels, time and bad input."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from checks_helpers import DAY, PRIMARY_FPR, T0, Part, build_key, good_key, signature, uid

from gkeys_portage.checks.glep63 import DEFAULT_SPEC, SPECS, Level, check_health, check_key, exit_status, get_spec
from gkeys_portage.checks.glep63.findings import MAX_PER_CODE, Issue, Target
from gkeys_portage.checks.glep63.sources import parse_at
from gkeys_portage.core.errors import UsageError
from gkeys_portage.openpgp.colons import parse_colons

AT = datetime.fromtimestamp(T0 + 10 * DAY, UTC)


def codes(issues: list[Issue]) -> list[tuple[str, str, str]]:
    return [(i.code, str(i.level), i.concerns) for i in issues]


def test_the_default_spec_is_glep63_2_2_and_extends_2_1() -> None:
    assert DEFAULT_SPEC == "glep63-2.2"
    base, current = SPECS["glep63-2.1"], SPECS["glep63-2.2"]
    assert dataclasses.replace(current, name=base.name, doc=base.doc, weak_self_signature=None,
                               primary_not_certify_only=None) == base
    assert current.subkey_types == ("s", "e") and current.expire_max_key == 900


def test_unknown_spec_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown spec 'glep63-9'"):
        get_spec("glep63-9")


def test_a_compliant_key_has_no_findings_under_2_2() -> None:
    assert check_key(good_key(), "glep63-2.2", AT) == []
    assert check_health(good_key(), AT) == []


@pytest.mark.parametrize(("primary", "expected"), [
    ({"algo": 1, "bits": 4096, "curve": ""}, []),
    ({"algo": 1, "bits": 1024, "curve": ""}, [("algo:rsa:tooshort", "error", "key")]),
    ({"algo": 17, "bits": 3072, "curve": ""}, [("algo:dsa", "error", "key")]),
    ({"algo": 19, "bits": 256, "curve": "nistp256"}, [("algo:ecc:invalid", "error", "key")]),
    ({"algo": 28, "bits": 456, "curve": ""}, [("algo:ecc:invalid", "error", "key")]),
    ({"algo": 27, "bits": 255, "curve": ""}, []),  # RFC 9580 Ed25519
    ({"algo": 99, "bits": 0, "curve": ""}, [("algo:invalid", "error", "key")]),  # unknown algorithm
    ({"algo": 3, "bits": 4096, "curve": ""}, [("algo:rsa:deprecated_only", "warning", "key")]),
])
def test_primary_key_algorithms(primary: dict[str, Any], expected: list[tuple[str, str, str]]) -> None:
    assert codes(check_key(good_key(**primary), "glep63-2.1", AT)) == expected


def test_expiry_is_evaluated_as_of_the_given_time() -> None:
    key = good_key(expires=T0 + 1000 * DAY, sub_expires=T0 + 1000 * DAY)
    assert codes(check_key(key, "glep63-2.1", AT)) == [
        ("expire:long", "error", "key"), ("expire:long", "error", f"subkey {1:016X}"),
        ("expire:long", "error", f"subkey {2:016X}")]
    later = datetime.fromtimestamp(T0 + 200 * DAY, UTC)
    assert check_key(key, "glep63-2.1", later) == []
    nearly = datetime.fromtimestamp(T0 + 980 * DAY, UTC)
    assert [c for c, _l, _o in codes(check_key(key, "glep63-2.1", nearly))] == ["expire:short"] * 3
    assert {lvl for _c, lvl, _o in codes(check_key(key, "glep63-2.1", nearly))} == {"warning"}
    after = datetime.fromtimestamp(T0 + 1001 * DAY, UTC)
    assert codes(check_key(key, "glep63-2.1", after)) == [("validity:expired", "error", "key")]
    assert codes(check_health(key, after)) == [("validity:expired", "error", "key")]


def test_no_user_id_at_all() -> None:
    key = build_key(Part("cSC"), [Part("s"), Part("e", algo=18, curve="cv25519")], [])
    assert codes(check_key(key, "glep63-2.2", AT)) == [("uid:nogentoo", "error", "key")]
    assert check_health(key, AT) == []


def test_revoked_and_invalid_user_ids() -> None:
    key = build_key(Part("cSC"), [Part("s"), Part("e", algo=18, curve="cv25519")],
                    [uid("Larry <larry@gentoo.org>", validity="r"), uid("Broken <b@example.org>", validity="i")])
    assert codes(check_key(key, "glep63-2.2", AT)) == [
        ("validity:invalid", "error", "uid Broken <b@example.org>"), ("uid:nogentoo", "error", "key")]


def test_sha1_self_signatures_fail_2_2_only() -> None:
    key = build_key(Part("cSC"), [Part("s", sig_hash=2), Part("e", algo=18, curve="cv25519")],
                    [uid("Larry <larry@gentoo.org>", sig_hash=2)])
    found = codes(check_key(key, "glep63-2.2", AT))
    assert ("sig:sha1", "error", "uid Larry <larry@gentoo.org>") in found
    assert ("sig:sha1", "error", f"subkey {1:016X}") in found
    assert len(found) == 2
    assert check_key(key, "glep63-2.1", AT) == []


def test_only_the_newest_self_signature_counts() -> None:
    newer = signature("13x", 8, created=T0 + DAY)
    third_party = signature("10x", 2, created=T0 + 2 * DAY, issuer="B" * 40)
    key = build_key(Part("cSC"), [Part("s"), Part("e", algo=18, curve="cv25519")],
                    [uid("Larry <larry@gentoo.org>", sig_hash=2, extra=(newer, third_party))])
    assert check_key(key, "glep63-2.2", AT) == []


def test_md5_self_signature_is_weak() -> None:
    key = build_key(Part("cSC"), [Part("s"), Part("e", algo=18, curve="cv25519")],
                    [uid("Larry <larry@gentoo.org>", sig_hash=1)])
    assert codes(check_key(key, "glep63-2.2", AT)) == [("sig:weakhash", "error", "uid Larry <larry@gentoo.org>")]


def test_primary_that_signs_is_a_note_not_a_failure() -> None:
    key = good_key(caps="scSC")
    issues = check_key(key, "glep63-2.2", AT)
    assert codes(issues) == [("key:notcertifyonly", "note", "key")]
    assert exit_status(issues, warnings_fail=True) == 0
    assert check_key(key, "glep63-2.1", AT) == []


def test_revocation_counts_only_from_its_date() -> None:
    revocation = signature("20x", 8, created=T0 + 5 * DAY, kind="rev")
    key = good_key(validity="r", sigs=[revocation])
    before = datetime.fromtimestamp(T0 + 4 * DAY, UTC)
    assert check_key(key, "glep63-2.2", before) == []
    assert codes(check_key(key, "glep63-2.2", AT)) == [("validity:revoked", "error", "key")]
    assert codes(check_health(key, AT)) == [("validity:revoked", "error", "key")]
    # without signature records the listing's "r" is all there is: revoked
    assert codes(check_key(good_key(validity="r"), "glep63-2.2", before)) == [("validity:revoked", "error", "key")]


def test_health_signing_subkeys() -> None:
    no_signing = build_key(Part("cSC"), [Part("e", algo=18, curve="cv25519")], [uid("L <l@gentoo.org>")])
    assert codes(check_health(no_signing, AT)) == [("subkey:none:s", "error", "key")]
    primary_signs = build_key(Part("scSC"), [], [uid("L <l@gentoo.org>")])
    assert codes(check_health(primary_signs, AT)) == [("subkey:none:s", "warning", "key")]
    revoked_sub = build_key(Part("cSC"), [Part("s", validity="r"), Part("s")], [uid("L <l@gentoo.org>")])
    assert codes(check_health(revoked_sub, AT)) == [("subkey:revoked", "note", f"subkey {1:016X}")]
    soon = build_key(Part("cSC"), [Part("s", expires=T0 + 20 * DAY)], [uid("L <l@gentoo.org>")])
    assert codes(check_health(soon, AT, days=30)) == [("expire:soon", "warning", f"subkey {1:016X}")]
    assert check_health(soon, AT, days=5) == []
    expired_sub = build_key(Part("cSC"), [Part("s", expires=T0 + DAY)], [uid("L <l@gentoo.org>")])
    assert codes(check_health(expired_sub, AT)) == [("subkey:expired", "note", f"subkey {1:016X}"),
                                                    ("subkey:none:s", "error", "key")]


def test_thousands_of_uids_and_signatures_give_bounded_findings() -> None:
    many_sigs = tuple(signature("10x", 8, issuer=f"{n:040X}") for n in range(20))
    uids = [uid(f"Someone {n} <s{n}@example.org>", validity="i", sig_hash=2, extra=many_sigs) for n in range(3000)]
    subkeys = [Part("s", sig_hash=2) for _ in range(500)]
    key = build_key(Part("cSC"), subkeys, uids)
    assert len(key.uids) == 3000 and sum(len(u.signatures) for u in key.uids) == 63000
    issues = check_key(key, "glep63-2.2", AT)
    per_code: dict[str, int] = {}
    for issue in issues:
        per_code[issue.code] = per_code.get(issue.code, 0) + 1
    assert per_code["validity:invalid"] == MAX_PER_CODE + 1  # ten shown, then "... and 2990 more"
    assert per_code["sig:sha1"] == MAX_PER_CODE + 1
    assert any("2990 more" in i.message for i in issues if i.code == "validity:invalid")
    assert len(issues) < 40
    assert len(check_health(key, AT)) <= MAX_PER_CODE + 1


def test_a_v3_style_fingerprint_is_dropped_by_the_parser() -> None:
    listing = (f"pub:-:1024:1:0123456789ABCDEF:{T0}:::-:::scSC::::::::0:\n"
               "fpr:::::::::0123456789ABCDEF0123456789ABCDEF:\n"  # 32 hex: a v3 (MD5) fingerprint
               "uid:-::::::HASH::Old <old@gentoo.org>::::::::::0:\n")
    assert parse_colons(listing) == []


def test_issue_json_names_what_it_concerns() -> None:
    key = build_key(Part("cSC"), [Part("s", expires=None), Part("e", algo=18, curve="cv25519")],
                    [uid("L <l@gentoo.org>")])
    (issue,) = check_key(key, "glep63-2.2", AT)
    assert issue.on is Target.SUBKEY and issue.level is Level.ERROR
    assert issue.to_json() == {"code": "expire:none", "level": "error", "on": "subkey", "key": PRIMARY_FPR,
                               "subkey": f"{1:016X}", "subkey_fingerprint": f"{1:024X}{1:016X}",
                               "message": issue.message}
    assert "no expiration date" in issue.message


@pytest.mark.parametrize(("text", "expected"), [
    ("2018-08-03T00:01:00Z", datetime(2018, 8, 3, 0, 1, tzinfo=UTC)),
    ("2018-08-03", datetime(2018, 8, 3, tzinfo=UTC)),
    ("2018-08-03T02:01:00+02:00", datetime(2018, 8, 3, 0, 1, tzinfo=UTC)),
    ("@1533254460", datetime(2018, 8, 3, 0, 1, tzinfo=UTC)),
])
def test_parse_at(text: str, expected: datetime) -> None:
    assert parse_at(text) == expected


@pytest.mark.parametrize("text", ["yesterday", "@x", "2018-13-45", ""])
def test_parse_at_rejects_garbage(text: str) -> None:
    with pytest.raises(UsageError, match="--at"):
        parse_at(text)


def test_a_key_created_after_the_evaluation_time() -> None:
    before = datetime.fromtimestamp(T0 - DAY, UTC)
    assert codes(check_key(good_key(), "glep63-2.2", before)) == [("validity:notyet", "error", "key")]
    assert codes(check_health(good_key(), before)) == [("validity:notyet", "error", "key")]
