"""Verify a stage3 tarball or an ISO against every signed sibling found beside it.

Siblings (design.md §5, ``verify-media``):
* ``<file>.asc``: a detached signature over the file;
* ``<file>.DIGESTS`` (clearsigned, current form), ``<file>.DIGESTS.asc`` (older clearsigned form; or a detached
  signature over an unsigned ``.DIGESTS``), ``<file>.sha256`` (clearsigned);
* ``<file>.CONTENTS`` / ``<file>.CONTENTS.gz``: checked against their DIGESTS entries when present.

Every sibling found is checked and must pass (an ``.asc`` beside a statement listing the file: on its digest prefix
only, :mod:`gkeys_portage.verify.media.prefix`); at least one signed statement is required.  Only the text gpg
says was signed is parsed.

One strong digest per signed statement binds the file (:func:`to_check`): the first of :data:`PREFERRED` that
the statement lists (SHA512, what the handbook's ``sha512sum -c`` checks, so our verdict and the handbook
reader's agree), the others it lists are recorded as ``unchecked``; ``[media] all-digests = yes`` checks every
listed digest.  Weak digests (MD5, SHA1) never count: a statement listing no strong one is checked on
everything it lists, and a strong digest must still match somewhere.  Two statements that list one algorithm
for the same file must list the same digest, checked or not (:func:`_agreeing`).

The file must also be bound to its *name* (a detached ``.asc`` names no file, so an old release with
its genuine ``.asc`` could be served under a newer name).  One of these rules must pass, and the
result names it (:data:`NAME_RULES`):

* ``listed``: a signed statement (``.DIGESTS``, ``.sha256``) lists the file by name with a matching
  strong digest;
* ``listed-in-latest``: the verified ``latest-*.txt`` that ``fetch-media --latest`` chose the file from
  names it with its size (:class:`NamedEntry`), and the file has that size;
* ``signed-after-build``: only when asked for (``--bind-by-date``, ``[fetch] bind-by-date``): nothing
  signed names the file, but its name carries a build stamp (``stage3-amd64-openrc-20261201T170321Z.tar.xz``)
  and the ``.asc`` was made at or after it.  That binds a *date*, not a name: another product's genuine
  build signed later (an i686 musl stage3 under an amd64 name) passes it, so it is never the default;
* ``allowed-unnamed``: none of these, and the caller allowed it explicitly (``--allow-unnamed``).

Only signed text names a file: an unsigned ``.DIGESTS`` or ``.sha256`` names nothing; when nothing else does,
the refusal says which statement is unsigned or missing and what to do.

The file is read as few times as the verdict needs (:mod:`gkeys_portage.verify.media.passes`): once when a
signed statement lists it (every digest from that read; an ``.asc`` beside it is not needed, and is only
compared on its digest prefix, :mod:`gkeys_portage.verify.media.prefix`), twice side by side for a lone
``.asc`` (gpg's read and Sequoia's, which also gives the journal its digest), held still by a read lease
(:mod:`gkeys_portage.verify.media.pinned`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from gkeys_portage.core.config import Config
from gkeys_portage.core.errors import BadInputError, NoSignatureError, NotVerifiedError
from gkeys_portage.core.state import read_limited
from gkeys_portage.keys.context import Gkeys, SignatureVerifier
from gkeys_portage.keys.purposes import Purpose
from gkeys_portage.openpgp.verdict import GoodSignature, VerifyResult
from gkeys_portage.verify.media.digests import (
    STRONG,
    DigestList,
    hashlib_name,
    name_stamps,
    parse_digests,
    shown,
    stamp_time,
)
from gkeys_portage.verify.media.fanout import read_once
from gkeys_portage.verify.media.passes import asc_agrees, asc_hashes, asc_pass, checked, listed_pass
from gkeys_portage.verify.media.pinned import FileChangedError
from gkeys_portage.verify.media.record import JOURNALED

DETACHED = ".asc"
STATEMENTS = (".DIGESTS", ".DIGESTS.asc", ".sha256")
CONTENTS = (".CONTENTS.gz", ".CONTENTS")
SIGNED_SIBLINGS = (DETACHED, *STATEMENTS)
ALL_SIBLINGS = (*SIGNED_SIBLINGS, *CONTENTS)
MAX_STATEMENT = 4 * 1024 * 1024
CLEARSIGN_MARKER = b"-----BEGIN PGP SIGNED MESSAGE-----"
DETACHED_MARKER = b"-----BEGIN PGP SIGNATURE-----"

Progress = Callable[[int, int], None]

#: How a verified file was bound to its name (see the module docstring).
NAME_RULES = ("listed", "listed-in-latest", "signed-after-build", "allowed-unnamed")
#: Strong digests in order of preference: the one a statement is checked on (see the module docstring).
PREFERRED = ("SHA512", "BLAKE2B", "SHA256")


class DigestMismatchError(NotVerifiedError):
    """A signed statement lists a hash that the file does not have."""


class NotListedError(NotVerifiedError):
    """A signed statement found beside the file says nothing about the file."""


class UnnamedMediaError(NotVerifiedError):
    """Only a detached signature vouches for the file, and nothing signed binds it to its name."""


@dataclass(frozen=True)
class SignedBy:
    """One sibling that verified, and the pinned key that signed it."""

    source: str
    kind: str
    signature: GoodSignature

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {"source": self.source, "kind": self.kind, **self.signature.to_json()}


@dataclass(frozen=True)
class DigestCheck:
    """One listed hash of one file, and what became of it: ``match``, ``skipped`` (not computable here) or
    ``unchecked`` (another strong digest of the same statement was checked, :func:`to_check`)."""

    filename: str
    algorithm: str
    source: str
    outcome: str

    def to_json(self) -> dict[str, str]:
        """Machine-readable form for ``--json``."""
        return {"file": self.filename, "algorithm": self.algorithm, "source": self.source, "result": self.outcome}


@dataclass
class MediaVerification:
    """A verified release file: who signed which sibling, which digests matched, what was skipped."""

    file: str
    category: str
    signed: list[SignedBy] = field(default_factory=list)
    checks: list[DigestCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: names of the siblings that were verified or checked (ignored ones are not listed): the ones worth keeping
    verified_files: list[str] = field(default_factory=list)
    #: which of :data:`NAME_RULES` bound the file to its name, and in words
    name_rule: str = ""
    name_detail: str = ""
    size: int = 0  # bytes of the file verified
    digests: dict[str, str] = field(default_factory=dict)  # hashlib name -> hex of the file verified (a strong one)
    #: what was said of siblings not needed for the verdict (a detached .asc beside a listing statement)
    asides: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {"file": self.file, "category": self.category, "verified": True,
                "signatures": [s.to_json() for s in self.signed], "digests": [c.to_json() for c in self.checks],
                "name": {"rule": self.name_rule, "detail": self.name_detail}, "notes": self.notes,
                "not_needed": self.asides}


@dataclass
class _Statement:
    """A verified DIGESTS-like sibling and its parsed entries."""

    source: str
    digests: DigestList


def find_siblings(path: Path) -> dict[str, Path]:
    """``{suffix: path}`` of the siblings that exist beside ``path``."""
    found = {}
    for suffix in ALL_SIBLINGS:
        candidate = path.with_name(path.name + suffix)
        if candidate.is_file():
            found[suffix] = candidate
    return found


def _has_armor(data: bytes, marker: bytes) -> bool:
    """True if an armor header line ``marker`` starts any line (text may precede it)."""
    return (b"\n" + data).find(b"\n" + marker) >= 0


def _detached(path: Path | None) -> bytes | None:
    """The bytes of ``path`` if it holds an armored detached signature (not a clearsigned message), else None
    (read once: the bytes judged are the bytes gpg gets)."""
    if path is None:
        return None
    data = read_limited(path, MAX_STATEMENT, "signature")
    return data if _has_armor(data, DETACHED_MARKER) and not _has_armor(data, CLEARSIGN_MARKER) else None


def signed_text(data: bytes, source: str) -> str:
    """The signed text as UTF-8 (anything else is bad input)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{source}: signed text is not UTF-8") from exc


