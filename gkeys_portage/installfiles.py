"""The files a gkeys-portage installation puts outside the Python package: one list for all installers.

``setup.py`` (wheel ``data_files``), the Gentoo ebuild (``/etc/gkeys``), ``gkeys setup-portage`` (where
the hooks are) and the tests all read :data:`DATA_FILES`; nobody keeps a second list.  Standard library
only: ``setup.py`` loads this file by path at build time, before any dependency is installed.

Run as a script to print ``SOURCE<TAB>TARGET-DIR`` lines of one group (for the ebuild)::

    python3 gkeys_portage/installfiles.py etc
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

SHARE = "share/gkeys-portage"
MAN_PAGES = ("gkeys.1", "gkeys-gen.1", "gkeys-ldap.1", "gkeys-fetch.1", "gkeys-trust-helper.1", "gkeys.conf.5")
SAMPLE_CONFIG = "packaging/gkeys.conf"
PROGRAMS = ("gkeys", "gkeys-gen", "gkeys-ldap", "gkeys-fetch", "gkeys-trust-helper")
COMPLETION_DIR = "packaging/bash-completion"
COMPLETION = f"{COMPLETION_DIR}/gkeys"
# Source tree paths of the Portage hooks, relative to hooks/ (also their path under SHARE/hooks/).
HOOKS = ("repo.postsync.d/gkeys-verify", "postsync.d/gkeys-verify", "postsync.d/gkeys-overlays", "fetch/gkeys-fetch")
BASHRC = "bashrc.d/gkeys.sh"
ECLASS = "eclass-helpers/gkeys-verify.eclass"
# The daily key refresh, off the sync path: systemd units (``systemd`` group: the ebuild installs them with
# systemd_dounit, ${EPREFIX} put into their paths; a pip install has no systemd unit directory) and a cron.daily
# script for systems without systemd timers.
REFRESH_UNITS = ("packaging/systemd/gkeys-refresh.service", "packaging/systemd/gkeys-refresh.timer")
REFRESH_CRON = "packaging/cron/gkeys-refresh"
# The documentation: PREFIX/share/doc/gkeys-portage (the ebuild moves it to /usr/share/doc/${PF} and links this name
# to it); messages and man pages name the files there (:func:`doc_file`, :data:`DOC_SHOWN`).
DOCS = ("README.md", "SECURITY.md", *(f"docs/{name}.md" for name in (
    "architecture", "benchmarks", "engines", "exit-codes", "journal", "keys", "media", "overlays", "portage", "tree")))
DOC_DIR = "share/doc/gkeys-portage"
#: How help texts and man pages (generated, the same on every system) name the documentation directory.
DOC_SHOWN = "/usr/share/doc/gkeys-portage"


@dataclass(frozen=True)
class DataFile:
    """One installed file: its path in the source tree, the directory it goes to and its group.

    ``target`` is relative to the install prefix (``share`` group) or to the root (``etc`` group).
    """

    source: str
    target: str
    group: str = "share"
    executable: bool = False

    @property
    def name(self) -> str:
        """The installed file name."""
        return self.source.rsplit("/", 1)[-1]

    def installed(self, base: Path) -> Path:
        """Where this file lands below ``base`` (the prefix or root of its group)."""
        return base / self.target / self.name


DATA_FILES: tuple[DataFile, ...] = (
    *(DataFile(f"hooks/{hook}", f"{SHARE}/hooks/{hook.rsplit('/', 1)[0]}", executable=True) for hook in HOOKS),
    DataFile(f"hooks/{BASHRC}", f"{SHARE}/hooks/bashrc.d"),
    DataFile(ECLASS, f"{SHARE}/eclass"),
    DataFile(SAMPLE_CONFIG, SHARE),
    *(DataFile(f"docs/man/{page}", f"share/man/man{page[-1]}") for page in MAN_PAGES),
    # one file per command: bash-completion loads completions/NAME when NAME is first completed
    *(DataFile(f"{COMPLETION_DIR}/{program}", "share/bash-completion/completions") for program in PROGRAMS),
    *(DataFile(doc, DOC_DIR) for doc in DOCS),
    *(DataFile(unit, "lib/systemd/system", group="systemd") for unit in REFRESH_UNITS),
    DataFile(SAMPLE_CONFIG, "etc/gkeys", group="etc"),
    DataFile(REFRESH_CRON, "etc/cron.daily", group="etc", executable=True),
)


def data_files(group: str = "share") -> list[tuple[str, list[str]]]:
    """``(target-dir, [sources])`` pairs of one group, the shape setuptools' ``data_files`` takes."""
    grouped: dict[str, list[str]] = {}
    for item in DATA_FILES:
        if item.group == group:
            grouped.setdefault(item.target, []).append(item.source)
    return list(grouped.items())


def source_root() -> Path | None:
    """The source checkout this module runs from (it has ``hooks/``), or None when installed."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "hooks" / HOOKS[0]).is_file() and (root / "setup.py").is_file() else None


def share_dir(prefix: Path | None = None) -> Path:
    """Where the shared files are: a source checkout's own tree wins (its hooks match its code), else
    ``PREFIX/share/gkeys-portage`` of the interpreter's installation (``sys.prefix``)."""
    if prefix is None and source_root() is not None:
        return Path(str(source_root()))
    return (prefix or Path(sys.prefix)) / SHARE


def hook_file(hook: str, prefix: Path | None = None) -> Path:
    """The file of one hook (``"repo.postsync.d/gkeys-verify"``) in the source tree or the installation."""
    base = share_dir(prefix)
    return base / "hooks" / hook


def doc_file(name: str, prefix: Path | None = None) -> str:
    """Where the document ``name`` (``"portage.md"``) is for the user reading a message: the source checkout's
    ``docs/`` when running from one, else ``PREFIX/share/doc/gkeys-portage/`` of the installation."""
    root = source_root() if prefix is None else None
    if root is not None:
        return str(root / "docs" / name if (root / "docs" / name).is_file() else root / name)
    return str((prefix or Path(sys.prefix)) / DOC_DIR / name)


def bashrc_file(prefix: Path | None = None) -> Path:
    """The bashrc snippet (``pre_src_unpack`` distfile verification)."""
    return share_dir(prefix) / "hooks" / BASHRC


def main(argv: list[str]) -> int:
    """Print ``SOURCE<TAB>TARGET-DIR`` for every file of the group named in ``argv``."""
    if len(argv) != 1:
        sys.stderr.write("usage: installfiles.py GROUP (share, etc or systemd)\n")
        return 2
    for target, sources in data_files(argv[0]):
        for source in sources:
            print(f"{source}\t{target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
