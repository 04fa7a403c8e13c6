"""The commit parser never guesses: two signature headers make the commit unverifiable."""

from __future__ import annotations

from gkeys_portage.verify.git.objects import INVALID_SIGNATURE, parse_commit

ARMOR = b"-----BEGIN PGP SIGNATURE-----\n \n AAAA\n -----END PGP SIGNATURE-----"
HEAD = b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor a <a@g.org> 1 +0000\ncommitter a <a@g.org> 1 +0000\n"


def test_two_gpgsig_headers_make_the_signature_invalid() -> None:
    raw = HEAD + b"gpgsig " + ARMOR + b"\ngpgsig " + ARMOR + b"\n\nmessage\n"
    commit = parse_commit("a" * 40, raw)
    assert commit.signature == INVALID_SIGNATURE
    assert not commit.signature.startswith(b"-----BEGIN")
    assert b"gpgsig" not in commit.payload


def test_one_gpgsig_header_is_split_from_the_payload() -> None:
    commit = parse_commit("a" * 40, HEAD + b"gpgsig " + ARMOR + b"\n\nmessage\n")
    assert commit.signature is not None and commit.signature.startswith(b"-----BEGIN PGP SIGNATURE-----")
    assert commit.payload == HEAD + b"\nmessage\n"
