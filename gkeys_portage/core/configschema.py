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
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gkeys_portage.core.errors import BadInputError, ConfigError
from gkeys_portage.core.types import parse_category, parse_nick


@dataclass(frozen=True)
class Option:
    """One key of a section: its default as written in the file (empty: unset) and what it does."""

    key: str
    default: str
    help: str = ""


@dataclass(frozen=True)
class Section:
    """One section of ``gkeys.conf``: its options, or (open sections) what its keys mean, examples and the lines
    built in (a section in a file replaces its built-in lines as a whole)."""

    name: str
    intro: str = ""
    examples: tuple[str, ...] = ()
    builtin: tuple[str, ...] = ()
    options: tuple[Option, ...] = ()


#: Every section and option with its default: the schema the loader checks against and the source of the shipped
#: sample ``packaging/gkeys.conf`` and of gkeys.conf(5) (:func:`sample_config`; ``python3 -m
#: gkeys_portage.cli.docgen`` writes them).  The defaults are the code's fallbacks (tests/test_install_files.py).
SECTIONS: tuple[Section, ...] = (
    Section("base", options=(
        Option("gkeysdir", "/var/lib/gkeys",
               "Where seeds/, keyrings/ and state/ live (--root DIR wins over this)."),
    )),
    Section("seedurls",
            intro="CATEGORY = URL of its seed file; the signature is fetched from URL.sig or URL.asc. "
                  "None built in: gentoo, gentoo-auth and gentoo-infra are packaged seeds, gentoo-devs "
                  "comes from [authority-seeds]; the seed files of the old project "
                  "(api.gentoo.org/gentoo-keys) are gone since 2023. Example for a third-party category:",
            examples=("my-overlay = https://example.org/seeds/my-overlay.seeds",)),
    Section("verify-seeds",
            intro='CATEGORY = "SIGNER-CATEGORY SIGNER-NICK": the pinned key that must sign CATEGORY\'s '
                  "seed file. None built in.  Example:",
            examples=("my-overlay = my-overlay-signers owner",)),
    Section("keyrings",
            intro="CATEGORY = URL (http(s)://, file://) or absolute path of a keyring bundle ('gkeys "
                  "build-keyring'), the first key source of that category; keys are still taken only by "
                  "the seeds' fingerprints.  When [verify-seeds] names a signer for the category, the "
                  "signature (URL.sig / URL.asc) is required, must be that signer's, bound to the "
                  "category, no older than the bundle's used last, and made within [policy] "
                  "max-bundle-age (else the bundle is stale); without a signer a bundle may be unsigned."
                  "  A bundle URL that does not answer is a silent key source like a keyserver: a "
                  "warning, an error after [policy] max-refresh-age. None built in.  Example:",
            examples=("my-overlay = https://example.org/keys/my-overlay.gpg",)),
    Section("authority-seeds",
            intro="CATEGORY = KEYRING-URL-OR-FILE CERTIFIER [CERTIFIER...]  (CERTIFIER = category/nick of"
                  " a pinned key): seeds derived from the keys of the keyring that carry a valid "
                  "certification by a certifier (GLEP 79).",
            builtin=("gentoo-devs = https://qa-reports.gentoo.org/output/active-devs.gpg gentoo-auth/l2-dev",)),
    Section("authority", options=(
        Option("roots", "gentoo-auth/l1",
               "Root keys (category/nick): every certifier key must itself carry a valid certification by"
               " a root."),
        Option("domain", "gentoo.org",
               "Only user ids at this domain are considered; the nick is the address's local part."),
        Option("max-shrink", "10",
               "Refuse an update that would drop more than this percentage of the seeds (unless "
               "--allow-shrink)."),
        Option("shrink-window", "30",
               "... counted from the largest seed set installed within this many days."),
    )),
    Section("sources", options=(
        Option("keyservers", "hkps://keys.gentoo.org",
               "Keyservers, space-separated, tried in order (hkp://, hkps://, http://, https://)."),
        Option("wkd", "yes",
               "Look keys up by the seeds' uid e-mail addresses in the Web Key Directory (yes/no)."),
        Option("wkd-advanced-url", "https://openpgpkey.{domain}/.well-known/openpgpkey/{domain}",
               "WKD advanced and direct method base URLs ({domain} is the e-mail domain).  A refresh "
               "counts the direct method only where the advanced host does not exist (DNS); an "
               "unreachable one did not answer."),
        Option("wkd-direct-url", "https://{domain}/.well-known/openpgpkey"),
        Option("timeout", "30",
               "Seconds per read, and per attempt unless the answer arrives at 16 KiB/s or more."),
        Option("retries", "3",
               "Attempts per source before moving on."),
        Option("backoff", "0.5",
               "Seconds of back-off before the first retry (doubles with each retry)."),
        Option("workers", "32",
               "Requests in parallel when installing or refreshing many keys."),
    )),
    Section("policy", options=(
        Option("clock-skew", "600",
               "Seconds a signature may be dated in the future."),
        Option("refresh-interval", "24",
               "Hours between key refreshes."),
        Option("max-refresh-age", "30",
               "Days after the last successful refresh when verification fails (bounds how late a "
               "revocation is seen); counted for each key source on its own: one that keeps failing while"
               " another answers is an error after it."),
        Option("require-currently-valid", "no",
               "Require keys that are valid now, not only when they signed (yes/no)."),
        Option("max-seed-age", "0",
               "Days after which a seed file is too old to use; 0 = no limit."),
        Option("max-bundle-age", "30",
               "Days after which a signed [keyrings] bundle is too old to use (a mirror replaying an old "
               "bundle would keep revocations out); its publisher re-signs it more often (gkeys "
               "build-keyring --sign, daily from a timer)."),
        Option("gpg-timeout", "900",
               "Seconds one gpg call may take."),
        Option("unbound-seeds", "",
               "Categories whose seed files may carry an old signature that does not name the category."),
        Option("weak-hashes", "",
               "Weak data digests admitted for signatures made before a cut-off date, e.g. "
               "sha1<2019-01-19 (default: MD5, SHA-1 and RIPEMD-160 data signatures are refused)."),
    )),
    Section("sign", options=(
        Option("category", "sign",
               "Who signs with 'gkeys sign': category and nick of the signing seed, and the GnuPG home "
               "with its secret key."),
        Option("nick", ""),
        Option("gnupghome", ""),
    )),
    Section("checks", options=(
        Option("expiry-days", "30",
               "'gkeys check-key': warn about keys expiring within this many days."),
        Option("spec", "glep63-2.2",
               "'gkeys spec-check': the GLEP 63 spec to check against."),
        Option("cutoffs", "",
               "'check-key' / 'spec-check': dates from which Sequoia-based verifiers (apt's sqv) refuse "
               "SHA-1 and SHA-224 self-signatures, brainpool curves and RSA under 3072 bits (warned a "
               "year ahead): NAME:YYYY-MM-DD words that move a date; empty: sha1:2026-02-01 "
               "sha224:2026-02-01 brainpool:2028-02-01 rsa3072:2030-02-01."),
    )),
    Section("media", options=(
        Option("category", "gentoo",
               "Category whose keys sign release media (stage3, ISO)."),
        Option("mirror", "https://distfiles.gentoo.org",
               "Mirror used by 'gkeys fetch-media --latest'."),
        Option("stall-timeout", "60",
               "Seconds without data before a download is abandoned."),
        Option("max-size", "17179869184",
               "Largest download accepted, in bytes."),
        Option("max-age", "0",
               "Refuse media signed longer ago than this many days (a frozen mirror); 0 = off."),
        Option("all-digests", "no",
               "Check every digest a signed DIGESTS lists, not only its strongest (SHA512, else BLAKE2B, "
               "else SHA256) (yes/no)."),
    )),
    Section("fetch", options=(
        Option("patterns", "stage3-*.tar.* install-*.iso admincd-*.iso livegui-*.iso",
               "Fetch wrapper (gkeys-fetch): distfiles matching these globs are verified after download."),
        Option("renamed", "",
               'Local names of renamed distfiles (SRC_URI "... -> NAME") that are release media too.'),
        Option("category", "gentoo",
               "Category and nick whose keys must sign them (default: [media] category, any nick)."),
        Option("nick", ""),
        Option("bind-by-date", "no",
               "Accept an .asc made at or after the build stamp in the file's name as binding the file to"
               " its name (yes/no). That binds a date, not a name: another product's build signed later "
               "passes it too."),
        Option("allow-unnamed", "no",
               "Accept media that nothing signed binds to their name (no signed DIGESTS or latest list "
               "names them) (yes/no)."),
    )),
    Section("overlays", options=(
        Option("url", "https://api.gentoo.org/overlays/repositories.xml",
               "The overlay list, its signature (default: URL.asc) and where the verified copy goes "
               "(default: GKEYSDIR/overlays/repositories.xml)."),
        Option("signature-url", ""),
        Option("output", ""),
        Option("category", "gentoo",
               "Category whose overlay-list keys ([purposes] overlay-list) sign the list."),
        Option("max-size", "16",
               "Largest list accepted, in MiB."),
        Option("max-age", "0",
               "Refuse a list signed longer ago than this many days; 0 = off."),
    )),
    Section("tree", options=(
        Option("category", "gentoo-devs",
               "Categories whose keys sign the commits of a verified tree (space-separated; a commit is "
               "good when signed by a key pinned in any of them), e.g. gentoo-devs gentoo-infra for "
               "Gentoo's sync repository."),
        Option("top-category", "",
               "Category whose keys may sign the top commit (the mirror's key); empty = same as category."),
        Option("policy", "top",
               "Which commits are verified: top (the new top commit) or all (every new commit)."),
        Option("max-age", "0",
               "Refuse a top commit signed longer ago than this many days (a frozen mirror); 0 = off."),
        Option("max-fetch-mib", "8192",
               "Largest file a fetch may write, in MiB; 0 = no cap."),
    )),
    Section("snapshot", options=(
        Option("category", "gentoo",
               "emerge-webrsync snapshots (gkeys verify-snapshot): the category whose repository key "
               "(seed 'snapshot') signs them, and the maximum age in hours (snapshots are made daily); 0 "
               "= no maximum."),
        Option("max-age", "48"),
    )),
    Section("notify", options=(
        Option("smtp", "localhost:25",
               "'gkeys check-key --notify': the SMTP server (host:port; STARTTLS when offered) and the "
               "sender address."),
        Option("from", ""),
    )),
    Section("purposes", options=(
        Option("release-media", "gentoo/releng gentoo/weekly",
               "Which seeds (category/nick, space-separated) may sign what; in a category where some seed"
               " has a purpose, a verifier accepts only the seeds of its own. Each line replaces that "
               "purpose's default."),
        Option("repository", "gentoo/snapshot"),
        Option("git-mirror", "gentoo/mirror gentoo-infra/mirror"),
        Option("overlay-list", "gentoo/snapshot"),
    )),
    Section("binpkg", options=(
        Option("category", "gentoo",
               "'gkeys-trust-helper' / 'gkeys binpkg-keyring': the category and nicks (space-separated) "
               "whose keys may sign binary packages; only they are trusted in Portage's verification "
               "home."),
        Option("nicks", "weekly"),
    )),
    Section("gpg", options=(
        Option("program", "gpg",
               "The OpenPGP engine: the gpg program gkeys runs (absolute path, or a name in PATH); "
               "$GKEYS_GPG wins over it. Its capabilities are probed, not read from its version "
               "(/usr/share/doc/gkeys-portage/engines.md). It is refused when someone other than root and "
               "the user running gkeys can replace it (the file or a directory on its path)."),
        Option("second-opinion", "yes",
               "The second opinion: Sequoia (pysequoia, in-process) checks every signature GnuPG accepts,"
               ' on the same bytes and against the same keyring; "verified" needs both, with the same '
               "signer (engines-disagree otherwise). Without pysequoia every signature is refused, naming"
               ' the fix. "no" leaves GnuPG\'s word alone (gkeys doctor reports it as a finding).'),
    )),
)

