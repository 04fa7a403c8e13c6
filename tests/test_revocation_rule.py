"""Revocation is gkeys' rule, the same on every engine (issue 34 cases 3 and 4; openpgp/revocations.py).

* A soft revocation ("superseded", "no longer used") of a signing subkey or of a whole key, older than a newer
  self-signature: GnuPG says revoked, gpg-sq (Sequoia) said good; gkeys now says revoked on every engine.
* A key revoked by its designated revoker, pinned in the same category: the ``self-sigs-only`` import dropped
  that revocation (made by another key), so the key still verified; import now keeps it, and only it.

The keys are made by the reference GnuPG (the signers' side): the revocation in a copy of the secret home dated
5 days ago, the newer self-signature in the original 2 days ago, the two public keys then merged, as a key
that was revoked and bound again by its owner looks on a keyserver.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import SIGNER_PROGRAM, GkeysEnv
from tree_helpers import build, context, install_devs

from gkeys_portage.core.errors import RevokedKeyError
from gkeys_portage.core.types import Category
from gkeys_portage.demo.world import KeyFactory, past
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.keyblocks import _packets, armor_public_keys, dearmor_public_keys, designated_revocations
from gkeys_portage.openpgp.revocations import apply_revocation_rule
from gkeys_portage.openpgp.status import SigOutcome
from gkeys_portage.verify.manifest.purpose import purpose_keyring

DATA = b"signed after the revocation\n"


def _gpg(home: Path, *args: str, commands: str = "", when: float | None = None) -> subprocess.CompletedProcess[bytes]:
    """The signers' GnuPG on ``home`` (no passphrases), answering prompts with ``commands``."""
    faked = ["--faked-system-time", f"{int(past(when).timestamp())}!"] if when is not None else []
    done = subprocess.run([SIGNER_PROGRAM, "--homedir", str(home), "--batch", "--pinentry-mode", "loopback",
                           "--passphrase", "", *faked, *(["--command-fd", "0"] if commands else []), *args],
                          input=commands.encode(), capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done


def _copy_home(keys: KeyFactory, target: Path) -> Path:
    shutil.copytree(keys.home, target, ignore=shutil.ignore_patterns("S.*", "*.lock", ".#lk*"))
    return target


def _merged(keys: KeyFactory, fingerprint: str, other: Path, scratch: Path) -> bytes:
    """The key as the factory has it merged with its copy in ``other`` (binary, certifications kept)."""
    merged = GnuPG(scratch, program=SIGNER_PROGRAM)
    merged.import_keys(keys.gpg.export_keys([fingerprint], armor=False, clean=False), options=())
    merged.import_keys(GnuPG(other, program=SIGNER_PROGRAM).export_keys([fingerprint], armor=False, clean=False),
                       options=())
    return merged.export_keys([fingerprint], armor=True, clean=False)


@pytest.fixture(scope="module")
def revoked(keys: KeyFactory, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Public keys by nick: ``softsub`` (its signing subkey revoked as superseded, then bound again),
    ``softkey`` (the key revoked as no longer used, then a newer self-signature), ``desigkey`` (revoked by its
    designated revoker ``desigrev``), ``desigrev``."""
    work = tmp_path_factory.mktemp("revocations")
    for nick in ("softsub", "softkey", "desigrev", "desigkey"):
        if nick not in keys.keys:
            keys.create(nick, created=past(10))
    public: dict[str, bytes] = {}
    soft = keys.keys["softsub"]
    copy = _copy_home(keys, work / "softsub")
    _gpg(copy, "--edit-key", soft.fingerprint, commands="key 1\nrevkey\ny\n2\n\ny\nsave\n", when=5)  # superseded
    _gpg(keys.home, "--quick-set-expire", soft.fingerprint, "3y", soft.signing_subkey, when=2)  # bound again
    public["softsub"] = _merged(keys, soft.fingerprint, copy, work / "merge-softsub")
    key = keys.keys["softkey"]
    copy = _copy_home(keys, work / "softkey")
    _gpg(copy, "--edit-key", key.fingerprint, commands="revkey\ny\n3\n\ny\nsave\n", when=5)  # no longer used
    _gpg(keys.home, "--quick-set-expire", key.fingerprint, "3y", when=2)  # a newer self-signature
    public["softkey"] = _merged(keys, key.fingerprint, copy, work / "merge-softkey")
    revoker, target = keys.keys["desigrev"], keys.keys["desigkey"]
    _gpg(keys.home, "--edit-key", target.fingerprint, commands=f"addrevoker\n{revoker.fingerprint}\ny\nsave\n")
    copy = _copy_home(keys, work / "desig")
    (work / "cmds").write_text("y\n1\nrevoked by its designated revoker\n\ny\n")
    # gpg --desig-revoke asks on a terminal: script(1) lends it one
    subprocess.run(["script", "-qec", f"{SIGNER_PROGRAM} --homedir {copy} --pinentry-mode loopback --passphrase '' "
                    f"--command-file {work / 'cmds'} -o {work / 'desig.rev'} --desig-revoke {target.fingerprint}",
                    "/dev/null"], capture_output=True, check=True)
    assert (work / "desig.rev").stat().st_size > 0
    _gpg(copy, "--import-options", "no-self-sigs-only", "--import", str(work / "desig.rev"))
    public["desigkey"] = _merged(keys, target.fingerprint, copy, work / "merge-desig")
    public["desigrev"] = keys.public("desigrev")
    for home in (work / "softsub", work / "softkey", work / "desig"):
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
    return public


def _verify(env: GkeysEnv, nick: str) -> Any:
    data = env.root / "release.txt"
    data.write_bytes(DATA)
    signature = env.root / "release.txt.asc"
    signature.write_bytes(env.keys.sign_bytes(nick, DATA, env.root))
    return env.run("verify", "-F", str(data), "-s", str(signature), "-C", "gentoo-devs", "-n", nick)


@pytest.mark.parametrize("nick", ["softsub", "softkey"])
def test_a_soft_revocation_stands_whatever_later_self_signatures_say(env: GkeysEnv, revoked: dict[str, bytes],
                                                                      nick: str) -> None:
    install_devs(env, (nick,), public={nick: revoked[nick]})
    result = _verify(env, nick)
    assert result.code == 1 and "revoked" in result.text, result.text


def test_a_key_revoked_by_its_pinned_designated_revoker_is_revoked(env: GkeysEnv, revoked: dict[str, bytes]) -> None:
    install_devs(env, ("desigrev", "desigkey"), public=revoked)
    result = _verify(env, "desigkey")
    assert result.code == 1 and "revoked" in result.text, result.text
    assert _verify(env, "desigrev").code == 0  # the revoker itself is fine


def test_a_designated_revocation_by_an_unpinned_revoker_is_not_kept(env: GkeysEnv, revoked: dict[str, bytes]) -> None:
    install_devs(env, ("desigkey",), public=revoked)  # the revoker is no pin of gentoo-devs
    assert _verify(env, "desigkey").code == 0


def test_verify_tree_refuses_commits_by_a_subkey_revoked_as_superseded_and_bound_again(
        env: GkeysEnv, revoked: dict[str, bytes], tmp_path: Path) -> None:
    install_devs(env, ("softsub",), public={"softsub": revoked["softsub"]})
    repo = build(tmp_path / "repo", env.keys, ["softsub"])
    result = env.run("verify-tree", str(repo.path), "--policy", "all", "--no-record")
    assert result.code == 1 and "revoked" in result.text, result.text


@pytest.mark.parametrize("nick", ["softsub", "softkey"])
def test_keyrings_handed_to_gemato_and_portage_carry_the_rule(env: GkeysEnv, revoked: dict[str, bytes], nick: str,
                                                               tmp_path: Path) -> None:
    """gemato (rsync trees) and Portage's gpg (webrsync snapshots) take their engine's word on revocations: the
    keyring gkeys hands them leaves out what the rule revokes and the engine does not, so gpg-sq cannot accept
    it there either."""
    install_devs(env, (nick,), public={nick: revoked[nick]})
    ctx = context(env)
    pins = ctx.seeds.pins(Category("gentoo-devs"), [nick])
    keyring = ctx.keyring("gentoo-devs")
    if nick == "softkey" and not keyring.gpg().list_keys([env.keys.keys[nick].fingerprint])[0].primary.revoked:
        with pytest.raises(RevokedKeyError, match="is revoked"):  # gpg-sq: the only key is left out
            purpose_keyring(ctx, "gentoo-devs", pins)
        return
    scratch = GnuPG(tmp_path / "verifier")
    scratch.import_report(purpose_keyring(ctx, "gentoo-devs", pins), options=())
    report = scratch.verify_detached(env.keys.sign_bytes(nick, DATA, env.root), DATA)
    assert report.signatures and not any(sig.outcome is SigOutcome.GOOD for sig in report.signatures), report.lines


def _forged(public: bytes) -> bytes:
    """``public`` with the last byte of each key revocation (class 0x20) flipped: a revocation anyone could add."""
    data = bytearray(dearmor_public_keys(public))
    for tag, _start, body, end in list(_packets(bytes(data))):
        if tag == 2 and data[body] == 4 and data[body + 1] == 0x20:
            data[end - 1] ^= 0x01
    return armor_public_keys(bytes(data))


def test_a_forged_designated_revocation_revokes_nothing(env: GkeysEnv, revoked: dict[str, bytes]) -> None:
    install_devs(env, ("desigrev", "desigkey"), public={**revoked, "desigkey": _forged(revoked["desigkey"])})
    assert _verify(env, "desigkey").code == 0


def _engine_listing(env: GkeysEnv, nick: str, revoked: dict[str, bytes]) -> tuple[Any, list[Any], Any]:
    """The keyring holding ``nick``'s soft-revoked key, its listing as an engine that ignores soft revocations
    lists it (gpg-sq: nothing revoked), and the revoked part's fingerprint."""
    install_devs(env, (nick,), public={nick: revoked[nick]})
    keyring = context(env).keyring("gentoo-devs")
    listing = keyring.gpg().list_keys(sigs=True)
    for key in listing:
        for part in key.all_keys():
            part.validity = "f" if part.validity == "r" else part.validity
    demo = env.keys.keys[nick]
    return keyring, listing, demo.signing_subkey if nick == "softsub" else demo.fingerprint


@pytest.mark.parametrize("nick", ["softsub", "softkey"])
def test_the_rule_revokes_what_the_engine_listing_leaves_valid(env: GkeysEnv, revoked: dict[str, bytes],
                                                               nick: str) -> None:
    """gkeys' rule, not the engine, revokes: a listing that shows the soft-revoked key or subkey valid (as
    gpg-sq's does; GnuPG 2.2 and 2.4 revoke it themselves, so the verdict tests above cannot tell) comes out of
    the rule revoked, from the engine's checked revocation signature alone."""
    keyring, listing, part = _engine_listing(env, nick, revoked)
    ruled = apply_revocation_rule(listing, keyring._checked_signatures)
    found = [p for key in ruled for p in key.all_keys() if p.fingerprint == part]
    assert found and found[0].validity == "r", found


def test_the_rule_counts_only_a_good_revocation_by_the_key_or_its_designated_revoker(
        env: GkeysEnv, revoked: dict[str, bytes]) -> None:
    """A revocation record the engine did not find good (``--check-sigs`` "-": forged, or "?": no key to check
    it) revokes nothing under the rule."""
    keyring, listing, part = _engine_listing(env, "softsub", revoked)

    def unchecked(revokers: Any, key: Any) -> Any:
        listed = keyring._checked_signatures(revokers, key)
        for sub in listed.all_keys():
            for sig in sub.signatures:
                if sig.kind == "rev":
                    assert sig.good  # the engine found it good: now say it did not
                    sig.check = "-"
        return listed

    ruled = apply_revocation_rule(listing, unchecked)
    found = [p for key in ruled for p in key.all_keys() if p.fingerprint == part]
    assert found and found[0].validity != "r", found


def test_only_a_revocation_by_a_pinned_designated_revoker_is_imported_again(keys: KeyFactory,
                                                                            revoked: dict[str, bytes]) -> None:
    """What is imported again after a ``self-sigs-only`` import: the designated revocation when the revoker's
    key is in the keyring (pinned in the category) or in the same import, nothing when it is in neither (the
    engine could not check it now, and a later key of that name must not find it waiting)."""
    data = dearmor_public_keys(revoked["desigkey"])
    revoker = keys.keys["desigrev"].fingerprint
    assert designated_revocations(data, lambda: {revoker})
    assert designated_revocations(data + dearmor_public_keys(revoked["desigrev"]), lambda: set())
    assert designated_revocations(data, lambda: set()) == b""
