"""verify-tree --policy all over a small copy of a real-world history shape (issue 18 goal 4).

The shape (``bench/tree_shape.py``, the builder of ``bench/tree_large.py``): one root, epochs of four
parallel lanes merged back by two-parent merges or an octopus, developer keys with a certify-only
primary and a signing subkey, some keys expired since they signed, some whose signing subkey was
rotated (the old one expired a month after the new one took over).  Real gpg signs every commit with
its clock at the commit's epoch; real git stores them in packfiles.

GnuPG's status lines for these cases (checked below, gpg 2.2): a signature made before its key or
subkey expired gets ``EXPKEYSIG`` + ``VALIDSIG`` (accepted: the expiry lies after the signature); one
made after the expiry gets the same lines (refused on the key's expiry date from the listing); a
subkey revoked for any reason, "superseded" included, gets ``REVKEYSIG`` for every signature, however
old (refused: GnuPG's verdict stands, and the message names the next step).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from tree_shape import (  # noqa: E402
    DAY,
    Grower,
    Shape,
    add_commit,
    build_shape,
    extend_secret,
    refresh_verifier,
    revoke_first_subkey,
)

from gkeys_portage.cli.main import main as gkeys_main  # noqa: E402
from gkeys_portage.core.config import load_config  # noqa: E402
from gkeys_portage.core.types import Fingerprint  # noqa: E402
from gkeys_portage.demo.world import KeyFactory  # noqa: E402
from gkeys_portage.keys.context import Gkeys  # noqa: E402
from gkeys_portage.openpgp.colons import Signature, SubKey  # noqa: E402
from gkeys_portage.openpgp.gnupg import GnuPG  # noqa: E402
from gkeys_portage.verify.git.objects import GitRepo  # noqa: E402
from gkeys_portage.verify.git.revocation import revoked_subkey_reason, subkey_revocation  # noqa: E402
from gkeys_portage.verify.git.tree import TreeOptions, TreeVerifier  # noqa: E402

COMMITS = 80


@pytest.fixture
def shape(tmp_path: Path) -> Iterator[Shape]:
    """80 commits by 8 keys (2 expired since signing, 2 rotated), 4 lanes of 4 commits per epoch."""
    built, factory = build_shape(tmp_path / "shape", commits=COMMITS, keys=8, expired=2, rotated=2,
                                 per_lane=4, octopus_every=3, record_signers=True)
    yield built
    factory.close()


def verify(shape: Shape, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    """``gkeys --json verify-tree REPO args`` in-process."""
    capsys.readouterr()
    code = gkeys_main(["-c", str(shape.config), "--json", "verify-tree", str(shape.repo), *args])
    return code, json.loads(capsys.readouterr().out)


def status_lines(shape: Shape, commit: str) -> list[str]:
    """gpg's status keywords for one commit, verified against the verifier's keyring."""
    parsed = GitRepo(shape.repo).read_commits([commit])[commit]
    assert parsed.signature is not None
    report = GnuPG(shape.keyring).verify_detached(parsed.signature, parsed.payload)
    return [line.split()[0] for line in report.lines]


def move(shape: Shape, tip: str) -> None:
    GitRepo(shape.repo).run("update-ref", "refs/heads/master", tip)


def test_shape_has_what_it_claims(shape: Shape) -> None:
    repo = GitRepo(shape.repo)
    assert shape.commits == COMMITS == len(repo.rev_list(shape.tip))
    assert int(repo.run("rev-list", "--count", "--min-parents=3", shape.tip).stdout) >= 1  # octopus
    assert int(repo.run("rev-list", "--count", "--merges", shape.tip).stdout) == shape.merges > 5
    assert list((shape.repo / ".git" / "objects" / "pack").glob("*.pack"))
    used = set(shape.signers.values())
    now = time.time()
    for key in shape.keys.values():
        if key.kind == "expired":
            assert key.expires is not None and key.expires < now and key.subkeys[0] in used
        if key.kind == "rotated":
            assert key.old_expires is not None and key.old_expires < now
            assert set(key.subkeys) <= used  # the old subkey signed before the rotation, the new one after
    assert shape.kinds() == {"normal": 4, "expired": 2, "rotated": 2}


def test_legitimate_history_passes_policy_all(shape: Shape, capsys: pytest.CaptureFixture[str]) -> None:
    """Expired-since-signing keys, old rotated subkeys used while valid, merges, octopus: all good."""
    code, data = verify(shape, capsys, "--policy", "all")
    assert code == 0, data
    assert data["verified"] is True and data["checked"] == COMMITS
    old = {k.subkeys[0] for k in shape.keys.values() if k.kind != "normal"}
    by_old = [c for c, sub in shape.signers.items() if sub in old]
    assert by_old
    for commit in by_old[:4]:
        lines = status_lines(shape, commit)
        assert "EXPKEYSIG" in lines and "VALIDSIG" in lines, lines


def test_incremental_run_checks_exactly_the_new_commits(shape: Shape, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = verify(shape, capsys, "--policy", "all")
    assert code == 0 and data["checked"] == COMMITS
    before, merges = shape.tip, shape.merges
    Grower(shape, lanes=4, per_lane=4).grow(100, 3600)
    assert shape.merges > merges
    code, data = verify(shape, capsys)
    assert code == 0, data
    assert data["checked"] == 100 and data["base"] == before and data["tip"] == shape.tip


def _rotated(shape: Shape) -> Any:
    return next(k for k in shape.keys.values() if k.kind == "rotated")


def _expired(shape: Shape) -> Any:
    return next(k for k in shape.keys.values() if k.kind == "expired")


def _normal(shape: Shape) -> Any:
    return next(k for k in shape.keys.values() if k.kind == "normal")


def bad_commit(shape: Shape, case: str) -> str:
    """Build one refused commit on top of the shape's tip; return it."""
    when = time.time() - DAY
    if case == "old-subkey-after-expiry":  # the rotated-out subkey, used after it expired
        key = _rotated(shape)
        extend_secret(shape, key.nick, key.old_expires - DAY, subkey=key.subkeys[0])
        return add_commit(shape, [shape.tip], when, subkey=key.subkeys[0], nick=key.nick)
    if case == "expired-key-after-expiry":
        key = _expired(shape)
        extend_secret(shape, key.nick, key.expires - DAY, subkey=key.subkeys[0])
        return add_commit(shape, [shape.tip], when, subkey=key.subkeys[0], nick=key.nick)
    if case == "new-subkey-backdated":  # the rotated-in subkey, signing "before" it existed
        key = _rotated(shape)
        return add_commit(shape, [shape.tip], key.rotated - 10 * DAY, subkey=key.subkeys[1], nick=key.nick,
                          backdate=True)
    side = [add_commit(shape, [shape.tip], when - 60 * i, subkey=_normal(shape).subkeys[0], nick="side")
            for i in (1, 2)]
    if case == "unsigned-merge":
        return add_commit(shape, [shape.tip, side[0]], when, subkey=None, message="merge")
    stranger = KeyFactory(shape.work / "stranger")
    key = stranger.create("stranger", created=datetime.fromtimestamp(when - 9 * DAY, UTC))
    if case == "octopus-unpinned":  # in the keyring, but no seed pins it
        GnuPG(shape.keyring).import_keys(stranger.public("stranger"))
    else:
        assert case == "octopus-unknown"
    try:
        return add_commit(shape, [shape.tip, *side], when, subkey=key.signing_subkey, nick="stranger",
                          home=stranger.home, message="octopus merge")
    finally:
        stranger.close()


