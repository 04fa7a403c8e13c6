"""One exit status per cause, one JSON shape (issue 23, item 20; the table is docs/exit-codes.md).

Every verifying action is run for every cause of the table that applies to it, as text and as ``--json``: the
exit status is the cause's, the JSON document carries the same keys as a success, and the ``reason`` is the
cause's code.  Real files, a real HTTP server on 127.0.0.1, real gpg.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import GkeysEnv

from gkeys_portage.ui.output import VERDICT_KEYS

PROJECT = Path(__file__).resolve().parent.parent
STAGE3 = "releases/amd64/stage3-amd64-openrc-20260101T000000Z.tar.xz"


@dataclass(frozen=True)
class World:
    """Paths and URLs every case may use."""

    root: Path
    url: str

    @property
    def plain(self) -> Path:
        """A local file nothing signs."""
        return self.root / "plain.txt"


Argv = Callable[[World], list[str]]
# action -> cause -> (argv, exit status, reason)
TABLE: dict[str, dict[str, tuple[Argv, int, str]]] = {
    "verify": {
        "not-found": (lambda w: ["verify", "-F", f"{w.url}/missing.txt", "-C", "gentoo-devs"], 3, "not-found"),
        "no-signature": (lambda w: ["verify", "-F", str(w.plain), "-C", "gentoo-devs"], 1, "no-signature"),
        "no-signature (URL)": (lambda w: ["verify", "-F", f"{w.url}/plain.txt", "-C", "gentoo-devs"], 1,
                               "no-signature"),
        "bad-signature": (lambda w: ["verify", "-F", str(w.root / "tampered.txt"), "-C", "gentoo-devs"], 1,
                          "bad-signature"),
        "usage": (lambda w: ["verify"], 2, "usage"),
    },
    "verify-overlays": {
        "not-found": (lambda w: ["verify-overlays", f"{w.url}/repositories.xml"], 3, "not-found"),
        "no-signature": (lambda w: ["verify-overlays", str(w.plain)], 1, "no-signature"),
        "usage": (lambda w: ["verify-overlays", "--bogus"], 2, "usage"),
    },
    "verify-media": {
        "not-found": (lambda w: ["verify-media", f"{w.url}/{STAGE3}"], 3, "not-found"),
        "not-found (no build stamp)": (lambda w: ["verify-media", f"{w.url}/releases/install-amd64-minimal.iso"], 3,
                                       "not-found"),
        "not-found (siblings only)": (lambda w: ["verify-media", f"{w.url}/releases/only-siblings.iso"], 3,
                                      "not-found"),
        "no-signature": (lambda w: ["verify-media", str(w.plain)], 1, "no-signature"),
        "no-signature (URL)": (lambda w: ["verify-media", f"{w.url}/plain.txt"], 1, "no-signature"),
        "usage": (lambda w: ["verify-media"], 2, "usage"),
    },
    "fetch-media": {
        "not-found": (lambda w: ["fetch-media", f"{w.url}/{STAGE3}", "-d", str(w.root / "dest")], 3, "not-found"),
        "not-found (--latest)": (lambda w: ["fetch-media", "--latest", "stage3-amd64-openrc", "--mirror", w.url,
                                            "-d", str(w.root / "dest")], 3, "not-found"),
        "no-signature": (lambda w: ["fetch-media", f"{w.url}/plain.txt", "-d", str(w.root / "dest")], 1,
                         "no-signature"),
        "usage": (lambda w: ["fetch-media", "--bogus"], 2, "usage"),
    },
    "verify-tree": {
        "bad-input": (lambda w: ["verify-tree", str(w.root / "dest")], 2, "bad-input"),
        "usage": (lambda w: ["verify-tree", "--policy", "nonsense"], 2, "usage"),
    },
}
CASES = [(action, cause) for action, causes in TABLE.items() for cause in causes]


@pytest.fixture
def world(env: GkeysEnv) -> World:
    env.install_devs("alice")
    plain = b"hello\n"
    env.server.publish("plain.txt", plain)
    (env.root / "plain.txt").write_bytes(plain)
    (env.root / "dest").mkdir()
    (env.root / "signed.txt").write_bytes(plain)
    (env.root / "signed.txt.asc").write_bytes(env.keys.sign_bytes("alice", plain, env.root))
    (env.root / "tampered.txt").write_bytes(b"hellO\n")
    env.server.publish("releases/only-siblings.iso.asc", env.keys.sign_bytes("alice", plain, env.root))
    (env.root / "tampered.txt.asc").write_bytes(env.keys.sign_bytes("alice", plain, env.root))
    return World(env.root, env.server.url)


def _run(env: GkeysEnv, *argv: str) -> tuple[int, str, str]:
    try:
        result = env.run(*argv)
    except SystemExit as exc:  # argparse
        captured = env.capsys.readouterr()
        return int(exc.code or 0), captured.out, captured.err
    return result.code, result.out, result.err


@pytest.mark.parametrize(("action", "cause"), CASES, ids=[f"{a}:{c}" for a, c in CASES])
def test_one_exit_status_and_reason_per_cause(env: GkeysEnv, world: World, action: str, cause: str) -> None:
    argv, status, reason = TABLE[action][cause]
    code, out, err = _run(env, *argv(world))
    assert code == status, (out, err)
    assert err.strip(), "the text output says why"
    code, out, err = _run(env, "--json", *argv(world))
    assert code == status, (out, err)
    document = json.loads(out)  # usage errors too: one JSON document on stdout
    assert set(VERDICT_KEYS) <= set(document), document
    assert document["verified"] is False and document["ok"] is False and document["exit"] == status
    assert document["reason"] == reason, document
    if reason != "usage":
        assert document["file"], document
    else:
        assert document["next_step"] == f"gkeys {action} --help"


def test_a_success_carries_the_same_keys(env: GkeysEnv, world: World) -> None:
    code, out, err = _run(env, "--json", "verify", "-F", str(world.root / "signed.txt"), "-C", "gentoo-devs")
    assert code == 0, err
    document = json.loads(out)
    assert set(VERDICT_KEYS) <= set(document)
    assert document["verified"] is True and document["reason"] is None and document["next_step"] is None
    assert document["file"] == str(world.root / "signed.txt") and document["signer"] == "gentoo-devs/alice"


def test_the_table_in_the_docs_names_every_reason_tested() -> None:
    table = (PROJECT / "docs" / "exit-codes.md").read_text()
    for causes in TABLE.values():
        for _argv, status, reason in causes.values():
            row = next((line for line in table.splitlines() if line.startswith("|") and f"`{reason}`" in line), None)
            assert row is not None, reason
            assert f"| {status} |" in row, (reason, row)


@pytest.mark.parametrize("program", ["gkeys-gen", "gkeys-ldap"])
def test_the_other_programs_print_usage_errors_as_json(program: str, capsys: pytest.CaptureFixture[str]) -> None:
    from gkeys_portage.cli import gen, ldap

    main = gen.main if program == "gkeys-gen" else ldap.main
    with pytest.raises(SystemExit) as stopped:
        main(["--json", "--no-such-option"])
    assert stopped.value.code == 2
    document = json.loads(capsys.readouterr().out)
    assert set(VERDICT_KEYS) <= set(document) and document["reason"] == "usage"
    assert document["next_step"] == f"{program} --help" and document["error"].startswith(f"{program}: ")


def test_a_missing_medium_is_not_found_whether_release_keys_are_installed_or_not(env: GkeysEnv) -> None:
    """Issue 45, item 5: the missing medium is the cause (3, not-found), not the signatures it would have had."""
    from media_helpers import install_release_key

    url = f"{env.server.url}/{STAGE3}"
    for installed in (False, True):
        if installed:
            install_release_key(env)
        code, out, err = _run(env, "verify-media", url)
        assert code == 3 and "not on the mirror" in err, (installed, out, err)
        code, out, _err = _run(env, "--json", "verify-media", url)
        assert code == 3 and json.loads(out)["reason"] == "not-found", (installed, out)


def test_audit_tells_a_fingerprint_nothing_knew_from_a_known_key_that_signed_nothing(env: GkeysEnv) -> None:
    """Issue 45, item 5: ``audit --key`` of a fingerprint no keyring, seed or journal entry named is exit 2
    (``unknown-key``: most likely mistyped, and "0 acceptances" would reassure a compromise audit); a known key
    that signed nothing gkeys accepted is 0 acceptances, exit 0; a key id is a usage error naming both lengths."""
    env.install_devs("alice")
    unknown = "0123456789ABCDEF0123456789ABCDEF01234567"
    code, out, err = _run(env, "audit", "--key", unknown)
    assert code == 2 and "ever named it" in err and f"{env.gkeys} history" in err, (out, err)
    code, out, _err = _run(env, "--json", "audit", "--key", unknown)
    document = json.loads(out)
    assert code == 2 and document["reason"] == "unknown-key" and document["next_step"] == f"{env.gkeys} history"
    code, out, err = _run(env, "--json", "audit", "--key", env.keys.keys["alice"].fingerprint)
    assert code == 0 and json.loads(out)["artifacts"] == [], (out, err)
    code, out, err = _run(env, "audit", "--key", "1234")
    assert code == 2 and "40 or 64 hex digits" in err and f"(next: {env.gkeys} audit --help)" in err, err
    code, out, err = _run(env, "--json", "audit", "--key", "1234")
    document = json.loads(out)
    assert document["reason"] == "usage" and document["next_step"] == f"{env.gkeys} audit --help", document


def test_the_table_in_the_docs_names_the_audit_causes() -> None:
    table = (PROJECT / "docs" / "exit-codes.md").read_text()
    row = next(line for line in table.splitlines() if "`unknown-key`" in line)
    assert "| 2 |" in row and "audit --key" in row
