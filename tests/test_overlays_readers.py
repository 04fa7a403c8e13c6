"""The overlay list means the same to every program that reads it (issue 35, case 11).

gkeys checks each ``<source>`` text; eselect-repository and layman then read the same bytes their own way.
Here each reader's path is run for real where it exists on this machine, else reproduced:

* eselect-repository v14: ``eselect-repo-helper remote-metadata`` prints ``name remote TYPE URL`` (Python
  ``print`` of lxml's ``.text``; for a text-only element ``xml.etree`` gives the same text, and markup inside a
  source is refused by ``format:mixed``); ``repository.eselect``'s ``do_enable`` reads the line with the bash
  ``read r state arg1 arg2`` (no ``-r``) and appends the section with ``sed`` after doubling backslashes — the
  two steps run below in real bash and GNU sed; then **Portage's own** repos.conf parser
  (``RepoConfigLoader._parse``, Portage 3.0.83) reads the file.
* layman 2.4.3 (not installable here): ``xml_db.read`` takes ``findall('overlay') + findall('repo')`` of the
  document and ``overlay.from_xml`` uses ``source.text.strip()`` (or ``src=`` of an old-format entry).

The real list: every source reads the same in all three.  The attacks: each reads differently, and gkeys
refuses the list (exit 1), where before it passed.
"""

from __future__ import annotations

import configparser
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import GkeysEnv, shared_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from overlays_helpers import overlay_list, repo
from portage.repository.config import RepoConfigLoader
from test_overlays_cli import infra, write_list  # noqa: F401  (the fixture)

from gkeys_portage.verify.overlays.urls import Severity, check_source

#: repository.eselect's do_enable (v14): ``while read r state arg1 arg2`` over the helper's output, each
#: section appended with ``sed -i -e "$ a\\..."`` after every backslash is doubled for sed.
ESELECT_ENABLE = r'''
f=$1
echo "# created by eselect-repo" > "$f"
while read r state arg1 arg2; do
    new_lines="\\
[${r//\\/\\\\}]\\
location = /var/db/repos/${r//\\/\\\\}\\
sync-type = ${arg1//\\/\\\\}\\
sync-uri = ${arg2//\\/\\\\}"
    sed -i -e "\$ a\\
${new_lines}" "$f"
done
'''
ESELECT_TYPES = {"git": "git", "rsync": "rsync", "svn": "svn", "bzr": "bzr", "mercurial": "hg"}


def eselect_choices(data: bytes) -> dict[str, tuple[str, str]]:
    """The (sync-type, URL) ``eselect-repo-helper remote-metadata`` picks for each repo: its first source of a
    type eselect-repository supports (a repo with none, like the real list's CVS one, cannot be enabled)."""
    chosen = {}
    for element in ET.fromstring(data).findall("repo"):
        for source in element.findall("source"):
            if source.get("type") in ESELECT_TYPES:
                chosen[element.findtext("name") or ""] = (ESELECT_TYPES[source.get("type", "")], source.text or "")
                break
    return chosen


def helper_lines(data: bytes) -> str:
    """What ``eselect-repo-helper remote-metadata`` prints (``print(name, "remote", type, url)``)."""
    return "".join(f"{name} remote {kind} {url}\n" for name, (kind, url) in eselect_choices(data).items())


def eselect_enable(data: bytes, folder: Path) -> dict[str, str | None]:
    """Enable every repo of the list as eselect-repository does; the sync-uri Portage then reads for each.

    Raises :class:`configparser.Error` where Portage's parser does (emerge then drops every repository)."""
    conf = folder / "eselect-repo.conf"
    subprocess.run(["bash", "-c", ESELECT_ENABLE, "eselect", str(conf)], input=helper_lines(data), text=True,
                   check=True)
    prepos: dict[str, object] = {}
    RepoConfigLoader._parse([str(conf)], prepos, True, {})
    return {name: getattr(config, "sync_uri", None) for name, config in prepos.items() if name != "DEFAULT"}


