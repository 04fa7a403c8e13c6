"""The one list of what ``gkeys.conf`` may say: every known section and its keys.

A typo must never weaken a check by being silently ignored (``[policy] max-seed-ages = 7`` would
leave the freeze check off), so :func:`check_known_keys` refuses unknown sections and unknown keys,
naming the nearest valid name.  To add an option, add its key here, beside the code that reads it.
Sections in :data:`OPEN_SECTIONS` take any key (their keys are category names).
"""

from __future__ import annotations

import configparser
import difflib
from collections.abc import Iterable
from pathlib import Path

from gkeys_portage.core.errors import ConfigError

#: section -> the keys it may hold (``tests/test_install_files.py`` checks it against the sample gkeys.conf).
SCHEMA: dict[str, frozenset[str]] = {
    "base": frozenset({"gkeysdir"}),
    "sources": frozenset({"keyservers", "wkd", "wkd-advanced-url", "wkd-direct-url", "timeout", "retries",
                          "backoff", "workers"}),
    "policy": frozenset({"clock-skew", "refresh-interval", "max-refresh-age", "require-currently-valid",
                         "max-seed-age", "gpg-timeout", "unbound-seeds", "weak-hashes"}),
    "sign": frozenset({"category", "nick", "gnupghome"}),
    "media": frozenset({"category", "mirror", "stall-timeout", "max-size", "max-age", "all-digests"}),
    "overlays": frozenset({"category", "url", "signature-url", "output", "max-size", "max-age"}),
    "tree": frozenset({"category", "top-category", "policy", "max-age", "max-fetch-mib"}),
    "snapshot": frozenset({"category", "max-age"}),
    "checks": frozenset({"spec", "expiry-days", "cutoffs"}),
    "fetch": frozenset({"patterns", "renamed", "category", "nick", "allow-unnamed", "bind-by-date"}),
    "authority": frozenset({"roots", "domain", "max-shrink", "shrink-window"}),
    "binpkg": frozenset({"category", "nicks"}),
    "notify": frozenset({"smtp", "from"}),
    "purposes": frozenset({"release-media", "repository", "git-mirror"}),
    "gpg": frozenset({"program", "second-opinion"}),
}
#: Sections whose keys are names chosen by the user (categories), not options.
OPEN_SECTIONS: frozenset[str] = frozenset({"seedurls", "verify-seeds", "authority-seeds", "keyrings"})


def nearest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``word`` (a likely typo), or None if none is close."""
    found = difflib.get_close_matches(word, sorted(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_name(kind: str, word: str, candidates: Iterable[str]) -> str:
    """``unknown KIND 'word' (did you mean 'x'?)``, or the valid names when nothing is close."""
    choices = sorted(candidates)
    close = nearest(word, choices)
    hint = f"did you mean {close!r}?" if close else f"valid: {', '.join(choices)}"
    return f"unknown {kind} {word!r} ({hint})"


def check_known_keys(parser: configparser.ConfigParser, path: Path | None) -> None:
    """Raise :class:`ConfigError` for the first unknown section or key of a loaded ``gkeys.conf``."""
    where = f"config {path}: " if path is not None else ""
    every = frozenset().union(*SCHEMA.values())
    for key in parser.defaults():  # [DEFAULT] reaches every section: a key no section knows is a typo
        if key not in every:
            raise ConfigError(f"{where}[DEFAULT] " + unknown_name("key", key, every))
    for section in parser.sections():
        if section in OPEN_SECTIONS:
            continue
        known = SCHEMA.get(section)
        if known is None:
            raise ConfigError(where + unknown_name("section", f"[{section}]",
                                                   [f"[{name}]" for name in (*SCHEMA, *OPEN_SECTIONS)]))
        for key in parser.options(section):
            if key not in known and key not in parser.defaults():
                raise ConfigError(f"{where}[{section}] " + unknown_name("key", key, known))
