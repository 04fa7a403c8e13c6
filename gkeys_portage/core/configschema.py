"""The one list of what ``gkeys.conf`` may say: every known section and its keys.

A typo must never weaken a check by being silently ignored (``[policy] max-seed-ages = 7`` would
leave the freeze check off), so :func:`check_known_keys` refuses unknown sections and unknown keys,
naming the nearest valid name.  To add an option, add its key here, beside the code that reads it.
Sections in :data:`OPEN_SECTIONS` take any key (their keys are category names).

Every value is checked when the file is loaded too (:func:`check_values`, by the kinds in :data:`KINDS`): a yes/no,
a number, a category, a nick, ``category/nick`` lists and every enumerated value, with "did you mean" for a
near miss.  ``[media] all-digests = yess`` then fails every command at once, as ``[sources] timeout = ten`` does,
not only the one command that reads it.  Whether a ``[purposes]`` ``category/nick`` names a seed is checked against
the seeds by :func:`gkeys_portage.keys.purposes.check_purpose_seeds` (the seeds are not config).
"""

from __future__ import annotations

import configparser
import difflib
from collections.abc import Iterable
from pathlib import Path

from gkeys_portage.core.errors import BadInputError, ConfigError
from gkeys_portage.core.types import parse_category, parse_nick

#: section -> the keys it may hold (``tests/test_install_files.py`` checks it against the sample gkeys.conf).
SCHEMA: dict[str, frozenset[str]] = {
    "base": frozenset({"gkeysdir"}),
    "sources": frozenset({"keyservers", "wkd", "wkd-advanced-url", "wkd-direct-url", "timeout", "retries",
                          "backoff", "workers"}),
    "policy": frozenset({"clock-skew", "refresh-interval", "max-refresh-age", "require-currently-valid",
                         "max-seed-age", "max-bundle-age", "gpg-timeout", "unbound-seeds", "weak-hashes"}),
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
    "purposes": frozenset({"release-media", "repository", "git-mirror", "overlay-list"}),
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


YES_NO = ("yes", "no", "true", "false", "on", "off", "1", "0")
#: enumerated values: section, key -> the values allowed
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("tree", "policy"): ("top", "all"),
    # the names of checks/glep63/specs.py SPECS (core imports no checks: tests/test_config_values.py compares them)
    ("checks", "spec"): ("glep63-1-rsa2048", "glep63-1-strict", "glep63-1-rsa2048-ec25519", "glep63-2-draft-20180707",
                         "glep63-2", "glep63-2.1", "glep63-2.2"),
}
#: section, key -> kind of value: yesno, number, category, categories, nick, nicks, keyrefs, choice
KINDS: dict[tuple[str, str], str] = {
    **dict.fromkeys([("sources", "wkd"), ("policy", "require-currently-valid"), ("media", "all-digests"),
                     ("fetch", "allow-unnamed"), ("fetch", "bind-by-date"), ("gpg", "second-opinion")], "yesno"),
    **dict.fromkeys([("sources", k) for k in ("timeout", "retries", "backoff", "workers")]
                    + [("policy", k) for k in ("clock-skew", "refresh-interval", "max-refresh-age", "max-seed-age",
                                               "gpg-timeout", "max-bundle-age")]
                    + [("media", k) for k in ("stall-timeout", "max-size", "max-age")]
                    + [("overlays", "max-size"), ("overlays", "max-age"), ("tree", "max-age"),
                       ("tree", "max-fetch-mib"), ("snapshot", "max-age"), ("checks", "expiry-days"),
                       ("authority", "max-shrink"), ("authority", "shrink-window")], "number"),
    **dict.fromkeys([(s, "category") for s in ("sign", "media", "overlays", "snapshot", "fetch", "binpkg")]
                    + [("tree", "top-category")], "category"),
    ("tree", "category"): "categories",
    ("sign", "nick"): "nick", ("fetch", "nick"): "nick", ("binpkg", "nicks"): "nicks",
    **dict.fromkeys([("purposes", k) for k in SCHEMA["purposes"]] + [("authority", "roots")], "keyrefs"),
    **dict.fromkeys(CHOICES, "choice"),
}


def _check_value(section: str, key: str, value: str) -> str | None:
    """Why ``value`` is not a valid ``[section] key`` (None if it is)."""
    kind = KINDS.get((section, key))
    text = value.strip()
    if kind == "yesno" and text.lower() not in YES_NO:
        close = nearest(text.lower(), ("yes", "no"))
        return f"expected yes or no, not {text!r}" + (f" (did you mean {close!r}?)" if close else "")
    if kind == "number":
        try:
            number = float(text)
        except ValueError:
            return f"not a number: {text!r}"
        return "must not be negative" if number < 0 else None
    if kind == "choice":
        choices = CHOICES[(section, key)]
        return None if text in choices else unknown_name("value", text, choices)
    try:
        if kind == "category" and text:  # empty: unset (the default applies)
            parse_category(text)
        elif kind == "categories":
            for word in text.replace(",", " ").split():
                parse_category(word)
        elif kind in ("nick", "nicks"):
            for word in text.replace(",", " ").split() if kind == "nicks" else [text] if text else []:
                parse_nick(word)
        elif kind == "keyrefs":
            for word in text.replace(",", " ").split():
                category, sep, nick = word.partition("/")
                if not sep:
                    return f"{word!r} is not category/nick of a pinned key"
                parse_category(category)
                parse_nick(nick)
    except BadInputError as exc:
        return exc.message
    return None


def check_values(parser: configparser.ConfigParser, path: Path | None) -> None:
    """Raise :class:`ConfigError` for the first value of a loaded ``gkeys.conf`` that its key cannot take."""
    where = f"config {path}: " if path is not None else ""
    for section in parser.sections():
        for key in parser.options(section):
            why = _check_value(section, key, parser.get(section, key))
            if why:
                raise ConfigError(f"{where}[{section}] {key}: {why}")
