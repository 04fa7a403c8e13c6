"""The overlay-list rules without gpg: safe parsing, the DTD/XSD format rules, source-URL safety.

Tables of (input, expected finding) make missing cases visible; the real 462-entry list (458 repos
plus 4 commented templates) from ../shared must validate with its real problems as warnings.
"""

from __future__ import annotations

import tracemalloc

import pytest
from conftest import shared_path
from overlays_helpers import GOOD, HEADER, overlay_list, repo

from gkeys_portage.demo.world import LoopbackServer
from gkeys_portage.verify.overlays.format import OverlayList, check_document
from gkeys_portage.verify.overlays.urls import Severity, check_source
from gkeys_portage.verify.overlays.xmltree import OverlayXmlError, XmlLimits, parse_document


def check(data: bytes) -> OverlayList:
    """Parse and check a list."""
    return check_document(parse_document(data, "repositories.xml"))


def codes(result: OverlayList, severity: Severity) -> set[tuple[str, str | None]]:
    """(code, repo) of the findings of one severity."""
    return {(f.code, f.repo) for f in result.findings if f.severity is severity}


# -- safe parsing ----------------------------------------------------------------------------------

XXE = b"""<?xml version="1.0"?>
<!DOCTYPE repositories [ <!ENTITY xxe SYSTEM "file:///etc/passwd"> ]>
<repositories version="1.0"><repo><name>&xxe;</name></repo></repositories>
"""
PARAMETER_XXE = b"""<?xml version="1.0"?>
<!DOCTYPE repositories [ <!ENTITY % remote SYSTEM "http://127.0.0.1:9/evil.dtd"> %remote; ]>
<repositories version="1.0"/>
"""
BILLION_LAUGHS = b'<?xml version="1.0"?>\n<!DOCTYPE repositories [\n <!ENTITY lol "lol">\n' + b"".join(
    b' <!ENTITY lol%d "%s">\n' % (i, b"&lol%d;" % (i - 1) * 10 if i > 1 else b"&lol;" * 10) for i in range(1, 10)
) + b"]>\n<repositories version=\"1.0\">&lol9;</repositories>\n"
ATTLIST_DEFAULT = b"""<?xml version="1.0"?>
<!DOCTYPE repositories [ <!ATTLIST repo quality CDATA "stable"> ]>
<repositories version="1.0"/>
"""

def _good_with(*pairs: bytes) -> bytes:
    """GOOD with the first occurrence of each (old, new) pair replaced (each must occur)."""
    data = GOOD
    for old, new in zip(pairs[::2], pairs[1::2], strict=True):
        assert old in data, old
        data = data.replace(old, new, 1)
    return data


