"""The INI configuration (design.md §4).

Looked up in this order: ``-c FILE``, ``$GKEYS_CONFIG``, ``${EPREFIX}/etc/gkeys/gkeys.conf``;
a missing default file means built-in defaults.  ``--root DIR`` wins over ``[base] gkeysdir``.
Inline comments start with `` ;``.  Sections other than the ones read here stay available
through :attr:`Config.parser` for the verifiers (``[media]``, ``[overlays]``, ``[tree]``).
"""

from __future__ import annotations

import configparser
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.core.configschema import builtin_lines, check_known_keys, check_values
from gkeys_portage.core.errors import ConfigError
from gkeys_portage.core.hashpolicy import parse_weak_hashes
from gkeys_portage.core.types import Category, Nick, parse_category, parse_nick

#: No built-in seed URL: the old project's seed files (api.gentoo.org/gentoo-keys/seeds/) were removed
#: in 2023.  ``gentoo``, ``gentoo-auth`` and ``gentoo-infra`` are packaged; ``gentoo-devs`` comes from
#: authority certifications (``[authority-seeds]``).  A config file may add third-party seed URLs.
DEFAULT_SEEDURLS: dict[str, str] = {}
DEFAULT_VERIFY_SEEDS: dict[str, str] = {}
#: ``[authority-seeds]`` built in: Gentoo's active developers, certified by the L2-developers key (GLEP 79).
DEFAULT_AUTHORITY_SEEDS = builtin_lines("authority-seeds")
DEFAULT_WKD_ADVANCED = "https://openpgpkey.{domain}/.well-known/openpgpkey/{domain}"
DEFAULT_WKD_DIRECT = "https://{domain}/.well-known/openpgpkey"


def eprefix() -> str:
    """The Gentoo Prefix offset (``$EPREFIX``), empty on a normal system."""
    return os.environ.get("EPREFIX", "").rstrip("/")


def default_config_path(prefix: str | None = None) -> Path:
    """``${EPREFIX}/etc/gkeys/gkeys.conf`` (``prefix``: the EPREFIX to use instead of ``$EPREFIX``)."""
    return Path((eprefix() if prefix is None else prefix.rstrip("/")) + "/etc/gkeys/gkeys.conf")


@dataclass
class SourcesConfig:
    """Where keys come from and how hard to try."""

    keyservers: list[str] = field(default_factory=lambda: ["hkps://keys.gentoo.org"])
    wkd: bool = True
    wkd_advanced_url: str = DEFAULT_WKD_ADVANCED
    wkd_direct_url: str = DEFAULT_WKD_DIRECT
    timeout: float = 30.0
    retries: int = 3
    backoff: float = 0.5
    workers: int = 32


@dataclass
class PolicyConfig:
    """Time and freshness rules."""

    clock_skew: float = 600.0
    refresh_interval: float = 24 * 3600.0
    max_refresh_age: float = 30 * 24 * 3600.0
    require_currently_valid: bool = False
    max_seed_age: float = 0.0  # seconds; 0 = no limit
    max_bundle_age: float = 30 * 24 * 3600.0  # seconds: a signed [keyrings] bundle signed longer ago is stale
    gpg_timeout: float = 900.0  # seconds for one gpg call (a multi-GB ISO is hashed in one call)
    unbound_seeds: frozenset[Category] = frozenset()  # categories whose seed signature may name no category
    weak_hashes: dict[int, float] = field(default_factory=dict)  # hash id -> cut-off (core.hashpolicy)


@dataclass(frozen=True)
class KeyRef:
    """``category/nick`` of a pinned key (a certifier or a root of an authority)."""

    category: Category
    nick: Nick

    def __str__(self) -> str:
        return f"{self.category}/{self.nick}"


@dataclass(frozen=True)
class AuthoritySource:
    """One ``[authority-seeds]`` line: where the keyring is and whose certifications count."""

    category: Category
    location: str  # an http(s) URL or a local file
    certifiers: tuple[KeyRef, ...]


