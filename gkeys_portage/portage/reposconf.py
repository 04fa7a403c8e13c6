"""Read Portage's repository configuration the way Portage merges it (no Portage import needed).

Portage reads ``${EPREFIX}/usr/share/portage/config/repos.conf`` and then ``${EROOT}/etc/portage/repos.conf``
(a file, or a directory whose files at any depth are read in Portage's order: :func:`file_or_directory`);
a later value of the same key wins.  :func:`read_repos` gives the merged options of every repository and the
file each value came from, for ``gkeys setup-portage`` and ``gkeys doctor``.
"""

from __future__ import annotations

import configparser
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.core.errors import BadInputError

DEFAULTS = Path("usr/share/portage/config/repos.conf")
USER = Path("etc/portage/repos.conf")


@dataclass
class RepoConfig:
    """The merged options of one repository and, per option, the file that set it last."""

    name: str
    options: dict[str, str] = field(default_factory=dict)
    origin: dict[str, Path] = field(default_factory=dict)

    def get(self, key: str, default: str = "") -> str:
        """An option's value (``default`` when unset)."""
        return self.options.get(key, default)

    def blocks_first_clone(self) -> Path | None:
        """The location, if it holds files but no git repository: a first ``sync-type = gkeys`` clone refuses
        to clone over it (an rsync tree, for instance)."""
        location = Path(self.get("location")) if self.get("location") else None
        if location is None or not location.is_dir() or (location / ".git").exists():
            return None
        return location if any(location.iterdir()) else None


#: directories Portage never descends into (``portage.const.VCS_DIRS``)
VCS_DIRS = ("CVS", "RCS", "SCCS", ".bzr", ".git", ".hg", ".svn")


def _visible(name: str) -> bool:
    return not name.startswith(".") and not name.endswith("~")


def file_or_directory(path: Path) -> list[Path]:
    """The files Portage reads for a configuration ``path`` that may be a file or a directory (repos.conf,
    make.conf), in Portage's order.

    Portage's own lister (``portage.util._recursive_file_list``) where Portage is importable, else
    :func:`list_config_files`, which does the same.
    """
    try:
        from portage.util import _recursive_file_list
    except Exception:  # no Portage here (or a namespace package without it): the same walk, by hand
        return list_config_files(path)
    try:
        return [Path(name) for name in _recursive_file_list(str(path))]
    except Exception as exc:  # PermissionDenied: Portage would fail too
        raise BadInputError(f"cannot read {path}: {exc}") from exc


def list_config_files(path: Path) -> list[Path]:
    """Portage's ``_recursive_file_list`` without Portage: the file itself, or every file below the directory at
    any depth, depth first with files and directories sorted together by name, directory symlinks followed,
    hidden and ``~`` names and VCS directories (``.git``, ``CVS``, ...) skipped.  A later file wins, so
    ``repos.conf/zzz/local.conf`` is read after ``repos.conf/zz-gkeys.conf``."""
    found: list[Path] = []

    def walk(current: Path, ancestors: frozenset[tuple[int, int]]) -> None:
        try:
            info = current.stat()  # follows symlinks, as Portage does
        except PermissionError as exc:
            raise BadInputError(f"cannot read {current}: permission denied") from exc
        except OSError:
            return
        if stat.S_ISDIR(info.st_mode):
            if current.name in VCS_DIRS or not _visible(current.name) or (info.st_dev, info.st_ino) in ancestors:
                return  # (a directory symlink loop would make Portage recurse for ever; here it ends)
            try:
                children = sorted(os.listdir(current))
            except PermissionError as exc:
                raise BadInputError(f"cannot read {current}: permission denied") from exc
            except OSError:
                return
            for child in children:
                walk(current / child, ancestors | {(info.st_dev, info.st_ino)})
        elif stat.S_ISREG(info.st_mode) and _visible(current.name):
            found.append(current)

    walk(path, frozenset())
    return found


def read_after(files: list[Path], directory: Path, name: str) -> list[Path]:
    """The files of ``files`` under ``directory`` that Portage reads after ``directory/name`` (at any depth)."""
    later = []
    for path in files:
        try:
            parts = path.relative_to(directory).parts
        except ValueError:
            continue
        if parts > (name,):
            later.append(path)
    return later


def config_files(eroot: Path, *, skip: Path | None = None) -> list[Path]:
    """The repos.conf files Portage reads under ``eroot``, in order (``skip`` is left out)."""
    files = [eroot / DEFAULTS] if (eroot / DEFAULTS).is_file() else []
    files += file_or_directory(eroot / USER)
    return [f for f in files if skip is None or f != skip]


def read_repos(eroot: Path, *, skip: Path | None = None) -> dict[str, RepoConfig]:
    """Every repository configured under ``eroot`` with its merged options ([DEFAULT] excluded)."""
    return read_files(config_files(eroot, skip=skip))


def read_files(files: list[Path], *, defaults: bool = True) -> dict[str, RepoConfig]:
    """The merged repositories of ``files``, read in this order (a later value wins).

    ``[DEFAULT]`` values apply to every repository that does not set the key itself (Portage's parser
    does this whatever file each came from); ``defaults=False`` leaves them out.
    """
    repos: dict[str, RepoConfig] = {}
    default = RepoConfig(DEFAULT)
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInputError(f"cannot read {path}: {str(exc).splitlines()[0]}") from exc
        _merge(repos, default, text, path)
    if defaults:
        _inherit(repos, default)
    return repos


def read_string(text: str, source: Path) -> dict[str, RepoConfig]:
    """The repositories of one repos.conf text, e.g. ``PORTAGE_REPOSITORIES`` (``source`` names it)."""
    repos: dict[str, RepoConfig] = {}
    default = RepoConfig(DEFAULT)
    _merge(repos, default, text, source)
    _inherit(repos, default)
    return repos


DEFAULT = "DEFAULT"
#: ``[DEFAULT]`` keys that mean something only there (Portage ignores them in a repository's section)
_DEFAULT_ONLY = ("main-repo",)


def _inherit(repos: dict[str, RepoConfig], default: RepoConfig) -> None:
    """Give every repository the ``[DEFAULT]`` values it does not set itself."""
    for repo in repos.values():
        for key, value in default.options.items():
            if key not in repo.options and key not in _DEFAULT_ONLY:
                repo.options[key] = value
                repo.origin[key] = default.origin[key]


def _merge(repos: dict[str, RepoConfig], default: RepoConfig, text: str, source: Path) -> None:
    """Merge the sections of ``text`` into ``repos`` and its ``[DEFAULT]`` into ``default`` (a later value wins)."""
    parser = configparser.ConfigParser(interpolation=None, strict=False, default_section="\0none")
    try:
        parser.read_string(text, source=str(source))
    except configparser.Error as exc:
        raise BadInputError(f"cannot read {source}: {str(exc).splitlines()[0]}") from exc
    for section in parser.sections():
        repo = default if section == DEFAULT else repos.setdefault(section, RepoConfig(section))
        for key, value in parser.items(section):
            repo.options[key] = value.strip()
            repo.origin[key] = source
