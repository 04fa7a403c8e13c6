"""The rules of the overlay-list format (``repositories.dtd`` 1.0 and ``repositories.xsd``) as code.

Input is the tree from :mod:`gkeys_portage.verify.overlays.xmltree`; output is an :class:`OverlayList`:
the repositories and every :class:`Finding` (severity, stable code, repo name, line).

Errors (the list is refused) — what the consumers rely on, or the DTD/XSD requires:
  ``format:root`` the document element is not ``<repositories>``; ``format:version`` its
  ``version`` is not ``1.0``; ``format:quality`` / ``format:status`` missing or not in the
  enumeration; ``format:priority`` not an integer; ``format:name`` not exactly one ``<name>``;
  ``name:pattern`` the name is not ``[A-Za-z0-9_][A-Za-z0-9_-]*`` (it becomes a directory name);
  ``name:duplicate`` two repos with one name; ``format:description`` no ``<description>``;
  ``format:owner`` no ``<owner>``, or an owner without exactly one ``<email>``; ``format:owner-type``
  not person/project; ``format:source`` no ``<source>``; ``format:source-type`` missing or not in
  the enumeration; ``format:overlay`` an old-format ``<overlay>`` entry (layman 2.4.3 still reads
  ``<overlay>`` beside ``<repo>``, eselect-repository does not: one list, two meanings; the format has
  had only ``<repo>`` since 2009 and the real list has none); ``source:attribute`` an attribute other than
  ``type`` on ``<source>`` (layman reads ``branch=``, eselect-repository ignores it); every *error* of
  :mod:`gkeys_portage.verify.overlays.urls` (which include what the readers would change).
Warnings (reported, the list is accepted):
  ``format:order`` children not in the DTD order; ``format:element`` / ``format:attribute``
  unknown elements or attributes (ignored by layman and eselect-repository); ``format:homepage``,
  ``format:owner`` more than one (the DTD allows one, the XSD several); ``format:lang`` two
  descriptions with one ``lang``; ``format:email`` / ``format:url`` values that do not match the
  XSD patterns; ``format:text`` stray or empty text; ``format:mixed`` a comment, processing
  instruction or element inside another text element (description, homepage, owner, ...);
  ``source:duplicate`` the same source twice in one repo; warnings of the URL rules.
Notices: the URL rules' ``source:unauthenticated``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from gkeys_portage.verify.overlays.urls import ALLOWED_SCHEMES, Severity, check_source
from gkeys_portage.verify.overlays.xmltree import Element

# -- policy tables (from repositories.dtd / repositories.xsd) ------------------------------------------------

QUALITIES = ("core", "stable", "testing", "experimental", "graveyard")
STATUSES = ("official", "unofficial")
OWNER_TYPES = ("person", "project")
SOURCE_TYPES = tuple(sorted(ALLOWED_SCHEMES))
REPO_NAME = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_-]*\Z")
EMAIL = re.compile(r"\A[^@]+@[^.]+\..+\Z")
URL = re.compile(r"\A[^:]+:.+\Z")
#: DTD content model of <repo>: child -> (minimum, maximum or None for unbounded), in DTD order.
REPO_CHILDREN: dict[str, tuple[int, int | None]] = {
    "name": (1, 1), "description": (1, None), "longdescription": (0, None), "homepage": (0, 1),
    "owner": (1, 1), "source": (1, None), "feed": (0, None),
}
REPO_ATTRIBUTES = frozenset({"priority", "quality", "status"})
LANG_ATTRIBUTES = frozenset({"lang"})
#: Elements the DTD allows once but the XSD (an unbounded choice) allows repeatedly: more than one is a
#: warning.  The real list has repos with two or three owners.
SOFT_MAXIMUM = frozenset({"homepage", "owner"})


@dataclass(frozen=True)
class Finding:
    """One problem in the list: severity, stable code, the repo it concerns (if any) and the line."""

    severity: Severity
    code: str
    message: str
    repo: str | None
    line: int

    def __str__(self) -> str:
        where = f"line {self.line}" + (f", repo {self.repo}" if self.repo else "")
        return f"{where}: {self.message} [{self.code}]"

    def to_json(self) -> dict[str, object]:
        """Machine-readable form."""
        return {"severity": self.severity.value, "code": self.code, "message": self.message,
                "repo": self.repo, "line": self.line}


@dataclass(frozen=True)
class Source:
    """A ``<source type=...>`` of a repository."""

    type: str
    url: str
    line: int


@dataclass
class Repo:
    """One ``<repo>`` as the consumers see it."""

    name: str
    line: int
    quality: str
    status: str
    sources: list[Source] = field(default_factory=list)


@dataclass
class OverlayList:
    """The checked list: its repositories and every finding."""

    repos: list[Repo] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def of(self, severity: Severity) -> list[Finding]:
        """The findings of one severity, in document order."""
        return [f for f in self.findings if f.severity is severity]

    @property
    def errors(self) -> list[Finding]:
        """Findings that refuse the list."""
        return self.of(Severity.ERROR)

    @property
    def ok(self) -> bool:
        """True if nothing refuses the list."""
        return not self.errors

    def source_counts(self) -> dict[str, int]:
        """Number of sources per source type."""
        return dict(sorted(Counter(s.type for r in self.repos for s in r.sources).items()))

    def to_json(self) -> dict[str, object]:
        """Summary and findings for ``--json``."""
        return {
            "repos": len(self.repos),
            "sources": self.source_counts(),
            "official": sum(1 for r in self.repos if r.status == "official"),
            "errors": len(self.errors), "warnings": len(self.of(Severity.WARNING)),
            "notices": len(self.of(Severity.NOTICE)),
            "findings": [f.to_json() for f in self.findings],
        }


class _Checker:
    """Collects findings while walking the tree."""

    def __init__(self) -> None:
        self.result = OverlayList()

    def add(self, severity: Severity, code: str, message: str, repo: str | None, line: int) -> None:
        self.result.findings.append(Finding(severity, code, message, repo, line))

    def error(self, code: str, message: str, repo: str | None, line: int) -> None:
        self.add(Severity.ERROR, code, message, repo, line)

    def warn(self, code: str, message: str, repo: str | None, line: int) -> None:
        self.add(Severity.WARNING, code, message, repo, line)

    # -- generic helpers ------------------------------------------------------------------------------

    def unknown_attributes(self, element: Element, allowed: frozenset[str], repo: str | None) -> None:
        for attribute in sorted(set(element.attrib) - allowed):
            self.warn("format:attribute", f"unknown attribute {attribute!r} on <{element.tag}>", repo, element.line)

    def no_text(self, element: Element, repo: str | None) -> None:
        if element.text.strip():
            self.warn("format:text", f"stray text inside <{element.tag}>", repo, element.line)

    def leaf(self, element: Element, repo: str | None, allowed: frozenset[str] = frozenset(), *,
             used: bool = False) -> str:
        """The text of an element that must hold only text; xs:token whitespace is collapsed.

        ``used``: the consumers act on this text (a repo's name, a source), so anything that splits it
        is an error: lxml's ``.text`` (eselect-repository) ends at the first comment, processing
        instruction or child element, while the text checked here is every piece joined.
        """
        for child in element.children:
            self.warn("format:element", f"unexpected <{child.tag}> inside <{element.tag}>", repo, child.line)
        if element.mixed is not None:
            what, line = element.mixed
            message = (f"{what} inside <{element.tag}>: it must hold text only (lxml, which eselect-repository "
                       "uses, reads only the text before it)")
            self.add(Severity.ERROR if used else Severity.WARNING, "format:mixed", message, repo, line)
        self.unknown_attributes(element, allowed, repo)
        return " ".join(element.text.split())

    def enum(self, element: Element, attribute: str, values: tuple[str, ...], repo: str | None,
             code: str, *, required: bool = True) -> str:
        value = element.attrib.get(attribute)
        if value is None:
            if required:
                self.error(code, f"<{element.tag}> has no {attribute} attribute (one of {', '.join(values)})",
                           repo, element.line)
            return ""
        if value not in values:
            self.error(code, f"{attribute}={value!r} is not one of {', '.join(values)}", repo, element.line)
        return value

    # -- the document ---------------------------------------------------------------------------------

    def document(self, root: Element) -> OverlayList:
        if root.tag != "repositories":
            self.error("format:root", f"document element is <{root.tag}>, expected <repositories>", None, root.line)
            return self.result
        version = root.attrib.get("version")
        if version != "1.0":
            self.error("format:version", f"<repositories> version is {version!r}, expected '1.0'", None, root.line)
        self.unknown_attributes(root, frozenset({"version"}), None)
        self.no_text(root, None)
        for child in root.children:
            if child.tag == "repo":
                self.repo(child)
            elif child.tag == "overlay":
                self.error("format:overlay", "an old-format <overlay> entry: layman reads it, eselect-repository does "
                                             "not (and repositories.dtd 1.0 has only <repo>)", child.attrib.get("name"),
                           child.line)
            else:
                self.warn("format:element", f"unexpected <{child.tag}> inside <repositories>", None, child.line)
        self.duplicates()
        return self.result

    def repo(self, element: Element) -> None:
        names = [c for c in element.children if c.tag == "name"]
        raw_name = names[0].text if names else ""
        name = raw_name.strip() or f"(unnamed repo at line {element.line})"
        self.counts(element, name)
        self.order(element, name)
        self.no_text(element, name)
        self.unknown_attributes(element, REPO_ATTRIBUTES, name)
        quality = self.enum(element, "quality", QUALITIES, name, "format:quality")
        status = self.enum(element, "status", STATUSES, name, "format:status")
        priority = element.attrib.get("priority")
        if priority is not None and not re.fullmatch(r"\s*[+-]?[0-9]+\s*", priority):
            self.error("format:priority", f"priority={priority!r} is not an integer", name, element.line)
        if names:
            self.leaf(names[0], name, used=True)
            if not REPO_NAME.match(raw_name):
                self.error("name:pattern", f"repository name {raw_name!r} does not match [A-Za-z0-9_][A-Za-z0-9_-]* "
                                           "(it becomes a directory and a repos.conf section)", name, names[0].line)
        repo = Repo(name, element.line, quality, status)
        langs: dict[str, Counter[str]] = {"description": Counter(), "longdescription": Counter()}
        for child in element.children:
            if child.tag in langs:
                if not self.leaf(child, name, LANG_ATTRIBUTES):
                    self.warn("format:text", f"empty <{child.tag}>", name, child.line)
                lang = child.attrib.get("lang", "C")
                langs[child.tag][lang] += 1
                if langs[child.tag][lang] == 2:
                    self.warn("format:lang", f"two <{child.tag}> elements with lang={lang!r}", name, child.line)
            elif child.tag in ("homepage", "feed"):
                value = self.leaf(child, name)
                if not URL.match(value):
                    self.warn("format:url", f"<{child.tag}> {value!r} is not a URL", name, child.line)
            elif child.tag == "owner":
                self.owner(child, name)
            elif child.tag == "source":
                self.source(child, repo)
            elif child.tag not in REPO_CHILDREN:
                self.warn("format:element", f"unexpected <{child.tag}> inside <repo>", name, child.line)
        self.result.repos.append(repo)

    def counts(self, element: Element, name: str) -> None:
        counts = Counter(c.tag for c in element.children)
        for tag, (low, high) in REPO_CHILDREN.items():
            found = counts[tag]
            if low <= found and (high is None or found <= high):
                continue
            want = f"exactly {low}" if low == high else (f"at least {low}" if high is None else f"at most {high}")
            message = f"has {found} <{tag}> elements, the format requires {want}"
            if tag in SOFT_MAXIMUM and found > low:
                self.warn(f"format:{tag}", f"has {found} <{tag}> elements (the DTD allows {high}, the XSD more)",
                          name, element.line)
            else:
                self.error(f"format:{tag}", message, name, element.line)

    def order(self, element: Element, name: str) -> None:
        rank = {tag: i for i, tag in enumerate(REPO_CHILDREN)}
        known = [c for c in element.children if c.tag in rank]
        for before, after in zip(known, known[1:], strict=False):
            if rank[after.tag] < rank[before.tag]:
                self.warn("format:order", f"<{after.tag}> comes after <{before.tag}> (DTD order: "
                                          f"{', '.join(REPO_CHILDREN)})", name, after.line)
                return

    def owner(self, element: Element, name: str) -> None:
        self.enum(element, "type", OWNER_TYPES, name, "format:owner-type", required=False)
        self.unknown_attributes(element, frozenset({"type"}), name)
        self.no_text(element, name)
        emails = [c for c in element.children if c.tag == "email"]
        if len(emails) != 1:
            self.error("format:owner", f"<owner> has {len(emails)} <email> elements, the format requires exactly 1",
                       name, element.line)
        if sum(1 for c in element.children if c.tag == "name") > 1:
            self.warn("format:owner", "<owner> has more than one <name>", name, element.line)
        for child in element.children:
            if child.tag == "email":
                email = self.leaf(child, name)
                if not EMAIL.match(email):
                    self.warn("format:email", f"owner e-mail {email!r} does not look like an address", name,
                              child.line)
            elif child.tag == "name":
                self.leaf(child, name)
            else:
                self.warn("format:element", f"unexpected <{child.tag}> inside <owner>", name, child.line)

    def source(self, element: Element, repo: Repo) -> None:
        source_type = self.enum(element, "type", SOURCE_TYPES, repo.name, "format:source-type")
        for attribute in sorted(set(element.attrib) - {"type"}):
            self.error("source:attribute", f"attribute {attribute!r} on <source>: layman reads some (branch=), "
                                           "eselect-repository none, so they would clone different things",
                       repo.name, element.line)
        self.leaf(element, repo.name, frozenset(element.attrib), used=True)
        url = element.text  # raw: eselect-repository copies it into repos.conf as it is
        if source_type not in ALLOWED_SCHEMES:
            return
        if any(s.url == url and s.type == source_type for s in repo.sources):
            self.warn("source:duplicate", f"source {url!r} is listed twice", repo.name, element.line)
        for issue in check_source(source_type, url):
            self.add(issue.severity, issue.code, f"{source_type} source {url!r}: {issue.message}", repo.name,
                     element.line)
        repo.sources.append(Source(source_type, url, element.line))

    def duplicates(self) -> None:
        first: dict[str, Repo] = {}
        for repo in self.result.repos:
            if repo.name.startswith("(unnamed"):
                continue
            if repo.name not in first:
                first[repo.name] = repo
                continue
            earlier = first[repo.name]
            same = {(s.type, s.url) for s in earlier.sources} == {(s.type, s.url) for s in repo.sources}
            self.error("name:duplicate", f"repository name is used again (first at line {earlier.line}) "
                                         f"{'with the same' if same else 'with different'} sources",
                       repo.name, repo.line)


def check_document(root: Element) -> OverlayList:
    """Apply every format and source-URL rule to a parsed overlay list."""
    result = _Checker().document(root)
    result.findings.sort(key=lambda f: f.line)
    return result