PARSE_CASES = [
    ("empty file", b"", "empty file"),
    ("whitespace only", b"  \n\t\n", "empty file"),
    ("XXE (external entity)", XXE, "line 2: a DOCTYPE with an internal subset"),
    ("external parameter entity", PARAMETER_XXE, "line 2: a DOCTYPE with an internal subset"),
    ("billion laughs", BILLION_LAUGHS, "line 2: a DOCTYPE with an internal subset"),
    ("default attribute from the DTD", ATTLIST_DEFAULT, "internal subset"),
    ("undeclared entity", b'<repositories version="1.0">&ent;</repositories>', "line 1: not well-formed"),
    ("not UTF-8", HEADER.encode() + b"  <repo><name>caf\xe9</name></repo>\n</repositories>\n",
     "line 3: not valid UTF-8 (byte 0xe9 at column 18)"),
    ("UTF-16", '<?xml version="1.0"?><repositories/>'.encode("utf-16"), "not valid UTF-8"),
    # Without a byte-order mark, UTF-16/UTF-32 of ASCII is valid UTF-8 byte by byte; expat decoded it as UTF-16.
    ("UTF-16LE without BOM", '<?xml version="1.0"?>\n<repositories version="1.0"/>'.encode("utf-16-le"),
     "line 1: a NUL byte at column 2 (UTF-16 or UTF-32 text?)"),
    ("UTF-16BE without BOM", '<repositories version="1.0"/>'.encode("utf-16-be"), "line 1: a NUL byte at column 1"),
    ("UTF-32LE without BOM", '<repositories version="1.0"/>'.encode("utf-32-le"), "line 1: a NUL byte"),
    ("NUL byte in a source", _good_with(b".git<", b".git\x00<"), "line 10: a NUL byte at column 67"),
    ("NUL character reference", _good_with(b".git<", b".git&#0;<"), "line 10: not well-formed XML"),
    ("declared UTF-16", b'<?xml version="1.0" encoding="UTF-16"?>\n<repositories version="1.0"/>',
     "declares encoding 'UTF-16'"),
    ("declared UTF-7", b"<?xml version='1.0' encoding='utf-7'?>\n<repositories version=\"1.0\"/>",
     "declares encoding 'utf-7'"),
    ("UTF-7 text declared UTF-8", b'<?xml version="1.0" encoding="UTF-8"?>+ADw-repositories/+AD4-',
     "not well-formed XML"),
    # A namespace-unaware reader takes <source xmlns="urn:a"> (or <x:source>, by local name) for a <source>.
    ("namespaced source (prefix)", _good_with(b'<source type="git">https://github.com/example/good-overlay.git</source>',
                                              b'<x:source xmlns:x="urn:x" type="git">ext::sh</x:source>'),
     "line 10: element <{urn:x}source> is in an XML namespace"),
    ("namespaced source (default namespace)", _good_with(b'<source type="git">', b'<source xmlns="urn:a" type="git">'),
     "line 10: element <{urn:a}source> is in an XML namespace"),
    ("namespaced ext:: source beside a good one (accepted before)",
     _good_with(b"good-overlay.git</source>",
                b'good-overlay.git</source><source xmlns="urn:a" type="git">ext::sh</source>'),
     "line 10: element <{urn:a}source> is in an XML namespace"),
    ("namespaced root", _good_with(b'xmlns=""', b'xmlns="urn:evil"'), "line 2: element <{urn:evil}repositories>"),
    ("namespaced repo", _good_with(b"<repo ", b'<r:repo xmlns:r="urn:r" ', b"</repo>", b"</r:repo>"),
     "line 3: element <{urn:r}repo>"),
    ("namespaced attribute", _good_with(b'<source type="git">', b'<source xmlns:a="urn:a" a:type="rsync" type="git">'),
     "line 10: attribute '{urn:a}type' on <source> is in an XML namespace"),
    ("xml:lang attribute", _good_with(b'lang="en"', b'xml:lang="en"'), "is in an XML namespace"),
    ("unbound prefix", _good_with(b"<repo ", b"<r:repo ", b"</repo>", b"</r:repo>"),
     "line 3: not well-formed XML (unbound prefix)"),
    ("declared Latin-1", b'<?xml version="1.0" encoding="ISO-8859-1"?>\n<repositories version="1.0"/>',
     "declares encoding 'ISO-8859-1'"),
    ("truncated", GOOD[:-40], "not well-formed XML"),
    ("two roots", b'<repositories version="1.0"/><repositories version="1.0"/>', "junk after document element"),
    ("other DOCTYPE", b'<!DOCTYPE html SYSTEM "x.dtd"><repositories version="1.0"/>', "expected 'repositories'"),
    ("deeply nested", b'<repositories version="1.0">' + b"<a>" * 20 + b"</a>" * 20 + b"</repositories>",
     "nested deeper than 16 levels"),
    ("too many attributes", b"<repositories " + b" ".join(b'a%d="1"' % i for i in range(20)) + b"/>",
     "more than 16 attributes"),
]


@pytest.mark.parametrize(("data", "message"), [c[1:] for c in PARSE_CASES], ids=[c[0] for c in PARSE_CASES])
def test_unacceptable_documents_are_refused_with_the_line(data: bytes, message: str) -> None:
    with pytest.raises(OverlayXmlError) as caught:
        parse_document(data, "repositories.xml")
    assert message in str(caught.value)
    assert str(caught.value).startswith("repositories.xml")
    assert caught.value.exit_code == 2


# Character references and CDATA sections are decoded by the XML parser (as by lxml, whose ``.text`` merges
# CDATA into the text): the source rules see the decoded text, so markup cannot hide a dangerous source.
ESCAPED_SOURCE_CASES: list[tuple[str, str, str, str]] = [
    ("&#10; then an option", "https://x.org/y.git&#10;--upload-pack=touch /tmp/pwned", "source:whitespace", "\\n"),
    ("&#10; at the end", "https://x.org/y.git&#10;", "source:whitespace", "U+000A"),
    ("&#13; at the end", "https://x.org/y.git&#13;", "source:whitespace", "U+000D"),
    ("&#9; in front", "&#9;https://x.org/y.git", "source:whitespace", "U+0009"),
    ("&#x2d;&#45; make an option", "&#x2d;&#45;upload-pack=touch /tmp/pwned", "source:option", "--upload-pack"),
    ("&#101; makes ext::", "&#101;xt::sh -c touch% /tmp/pwned", "source:helper", "ext::sh"),
    ("CDATA ext::", "<![CDATA[ext::sh -c touch% /tmp/pwned]]>", "source:helper", "ext::sh"),
    ("CDATA split into an option", "<![CDATA[-]]>-upload-pack=x", "source:option", "--upload-pack=x"),
]