@pytest.mark.parametrize(("case", "code"), [
    ("old-subkey-after-expiry", "expired-key"),
    ("expired-key-after-expiry", "expired-key"),
    ("new-subkey-backdated", "bad-signature"),  # gpg: ERRSIG rc 39 (time conflict)
    ("unsigned-merge", "no-signature"),
    ("octopus-unpinned", "signer-not-pinned"),
    ("octopus-unknown", "unknown-signer"),
])
def test_refusals_in_the_shape(shape: Shape, capsys: pytest.CaptureFixture[str], case: str, code: str) -> None:
    """Each bad commit on top of the good history is the one refused, for its own reason; a good commit
    above it does not help."""
    bad = bad_commit(shape, case)
    top = add_commit(shape, [bad], time.time() - 600, subkey=_normal(shape).subkeys[0], nick="top")
    move(shape, top)
    status, data = verify(shape, capsys, "--policy", "all")
    assert status == 1, data
    assert [b["commit"] for b in data["bad"]] == [bad] and data["bad"][0]["code"] == code, data["bad"]
    assert data["first_good_ancestor"] == shape.tip  # the good history below is named
    if case.endswith("after-expiry"):
        assert "EXPKEYSIG" in status_lines(shape, bad) and "VALIDSIG" in status_lines(shape, bad)
    if case == "new-subkey-backdated":
        assert "ERRSIG" in status_lines(shape, bad) and "VALIDSIG" not in status_lines(shape, bad)
        assert "dated before the key that made it was created" in data["bad"][0]["reason"], data["bad"]