def to_check(entries: dict[str, str], *, all_digests: bool = False) -> dict[str, str]:
    """The listed digests ``{algorithm: hex}`` of one statement that are checked.

    By default one: the first of :data:`PREFERRED` that is listed and computable here.  With
    ``all_digests``, or when the statement lists no strong digest, every listed one (weak ones never
    count on their own: see :meth:`MediaVerifier.verify`).
    """
    if not all_digests:
        for algorithm in PREFERRED:
            if algorithm in entries and hashlib_name(algorithm) is not None:
                return {algorithm: entries[algorithm]}
    return dict(entries)


def all_digests(config: Config) -> bool:
    """``[media] all-digests`` (default no): check every digest a statement lists, not one strong one."""
    return config.flag("media", "all-digests", False)


def media_signatures(ctx: Gkeys, category: str, nick: str | None = None) -> SignatureVerifier:
    """The signature verifier for release media: ``category``'s pinned keys (only ``nick``'s if given) of
    purpose release-media (:mod:`gkeys_portage.keys.purposes`: in the packaged ``gentoo`` category the
    releng and weekly keys, never the snapshot or mirror key)."""
    return ctx.verifier(category, [nick] if nick else [], purpose=Purpose.RELEASE_MEDIA)


def _hash_plan(expected: list[tuple[str, dict[str, str]]]) -> list[str]:
    """The hashlib names to compute for the listed algorithms (unavailable ones left out); SHA-256 if none is strong."""
    names = [n for n in dict.fromkeys(hashlib_name(a) for _, entries in expected for a in entries) if n is not None]
    return names if any(name in JOURNALED for name in names) else [*names, "sha256"]  # the journal's digest