@pytest.mark.parametrize(("raw", "code", "shown"), [c[1:] for c in ESCAPED_SOURCE_CASES],
                         ids=[c[0] for c in ESCAPED_SOURCE_CASES])
def test_escaped_or_cdata_sources_are_checked_decoded(raw: str, code: str, shown: str) -> None:
    result = check(_source(raw))
    assert not result.ok
    found = [f for f in result.errors if f.repo == "split"]
    assert [f.code for f in found] == [code], [str(f) for f in result.findings]
    assert found[0].line == 19 and shown in found[0].message


def test_a_source_split_by_cdata_is_read_whole_as_lxml_reads_it() -> None:
    """``https://github.com/<![CDATA[x/y.git]]>``: one text, ``https://github.com/x/y.git`` (lxml's .text)."""
    root = parse_document(_source("https://github.com/<![CDATA[example/split.git]]>"), "repositories.xml")
    source = [r for r in root.children if r.children[0].text == "split"][0].children[4]
    assert source.tag == "source" and source.text == "https://github.com/example/split.git" and source.mixed is None
    assert check(_source("https://github.com/<![CDATA[example/split.git]]>")).ok


def test_character_references_in_a_name_or_type_are_checked_decoded() -> None:
    name = check(overlay_list(repo("fine"), repo("ev&#10;il")))
    assert [(f.code, f.repo) for f in name.errors] == [("name:pattern", "ev\nil")]
    kind = check(overlay_list(repo("fine"), repo("t").replace('<source type="git">', '<source type="git&#10;">')))
    assert [(f.code, f.repo) for f in kind.errors] == [("format:source-type", "t")]


def test_external_dtd_reference_is_accepted_but_never_fetched(server: LoopbackServer) -> None:
    server.publish("evil.dtd", b'<!ENTITY x SYSTEM "file:///etc/passwd">')
    data = GOOD.replace(b"<repositories ", f'<!DOCTYPE repositories SYSTEM "{server.url}/evil.dtd">\n'
                        "<repositories ".encode(), 1)
    assert check(data).ok
    assert server.log == []


def test_limits_on_size_elements_and_text() -> None:
    with pytest.raises(OverlayXmlError, match="larger than 1000 bytes"):
        parse_document(b" " * 1001, "big.xml", XmlLimits(max_bytes=1000))
    many = overlay_list(*(repo(f"r{i}") for i in range(30)))
    with pytest.raises(OverlayXmlError, match="more than 100 elements"):
        parse_document(many, "many.xml", XmlLimits(max_elements=100))
    long_text = overlay_list(repo("long", extra=f"    <longdescription>{'x' * 5000}</longdescription>\n"))
    with pytest.raises(OverlayXmlError, match="more than 4096 characters"):
        parse_document(long_text, "long.xml", XmlLimits(max_text=4096))
    split_text = overlay_list(repo("split", extra=f"    <longdescription>{'x' * 3000}<br/>{'x' * 3000}"
                                                  "</longdescription>\n"))
    with pytest.raises(OverlayXmlError, match="more than 4096 characters"):  # all of an element's text counts
        parse_document(split_text, "split.xml", XmlLimits(max_text=4096))