@pytest.mark.parametrize(("menu", "reason"), [(2, "superseded"), (1, "compromised")])
def test_revoked_rotated_subkey_is_judged_at_each_commit_s_time(
        shape: Shape, capsys: pytest.CaptureFixture[str], menu: int, reason: str) -> None:
    """A rotation that *revokes* the old subkey (gpg's menu 2, "superseded"; or 1, "compromised"): GnuPG
    reports REVKEYSIG for every signature of that subkey, also those made long before the revocation.  gkeys
    reads it under the time rule (issue 41): a superseded subkey keeps the commits it signed before its
    revocation, a compromised one fails them all.  A refused commit's reason names the subkey (not the
    developer's key), when and why it was revoked, and asks the developer.  The new subkey's commits stay good."""
    key = _rotated(shape)
    assert key.rotated is not None and key.old_expires is not None
    # the old subkey (its secret copy extended) signs after the revocation date, before gpg learns of it
    extend_secret(shape, key.nick, key.old_expires - DAY, subkey=key.subkeys[0])
    late = add_commit(shape, [shape.tip], time.time() - DAY, subkey=key.subkeys[0], nick=key.nick)
    top = add_commit(shape, [late], time.time() - 600, subkey=key.subkeys[1], nick=key.nick)
    move(shape, top)
    revoke_first_subkey(shape.secret, key.fingerprint, key.rotated + DAY, reason=menu)
    refresh_verifier(shape, key.nick)
    by_old = {c for c, sub in shape.signers.items() if sub == key.subkeys[0]}
    assert by_old and "REVKEYSIG" in status_lines(shape, next(iter(by_old)))
    assert "REVKEYSIG" in status_lines(shape, late)
    status, data = verify(shape, capsys, "--policy", "all")
    assert status == 1
    # main: by_old | {late} for both reasons
    assert {b["commit"] for b in data["bad"]} == ({late} if reason == "superseded" else by_old | {late}), data
    for bad in data["bad"]:
        text = bad["reason"]
        assert bad["code"] == "revoked-key"
        assert f"signing subkey {key.subkeys[0]} was revoked" in text and f"({reason})" in text, text
        assert "--accept COMMIT" not in text and f"ask gentoo-devs/{key.nick}" in text, text
        assert ("after the revocation" in text) == (bad["commit"] == late), text
    status, data = verify(shape, capsys, "--range", f"{late}..{top}")
    assert status == 0, data  # the new subkey is fine


def _sub(*revocations: tuple[str, int | None]) -> SubKey:
    sigs = [Signature("sig", "AA", 22, 100, None, "18x", 8)]
    sigs += [Signature("rev", "AA", 22, created, None, sig_class, 8) for sig_class, created in revocations]
    return SubKey(Fingerprint("B" * 40), "B" * 16, 22, 255, "ed25519", 100, None, "r", "s", sigs)


@pytest.mark.parametrize(("sub", "signed", "words", "next_step"), [
    (_sub(("28x,01", 2000)), 1000, "(superseded), after this commit was signed", "--accept"),
    (_sub(("28x,03", 2000)), 1000, "(retired), after this commit was signed", "--accept"),
    (_sub(("28x,01", 2000)), 3000, "(superseded) and this commit was signed after the revocation", "ask"),
    (_sub(("28x,02", 2000)), 1000, "(compromised) and this commit was signed before the revocation", "ask"),
    (_sub(("28x,00", 2000)), 1000, "(no reason given)", "ask"),
    (_sub(("28x", 2000)), 1000, "(no reason given)", "ask"),
    (_sub(("28x,7f", 2000)), 1000, "(reason 7f)", "ask"),
    (_sub(("28x,02", 1500), ("28x,01", 2000)), 1000, "(superseded)", "--accept"),  # the newest counts
    (_sub(("28x,01", None)), 1000, "and this commit was signed", "ask"),  # no date: not "before"
    (_sub(), 1000, "(GnuPG refuses", "ask"),  # no revocation signature listed
])
def test_revoked_subkey_words(sub: SubKey, signed: int, words: str, next_step: str) -> None:
    """Only the words depend on the revocation signature (the verdict is GnuPG's REVKEYSIG, always refused)."""
    text = revoked_subkey_reason("gentoo-devs/dev", "A" * 40, sub.fingerprint, signed, subkey_revocation(sub))
    assert words in text and next_step in text, text
    assert ("--accept" in text) == (next_step == "--accept"), text


def test_report_keeps_only_the_refused_verdicts(shape: Shape) -> None:
    """A whole-history run keeps a count of the good commits, not a record of each (memory at scale)."""
    bad = add_commit(shape, [shape.tip], time.time() - DAY, subkey=None)
    top = add_commit(shape, [bad], time.time() - 600, subkey=_normal(shape).subkeys[0], nick="top")
    move(shape, top)
    verifier = TreeVerifier(Gkeys(load_config(shape.config)), TreeOptions(policy="all"))
    report = verifier.verify_repo(shape.repo, record=False)
    assert report.checked == COMMITS + 2 and not report.ok
    assert [v.commit for v in report.refused] == [bad] and report.first_good == shape.tip
