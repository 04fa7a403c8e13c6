"""Each signature is judged at its own time, by one rule for every engine (issue 41 item 2,
``openpgp/history/timerule.py``), through ``gkeys verify`` with keys built over years (``--faked-system-time``).

| class | right answer | main |
|---|---|---|
| made before a renewal (history kept) | accept | engines-disagree |
| by a key that lapsed and was never extended | accept | accept |
| by a signing subkey later revoked as superseded, made before | accept | key-revoked |
| by the new subkey after the rotation | accept | accept |
| by the superseded subkey after its revocation (a stolen copy) | refuse, key-revoked | refuse |
| by a key later retired (soft key revocation), made before | accept | key-revoked |
| by the retired key after the retirement (a stolen copy) | refuse, key-revoked | refuse |
| by a key later revoked as compromised, made before | refuse, key-revoked | refuse |
| by a key revoked with no reason, made before | refuse, key-revoked | refuse |
| made before a renewal, only the newest self-signature held | refuse, key-history-missing | engines-disagree |
| a garbage signature | refuse | refuse |
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import GkeysEnv
from history_helpers import COMPROMISED, NO_REASON, RETIRED, SUPERSEDED, LifeKey

from gkeys_portage.core.errors import BadSignatureError, ExpiredKeyError, MissingHistoryError, RevokedKeyError
from gkeys_portage.core.types import Fingerprint
from gkeys_portage.openpgp.history.store import Binding, KeyHistory, PartHistory, Revocation
from gkeys_portage.openpgp.history.timerule import judge

CATEGORY = "gentoo-devs"
DATA = b"a commit's worth of data\n"


@pytest.fixture(scope="module")
def lives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[LifeKey, bytes, dict[str, bytes]]]:
    """Keys by class: the key, its public key as gkeys gets it, and signatures by name."""
    work = tmp_path_factory.mktemp("lives")
    made: dict[str, tuple[LifeKey, bytes, dict[str, bytes]]] = {}

    lapsed = LifeKey(work / "lapsed", "lapsed", created=800, expire="1y")
    made["lapsed"] = (lapsed, lapsed.public(), {"before-expiry": lapsed.sign(DATA, when=700)})

    rotated = LifeKey(work / "rotated", "rotated", created=1000, expire="5y")
    sigs = {"old-subkey-before": rotated.sign(DATA, when=600)}
    thief = rotated.stolen(work / "rotated-stolen")
    rotated.rotate(when=400, reason=SUPERSEDED)
    sigs["new-subkey-after"] = rotated.sign(DATA, when=300)
    sigs["old-subkey-after"] = thief.sign(DATA, when=200)
    thief.close()
    made["rotated"] = (rotated, rotated.public(), sigs)

    for nick, reason in (("retired", RETIRED), ("compromised", COMPROMISED), ("noreason", NO_REASON)):
        key = LifeKey(work / nick, nick, created=1000, expire="5y")
        sigs = {"before": key.sign(DATA, when=600)}
        thief = key.stolen(work / f"{nick}-stolen")
        key.revoke(when=400, reason=reason)
        sigs["after"] = thief.sign(DATA, when=200)
        made[nick] = (key, key.public(), sigs)
        thief.close()

    renewed = LifeKey(work / "renewed", "renewed", created=400, expire="1y")
    sigs = {"before-renewal": renewed.sign(DATA, when=300)}
    renewed.renew(when=100)
    made["renewed"] = (renewed, renewed.public(history=False), sigs)
    for key, _public, _sigs in made.values():
        key.close()
    return made


def _verify(env: GkeysEnv, lives: dict[str, tuple[LifeKey, bytes, dict[str, bytes]]],
            nick: str, name: str) -> dict[str, object]:
    key, public, sigs = lives[nick]
    if env.run("list-seed", "-C", CATEGORY, "-n", nick).code != 0:
        assert env.run("add-seed", "-C", CATEGORY, "-n", nick, "-N", nick, "-K", key.fingerprint).code == 0
        path = env.root / f"{nick}.pub.asc"
        path.write_bytes(public)
        result = env.run("import-key", "-C", CATEGORY, "-n", nick, "-F", str(path))
        assert result.code == 0, result.text
    target = env.root / "data.txt"
    target.write_bytes(DATA)
    signature = env.root / f"{nick}-{name}.asc"
    signature.write_bytes(sigs[name])
    result = env.run("--json", "verify", "-F", str(target), "-s", str(signature), "-C", CATEGORY)
    document: dict[str, object] = json.loads(result.out)
    assert (result.code == 0) == (document["verified"] is True), result.text
    return document


@pytest.mark.parametrize(("nick", "name", "reason"), [
    ("lapsed", "before-expiry", None),
    ("rotated", "old-subkey-before", None),  # main: key-revoked (GnuPG's REVKEYSIG)
    ("rotated", "new-subkey-after", None),
    ("rotated", "old-subkey-after", "key-revoked"),
    ("retired", "before", None),  # main: key-revoked
    ("retired", "after", "key-revoked"),
    ("compromised", "before", "key-revoked"),
    ("compromised", "after", "key-revoked"),
    ("noreason", "before", "key-revoked"),
    ("renewed", "before-renewal", "key-history-missing"),  # main: engines-disagree
])
def test_each_class_of_a_key_life(env: GkeysEnv, lives: dict[str, tuple[LifeKey, bytes, dict[str, bytes]]],
                                  nick: str, name: str, reason: str | None) -> None:
    document = _verify(env, lives, nick, name)
    assert document["reason"] == reason, document["error"]
    if reason == "key-history-missing":
        assert "refresh-key" in str(document["next_step"]) and "renewed" in str(document["error"]), document


def test_a_garbage_signature_by_a_key_with_history_is_refused(
        env: GkeysEnv, lives: dict[str, tuple[LifeKey, bytes, dict[str, bytes]]]) -> None:
    _verify(env, lives, "rotated", "new-subkey-after")
    target = env.root / "data.txt"
    target.write_bytes(DATA + b"changed\n")
    signature = env.root / "rotated-new-subkey-after.asc"
    result = env.run("--json", "verify", "-F", str(target), "-s", str(signature), "-C", CATEGORY)
    assert result.code == 1 and json.loads(result.out)["reason"] == "bad-signature", result.text
    signature.write_bytes(b"-----BEGIN PGP SIGNATURE-----\n\nnot a signature\n-----END PGP SIGNATURE-----\n")
    assert env.run("verify", "-F", str(target), "-s", str(signature), "-C", CATEGORY).code == 1


def test_second_opinion_off_leaves_gnupg_s_view(env: GkeysEnv, tmp_path: Path,
                                               lives: dict[str, tuple[LifeKey, bytes, dict[str, bytes]]]) -> None:
    """What the rule accepts beyond GnuPG's view now rests on self-signatures only Sequoia checks: without the
    second opinion a signature by a subkey revoked since is refused as before."""
    env.write_config("[gpg]\nsecond-opinion = no\n")
    document = _verify(env, lives, "rotated", "old-subkey-before")
    assert document["reason"] == "key-revoked", document


# -- the rule itself, on dated facts (openpgp/history/timerule.py) ------------------------------------------------

P, S = "A" * 40, "B" * 40


ALWAYS = (Binding(100, None),)


def _history(*, sub_bindings: tuple[Binding, ...] = ALWAYS, primary_revocations: tuple[Revocation, ...] = (),
             sub_revocations: tuple[Revocation, ...] = (), primary_bindings: tuple[Binding, ...] = ALWAYS,
             ) -> KeyHistory:
    primary = PartHistory(Fingerprint(P), 100, list(primary_bindings), list(primary_revocations))
    sub = PartHistory(Fingerprint(S), 100, list(sub_bindings), list(sub_revocations))
    return KeyHistory(primary, {sub.fingerprint: sub})


@pytest.mark.parametrize(("history", "revoked", "created", "error"), [
    (_history(), {}, 500, None),
    (_history(), {}, 99, BadSignatureError),  # before the key was created
    (_history(primary_bindings=(Binding(100, 300),)), {}, 299, None),  # expired after the signature: fine
    (_history(primary_bindings=(Binding(100, 300),)), {}, 300, ExpiredKeyError),
    (_history(primary_bindings=(Binding(100, 300), Binding(250, 900))), {}, 500, None),  # renewed before expiry
    (_history(primary_bindings=(Binding(100, 300), Binding(400, 900))), {}, 350, ExpiredKeyError),  # in a lapse
    (_history(primary_bindings=(Binding(400, 900),)), {}, 350, MissingHistoryError),  # the older binding is missing
    (_history(sub_bindings=(Binding(100, 300),)), {}, 300, ExpiredKeyError),  # the subkey's own expiry
    (_history(sub_revocations=(Revocation(400, 1),)), {S: True}, 399, None),  # superseded later
    (_history(sub_revocations=(Revocation(400, 1),)), {S: True}, 400, RevokedKeyError),
    (_history(sub_revocations=(Revocation(400, 3),)), {S: True}, 399, None),  # retired later
    (_history(sub_revocations=(Revocation(400, 32),)), {S: True}, 399, None),
    (_history(sub_revocations=(Revocation(400, 2),)), {S: True}, 150, RevokedKeyError),  # compromised: always
    (_history(sub_revocations=(Revocation(400, None),)), {S: True}, 150, RevokedKeyError),  # no reason: always
    (_history(sub_revocations=(Revocation(400, 0),)), {S: True}, 150, RevokedKeyError),
    (_history(sub_revocations=(Revocation(400, 0x7F),)), {S: True}, 150, RevokedKeyError),  # unknown reason: hard
    (_history(sub_revocations=(Revocation(400, 1), Revocation(600, 2))), {S: True}, 150, RevokedKeyError),
    (_history(), {S: True}, 150, RevokedKeyError),  # revoked, no dated revocation in the history: hard
    (_history(sub_revocations=(Revocation(400, 1),)), {}, 500, None),  # a revocation no engine counts: forged
    (_history(primary_revocations=(Revocation(400, 3),)), {P: True, S: True}, 399, None),  # a retired key
    (_history(primary_revocations=(Revocation(400, 3),)), {P: True, S: True}, 401, RevokedKeyError),
    (_history(primary_revocations=(Revocation(400, 2),)), {P: True, S: True}, 150, RevokedKeyError),
])
def test_the_rule(history: KeyHistory, revoked: dict[str, bool], created: int,
                  error: type[Exception] | None) -> None:
    def run() -> None:
        judge(history, S, created, revoked=revoked, who="gentoo-devs/dev", refresh="gkeys refresh-key")

    if error is None:
        run()
    else:
        with pytest.raises(error):
            run()


def test_an_unknown_signing_key_is_missing_history() -> None:
    with pytest.raises(MissingHistoryError) as caught:
        judge(_history(), "C" * 40, 500, revoked={}, who="x", refresh="gkeys refresh-key -C x --force")
    assert caught.value.next_step == "gkeys refresh-key -C x --force"