@dataclass
class AuthorityConfig:
    """``[authority-seeds]`` and ``[authority]``: seeds derived from certifications (design.md §8)."""

    sources: dict[Category, AuthoritySource] = field(default_factory=dict)
    roots: tuple[KeyRef, ...] = ()
    domain: str = "gentoo.org"
    max_shrink: float = 10.0  # percent of the current seeds an update may drop
    shrink_window: float = 30 * 86400.0  # seconds: max-shrink counts from the largest seed set seen this recently


@dataclass(frozen=True)
class BinpkgConfig:
    """``[binpkg]``: who may sign binary packages (the keys of Portage's GPKG verification home)."""

    category: Category = Category("gentoo")
    nicks: tuple[Nick, ...] = (Nick("weekly"),)



def _binpkg(parser: configparser.ConfigParser) -> BinpkgConfig:
    """Parse ``[binpkg]``; an empty ``nicks`` is a :class:`ConfigError` (unknown keys: :mod:`configschema`)."""
    if not parser.has_section("binpkg"):
        return BinpkgConfig()
    try:
        category = parse_category(parser.get("binpkg", "category", fallback="gentoo"))
        words = parser.get("binpkg", "nicks", fallback="weekly").replace(",", " ").split()
        nicks = tuple(dict.fromkeys(parse_nick(word) for word in words))
    except Exception as exc:
        raise ConfigError(f"[binpkg] {exc}") from exc
    if not nicks:
        raise ConfigError("[binpkg] nicks: name at least one seed nick (e.g. 'nicks = weekly')")
    return BinpkgConfig(category=category, nicks=nicks)


def writable_by_others(info: os.stat_result) -> bool:
    """gkeys.conf's rule: a file anyone may write (a world-writable directory with the sticky bit, as ``/tmp``,
    lets nobody replace another user's entries, so it passes)."""
    return bool(info.st_mode & stat.S_IWOTH) and not (stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX)


def untrusted_program(program: Path) -> str | None:
    """Why root must not run ``program`` (an absolute path), or None: the file or a directory on its path (the
    name as given and the file it resolves to) is writable by others than its owner and root (gkeys.conf's
    rule, :func:`writable_by_others`, plus group write for any group but root's), or owned by a user other than
    root and the one running gkeys.  Anyone who may replace the engine decides every verdict."""
    me = os.geteuid()
    for path in dict.fromkeys([*reversed(program.parents), program, *reversed(Path(os.path.realpath(program)).parents),
                               Path(os.path.realpath(program))]):
        try:
            info = os.stat(path)
        except OSError as exc:
            return f"{path} cannot be read ({exc.strerror})"
        if info.st_uid not in (0, me):
            return f"{path} belongs to uid {info.st_uid}, neither root nor the user running gkeys"
        group_write = bool(info.st_mode & stat.S_IWGRP) and info.st_gid != 0 and not (
            stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX)
        if writable_by_others(info) or group_write:
            return f"{path} is writable by {'group ' + str(info.st_gid) if group_write else 'every user'}"
    return None


def _gpg_program(parser: configparser.ConfigParser) -> str | None:
    """``[gpg] program``: an absolute path, or a bare name looked up in ``PATH``; empty means unset."""
    value = parser.get("gpg", "program", fallback="gpg").strip()
    if value and (("/" in value and not value.startswith("/")) or any(c.isspace() for c in value)):
        raise ConfigError(f"[gpg] program = {value}: give an absolute path (e.g. /usr/bin/gpg) or a program "
                          "name found in PATH")
    return value or None