def layman_sources(data: bytes) -> dict[str, list[str]]:
    """What layman 2.4.3 clones for each overlay name (old and new format): ``URL`` or ``URL -b BRANCH``."""
    found: dict[str, list[str]] = {}
    document = ET.fromstring(data)
    for element in document.findall("overlay") + document.findall("repo"):
        name = (element.findtext("name") or element.get("name") or "").strip()
        sources = [s for s in element.findall("source") if "type" in s.attrib]
        if sources:
            found[name] = [(s.text or "").strip() + (f" -b {s.get('branch')}" if s.get("branch") else "")
                           for s in sources]
        elif "src" in element.attrib and "type" in element.attrib:
            found[name] = [element.attrib["src"].strip()]
    return found


def gkeys_sources(data: bytes) -> dict[str, list[str]]:
    """The source texts gkeys checked, per repo (``xml.etree`` decoding, as :mod:`xmltree`'s expat)."""
    return {element.findtext("name") or "": [s.text or "" for s in element.findall("source")]
            for element in ET.fromstring(data).findall("repo")}


def first_sources(data: bytes) -> dict[str, str | None]:
    """The URL gkeys checked of each source eselect-repository enables."""
    return {name: url for name, (_kind, url) in eselect_choices(data).items()}


def test_every_source_of_the_real_list_reads_the_same_in_eselect_portage_and_layman(tmp_path: Path) -> None:
    data = shared_path("fixtures", "real", "overlays", "repositories.xml").read_bytes()
    checked = gkeys_sources(data)
    assert len(checked) == 458
    assert eselect_enable(data, tmp_path) == first_sources(data)
    assert layman_sources(data) == checked


def _attack(source: str, *, attributes: str = "") -> bytes:
    return overlay_list(repo("fine"), repo("evil", sources=(("git", "https://x.org/e.git"),)).replace(
        '    <source type="git">https://x.org/e.git</source>\n',
        f'    <source type="git"{attributes}>{source}</source>\n'))


OLD_FORMAT = overlay_list(repo("fine")).replace(
    b"</repositories>", b'  <overlay name="evil" type="mercurial" src="--config=hooks.pre-clone=touch /tmp/pwned"/>\n'
                        b"</repositories>")
#: (id, list, code gkeys refuses it with)
ATTACKS = [
    ("percent", _attack("https://x.org/%41.git"), "source:percent"),
    ("double-percent", _attack("https://x.org/%%41.git"), "source:percent"),
    ("backslashes", _attack(r"\-\-upload-pack=touch${IFS}/tmp/pwned;x:y"), "source:backslash"),
    ("branch", _attack("https://x.org/e.git", attributes=' branch="evil-branch"'), "source:attribute"),
    ("old-format", OLD_FORMAT, "format:overlay"),
]


@pytest.mark.parametrize(("data", "code"), [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_a_source_the_readers_would_read_differently_refuses_the_list(infra: GkeysEnv,  # noqa: F811
                                                                      tmp_path: Path, data: bytes,
                                                                      code: str) -> None:
    checked = gkeys_sources(data)
    try:
        eselect: dict[str, str | None] | None = eselect_enable(data, tmp_path)
    except configparser.Error:
        eselect = None  # Portage's parser fails: emerge drops every repository ("Nothing to sync", exit 0)
    assert eselect != first_sources(data) or layman_sources(data) != checked, "every reader agrees"
    result = infra.run("verify-overlays", str(write_list(infra, data)))
    assert result.code == 1, result.text
    assert f"[{code}]" in result.text and "Traceback" not in result.text, result.text


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.characters(codec="ascii"), min_size=1, max_size=40))
def test_any_source_gkeys_accepts_reads_the_same_in_eselect_portage_and_layman(tmp_path: Path, tail: str) -> None:
    url = "https://x.org/" + tail
    if any(issue.severity is Severity.ERROR for issue in check_source("git", url)):
        return
    text = url.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    data = overlay_list(repo("fine", sources=(("git", text),)))
    assert eselect_enable(data, tmp_path) == {"fine": url}
    assert layman_sources(data) == {"fine": [url]}