def _agreeing(name: str, expected: list[tuple[str, dict[str, str]]]) -> None:
    """Raise :class:`DigestMismatchError` if two signed statements list different digests of one algorithm for
    ``name``: each is checked on one digest (:func:`to_check`), so a ``.DIGESTS`` whose SHA256 line contradicts
    the ``.sha256`` would otherwise pass on its SHA512 line; a release that says two things is not one release."""
    first: dict[str, tuple[str, str]] = {}
    for source, entries in expected:
        for algorithm, listed in entries.items():
            other, said = first.setdefault(algorithm, (source, listed))
            if said != listed:
                raise DigestMismatchError(
                    f"{name}: {other} and {source} list different {algorithm} digests for {name} ({said[:16]}…, "
                    f"{listed[:16]}…): signed statements that contradict each other are not one release; next: "
                    f"fetch {name} and its siblings again from the release directory")


@dataclass(frozen=True)
class NamedEntry:
    """A file named, with its size, by signed text other than its own siblings: the entry of a verified
    ``latest-*.txt`` that ``fetch-media --latest`` chose (``source`` is that list's name)."""

    source: str
    filename: str
    size: int


def _signed_looking(siblings: dict[str, Path]) -> list[str]:
    """The suffixes of the statements beside a file that carry a signature (clearsigned, or a ``.DIGESTS``
    with a detached ``.DIGESTS.asc``); whether it verifies is decided later."""
    found = []
    for suffix in STATEMENTS:
        if suffix not in siblings:
            continue
        data = read_limited(siblings[suffix], MAX_STATEMENT, "signed statement")
        if _has_armor(data, CLEARSIGN_MARKER) or (suffix == ".DIGESTS" and _detached(siblings.get(".DIGESTS.asc"))):
            found.append(suffix)
    return found


def _what_is_missing(name: str, present: set[str], signed: set[str]) -> str:
    """``FILE.DIGESTS is not signed; there is no FILE.sha256``: why no statement names ``name``."""
    unsigned, absent = [], []
    for suffix in (".DIGESTS", ".sha256"):
        if suffix in signed or (suffix == ".DIGESTS" and ".DIGESTS.asc" in signed):
            continue
        if suffix in present:
            unsigned.append(name + suffix)
        elif suffix == ".DIGESTS" and ".DIGESTS.asc" in present:
            unsigned.append(name + ".DIGESTS.asc")
        else:
            absent.append(name + suffix)
    parts = [f"{shown} is not signed (unsigned text names nothing)" for shown in unsigned]
    if absent:
        parts.append(f"there is no {' or '.join(absent)}")
    return "; ".join(parts) or "no signed statement lists it"