def test_a_deep_15_mb_document_is_rejected_early_with_bounded_memory() -> None:
    data = b'<repositories version="1.0">' + b"<repo>" * 2_500_000
    tracemalloc.start()
    try:
        with pytest.raises(OverlayXmlError, match="line 1: elements nested deeper"):
            parse_document(data, "deep.xml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"parser used {peak} bytes"


# -- the format rules --------------------------------------------------------------------------------

FORMAT_CASES: list[tuple[str, bytes, str, str | None, int]] = [
    ("invalid quality", overlay_list(repo("q", quality="superb")), "format:quality", "q", 3),
    ("invalid status", overlay_list(repo("s", status="semi-official")), "format:status", "s", 3),
    ("missing quality", overlay_list(repo("m").replace(' quality="experimental"', "")), "format:quality", "m", 3),
    ("invalid source type", overlay_list(repo("t", sources=(("cvs2", "https://x.org/t"),))),
     "format:source-type", "t", 10),
    ("no source", overlay_list(repo("n", sources=())), "format:source", "n", 3),
    ("no name", overlay_list(repo("x").replace("    <name>x</name>\n", "")), "format:name", None, 3),
    ("two names", overlay_list(repo("two", extra="    <name>other</name>\n")), "format:name", "two", 3),
    ("bad name", overlay_list(repo("../../etc")), "name:pattern", "../../etc", 4),
    ("name with spaces", overlay_list(repo(" spaced ")), "name:pattern", "spaced", 4),
    ("no description", overlay_list(repo("d").replace('    <description lang="en">The d overlay</description>\n',
                                                      "")), "format:description", "d", 3),
    ("no owner", overlay_list(repo("o").replace(
        '    <owner type="person">\n      <email>o@example.org</email>\n    </owner>\n', "")), "format:owner", "o", 3),
    ("owner without e-mail", overlay_list(repo("e").replace("      <email>e@example.org</email>\n", "")),
     "format:owner", "e", 7),
    ("invalid owner type", overlay_list(repo("ot").replace('type="person"', 'type="robot"')),
     "format:owner-type", "ot", 7),
    ("priority not an integer", overlay_list(repo("p").replace("<repo ", '<repo priority="high" ')),
     "format:priority", "p", 3),
    ("wrong root", b'<overlays version="1.0"/>', "format:root", None, 1),
    ("wrong version", overlay_list(header=HEADER.replace('version="1.0"', 'version="2.0"')), "format:version",
     None, 2),
    ("duplicate names, different sources",
     overlay_list(repo("dup"), repo("dup", sources=(("git", "https://evil.example/dup.git"),))),
     "name:duplicate", "dup", 12),
    ("duplicate names, same sources", overlay_list(repo("same"), repo("same")), "name:duplicate", "same", 12),
]


@pytest.mark.parametrize(("data", "code", "name", "line"), [c[1:] for c in FORMAT_CASES],
                         ids=[c[0] for c in FORMAT_CASES])
def test_format_errors_name_the_repo_and_line(data: bytes, code: str, name: str | None, line: int) -> None:
    result = check(data)
    assert not result.ok
    found = [f for f in result.errors if f.code == code]
    assert found, [str(f) for f in result.findings]
    assert found[0].line == line
    assert name is None or found[0].repo == name


def _source(raw: str) -> bytes:
    """A list whose repo "split" has one <source type="git"> holding ``raw`` as it is (markup included)."""
    return overlay_list(repo("fine"), repo("split", sources=(("git", raw),)))


# lxml (eselect-repository) reads a <source>'s text only up to its first comment, processing instruction
# or child element; the checker joins every piece.  Any of them inside a <source> or a <name> is an error.
MIXED_CASES: list[tuple[str, bytes, str, str, int]] = [
    ("comment splits the source", _source("srv<!-- x -->:x/y"), "a comment inside <source>", "split", 19),
    ("processing instruction splits the source", _source("srv<?php x?>:x/y"),
     "a processing instruction <?php?> inside <source>", "split", 19),
    ("child element inside the source", _source("<b/>https://github.com/example/split.git"),
     "a <b> element inside <source>", "split", 19),
    ("text after a child element", _source("https://github.com/example/split.git<b/>#../../evil"),
     "a <b> element inside <source>", "split", 19),
    ("comment on its own line in the source", _source("srv\n<!-- x -->:x/y"), "a comment inside <source>",
     "split", 20),
    ("comment splits the name", overlay_list(repo("al<!-- x -->pha")), "a comment inside <name>", "alpha", 4),
    ("processing instruction in the name", overlay_list(repo("alpha<?x?>")),
     "a processing instruction <?x?> inside <name>", "alpha", 4),
]


@pytest.mark.parametrize(("data", "message", "name", "line"), [c[1:] for c in MIXED_CASES],
                         ids=[c[0] for c in MIXED_CASES])
def test_markup_inside_a_source_or_name_is_an_error(data: bytes, message: str, name: str, line: int) -> None:
    result = check(data)
    mixed = [f for f in result.errors if f.code == "format:mixed"]
    assert len(mixed) == 1, [str(f) for f in result.findings]
    assert message in mixed[0].message and "text before it" in mixed[0].message
    assert (mixed[0].repo, mixed[0].line) == (name, line)
    assert not result.ok


def test_markup_inside_other_text_elements_is_a_warning() -> None:
    result = check(overlay_list(repo("d").replace("The d overlay", "The d<!-- x --> overlay")))
    assert result.ok, [str(f) for f in result.errors]
    assert ("format:mixed", "d") in codes(result, Severity.WARNING)
    plain = check(overlay_list(repo("c", extra="    <!-- a comment between elements is fine -->\n")))
    assert plain.findings == [f for f in plain.findings if f.severity is Severity.NOTICE]


def test_duplicate_names_say_whether_sources_differ() -> None:
    result = check(overlay_list(repo("dup"), repo("dup", sources=(("git", "https://evil.example/dup.git"),))))
    assert "(first at line 3) with different sources" in str(result.errors[0])


WARNING_CASES = [
    ("elements out of DTD order", repo("order").replace(
        '    <homepage>https://example.org/order</homepage>\n', "") .replace(
        "  </repo>", "    <homepage>https://example.org/order</homepage>\n  </repo>"), "format:order"),
    ("unknown element", repo("u", extra="    <maintainer>x</maintainer>\n"), "format:element"),
    ("unknown attribute", repo("a").replace("<repo ", '<repo colour="red" '), "format:attribute"),
    ("two homepages", repo("h", extra="    <homepage>https://b.example</homepage>\n"), "format:homepage"),
    ("two owners", repo("o2", extra='    <owner><email>x@y.org</email></owner>\n'), "format:owner"),
    ("bad e-mail", repo("m").replace("m@example.org", "nobody"), "format:email"),
    ("homepage not a URL", repo("w").replace("https://example.org/w", "example.org"), "format:url"),
    ("same source twice", repo("twice", sources=(("git", "https://x.org/a.git"), ("git", "https://x.org/a.git"))),
     "source:duplicate"),
    ("two descriptions in one language", repo("l", extra='    <description lang="en">again</description>\n'),
     "format:lang"),
]


@pytest.mark.parametrize(("element", "code"), [c[1:] for c in WARNING_CASES], ids=[c[0] for c in WARNING_CASES])
def test_harmless_deviations_are_warnings(element: str, code: str) -> None:
    result = check(overlay_list(element))
    assert result.ok, [str(f) for f in result.errors]
    assert code in {f.code for f in result.of(Severity.WARNING)}


def test_a_good_list_has_no_findings_and_a_summary() -> None:
    result = check(GOOD)
    assert result.findings == [f for f in result.findings if f.severity is Severity.NOTICE]
    assert [r.name for r in result.repos] == ["alpha", "beta", "gamma"]
    assert result.source_counts() == {"git": 2, "mercurial": 1, "rsync": 1}
    assert result.to_json()["official"] == 1


# -- source URLs ----------------------------------------------------------------------------------

URL_CASES: list[tuple[str, str, str | None]] = [
    ("git", "https://github.com/gentoo/guru.git", None),
    ("git", "git+ssh://git@git.gentoo.org/repo/proj/guru.git", None),
    ("git", "git@github.com:gentoo/guru.git", None),
    ("git", "ssh://git@[2001:db8::1]:2222/x.git", None),
    ("cvs", "anoncvs@cvs.example.org:/var/CVSROOT/x", None),
    ("cvs", ":pserver:anonymous@cvs.example.org:/cvsroot", "source:unauthenticated"),
    ("git", "git://github.com/x/y.git", "source:unauthenticated"),
    ("git", "http://example.org/x.git", "source:unauthenticated"),
    ("rsync", "rsync://rsync.example.org/x", "source:unauthenticated"),
    ("git", "file:///etc", "source:local"),
    ("git", "FILE:///etc", "source:local"),
    ("git", "file:/etc", "source:local"),
    ("git", "/var/db/repos/gentoo", "source:local"),
    ("git", "../elsewhere", "source:local"),
    ("cvs", ":local:/var/cvs", "source:local"),
    ("git", "ext::sh -c touch% /tmp/pwned", "source:helper"),
    ("git", "ext::sh", "source:helper"),
    ("git", "fd::17", "source:helper"),
    ("git", "--upload-pack=touch /tmp/pwned", "source:option"),
    ("git", "-oProxyCommand=x", "source:option"),
    ("git", "ssh://-oProxyCommand=touch/y", "source:option"),
    ("git", "ssh://-l@host/y", "source:option"),
    ("git", "ssh://host:-p/y", "source:option"),
    ("git", "-x@host:path", "source:option"),
    ("git", "host:-path", "source:option"),
    ("git", " https://x.org/y.git", "source:whitespace"),
    ("git", "https://x.org/y.git\n", "source:whitespace"),
    ("git", "https://x.org/a b.git", "source:whitespace"),
    ("git", "https://x.org/\x1b[31m", "source:whitespace"),
    ("git", "https://x.org/\u200by", "source:whitespace"),
    ("git", "https://x.org/%0a", "source:percent"),
    ("git", "https://x.org/a%2Fb.git", "source:percent"),
    ("git", "https://x.org/%%(location)s", "source:percent"),
    ("git", "\\-\\-upload-pack=touch /tmp/pwned", "source:whitespace"),
    ("git", "\\-\\-upload-pack=touch_/tmp/pwned:x", "source:backslash"),
    ("git", "https://x.org/a\\b.git", "source:backslash"),
    ("git", "https://x.org/%20", "source:percent"),
    ("git", "", "source:empty"),
    ("git", "ftp://x.org/y", "source:scheme"),
    ("mercurial", "git@github.com:x/y", "source:scheme"),
    ("tar", "rsync://x.org/y.tar", "source:scheme"),
    ("git", "https:///path", "source:host"),
    ("git", "https://bad_host!/x", "source:host"),
    ("git", "ssh://git@github.com:CCF100/x.git", "source:port"),
    ("git", "git+https://git.sr.ht/~x/y", "source:unsupported"),
    ("git", "https://user:secret@x.org/y.git", "source:credentials"),
    ("git", "https://gіthub.com/x/y.git", "source:non-ascii"),  # Cyrillic i
]


@pytest.mark.parametrize(("kind", "url", "code"), URL_CASES, ids=[f"{k}:{u!r}" for k, u, _ in URL_CASES])
def test_source_url_rules(kind: str, url: str, code: str | None) -> None:
    issues = check_source(kind, url)
    assert [i.code for i in issues] == ([code] if code else [])


@pytest.mark.parametrize("url", ["file:///etc", "ext::sh -c touch% /tmp/pwned", "--upload-pack=touch /tmp/pwned"])
def test_dangerous_sources_refuse_the_list_naming_the_repo(url: str) -> None:
    source = url.replace("&", "&amp;")
    result = check(overlay_list(repo("fine"), repo("evil", sources=(("git", "https://x.org/e.git"), ("git", source)))))
    assert not result.ok
    assert [(f.repo, f.line) for f in result.errors] == [("evil", 20)]
    assert url in result.errors[0].message


# -- the real list ----------------------------------------------------------------------------------

def test_the_real_list_validates_with_its_real_problems_as_warnings() -> None:
    data = shared_path("fixtures", "real", "overlays", "repositories.xml").read_bytes()
    result = check(data)
    assert result.ok, [str(f) for f in result.errors]
    assert len(result.repos) == 458  # 462 <repo> in the file, 4 of them templates inside a comment
    assert result.source_counts() == {"cvs": 1, "git": 896, "mercurial": 1, "rsync": 5}
    warnings = result.of(Severity.WARNING)
    assert {f.code for f in warnings} == {"source:port", "source:unsupported", "format:owner"}
    chloverlay = [f for f in warnings if f.repo == "chloverlay"]
    assert [(f.code, f.line) for f in chloverlay] == [("source:port", 927)]
    assert sum(1 for f in warnings if f.code == "format:owner") == 4
    assert len(result.of(Severity.NOTICE)) == 54


@pytest.mark.parametrize(("data", "where"), [
    (b"<a>\xe9</a>", "line 1: not valid UTF-8 (byte 0xe9 at column 4)"),
    (b"<a>\xc3\xa9\xc3(</a>", "line 1: not valid UTF-8 (byte 0xc3 at column 6)"),
    (b"<a>\n\xe2\x82\n</a>", "line 2: not valid UTF-8 (byte 0xe2 at column 1)"),
    (b"<ab>\xc3", "line 1: not valid UTF-8 (byte 0xc3 at column 5)"),
])
def test_utf8_errors_are_located_across_chunk_boundaries(monkeypatch: pytest.MonkeyPatch, data: bytes,
                                                         where: str) -> None:
    monkeypatch.setattr("gkeys_portage.verify.overlays.xmltree.CHUNK", 4)
    with pytest.raises(OverlayXmlError, match=where.replace("(", r"\(").replace(")", r"\)")):
        parse_document(data, "small-chunks.xml")