@dataclass
class Config:
    """The parsed configuration."""

    path: Path | None
    gkeysdir: Path
    seedurls: dict[Category, str]
    verify_seeds: dict[Category, tuple[Category, Nick]]
    sources: SourcesConfig
    policy: PolicyConfig
    sign_category: Category | None
    sign_nick: Nick | None
    sign_homedir: Path | None
    parser: configparser.ConfigParser
    authority: AuthorityConfig = field(default_factory=AuthorityConfig)
    keyrings: dict[Category, str] = field(default_factory=dict)  # [keyrings] CAT = bundle URL or file
    binpkg: BinpkgConfig = field(default_factory=BinpkgConfig)
    gpg_program: str | None = None  # [gpg] program: the OpenPGP engine ($GKEYS_GPG wins); None: gpg from PATH
    second_opinion: bool = True  # [gpg] second-opinion: Sequoia confirms every signature GnuPG accepts

    def get(self, section: str, option: str, fallback: str) -> str:
        """A raw option from any section (for the verifiers' own sections)."""
        return self.parser.get(section, option, fallback=fallback)

    def number(self, section: str, option: str, fallback: float) -> float:
        """A non-negative number from any section; a clear :class:`ConfigError` otherwise."""
        return _float(self.parser, section, option, fallback)

    def flag(self, section: str, option: str, fallback: bool) -> bool:
        """A yes/no option from any section; a clear :class:`ConfigError` otherwise."""
        return _bool(self.parser, section, option, fallback)


def _float(parser: configparser.ConfigParser, section: str, option: str, fallback: float) -> float:
    try:
        value = parser.getfloat(section, option, fallback=fallback)
    except ValueError as exc:
        raise ConfigError(f"[{section}] {option}: not a number") from exc
    if value < 0:
        raise ConfigError(f"[{section}] {option}: must not be negative")
    return value


def _bool(parser: configparser.ConfigParser, section: str, option: str, fallback: bool) -> bool:
    try:
        return parser.getboolean(section, option, fallback=fallback)
    except ValueError as exc:
        raise ConfigError(f"[{section}] {option}: expected yes or no") from exc


def _verify_seeds(parser: configparser.ConfigParser) -> dict[Category, tuple[Category, Nick]]:
    raw = dict(DEFAULT_VERIFY_SEEDS)
    if parser.has_section("verify-seeds"):
        raw.update(parser.items("verify-seeds"))
    result: dict[Category, tuple[Category, Nick]] = {}
    for category, value in raw.items():
        parts = value.split()
        if len(parts) != 2:
            raise ConfigError(f"[verify-seeds] {category} = {value!r}: expected '<category> <nick>'")
        try:
            result[parse_category(category)] = (parse_category(parts[0]), parse_nick(parts[1]))
        except Exception as exc:
            raise ConfigError(f"[verify-seeds] {category}: {exc}") from exc
    return result


def _unbound_seeds(parser: configparser.ConfigParser,
                   verify_seeds: dict[Category, tuple[Category, Nick]]) -> frozenset[Category]:
    """``[policy] unbound-seeds = CAT ...``: categories whose seed files may carry an old, unbound
    signature.  Each must have a ``[verify-seeds]`` signer that signs no other category there:
    a signer shared between categories cannot tell their seed files apart without the binding."""
    result: set[Category] = set()
    for word in parser.get("policy", "unbound-seeds", fallback="").split():
        try:
            category = parse_category(word)
        except Exception as exc:
            raise ConfigError(f"[policy] unbound-seeds: {exc}") from exc
        signer = verify_seeds.get(category)
        if signer is None:
            raise ConfigError(f"[policy] unbound-seeds: {category!r} has no seed signer in [verify-seeds]")
        shared = sorted(other for other, who in verify_seeds.items() if who == signer and other != category)
        if shared:
            raise ConfigError(
                f"[policy] unbound-seeds: {category}'s seed signer {signer[0]}/{signer[1]} also signs "
                f"{', '.join(shared)} seeds ([verify-seeds]), so an unbound signature cannot tell them apart; "
                f"give {category} its own signer or drop it from unbound-seeds")
        result.add(category)
    return frozenset(result)


def parse_keyref(text: str, where: str) -> KeyRef:
    """``category/nick`` of a pinned key; a clear :class:`ConfigError` otherwise."""
    category, sep, nick = text.partition("/")
    try:
        if not sep:
            raise ValueError("expected category/nick")
        return KeyRef(parse_category(category), parse_nick(nick))
    except Exception as exc:
        raise ConfigError(f"{where}: {text!r} is not category/nick of a pinned key ({exc})") from exc