#: Sections whose keys are names chosen by the user (categories), not options.
OPEN_SECTIONS: frozenset[str] = frozenset({"seedurls", "verify-seeds", "authority-seeds", "keyrings"})
#: section -> the keys it may hold.
SCHEMA: dict[str, frozenset[str]] = {section.name: frozenset(option.key for option in section.options)
                                     for section in SECTIONS if section.name not in OPEN_SECTIONS}

_PREAMBLE = (
    "gkeys.conf: configuration of gkeys-portage (installed as ${EPREFIX}/etc/gkeys/gkeys.conf).",
    "",
    "Every option is listed with its default, commented out: uncomment a line to change it.  As shipped, this file "
    "configures exactly what no file does.  Inline comments start with \" ;\".  An unreadable or world-writable "
    "file is refused.  Options given with -c FILE or $GKEYS_CONFIG replace this file.  See gkeys.conf(5).",
    "",
    "Generated from gkeys_portage/core/configschema.py by 'python3 -m gkeys_portage.cli.docgen': do not edit.",
)


def builtin_lines(name: str) -> dict[str, str]:
    """The built-in ``key = value`` lines of the open section ``name``."""
    section = next(section for section in SECTIONS if section.name == name)
    return {key.strip(): value.strip() for key, _, value in (line.partition("=") for line in section.builtin)}


def _comment(text: str) -> list[str]:
    """``text`` as ``# `` comment lines of at most 118 characters (an empty text: an empty comment line)."""
    return textwrap.wrap(text, width=118, initial_indent="# ", subsequent_indent="# ",
                         break_on_hyphens=False, break_long_words=False) or ["#"]


def sample_config() -> str:
    """The sample ``gkeys.conf``: every section, every option commented out with its default.  Loading it equals
    loading no file, by construction: an open section with built-in lines has its header commented out too."""
    lines = [line for text in _PREAMBLE for line in _comment(text)]
    for section in SECTIONS:
        lines += ["", f"# [{section.name}]" if section.builtin else f"[{section.name}]"]
        lines += _comment(section.intro) if section.intro else []
        lines += [f"#   {example}" for example in section.examples]
        if section.builtin:
            lines += _comment(f"Built in (a [{section.name}] section in this file replaces these lines as a whole: "
                              "uncomment the header with them):")
            lines += [f"# {line}" for line in section.builtin]
        for option in section.options:
            lines += _comment(option.help) if option.help else []
            lines.append(f"# {option.key} = {option.default}".rstrip())
    return "\n".join(lines) + "\n"


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
