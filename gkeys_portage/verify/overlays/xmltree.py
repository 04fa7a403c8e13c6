"""Safe, bounded parsing of an overlay list (``repositories.xml``) into a small tree with line numbers.

The document has already had its signature checked, but it is still parsed as if hostile:

* ``defusedxml`` (expat underneath): entity declarations and external entity references raise;
* a ``<!DOCTYPE>`` is allowed only as the plain external reference the real list carries
  (``<!DOCTYPE repositories SYSTEM "...">``); it is never fetched, and an internal subset
  (entity, element or attribute declarations, default attribute values) is refused outright;
* the bytes must be UTF-8 (any encoding declaration must say so) without NUL bytes: XML never
  allows U+0000, and UTF-16/UTF-32 text without a byte-order mark is valid UTF-8 byte by byte
  (ASCII interleaved with NULs) that expat and libxml2 would nevertheless decode as UTF-16;
* no XML namespaces (``<x:source xmlns:x=...>``, ``<source xmlns="urn:a">``, ``xml:lang``): the format
  has none, and a namespace-unaware reader takes ``<source xmlns="urn:a">`` for a ``<source>``
  that a namespace-aware one (ElementTree, lxml) skips as another element;
* size, nesting depth, element count, attributes per element and text per element are bounded,
  and the limits are enforced while parsing, so a hostile document is rejected early;
* comments and processing instructions are not kept, but one inside an element is recorded
  (:attr:`Element.mixed`, like a child element): lxml, which eselect-repository uses, gives as an
  element's ``text`` only the text *before* its first comment, processing instruction or child,
  while :attr:`Element.text` joins every piece, so the checker must know when the two differ.

Every failure raises :class:`OverlayXmlError` (exit status 2) naming the document and the line.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from xml.etree.ElementTree import ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import DefusedXMLParser

from gkeys_portage.core.errors import BadInputError

CHUNK = 64 * 1024
_XML_DECLARATION = re.compile(rb"\A(?:\xef\xbb\xbf)?<\?xml[^>]*?encoding\s*=\s*[\"']([A-Za-z0-9._-]+)[\"']")


class OverlayXmlError(BadInputError):
    """The overlay list is not a well-formed, acceptable XML document."""


@dataclass(frozen=True)
class XmlLimits:
    """Bounds on what the parser accepts (the real list: 270 KB, depth 4, ~6,000 elements)."""

    max_bytes: int = 16 * 1024 * 1024
    max_depth: int = 16
    max_elements: int = 200_000
    max_attributes: int = 16
    max_text: int = 64 * 1024


@dataclass
class Element:
    """One XML element: tag, attributes, the line it starts on, its own text and its children.

    ``mixed`` names the first node inside the element that is not text (a child element, a comment or
    a processing instruction) and its line, or is None.  Other parsers read an element's text up to
    that node only (lxml's ``.text``), so for an element whose text is used it must be None.
    """

    tag: str
    attrib: dict[str, str]
    line: int
    children: list[Element] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    mixed: tuple[str, int] | None = None

    @property
    def text(self) -> str:
        """All character data directly inside this element (not inside its children), joined."""
        return "".join(self.parts)


class _LimitExceeded(Exception):
    """Raised from inside a parser callback; turned into :class:`OverlayXmlError` with the line."""


class _TreeBuilder:
    """An ElementTree parser *target* that builds :class:`Element` objects and enforces the limits."""

    def __init__(self, limits: XmlLimits) -> None:
        self.limits = limits
        self.stack: list[Element] = []
        self.root: Element | None = None
        self.count = 0
        self.text_sizes: list[int] = []  # characters of text so far in each open element
        self.line_of: object = None  # the expat parser, set once it exists

    def _line(self) -> int:
        return int(getattr(self.line_of, "CurrentLineNumber", 0))

    def _interrupt(self, what: str) -> None:
        """A node that is not text inside the open element (if any): it no longer holds plain text only."""
        if self.stack and self.stack[-1].mixed is None:
            self.stack[-1].mixed = (what, self._line())

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        """An element opens."""
        if tag.startswith("{"):
            raise _LimitExceeded(f"element <{tag}> is in an XML namespace; the overlay list format has none "
                                 "(readers that ignore namespaces would take it for a plain element)")
        for name in attrib:
            if name.startswith("{"):
                raise _LimitExceeded(f"attribute {name!r} on <{tag}> is in an XML namespace; "
                                     "the overlay list format has none")
        self.count += 1
        if self.count > self.limits.max_elements:
            raise _LimitExceeded(f"more than {self.limits.max_elements} elements")
        if len(self.stack) >= self.limits.max_depth:
            raise _LimitExceeded(f"elements nested deeper than {self.limits.max_depth} levels")
        if len(attrib) > self.limits.max_attributes:
            raise _LimitExceeded(f"<{tag}> has more than {self.limits.max_attributes} attributes")
        element = Element(tag, dict(attrib), self._line())
        self._interrupt(f"a <{tag}> element")
        if self.stack:
            self.stack[-1].children.append(element)
        else:
            self.root = element
        self.stack.append(element)
        self.text_sizes.append(0)

    def end(self, tag: str) -> None:
        """An element closes."""
        self.stack.pop()
        self.text_sizes.pop()

    def comment(self, text: str) -> None:
        """A comment (not kept; recorded if inside an element)."""
        self._interrupt("a comment")

    def pi(self, target: str, text: str | None = None) -> None:
        """A processing instruction (not kept; recorded if inside an element)."""
        self._interrupt(f"a processing instruction <?{target}?>")

    def data(self, text: str) -> None:
        """Character data inside the current element."""
        if not self.stack:
            return
        self.text_sizes[-1] += len(text)  # all of the element's text, also when split by children
        if self.text_sizes[-1] > self.limits.max_text:
            raise _LimitExceeded(f"<{self.stack[-1].tag}> holds more than {self.limits.max_text} characters of text")
        self.stack[-1].parts.append(text)

    def close(self) -> Element | None:
        """End of document."""
        return self.root


def is_blank(data: bytes) -> bool:
    """True if ``data`` is empty or only whitespace (without copying it)."""
    return not data or data.isspace()


def _check_encoding(data: bytes, name: str) -> None:
    """The bytes must be UTF-8, and an encoding declaration (if any) must say UTF-8.

    Decoded chunk by chunk and thrown away, so a large document is never held twice.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, chunk = 0, b""
    try:
        for offset in range(0, len(data), CHUNK):
            chunk = data[offset:offset + CHUNK]
            decoder.decode(chunk)
        offset, chunk = len(data), b""
        decoder.decode(chunk, final=True)
    except UnicodeDecodeError as exc:
        carried = len(exc.object) - len(chunk)  # undecoded bytes carried over from the previous chunk
        position = offset - carried + exc.start
        line = data.count(b"\n", 0, position) + 1
        column = position - (data.rfind(b"\n", 0, position) + 1) + 1
        raise OverlayXmlError(
            f"{name} line {line}: not valid UTF-8 (byte 0x{data[position]:02x} at column {column})") from exc
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        column = nul - (data.rfind(b"\n", 0, nul) + 1) + 1
        raise OverlayXmlError(f"{name} line {line}: a NUL byte at column {column} (UTF-16 or UTF-32 text?); "
                              "an overlay list must be UTF-8")
    declared = _XML_DECLARATION.match(data)
    if declared and declared.group(1).lower().replace(b"_", b"-") not in (b"utf-8", b"utf8"):
        raise OverlayXmlError(f"{name} line 1: declares encoding {declared.group(1).decode()!r}; "
                              "an overlay list must be UTF-8")


def parse_document(data: bytes, name: str, limits: XmlLimits | None = None) -> Element:
    """Parse ``data`` safely into an :class:`Element` tree; raise :class:`OverlayXmlError` otherwise."""
    limits = limits or XmlLimits()
    if len(data) > limits.max_bytes:
        raise OverlayXmlError(f"{name}: larger than {limits.max_bytes} bytes")
    if is_blank(data):
        raise OverlayXmlError(f"{name}: empty file (no XML document)")
    _check_encoding(data, name)

    builder = _TreeBuilder(limits)
    parser = DefusedXMLParser(target=builder, forbid_dtd=False, forbid_entities=True, forbid_external=True)
    expat = parser.parser
    builder.line_of = expat

    def doctype(doctype_name: str, sysid: str | None, pubid: str | None, has_internal_subset: int) -> None:
        if has_internal_subset:
            raise _LimitExceeded("a DOCTYPE with an internal subset (entity or attribute declarations) "
                                 "is not allowed")
        if doctype_name != "repositories":
            raise _LimitExceeded(f"DOCTYPE names {doctype_name!r}, expected 'repositories'")

    expat.StartDoctypeDeclHandler = doctype
    try:
        for offset in range(0, len(data), CHUNK):  # in chunks: expat buffers only an unfinished token
            parser.feed(data[offset:offset + CHUNK])
        root = parser.close()
    except _LimitExceeded as exc:
        raise OverlayXmlError(f"{name} line {expat.CurrentLineNumber}: {exc}") from exc
    except DefusedXmlException as exc:
        raise OverlayXmlError(f"{name} line {expat.CurrentLineNumber}: forbidden XML construct: {exc}") from exc
    except ParseError as exc:
        line = exc.position[0] if exc.position else expat.CurrentLineNumber
        reason = str(exc).split(": line ")[0]
        raise OverlayXmlError(f"{name} line {line}: not well-formed XML ({reason})") from exc
    except RecursionError as exc:  # defensive: the depth limit should make this unreachable
        raise OverlayXmlError(f"{name}: nested too deeply") from exc
    if not isinstance(root, Element):
        raise OverlayXmlError(f"{name}: no XML document element")
    return root