def _authority(parser: configparser.ConfigParser) -> AuthorityConfig:
    """``[authority-seeds]`` (``category = LOCATION CERTIFIER...``) and ``[authority]``.

    A config file's ``[authority-seeds]`` section replaces the built-in line(s) as a whole; a
    ``[seedurls]`` line in the config file wins over a *built-in* authority line for its category,
    while the same category in both sections of the file is an error.  Unknown keys in
    ``[authority]`` are errors (:func:`~gkeys_portage.core.configschema.check_known_keys`).
    """
    configured_urls = set(parser.options("seedurls")) if parser.has_section("seedurls") else set()
    if parser.has_section("authority-seeds"):
        raw = dict(parser.items("authority-seeds"))
        both = sorted(set(parser.options("authority-seeds")) & configured_urls)
        if both:
            raise ConfigError(f"{', '.join(both)}: in both [seedurls] and [authority-seeds]; keep one")
    else:
        raw = {k: v for k, v in DEFAULT_AUTHORITY_SEEDS.items() if k not in configured_urls}
    sources: dict[Category, AuthoritySource] = {}
    for name, value in raw.items():
        where = f"[authority-seeds] {name}"
        parts = value.split()
        if len(parts) < 2:
            raise ConfigError(f"{where} = {value!r}: expected 'KEYRING-URL-OR-FILE CERTIFIER [CERTIFIER...]'")
        try:
            category = parse_category(name)
        except Exception as exc:
            raise ConfigError(f"{where}: {exc}") from exc
        sources[category] = AuthoritySource(category, parts[0],
                                            tuple(parse_keyref(p, where) for p in parts[1:]))
    roots = tuple(parse_keyref(p, "[authority] roots")
                  for p in parser.get("authority", "roots", fallback="gentoo-auth/l1").split())
    if not roots and sources:
        raise ConfigError("[authority] roots: empty, but [authority-seeds] needs at least one root key")
    domain = parser.get("authority", "domain", fallback="gentoo.org").strip().lower()
    if not domain or "@" in domain or any(c.isspace() for c in domain):
        raise ConfigError(f"[authority] domain: {domain!r} is not a domain name")
    max_shrink = _float(parser, "authority", "max-shrink", 10.0)
    if max_shrink > 100:
        raise ConfigError("[authority] max-shrink: a percentage, at most 100")
    window = _float(parser, "authority", "shrink-window", 30.0)
    return AuthorityConfig(sources, roots, domain, max_shrink, window * 86400)


def _keyrings(parser: configparser.ConfigParser) -> dict[Category, str]:
    """``[keyrings] CAT = URL``: a keyring bundle (http(s)://, file:// or an absolute path) per category."""
    result: dict[Category, str] = {}
    if not parser.has_section("keyrings"):
        return result
    for name, value in parser.items("keyrings"):
        try:
            category = parse_category(name)
        except Exception as exc:
            raise ConfigError(f"[keyrings] {name}: {exc}") from exc
        value = value.strip()
        if not (value.startswith(("http://", "https://", "file:///")) or value.startswith("/")):
            raise ConfigError(f"[keyrings] {name} = {value!r}: expected an http(s):// or file:// URL "
                              "or an absolute path of a keyring bundle (CAT.gpg or CAT.asc)")
        result[category] = value
    return result


