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
