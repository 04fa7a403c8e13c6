"""Seed files are bound to their category (issue 11 item 2).

One seed-signing key signs every category's seed file.  Without a binding, the developers' seed file
(validly signed, newer) served at the release seed URL installed developer keys as release keys.
The signature now carries a hashed ``seed-category@gentoo.org`` notation that ``fetch-seed`` checks.
"""

from __future__ import annotations

import json
import os
import struct
import time

import pytest
from conftest import GkeysEnv
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gkeys_portage.core.errors import GpgError, NoSignatureError, SeedCategoryError, UnboundSeedError
from gkeys_portage.core.types import Category, Fingerprint, Nick
from gkeys_portage.keys.seedbinding import CATEGORY_NOTATION, check_binding
from gkeys_portage.openpgp.status import Notation, parse_status
from gkeys_portage.openpgp.verdict import GoodSignature, Pin

FUZZ = settings(max_examples=int(os.environ.get("GKEYS_FUZZ_EXAMPLES", "200")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def _release_root(env: GkeysEnv) -> None:
    """Bootstrap, install the release seeds (gkeys, releng) and releng's key as category gentoo."""
    env.bootstrap()
    env.publish_seeds("gentoo", ("gkeys", "releng"))
    for nick in ("gkeys", "releng"):
        env.server.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick)
    result = env.run("update-seed", "-C", "gentoo")
    assert result.code == 0, result.text


def _signed_by(env: GkeysEnv, nick: str) -> str:
    path = env.root / f"media-{nick}.txt"
    path.write_bytes(b"a release file\n")
    (env.root / f"media-{nick}.txt.asc").write_bytes(env.keys.sign(nick, path))
    return str(path)


def test_developer_seed_served_at_the_release_url_is_refused(env: GkeysEnv) -> None:
    """The attack end to end: the newer developers' seed file (and its genuine signature) served at the
    release seed URL.  Refused naming both categories; release keys unchanged; alice still cannot sign
    as release.  Without the check in fetch_seed this installs alice and bob as release keys."""
    _release_root(env)
    time.sleep(1.1)  # the developers' signature is newer, so the rollback check alone would pass
    devs = env.publish_seeds("gentoo-devs", ("alice", "bob"))
    for nick in ("alice", "bob"):
        env.server.hkp[env.keys.keys[nick].fingerprint] = env.keys.public(nick)
    env.server.publish("seeds/gentoo.seeds", devs)
    env.server.publish("seeds/gentoo.seeds.sig", env.server.files["/seeds/gentoo-devs.seeds.sig"])
    before = env.snapshot()
    for action in ("fetch-seed", "update-seed"):
        result = env.run(action, "-C", "gentoo")
        assert result.code == 1, result.text
        assert "for category gentoo-devs, not gentoo" in result.text
        assert len(result.err.strip().splitlines()) == 1 and "Traceback" not in result.text
        assert env.snapshot() == before
    assert env.run("verify", "-F", _signed_by(env, "alice"), "-C", "gentoo").code == 1
    assert env.run("verify", "-F", _signed_by(env, "releng"), "-C", "gentoo").code == 0
    # The developers' seed file at its own URL is fine.
    assert env.run("fetch-seed", "-C", "gentoo-devs").code == 0


def test_unbound_seed_is_refused_by_default(env: GkeysEnv) -> None:
    """An old-style signature (no category) could be any category's: refused, with the way out."""
    env.bootstrap()
    env.publish_seeds("gentoo-devs", ("alice", "bob"), notations={})
    before = env.snapshot()
    result = env.run("fetch-seed", "-C", "gentoo-devs")
    assert result.code == 1, result.text
    assert "without a category binding" in result.text
    assert "gkeys sign --seed-category gentoo-devs" in result.text
    assert "[policy] unbound-seeds = gentoo-devs" in result.text
    assert "attack" not in result.text.lower()  # missing trust is not worded like an attack
    assert env.snapshot() == before


def test_unbound_seed_is_accepted_where_config_says_its_signer_is_unique(env: GkeysEnv) -> None:
    env.bootstrap()
    env.publish_seeds("gentoo-devs", ("alice", "bob"), notations={})
    # The default signer signs both categories: an unbound signature cannot tell them apart.
    env.write_config("[policy]\nunbound-seeds = gentoo-devs\n")
    result = env.run("fetch-seed", "-C", "gentoo-devs")
    assert result.code == 2 and "also signs gentoo seeds" in result.text, result.text
    # gentoo gets its own signer: gentoo-devs' signer is now unique to it.
    own_signer = env.config.read_text().replace("gentoo = seed-signers gkeys", "gentoo = release-signers releng")
    env.config.write_text(own_signer)
    result = env.run("--json", "fetch-seed", "-C", "gentoo-devs")
    assert result.code == 0, result.text
    assert json.loads(result.out)["fetched"][0]["bound"] is False
    human = env.run("fetch-seed", "-C", "gentoo-devs")
    assert "unbound signature (allowed by [policy] unbound-seeds)" in human.text
    # A seed bound to another category is refused even where unbound ones are allowed.
    time.sleep(1.1)
    env.publish_seeds("gentoo-devs", ("alice",), notations={CATEGORY_NOTATION: "gentoo"})
    result = env.run("fetch-seed", "-C", "gentoo-devs")
    assert result.code == 1 and "for category gentoo, not gentoo-devs" in result.text


def test_unbound_seed_by_a_key_another_category_pins_under_another_name_is_refused(env: GkeysEnv) -> None:
    """Issue 23 item 10: [policy] unbound-seeds compared signer names, not keys.  gentoo's seeds are signed by
    seed-signers/gkeys, gentoo-devs' by other-signers/gkeys2: two names, one key (as gentoo/mirror and
    gentoo-infra/mirror are).  The config check passed, so gentoo's unbound seed file served at the
    gentoo-devs URL installed as gentoo-devs seeds (exit 0).  Now refused by fingerprint; nothing changes."""
    env.bootstrap()
    env.pin_key("other-signers", "gkeys2", "gkeys")
    text = env.config.read_text().replace("gentoo-devs = seed-signers gkeys", "gentoo-devs = other-signers gkeys2")
    env.config.write_text(text + "[policy]\nunbound-seeds = gentoo-devs\n")
    env.publish_seeds("gentoo-devs", ("releng",), notations={})  # gentoo's (unbound) seeds at the devs URL
    before = env.snapshot()
    result = env.run("fetch-seed", "-C", "gentoo-devs")
    assert result.code == 1, result.text
    fpr = env.keys.keys["gkeys"].fingerprint
    assert f"unbound signature by other-signers/gkeys2 ({fpr}), and that key also signs the gentoo seeds" \
           in result.err, result.err
    assert len(result.err.strip().splitlines()) == 1 and "Traceback" not in result.text
    assert env.snapshot() == before
    # a key of its own: accepted as before
    env.pin_key("own-signers", "devsigner", "carol")
    env.config.write_text(env.config.read_text().replace("other-signers gkeys2", "own-signers devsigner"))
    env.publish_seeds("gentoo-devs", ("alice",), signer="carol", notations={})
    result = env.run("fetch-seed", "-C", "gentoo-devs")
    assert result.code == 0, result.text


BAD_UNBOUND = {
    "not a category name": ("unbound-seeds = gentoo/devs", "invalid category"),
    "no signer in [verify-seeds]": ("unbound-seeds = nowhere", "'nowhere' has no seed signer"),
    "signer shared with another category": ("unbound-seeds = gentoo", "also signs gentoo-devs seeds"),
}


@pytest.mark.parametrize("case", list(BAD_UNBOUND), ids=list(BAD_UNBOUND))
def test_bad_unbound_seeds_config_is_an_error(env: GkeysEnv, case: str) -> None:
    line, message = BAD_UNBOUND[case]
    env.write_config(f"[policy]\n{line}\n")
    result = env.run("list-cats")
    assert result.code == 2 and message in result.text and "[policy] unbound-seeds" in result.text, result.text


def _add_unhashed_notation(signature: bytes, name: str, value: str) -> bytes:
    """Append a notation subpacket to the *unhashed* area of a binary v4 signature (anyone can)."""
    tag = signature[0]
    assert tag & 0xC0 == 0x80 and (tag >> 2) & 0xF == 2, "an old-format signature packet"
    size = {0: 1, 1: 2, 2: 4}[tag & 3]
    body = signature[1 + size :]
    hashed_len = struct.unpack(">H", body[4:6])[0]
    start = 6 + hashed_len
    unhashed_len = struct.unpack(">H", body[start : start + 2])[0]
    unhashed = body[start + 2 : start + 2 + unhashed_len]
    data = b"\x14\x80\x00\x00\x00" + struct.pack(">HH", len(name), len(value)) + name.encode() + value.encode()
    unhashed += bytes([len(data)]) + data
    body = body[: start] + struct.pack(">H", len(unhashed)) + unhashed + body[start + 2 + unhashed_len :]
    return bytes([0x89]) + struct.pack(">H", len(body)) + body


def test_a_notation_in_the_unhashed_area_binds_nothing(env: GkeysEnv) -> None:
    """The unhashed area is not covered by the signature: gpg does not report notations there, so a
    mirror cannot rebind a seed file.  Checked both ways: added to an unbound and to a bound signature."""
    _release_root(env)
    time.sleep(1.1)
    devs = env.publish_seeds("gentoo-devs", ("alice", "bob"))
    bound_sig = env.server.files["/seeds/gentoo-devs.seeds.sig"]
    env.server.publish("seeds/gentoo.seeds", devs)
    env.server.publish("seeds/gentoo.seeds.sig", _add_unhashed_notation(bound_sig, CATEGORY_NOTATION, "gentoo"))
    before = env.snapshot()
    result = env.run("fetch-seed", "-C", "gentoo")
    assert result.code == 1 and "for category gentoo-devs, not gentoo" in result.text, result.text
    env.publish_seeds("gentoo-devs", ("alice", "bob"), notations={})
    unbound_sig = env.server.files["/seeds/gentoo-devs.seeds.sig"]
    env.server.publish("seeds/gentoo.seeds.sig", _add_unhashed_notation(unbound_sig, CATEGORY_NOTATION, "gentoo"))
    result = env.run("fetch-seed", "-C", "gentoo")
    assert result.code == 1 and "without a category binding" in result.text, result.text
    assert env.snapshot() == before


def test_a_critical_category_notation_is_a_bad_signature(env: GkeysEnv) -> None:
    """gpg fails a signature with a critical notation it does not know; fetch-seed never sees it as good."""
    env.bootstrap()
    env.publish_seeds("gentoo-devs", ("alice",), notations={"!" + CATEGORY_NOTATION: "gentoo-devs"})
    result = env.run("fetch-seed", "-C", "gentoo-devs")
    assert result.code == 1 and "BAD signature" in result.text, result.text


def test_gkeys_sign_seed_category_makes_a_bound_signature(env: GkeysEnv) -> None:
    """How a seed maintainer signs: `gkeys sign --seed-category CAT`; without it, fetch-seed refuses."""
    env.bootstrap()
    env.write_config(f"[sign]\ncategory = seed-signers\nnick = gkeys\ngnupghome = {env.keys.home}\n")
    seeds = env.root / "gentoo-devs.seeds"
    seeds.write_bytes(env.seed_bytes("alice", "bob"))
    env.server.publish("seeds/gentoo-devs.seeds", seeds.read_bytes())
    unbound = env.run("sign", "-F", str(seeds), "-o", str(env.root / "plain.asc"))
    assert unbound.code == 2 and "is a seed file: sign it for its category with --seed-category" in unbound.text
    assert not (env.root / "plain.asc").exists()
    other = env.root / "notes.txt"
    other.write_bytes(b"not a seed file\n")
    assert env.run("sign", "-F", str(other)).code == 0  # other files are signed as before
    signed = env.run("sign", "-F", str(seeds), "--seed-category", "gentoo-devs")
    assert signed.code == 0 and "bound to seed category gentoo-devs" in signed.text, signed.text
    env.server.publish("seeds/gentoo-devs.seeds.sig", (env.root / "gentoo-devs.seeds.asc").read_bytes())
    result = env.run("fetch-seed", "-C", "gentoo-devs")
    assert result.code == 0 and "signed for category gentoo-devs" in result.text, result.text
    assert env.run("sign", "-F", str(seeds), "--seed-category", "../x").code == 2


RECORDED = """\
[GNUPG:] NOTATION_NAME stray@x.org
[GNUPG:] NEWSIG
[GNUPG:] GOODSIG 21B59E8A872C67B2 T <t@x>
[GNUPG:] NOTATION_NAME seed-category@gentoo.org
[GNUPG:] NOTATION_FLAGS 0 1
[GNUPG:] NOTATION_DATA gentoo-d
[GNUPG:] NOTATION_DATA evs
[GNUPG:] NOTATION_NAME other@x.org
[GNUPG:] NOTATION_FLAGS 1 0
[GNUPG:] NOTATION_DATA a%20b%25c%0A
[GNUPG:] VALIDSIG 9548D91C35DA480E4906876D21B59E8A872C67B2 2026-12-03 1796314301 0 4 0 22 8 00 \
9548D91C35DA480E4906876D21B59E8A872C67B2
[GNUPG:] NEWSIG
[GNUPG:] NOTATION_DATA orphan
[GNUPG:] GOODSIG 31B59E8A872C67B2 U <u@x>
"""


def test_status_parser_reads_notations_per_signature() -> None:
    """NOTATION_* lines belong to the signature they follow; split and percent-escaped data is joined;
    lines outside a signature (or DATA without a NAME) bind nothing."""
    report = parse_status(RECORDED.replace("\\\n", "").splitlines())
    first, second = report.signatures
    assert first.valid and first.notations == [
        Notation("seed-category@gentoo.org", b"gentoo-devs", critical=False, human_readable=True),
        Notation("other@x.org", b"a b%c\n", critical=True, human_readable=False),
    ]
    assert first.notations[0].value == "gentoo-devs"
    assert second.notations == []


FPR = Fingerprint("155D7466912D97381EA7C24A6FD7280E2D0342FA")
notation_line = st.builds(
    lambda keyword, value: f"[GNUPG:] {keyword} {value}",
    st.sampled_from(["NOTATION_NAME", "NOTATION_FLAGS", "NOTATION_DATA", "NEWSIG", "GOODSIG", "VALIDSIG"]),
    st.one_of(st.sampled_from([CATEGORY_NOTATION, "gentoo", "gentoo-devs", "%", "%0", "%ZZ", "%e2%82", "1 1",
                               f"{FPR} 2026-12-03 1796314301 0 4 0 22 8 00 {FPR}", "21B59E8A872C67B2 T"]),
              st.text(max_size=20)))


@FUZZ
@given(st.lists(notation_line, max_size=25))
def test_notation_lines_never_crash_the_parser(lines: list[str]) -> None:
    for sig in parse_status(lines).signatures:
        for notation in sig.notations:
            assert isinstance(notation.value, str)


category_values = st.sampled_from(["gentoo", "gentoo-devs", "gentoo ", "Gentoo", "", "gentoo\x00"])
notations = st.lists(st.one_of(st.builds(lambda v: Notation(CATEGORY_NOTATION, v.encode()), category_values),
                               st.builds(lambda v: Notation("other@x.org", v.encode()), category_values)),
                     max_size=3)


@FUZZ
@given(st.lists(notations, max_size=3), st.booleans())
def test_binding_accepts_only_signatures_that_all_name_exactly_the_category(
        per_signature: list[list[Notation]], allow_unbound: bool) -> None:
    signatures = [GoodSignature(Pin(Category("seed-signers"), Nick("gkeys"), FPR), FPR, 1, tuple(ns))
                  for ns in per_signature]
    named = [[n.value for n in ns if n.name == CATEGORY_NOTATION] for ns in per_signature]
    mismatch = any(value != "gentoo" for values in named for value in values)
    unbound = any(not values for values in named)
    try:
        binding = check_binding(signatures, Category("gentoo"), "u", allow_unbound=allow_unbound)
    except NoSignatureError:
        assert not signatures
    except SeedCategoryError:
        assert mismatch
    except UnboundSeedError:
        assert unbound and not allow_unbound
    else:
        assert signatures and not mismatch and (allow_unbound or not unbound)
        assert binding.bound == (not unbound)


@pytest.mark.parametrize("notation", [{"x@y.org": "a%c"}, {"x=y@z.org": "a"}, {"x@y.org": "a\nb"}])
def test_notations_gpg_would_rewrite_are_refused(env: GkeysEnv, notation: dict[str, str]) -> None:
    """gpg expands %-sequences in notation values (``%c`` becomes a counter): never sign what was not asked."""
    path = env.root / "f"
    path.write_bytes(b"x")
    with pytest.raises(GpgError, match="refusing notation"):
        env.keys.sign("gkeys", path, notations=notation)