def _unnamed(name: str, missing: str, date: str = "") -> UnnamedMediaError:
    """The refusal of a file nothing signed binds to its name, what is missing, and what to do about it."""
    return UnnamedMediaError(
        f"{name}: not bound to its name: a detached .asc names no file, and nothing signed names {name} "
        f"({missing}){date}; next: fetch the signed {name}.DIGESTS from the release directory, or use "
        f"'gkeys fetch-media --latest PRODUCT' (its signed latest list names the file and its size); only if "
        f"you know this is the right file: --allow-unnamed ([fetch] allow-unnamed = yes for gkeys-fetch)")


class MediaVerifier:
    """Checks one release file with one category's pinned keys.

    ``named`` is a signed entry naming the file and its size (``fetch-media --latest``).  ``bind_by_date``
    accepts an ``.asc`` made after the build stamp in the name as binding it (a date, not a name);
    ``allow_unnamed`` accepts a file that only a detached signature vouches for even when nothing binds
    it to its name (see the module docstring); both off by default.  ``all_digests`` checks every digest a
    statement lists instead of its preferred strong one (:func:`to_check`).
    """

    def __init__(self, verifier: SignatureVerifier, category: str, *, allow_unnamed: bool = False,
                 bind_by_date: bool = False, named: NamedEntry | None = None, all_digests: bool = False) -> None:
        self.verifier = verifier
        self.category = category
        self.allow_unnamed = allow_unnamed
        self.bind_by_date = bind_by_date
        self.named = named
        self.all_digests = all_digests

    def verify(self, path: Path, progress: Progress | None = None) -> MediaVerification:
        """Verify ``path`` against every sibling found; raise the precise error on any failure.

        With a signed-looking statement (:func:`_signed_looking`) the statements are verified (both engines)
        and the file is read once for their digests (:func:`~gkeys_portage.verify.media.passes.listed_pass`);
        an ``.asc`` beside them must agree on its digest prefix.  Otherwise the ``.asc`` is checked by gpg and
        Sequoia reading the held file side by side (:func:`~gkeys_portage.verify.media.passes.asc_pass`).
        """
        if not path.is_file():
            raise BadInputError(f"{path}: no such file")
        siblings = find_siblings(path)
        result = MediaVerification(str(path), self.category)
        signature = self._detached_signature(siblings)
        source = path.name + DETACHED
        good: VerifyResult | None = None
        statements: list[_Statement] = []
        expected: list[tuple[str, dict[str, str]]] = []
        if signature is None or _signed_looking(siblings):  # a signed statement: one read (passes.listed_pass)
            statements = self._statements(siblings, result)
            if not statements:
                found = ", ".join(p.name for s, p in siblings.items() if s in STATEMENTS)
                raise NoSignatureError(f"nothing signed {path.name}: no {', '.join(SIGNED_SIBLINGS)} sibling"
                                       + (f" is signed (found unsigned {found})" if found else " found"))
            expected = self._expected(path.name, statements)
            _agreeing(path.name, expected)
            plan = _hash_plan(self._checked_part(expected))
            size, states = listed_pass(path, list(dict.fromkeys([*plan, *asc_hashes(signature)])), progress)
            digests = {name: states[name].hexdigest() for name in plan}
            self._compare(path.name, expected, digests, result)  # first: a tampered file is named as such
            if signature is not None:  # then the .asc, which only must not disagree
                listed_by = ", ".join(s.source for s in statements)
                result.asides += asc_agrees(path.name, signature, states, listed_by)
                result.verified_files.append(source)
        else:  # only the .asc signs it: gpg's and Sequoia's reads side by side (passes.asc_pass)
            late: list[_Statement] = []  # a statement looked unsigned: none may verify now (it was not compared)
            size, digests, good = asc_pass(path, signature, self.verifier.detached, source,
                                           lambda: late.extend(self._statements(siblings, result)), progress)
            if late:
                raise FileChangedError(f"{', '.join(s.source for s in late)} was signed when verified but not when "
                                       f"looked at, so nothing compared it with {path.name}: it changed meanwhile; "
                                       f"not verified. Let whatever writes it finish, then run: gkeys verify-media "
                                       f"{path}")
            result.signed.append(SignedBy(source, "detached signature", good.signer))
            result.verified_files.append(source)
        if statements and not any(c.outcome == "match" and c.algorithm in STRONG for c in result.checks):
            raise NotVerifiedError(f"{path.name}: no strong digest (SHA256, SHA512, BLAKE2B) could be checked")
        self._contents(siblings, statements, result)
        if not result.signed:  # defence in depth: never report "verified" without a good signature
            raise NoSignatureError(f"nothing signed {path.name}: no sibling verified")
        self._bind_name(path.name, size, siblings, statements, good, result)
        return replace(result, size=size, digests=digests)  # decided; the caller journals it (record.journal_media)

    def _bind_name(self, name: str, size: int, siblings: dict[str, Path], statements: list[_Statement],
                   detached: VerifyResult | None, result: MediaVerification) -> None:
        """Set ``result.name_rule``; raise :class:`UnnamedMediaError` if no rule binds ``name``."""
        if statements:  # every statement lists the file, and a strong digest matched (checked above)
            result.name_rule = "listed"
            result.name_detail = f"{', '.join(s.source for s in statements)} list(s) {name} by name"
            return
        named = self.named
        if named is not None and named.filename == name and named.size == size:
            result.name_rule = "listed-in-latest"
            result.name_detail = f"{named.source} (signed) names {name} with its size, {size} bytes"
            return
        missing = _what_is_missing(name, set(siblings), {s.source[len(name):] for s in statements})
        if named is not None and named.filename == name:
            missing += f"; {named.source} names it with {named.size} bytes, not {size}"
        stamps = name_stamps(name)
        made = min(g.created for g in detached.good) if detached is not None else None
        date = ""
        if made is not None and stamps:
            build = max(stamps)
            made_at = datetime.fromtimestamp(made, UTC)
            built = stamp_time(build)
            if built is not None and made_at >= built:
                if self.bind_by_date:
                    result.name_rule = "signed-after-build"
                    result.name_detail = (f"{name}.asc was made {made_at:%Y-%m-%d %H:%M:%S} UTC, after the build "
                                          f"stamp {build} in the name (a date, not a name: accepted with "
                                          f"--bind-by-date although {missing})")
                    result.notes.append(f"{name}: bound by a date, not a name: {missing}")
                    return
                date = (f"; its .asc postdates the build stamp {build}, but a date names no file (any build "
                        f"signed later passes it): --bind-by-date ([fetch] bind-by-date = yes) accepts that")
            else:
                date = (f"; its .asc was made {made_at:%Y-%m-%d %H:%M:%S} UTC, before the build stamp {build} "
                        f"in the name, so it signs an older build")
        if self.allow_unnamed:
            result.name_rule = "allowed-unnamed"
            result.name_detail = f"nothing signed names {name} ({missing}{date}); accepted with --allow-unnamed"
            result.notes.append(f"{name}: {result.name_detail}")
            return
        raise _unnamed(name, missing, date)

    def check_bindable(self, name: str, siblings: dict[str, Path]) -> None:
        """Before downloading ``name``: raise :class:`UnnamedMediaError` if, with the ``siblings`` fetched
        (``{suffix: path}``), no rule could bind it to its name (no signed statement, no signed list entry
        naming it, no build stamp that ``bind_by_date`` could accept, not allowed)."""
        signed = _signed_looking(siblings)
        if (self.allow_unnamed or signed or (self.named is not None and self.named.filename == name)
                or (self.bind_by_date and name_stamps(name))):
            return
        if name_stamps(name):
            date = ("; its name carries a build stamp: --bind-by-date ([fetch] bind-by-date = yes) would accept "
                    "an .asc made after it, a date, not a name")
        else:
            date = "; its name carries no build stamp"
        raise _unnamed(name, _what_is_missing(name, set(siblings), set(signed)), date)


    # -- signed statements -----------------------------------------------------------------------

    def _statements(self, siblings: dict[str, Path], result: MediaVerification) -> list[_Statement]:
        statements: list[_Statement] = []
        detached_over_digests = False
        for suffix in STATEMENTS:
            if suffix not in siblings or (suffix == ".DIGESTS.asc" and detached_over_digests):
                continue
            path = siblings[suffix]
            data = read_limited(path, MAX_STATEMENT, "signed statement")
            if _has_armor(data, CLEARSIGN_MARKER):
                good = checked(path.name, self.verifier.clearsigned, data)
                text = good.plaintext or b""
                kind = "clearsigned statement"
            elif suffix == ".DIGESTS" and (signature := _detached(siblings.get(".DIGESTS.asc"))) is not None:
                good = checked(siblings[".DIGESTS.asc"].name, self.verifier.detached, signature, data)
                detached_over_digests, text, kind = True, data, "statement with detached signature"
                result.verified_files.append(siblings[".DIGESTS.asc"].name)
            else:
                result.notes.append(f"{path.name}: not signed; ignored")
                continue
            result.signed.append(SignedBy(path.name, kind, good.signer))
            result.verified_files.append(path.name)
            statements.append(_Statement(path.name, parse_digests(signed_text(text, path.name), path.name)))
        return statements

    @staticmethod
    def _detached_signature(siblings: dict[str, Path]) -> bytes | None:
        if DETACHED not in siblings:
            return None
        path = siblings[DETACHED]
        data = read_limited(path, MAX_STATEMENT, "signature")
        if not data.strip():
            raise NoSignatureError(f"{path.name}: empty signature file")
        return data

    @staticmethod
    def _expected(name: str, statements: list[_Statement]) -> list[tuple[str, dict[str, str]]]:
        """``[(source, {algorithm: hex})]`` for ``name``; every statement must list it.

        A full build path is accepted for the file and its CONTENTS only: an absolute path naming
        anything else (``/etc/passwd``) makes the statement unacceptable.
        """
        related = {name, *(name + suffix for suffix in CONTENTS)}
        expected = []
        for statement in statements:
            for entry in statement.digests.entries:
                if entry.absolute and entry.filename not in related:
                    raise BadInputError(f"{statement.source} line {entry.line}: absolute path {entry.written!r} "
                                        f"names a file other than {name}; refused")
            entries = statement.digests.for_file(name)
            if not entries:
                listed = ", ".join(shown(n) for n in statement.digests.filenames()[:3])
                raise NotListedError(f"{statement.source} does not list {name} (it lists {listed})")
            expected.append((statement.source, entries))
        return expected

    def _checked_part(self, expected: list[tuple[str, dict[str, str]]]) -> list[tuple[str, dict[str, str]]]:
        """``expected`` cut to the digests that are checked (:func:`to_check`)."""
        return [(source, to_check(entries, all_digests=self.all_digests)) for source, entries in expected]

    def _compare(self, name: str, expected: list[tuple[str, dict[str, str]]], digests: dict[str, str],
                 result: MediaVerification) -> None:
        for source, entries in expected:
            checked_here = to_check(entries, all_digests=self.all_digests)
            for algorithm, listed in entries.items():
                if algorithm not in checked_here:
                    result.checks.append(DigestCheck(name, algorithm, source, "unchecked"))
                    continue
                library = hashlib_name(algorithm)
                if library is None:
                    result.checks.append(DigestCheck(name, algorithm, source, "skipped"))
                    result.notes.append(f"{source}: {algorithm} is not available here; skipped")
                    continue
                actual = digests[library]
                if actual != listed:
                    raise DigestMismatchError(f"{name}: {algorithm} does not match {source} "
                                              f"(file {actual[:16]}…, signed {listed[:16]}…)")
                result.checks.append(DigestCheck(name, algorithm, source, "match"))

    def _contents(self, siblings: dict[str, Path], statements: list[_Statement], result: MediaVerification) -> None:
        for suffix in CONTENTS:
            if suffix not in siblings:
                continue
            path = siblings[suffix]
            expected = [(s.source, s.digests.for_file(path.name)) for s in statements]
            expected = [(source, entries) for source, entries in expected if entries]
            if not expected:
                result.notes.append(f"{path.name}: not listed in a signed statement; not checked")
                continue
            _agreeing(path.name, expected)
            digests, _ = read_once(path, _hash_plan(self._checked_part(expected)))
            self._compare(path.name, expected, digests, result)
            result.verified_files.append(path.name)
