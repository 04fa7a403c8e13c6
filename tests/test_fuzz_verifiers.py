"""Property-based fuzzing of the verifiers' parsers: DIGESTS, latest-*.txt, repositories.xml, source URLs.

Properties: only the package's own error classes escape (never a traceback), whatever is accepted is
safe (no path leaves the mirror, no refused URL scheme is accepted), and time stays bounded.
Budget: ``GKEYS_FUZZ_EXAMPLES`` (default 200 per property).
"""

from __future__ import annotations

import os
import posixpath

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gkeys_portage.core.errors import GkeysError
from gkeys_portage.verify.media.digests import parse_digests, parse_latest
from gkeys_portage.verify.overlays.format import check_document
from gkeys_portage.verify.overlays.urls import Severity, check_source
from gkeys_portage.verify.overlays.xmltree import parse_document

EXAMPLES = int(os.environ.get("GKEYS_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HEX = "0123456789abcdef"
names = st.one_of(st.sampled_from(["stage3-amd64.tar.xz", "../etc/passwd", "/etc/shadow", "a/../../b",
                                   "stage3-amd64.tar.xz.CONTENTS.gz", "x\x00y", " ", "-rf", "..", "."]),
                  st.text(max_size=20))
digest_line = st.one_of(
    st.builds(lambda a: f"# {a} HASH", st.sampled_from(["SHA512", "BLAKE2B", "SHA256", "MD5", "WHIRLPOOL",
                                                         "SHA1", "FOO"])),
    st.builds(lambda h, n: f"{h}  {n}", st.text(HEX, min_size=0, max_size=130), names),
    st.builds(lambda a, n, h: f"{a} ({n}) = {h}", st.sampled_from(["SHA512", "BLAKE2B", "SHA256"]), names,
              st.text(HEX, max_size=130)),
    st.text(max_size=60),
)


@FUZZ
@given(st.lists(digest_line, max_size=25))
def test_digests_parser_accepts_only_safe_names(lines: list[str]) -> None:
    try:
        result = parse_digests("\n".join(lines))
    except GkeysError:
        return
    for name in result.filenames():
        assert name and "/" not in name and name not in (".", "..") and "\x00" not in name


latest_line = st.one_of(
    st.builds(lambda p, s: f"{p} {s}", st.one_of(names, st.sampled_from(
        ["20261203T000000Z/stage3-amd64-openrc-20261203T000000Z.tar.xz", "../../x", "https://evil.example/x",
         "//evil.example/x", "/abs/path"])), st.integers(min_value=-5, max_value=10**12)),
    st.text(max_size=60),
)


@FUZZ
@given(st.lists(latest_line, max_size=15))
def test_latest_parser_never_leaves_the_mirror(lines: list[str]) -> None:
    try:
        entries = parse_latest("\n".join(lines))
    except GkeysError:
        return
    for entry in entries:
        normal = posixpath.normpath(entry.path)
        assert not normal.startswith(("/", "..")) and "://" not in entry.path


xml_pieces = st.sampled_from([
    "<?xml version='1.0' encoding='UTF-8'?>", "<!DOCTYPE repositories SYSTEM 'http://127.0.0.1:1/x.dtd'>",
    "<!DOCTYPE r [<!ENTITY a 'aaaa'><!ENTITY b '&a;&a;&a;'>]>", "<!ENTITY x SYSTEM 'file:///etc/passwd'>",
    "<repositories version='1.0'>", "</repositories>", "<repo quality='experimental' status='unofficial'>",
    "<repo quality='bogus' status='official'>", "</repo>", "<name>foo</name>", "<name>-bad name</name>",
    "<description>d</description>", "<owner type='person'><email>a@b.c</email></owner>",
    "<source type='git'>https://example.org/r.git</source>", "<source type='git'>ext::sh -c id</source>",
    "<source type='git'>--upload-pack=touch /tmp/x</source>", "<source type='rsync'>file:///etc</source>",
    "&b;", "&x;", "<feed>https://example.org/f</feed>", "\xff", "\x00", "]]>", "<![CDATA[x]]>",
    "<x:source xmlns:x='urn:x' type='git'>ext::sh</x:source>", "<source xmlns='urn:a' type='git'>",
    "<![CDATA[ext::sh]]>", "&#10;", "&#x2d;&#45;", "\x00<\x00", "<?xml version='1.0' encoding='UTF-7'?>",
])


@FUZZ
@given(st.lists(st.one_of(xml_pieces, st.text(max_size=15)), max_size=30))
def test_overlay_xml_and_rules_never_crash_and_never_accept_dangerous_sources(pieces: list[str]) -> None:
    data = "".join(pieces).encode("utf-8", "surrogatepass")
    try:
        overlays = check_document(parse_document(data, "fuzz.xml"))
    except GkeysError:
        return
    if overlays.ok:  # an accepted list holds only sources the URL rules accept
        for repo in overlays.repos:
            for source in repo.sources:
                assert not any(i.severity is Severity.ERROR for i in check_source(source.type, source.url))


@FUZZ
@given(st.sampled_from(["git", "mercurial", "rsync", "svn", "cvs", "bzr", "tar", "bogus"]),
       st.one_of(st.text(max_size=50), st.builds(lambda s, r: s + r, st.sampled_from(
           ["https://", "git://", "ssh://", "git@", "file://", "ext::", "-", "rsync://", "svn+ssh://", " "]),
           st.text(max_size=30))))
def test_source_url_rules_refuse_local_and_option_injection(source_type: str, url: str) -> None:
    issues = check_source(source_type, url)
    accepted = not any(issue.severity is Severity.ERROR for issue in issues)
    if accepted:
        lowered = url.strip().lower()
        assert not lowered.startswith(("file:", "ext::", "fd::", "-", "/"))
        assert not any(ch.isspace() or ord(ch) < 32 for ch in url)
