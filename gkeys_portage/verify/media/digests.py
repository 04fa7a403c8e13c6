"""Parsers for the signed text of release-media statements.

* ``*.DIGESTS`` / ``*.DIGESTS.asc`` / ``*.sha256``: blocks of ``# <ALGO> HASH`` followed by
  ``<hex>  <file>`` lines, in any order and for several files (the tarball, its ``.CONTENTS.gz``);
  the BSD style ``SHA512 (file) = hex`` too.  A file may be named by a bare name or by the full
  build path catalyst saw (``/var/tmp/catalyst/builds/…/stage3-….tar.xz``); entries are matched by
  base name and a name is never used to open anything.  Path traversal (``..``) is refused here;
  :mod:`gkeys_portage.verify.media.verifier` refuses absolute paths that name any file other than the one
  being verified and its CONTENTS.
* ``latest-*.txt``: ``# …`` comments, then ``<YYYYMMDDTHHMMSSZ>/<file> <size>`` lines.

Both take text (what gpg says was signed), so they are tested on recorded data.  Nothing here
touches files or the network.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TextIO

from gkeys_portage.core.errors import BadInputError, NotVerifiedError

#: Canonical algorithm name -> (hashlib name, hex length).
ALGORITHMS: dict[str, tuple[str, int]] = {
    "MD5": ("md5", 32),
    "SHA1": ("sha1", 40),
    "SHA256": ("sha256", 64),
    "SHA512": ("sha512", 128),
    "BLAKE2B": ("blake2b", 128),
    "WHIRLPOOL": ("whirlpool", 128),
}
#: Algorithms strong enough to vouch for a file on their own.
STRONG = frozenset({"SHA256", "SHA512", "BLAKE2B"})
_ALIASES = {"SHA-256": "SHA256", "SHA-512": "SHA512", "SHA-1": "SHA1", "BLAKE2B-512": "BLAKE2B", "B2": "BLAKE2B",
            "BLAKE2": "BLAKE2B"}

_HEADER = re.compile(r"^#\s*(\S.*?)\s+HASH\s*$")  # "# SHA512 HASH", "# BLAKE2 (b2sum) HASH"
_TOOL_SUFFIX = re.compile(r"\s*\([^)]*\)$")
_GNU_LINE = re.compile(r"^([0-9A-Fa-f]+) [ *](.+)$")
_BSD_LINE = re.compile(r"^([A-Za-z0-9-]+) ?\((.+)\) = ([0-9A-Fa-f]+)$")
_STAMP = re.compile(r"^\d{8}(T\d{6}Z)?$")
#: A build stamp in a release file name: ``-20261201T170321Z.`` (or the older date-only ``-20200101.``).
_NAME_STAMP = re.compile(r"-(\d{8}(?:T\d{6}Z)?)(?=[.-])")
#: What may follow ``NAME-<stamp>`` in a release file name: ``.tar.xz``, ``.iso``, ``.qcow2``, …
_EXTENSION = r"\.[a-z0-9]+(?:\.[a-z0-9]+)*"
#: Last extensions that name a signature or checksum file, never release media.
_NOT_MEDIA = frozenset({"asc", "sig", "gpg", "sha256", "sha512", "md5", "b2", "txt"})
_TS = re.compile(r"^#\s*ts=(\d+)\s*$", re.MULTILINE)


def canonical_algorithm(name: str) -> str:
    """``sha512`` / ``SHA-512`` / ``BLAKE2b`` / ``BLAKE2 (b2sum)`` -> ``SHA512`` / ``BLAKE2B`` (unknown
    names upper-cased)."""
    upper = _TOOL_SUFFIX.sub("", name.strip()).upper()
    return _ALIASES.get(upper, upper)


def hashlib_name(algorithm: str) -> str | None:
    """The hashlib constructor name of ``algorithm`` if this Python can compute it, else None."""
    known = ALGORITHMS.get(algorithm)
    if known is None:
        return None
    try:
        hashlib.new(known[0])
    except (ValueError, TypeError):
        return None
    return known[0]


def shown(name: str, limit: int = 80) -> str:
    """``repr(name)``, cut to ``limit`` characters (a 3 MB name must not become a 3 MB error line)."""
    text = repr(name)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_name(name: str, where: str, *, absolute: bool = False) -> str:
    """Return the base name of a file named in a signed statement; refuse unsafe names
    (absolute paths too, unless ``absolute``).  A name with a character that is not printable (NUL,
    controls, Unicode line or paragraph separators) is unusable: other tools split or cut it differently."""
    if not name or name == "-" or "\\" in name or not name.isprintable():  # "-": standard input to sha512sum
        raise BadInputError(f"{where}: unusable file name {shown(name)}")
    if name.startswith("/") and not absolute:
        raise BadInputError(f"{where}: absolute path {shown(name)} refused (names must be relative)")
    parts = name.split("/")
    if ".." in parts:
        raise BadInputError(f"{where}: path traversal in file name {shown(name)} refused")
    base = parts[-1]
    if base in ("", "."):
        raise BadInputError(f"{where}: file name {shown(name)} names a directory")
    return base


@dataclass(frozen=True)
class DigestEntry:
    """One listed hash: algorithm (canonical), lower-case hex, base name and the name as written."""

    algorithm: str
    hexdigest: str
    filename: str
    written: str
    line: int

    @property
    def absolute(self) -> bool:
        """True if the file is named by an absolute (build) path."""
        return self.written.startswith("/")


@dataclass
class DigestList:
    """Every entry of one statement, indexed by base name."""

    entries: list[DigestEntry] = field(default_factory=list)

    def for_file(self, filename: str) -> dict[str, str]:
        """``{algorithm: hex}`` listed for ``filename`` (base name)."""
        return {e.algorithm: e.hexdigest for e in self.entries if e.filename == filename}

    def filenames(self) -> list[str]:
        """The base names listed, in order of first appearance."""
        return list(dict.fromkeys(e.filename for e in self.entries))

    def algorithms(self) -> list[str]:
        """The algorithms listed, in order of first appearance."""
        return list(dict.fromkeys(e.algorithm for e in self.entries))


def _add(result: DigestList, entry: DigestEntry, source: str) -> None:
    known = ALGORITHMS.get(entry.algorithm)
    if known is not None and len(entry.hexdigest) != known[1]:
        raise BadInputError(f"{source} line {entry.line}: {entry.algorithm} hash has {len(entry.hexdigest)} "
                            f"hex digits, expected {known[1]}")
    for other in result.entries:
        if (other.filename, other.algorithm) == (entry.filename, entry.algorithm) \
                and other.hexdigest != entry.hexdigest:
            raise BadInputError(f"{source}: conflicting {entry.algorithm} entries for {entry.filename} "
                                f"(lines {other.line} and {entry.line})")
    result.entries.append(entry)


def _lines(text: str | TextIO) -> Iterable[str]:
    """The lines of ``text``, split at LF only (as sha512sum and b2sum split them; ``str.splitlines`` would
    also split at form feeds and Unicode separators), without the line ending (LF or CRLF)."""
    lines = text.split("\n") if isinstance(text, str) else text
    return (line.removesuffix("\n").removesuffix("\r") for line in lines)


def parse_digests(text: str | TextIO, source: str = "DIGESTS") -> DigestList:
    """Parse the signed text of a DIGESTS / ``.sha256`` statement (any section order, both line styles).

    Raises :class:`BadInputError` for lines that are not digests, hashes outside a ``# … HASH``
    section, wrong hash lengths, unsafe file names and conflicting duplicate entries.
    """
    result = DigestList()
    algorithm: str | None = None
    for number, raw in enumerate(_lines(text), 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        header = _HEADER.match(line)
        if header:
            algorithm = canonical_algorithm(header.group(1))
            continue
        if line.startswith("#"):
            continue  # other comments (e.g. "# Latest as of …")
        where = f"{source} line {number}"
        bsd = _BSD_LINE.match(line)
        gnu = _GNU_LINE.match(line)
        if bsd:
            algo, name, hexdigest = canonical_algorithm(bsd.group(1)), bsd.group(2), bsd.group(3)
        elif gnu:
            if algorithm is None:
                raise BadInputError(f"{where}: hash line before any '# <ALGO> HASH' header")
            algo, hexdigest, name = algorithm, gnu.group(1), gnu.group(2)
        else:
            raise BadInputError(f"{where}: not a digest line: {line[:80]!r}")
        base = check_name(name, where, absolute=True)
        _add(result, DigestEntry(algo, hexdigest.lower(), base, name, number), source)
    if not result.entries:
        raise BadInputError(f"{source}: no digest entries in the signed text")
    return result


@dataclass(frozen=True)
class LatestEntry:
    """One line of a ``latest-*.txt`` file: relative path under ``autobuilds/`` and announced size."""

    path: str
    size: int | None
    line: int

    @property
    def filename(self) -> str:
        """The base name of the file."""
        return self.path.rsplit("/", 1)[-1]

    @property
    def stamp(self) -> str:
        """The build stamp directory (``20240107T170309Z``) or "" if the path has none."""
        first = self.path.split("/", 1)[0]
        return first if "/" in self.path and _STAMP.match(first) else ""


def check_mirror_path(path: str, where: str) -> str:
    """A path taken from a latest file must stay below the directory it came from."""
    if "://" in path or path.startswith("//"):
        raise BadInputError(f"{where}: {path!r} points outside the mirror (a URL, not a relative path)")
    check_name(path, where)
    if any(part in ("", ".") for part in path.split("/")):
        raise BadInputError(f"{where}: {path!r} is not a clean relative path")
    return path


def parse_latest(text: str | TextIO, source: str = "latest file") -> list[LatestEntry]:
    """Parse the signed text of ``latest-<name>.txt``; every path must stay inside the mirror."""
    entries: list[LatestEntry] = []
    for number, raw in enumerate(_lines(text), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source} line {number}"
        fields = line.split()
        if len(fields) > 2 or (len(fields) == 2 and not (fields[1].isascii() and fields[1].isdigit())):
            raise BadInputError(f"{where}: expected '<path> <size>', got {line[:80]!r}")
        path = check_mirror_path(fields[0], where)
        entries.append(LatestEntry(path, int(fields[1]) if len(fields) == 2 else None, number))
    if not entries:
        raise BadInputError(f"{source}: no entries in the signed text")
    return entries


def latest_timestamp(text: str) -> int | None:
    """The ``# ts=<epoch>`` a latest file carries (None if absent)."""
    match = _TS.search(text)
    return int(match.group(1)) if match else None