def load_config(path: Path | None = None, root: Path | None = None, *, prefix: str | None = None) -> Config:
    """Load the configuration; ``root`` (from ``--root``) overrides ``gkeysdir``.

    ``prefix`` is the EPREFIX the defaults live under (``${EPREFIX}/etc/gkeys/gkeys.conf``,
    ``${EPREFIX}/var/lib/gkeys``); None means ``$EPREFIX``.  Code running inside Portage passes the
    EPREFIX of Portage's settings, which in a prefix (``PORTAGE_OVERRIDE_EPREFIX``) is not in the
    environment.
    """
    explicit = path is not None or "GKEYS_CONFIG" in os.environ
    base = eprefix() if prefix is None else prefix.rstrip("/")
    if path is None:
        path = Path(os.environ["GKEYS_CONFIG"]) if "GKEYS_CONFIG" in os.environ else default_config_path(base)
    parser = configparser.ConfigParser(inline_comment_prefixes=(";",), interpolation=None)
    try:
        with open(path, encoding="utf-8") as handle:
            if writable_by_others(os.fstat(handle.fileno())):
                raise ConfigError(f"refusing config {path}: it is world-writable")
            parser.read_file(handle)
        used: Path | None = path
    except FileNotFoundError as exc:
        if explicit:
            raise ConfigError(f"config file {path} does not exist") from exc
        used = None
    except (OSError, UnicodeDecodeError, configparser.Error) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}".splitlines()[0]) from exc
    check_known_keys(parser, used)  # a typo is an error, never a check silently left at its default
    check_values(parser, used)  # every value of every key, not only those the command at hand reads

    gkeysdir = Path(root) if root is not None else Path(
        parser.get("base", "gkeysdir", fallback=base + "/var/lib/gkeys"))
    seedurls = dict(DEFAULT_SEEDURLS)
    if parser.has_section("seedurls"):
        seedurls.update(parser.items("seedurls"))
    sources = SourcesConfig(
        keyservers=parser.get("sources", "keyservers", fallback="hkps://keys.gentoo.org").split(),
        wkd=_bool(parser, "sources", "wkd", True),
        wkd_advanced_url=parser.get("sources", "wkd-advanced-url", fallback=DEFAULT_WKD_ADVANCED),
        wkd_direct_url=parser.get("sources", "wkd-direct-url", fallback=DEFAULT_WKD_DIRECT),
        timeout=_float(parser, "sources", "timeout", 30.0),
        retries=int(_float(parser, "sources", "retries", 3)),
        backoff=_float(parser, "sources", "backoff", 0.5),
        workers=max(1, int(_float(parser, "sources", "workers", 32))),
    )
    verify_seeds = _verify_seeds(parser)
    policy = PolicyConfig(
        clock_skew=_float(parser, "policy", "clock-skew", 600.0),
        refresh_interval=_float(parser, "policy", "refresh-interval", 24.0) * 3600.0,
        max_refresh_age=_float(parser, "policy", "max-refresh-age", 30.0) * 86400.0,
        require_currently_valid=_bool(parser, "policy", "require-currently-valid", False),
        max_seed_age=_float(parser, "policy", "max-seed-age", 0.0) * 86400.0,
        max_bundle_age=_float(parser, "policy", "max-bundle-age", 30.0) * 86400.0,
        gpg_timeout=max(1.0, _float(parser, "policy", "gpg-timeout", 900.0)),
        unbound_seeds=_unbound_seeds(parser, verify_seeds),
        weak_hashes=parse_weak_hashes(parser.get("policy", "weak-hashes", fallback="")),
    )
    sign_homedir = parser.get("sign", "gnupghome", fallback="")
    sign_nick = parser.get("sign", "nick", fallback="").strip()
    try:
        return Config(
            path=used,
            gkeysdir=gkeysdir,
            seedurls={parse_category(k): v for k, v in seedurls.items()},
            verify_seeds=verify_seeds,
            sources=sources,
            policy=policy,
            sign_category=parse_category(parser.get("sign", "category", fallback="sign")),
            sign_nick=parse_nick(sign_nick) if sign_nick else None,  # "nick =" (empty) means unset
            sign_homedir=Path(sign_homedir) if sign_homedir else None,
            parser=parser,
            authority=_authority(parser),
            keyrings=_keyrings(parser),
            binpkg=_binpkg(parser),
            gpg_program=_gpg_program(parser),
            second_opinion=_bool(parser, "gpg", "second-opinion", True),
        )
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"config {path}: {exc}") from exc
