"""Conformance with glep63-check: its 32 test keys x 6 specs, evaluated at 2018-08-03T00:01:00Z.

Every case must report exactly the expected codes, levels and targets, in order.  The library is
run on all 192 cases; the ``spec-check`` command on every key (each key against a different spec,
so the command covers all six specs too).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import SHARED, GkeysEnv, shared_path

from gkeys_portage.checks.glep63 import SPECS, check_key
from gkeys_portage.checks.glep63.findings import Issue
from gkeys_portage.checks.glep63.sources import file_subjects
from gkeys_portage.openpgp.colons import PublicKey

CONFORMANCE = ("conformance", "glep63-check")
_EXPECTED = SHARED.joinpath(*CONFORMANCE, "expected.json")
KEY_NAMES = sorted(json.loads(_EXPECTED.read_text())["keys"]) if _EXPECTED.exists() else ["(../shared absent)"]


def _short(issue: Issue) -> dict[str, str]:
    """An issue in the form of expected.json."""
    found = {"code": issue.code, "level": str(issue.level), "on": str(issue.on)}
    if issue.on == "subkey":
        found["subkey"] = issue.subkey_id
    return found


@pytest.fixture(scope="module")
def conformance() -> dict[str, Any]:
    """expected.json, its evaluation time and every key parsed (one throwaway GnuPG home each)."""
    expected = json.loads(shared_path(*CONFORMANCE, "expected.json").read_text())
    at = datetime.fromisoformat(expected["evaluated_at"].replace("Z", "+00:00"))
    keys: dict[str, PublicKey] = {}
    for name in expected["keys"]:
        subjects = file_subjects(shared_path(*CONFORMANCE, "keys", name), at=at)
        assert len(subjects) == 1 and subjects[0].key is not None
        keys[name] = subjects[0].key
    return {"expected": expected, "at": at, "keys": keys}


def test_the_suite_is_complete(conformance: dict[str, Any]) -> None:
    entries = conformance["expected"]["keys"]
    assert len(entries) == 32
    assert all(len(entry["expected"]) == 6 for entry in entries.values())
    assert {spec for entry in entries.values() for spec in entry["expected"]} <= set(SPECS)


@pytest.mark.parametrize("name", KEY_NAMES)
def test_library_matches_glep63_check(conformance: dict[str, Any], name: str) -> None:
    entry = conformance["expected"]["keys"][name]
    key = conformance["keys"][name]
    assert key.fingerprint == entry["primary_fpr"]
    for spec, expected in entry["expected"].items():
        assert [_short(i) for i in check_key(key, spec, conformance["at"])] == expected, (name, spec)


def test_spec_check_command_matches_glep63_check(env: GkeysEnv, conformance: dict[str, Any]) -> None:
    specs = sorted(SPECS)
    specs.remove("glep63-2.2")
    for index, (name, entry) in enumerate(sorted(conformance["expected"]["keys"].items())):
        spec = specs[index % len(specs)]
        path: Path = shared_path(*CONFORMANCE, "keys", name)
        result = env.run("spec-check", "--keyring", str(path), "--spec", spec, "--at", "2018-08-03T00:01:00Z",
                         "--json")
        document = json.loads(result.out)
        (key,) = document["keys"]
        found = [{k: v for k, v in issue.items() if k in ("code", "level", "on", "subkey")} for issue in key["issues"]]
        assert found == entry["expected"][spec], (name, spec)
        errors = any(i["level"] == "error" for i in found)
        assert result.code == (1 if errors else 0), (name, spec, result.text)
        assert document["spec"] == spec and document["compliant"] is not errors