def newest(entries: list[LatestEntry]) -> LatestEntry:
    """The newest entry by build stamp (the last line among equals, as the mirrors list them)."""
    return max(enumerate(entries), key=lambda pair: (pair[1].stamp, pair[0]))[1]


class WrongProductError(NotVerifiedError):
    """A validly signed latest file lists no file of the product asked for (another product's list)."""


def normal_stamp(stamp: str) -> str:
    """``20200101`` -> ``20200101T000000Z``; full stamps unchanged (so stamps compare as strings)."""
    return stamp if "T" in stamp else stamp + "T000000Z"


def stamp_time(stamp: str) -> datetime | None:
    """A build stamp (``20261201T170321Z`` or ``20200101``) as a UTC time; None if it is no real date."""
    try:
        return datetime.strptime(normal_stamp(stamp), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def name_stamps(filename: str) -> list[str]:
    """Every build stamp written in a release file name (``stage3-…-20261201T170321Z.tar.xz``), normalised;
    digits that are no real date and time are not a stamp."""
    return [normal_stamp(m.group(1)) for m in _NAME_STAMP.finditer(filename) if stamp_time(m.group(1))]


def product_build(entry: LatestEntry, product: str) -> str | None:
    """The normalised build stamp of ``entry`` if it is a file of ``product``, else None.

    A file of ``product`` is named ``<product>-<stamp>.<ext>`` exactly (``stage3-amd64-openrc-20261201T170321Z
    .tar.xz``; not ``stage3-amd64-openrc-splitusr-…``, not ``….tar.xz.asc``), and a stamp directory in its
    path, if any, is that same stamp.
    """
    match = re.fullmatch(re.escape(product) + r"-(\d{8}(?:T\d{6}Z)?)(" + _EXTENSION + ")", entry.filename)
    if match is None or match.group(2).rsplit(".", 1)[-1] in _NOT_MEDIA:
        return None
    if entry.stamp and entry.stamp != match.group(1):
        return None
    return normal_stamp(match.group(1))


def newest_of_product(entries: list[LatestEntry], product: str, source: str = "latest file") -> tuple[LatestEntry,
                                                                                                        str]:
    """The newest entry of ``product`` and its build stamp; entries of other products are never chosen.

    Raises :class:`WrongProductError` when the list names no file of ``product`` (a mirror serving another
    product's validly signed list under this name).
    """
    builds = [(build, number, entry) for number, entry in enumerate(entries)
              if (build := product_build(entry, product)) is not None]
    if not builds:
        listed = ", ".join(shown(e.filename) for e in entries[:3])
        raise WrongProductError(f"{source} lists no {product}-<stamp> file (it lists {listed}): the mirror serves "
                                f"another product's list under this name; refused (try another --mirror)")
    build, _number, entry = max(builds, key=lambda item: (item[0], item[1]))
    return entry, build
