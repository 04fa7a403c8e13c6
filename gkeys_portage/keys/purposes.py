"""Key purposes: which pinned seeds may sign which kind of artifact (design.md §9, "Key purposes").

The packaged ``gentoo`` category pins the release keys beside the ebuild-repository (snapshot) and the
git-mirror keys, so "a good signature by a seed of ``gentoo``" would let a daily tree snapshot, signed by
the snapshot key, pass as a stage3.  Each verifier therefore names the :class:`Purpose` it checks, and
:func:`purpose_pins` cuts a category's :class:`~gkeys_portage.openpgp.verdict.PinSet` down to the seeds of
that purpose.

The rule: in a category where some pinned seed has a purpose, a verifier of purpose P accepts only the
seeds of P; a good signature by a pinned seed of another purpose is refused naming both
(:class:`WrongPurposeError`).  A category where no seed has a purpose (a user's own category,
``gentoo-devs``) is unchanged: every seed of it counts.

Which seed has which purpose: :data:`DEFAULT_PURPOSES` for the packaged seeds, replaced per purpose by
``[purposes]`` in gkeys.conf (``release-media = gentoo/releng gentoo/weekly``); an unknown key is a
config error (:mod:`gkeys_portage.core.configschema`), and so is a value that is not a list of
``category/nick``.  A seed may have more than one purpose.

Some artifacts are verified *only* by seeds named for their purpose, even in a category where no seed has
one (:func:`named_pins`): Manifests and snapshots (``repository``) and the overlay list (``overlay-list``).

API (small on purpose): :class:`Purpose`, :func:`purpose_table`, :func:`purpose_pins`, :func:`named_pins`,
:func:`signer_purpose` / :func:`describe_signer` for messages, and :class:`PurposeScope`, which
:class:`~gkeys_portage.keys.context.SignatureVerifier` uses to word the refusal.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from gkeys_portage.core.config import Config, KeyRef, parse_keyref
from gkeys_portage.core.configschema import nearest
from gkeys_portage.core.errors import ConfigError, NotVerifiedError, SignerNotPinnedError
from gkeys_portage.core.types import Category, Fingerprint, Nick
from gkeys_portage.openpgp.status import StatusReport
from gkeys_portage.openpgp.verdict import Pin, PinSet

SECTION = "purposes"


class Purpose(enum.Enum):
    """What a key signs; the value is the ``[purposes]`` key."""

    RELEASE_MEDIA = "release-media"  # stage3 tarballs, ISO images, their DIGESTS and latest-*.txt
    REPOSITORY = "repository"  # rsync Manifests and webrsync snapshots (the ebuild-repository key)
    GIT_MIRROR = "git-mirror"  # the sync repositories' mirror commits
    OVERLAY_LIST = "overlay-list"  # the overlay list (repositories.xml) eselect-repository and layman read

    @property
    def key_name(self) -> str:
        """``the release-media key``: what a seed of this purpose is called in messages."""
        return f"the {self.value} key"

    @property
    def artifacts(self) -> str:
        """What a verifier of this purpose checks, in words."""
        return _ARTIFACTS[self]


_ARTIFACTS = {
    Purpose.RELEASE_MEDIA: "release media",
    Purpose.REPOSITORY: "rsync Manifests and webrsync snapshots",
    Purpose.GIT_MIRROR: "git mirror commits",
    Purpose.OVERLAY_LIST: "overlay lists",
}


def _ref(text: str) -> KeyRef:
    return parse_keyref(text, "built-in purposes")


#: The purposes of the packaged seeds (design.md §8: the weekly/releng keys sign release media, the
#: ebuild-repository key ``gentoo/snapshot`` rsync Manifests and webrsync snapshots, the mirror key commits).
#: The overlay list is Gentoo Infrastructure's (api.gentoo.org): its infrastructure@gentoo.org key, the
#: ebuild-repository key ``gentoo/snapshot`` (docs/keys.md, "Key purposes", says what this rests on).
DEFAULT_PURPOSES: Mapping[Purpose, tuple[KeyRef, ...]] = {
    Purpose.RELEASE_MEDIA: (_ref("gentoo/releng"), _ref("gentoo/weekly")),
    Purpose.REPOSITORY: (_ref("gentoo/snapshot"),),
    Purpose.GIT_MIRROR: (_ref("gentoo/mirror"), _ref("gentoo-infra/mirror")),
    Purpose.OVERLAY_LIST: (_ref("gentoo/snapshot"),),
}


class WrongPurposeError(SignerNotPinnedError):
    """A good signature by a pinned key whose purpose is another one (a snapshot key signing "a stage3")."""


def purpose_table(config: Config) -> dict[Purpose, tuple[KeyRef, ...]]:
    """Every purpose and its seeds: :data:`DEFAULT_PURPOSES`, each replaced by its ``[purposes]`` line.

    Raises :class:`ConfigError` for a value that is not a non-empty list of ``category/nick``.
    """
    table = dict(DEFAULT_PURPOSES)
    if not config.parser.has_section(SECTION):
        return table
    for purpose in Purpose:
        if not config.parser.has_option(SECTION, purpose.value):
            continue
        where = f"[{SECTION}] {purpose.value}"
        words = config.parser.get(SECTION, purpose.value).replace(",", " ").split()
        if not words:
            raise ConfigError(f"{where}: empty; name the seeds that sign {purpose.artifacts} "
                              f"(e.g. '{purpose.value} = {' '.join(str(r) for r in DEFAULT_PURPOSES[purpose])}') "
                              f"or remove the line to keep the default")
        table[purpose] = tuple(dict.fromkeys(parse_keyref(word, where) for word in words))
    return table


def check_purpose_seeds(config: Config, nicks_of: Callable[[Category], Collection[Nick]],
                        adding: KeyRef | None = None) -> None:
    """Raise :class:`ConfigError` for a ``[purposes]`` ``category/nick`` that names no seed of its category, with
    the nearest nick and the two ways on: add the seed (``add-seed``, which this line never blocks: ``adding`` is
    the seed being added, not judged) or the line without it.  ``nicks_of`` gives a category's seeds (installed,
    else packaged); a category that has none yet (its seed file not fetched) is not judged: the line is checked
    again by every command once it has."""
    if not config.parser.has_section(SECTION):
        return
    table = purpose_table(config)
    for purpose in Purpose:
        if not config.parser.has_option(SECTION, purpose.value):
            continue
        for ref in table[purpose]:
            nicks = nicks_of(ref.category)
            if nicks and ref.nick not in nicks and ref != adding:
                close = nearest(ref.nick, nicks)
                hint = f"did you mean {ref.category}/{close}?" if close else f"its seeds: {', '.join(sorted(nicks))}"
                rest = [str(other) for other in table[purpose] if other != ref]
                without = (f"change the line to '{purpose.value} = {' '.join(rest)}'" if rest
                           else f"remove the line '{purpose.value} = {ref}'")
                raise ConfigError(f"[{SECTION}] {purpose.value}: {ref} names no seed of {ref.category} ({hint}); "
                                  f"add that seed first: 'gkeys add-seed -C {ref.category} -n {ref.nick} -N NAME "
                                  f"-K FINGERPRINT' (this line does not block it), or {without}"
                                  + (f" in {config.path}" if config.path else ""))


def with_purpose(config: Config, purpose: Purpose, ref: KeyRef) -> str:
    """The ``[purposes]`` value that gives ``ref`` ``purpose`` besides the seeds that have it now."""
    return " ".join(str(r) for r in dict.fromkeys((*purpose_table(config)[purpose], ref)))


def has_purposes(config: Config, category: Category) -> list[KeyRef]:
    """The seeds of ``category`` that have a purpose (empty: every seed of it counts for every verifier)."""
    return sorted({r for refs in purpose_table(config).values() for r in refs if r.category == category}, key=str)


def signer_purpose(table: Mapping[Purpose, tuple[KeyRef, ...]], category: Category, nick: Nick) -> list[Purpose]:
    """The purposes of the seed ``category/nick`` (empty if it has none)."""
    ref = KeyRef(category, nick)
    return [purpose for purpose, refs in table.items() if ref in refs]


def describe_signer(table: Mapping[Purpose, tuple[KeyRef, ...]], pin: Pin) -> str:
    """``gentoo/snapshot, the repository key`` (or just ``category/nick`` for a seed without a purpose)."""
    purposes = signer_purpose(table, pin.category, pin.nick)
    shown = f"{pin.category}/{pin.nick}"
    return f"{shown}, {' and '.join(p.key_name for p in purposes)}" if purposes else shown


@dataclass(frozen=True)
class PurposeScope:
    """The pins a purpose left out of a PinSet, kept to word the refusal of their signatures."""

    purpose: Purpose
    table: Mapping[Purpose, tuple[KeyRef, ...]]
    excluded: PinSet = field(default_factory=PinSet)

    def refusal_for(self, report: StatusReport) -> WrongPurposeError | None:
        """The error for the first signature in ``report`` made by a pinned key of another purpose, else None
        (for a verdict of "signer not pinned": who signed, and which purpose was wanted)."""
        return next((refusal for sig in report.signatures
                     if (refusal := self.refusal(sig.primary_fingerprint)) is not None), None)

    def refusal(self, fingerprint: Fingerprint | None) -> WrongPurposeError | None:
        """The error for a signature by ``fingerprint`` if it is a pinned key of another purpose, else None."""
        pin = self.excluded.get(fingerprint)
        if pin is None:
            return None
        categories = {p.category for p in self.excluded.pins.values()}
        wanted = [str(r) for r in self.table[self.purpose] if r.category in categories] or \
            [str(r) for r in self.table[self.purpose]]
        return WrongPurposeError(
            f"signed by {describe_signer(self.table, pin)}; {self.purpose.artifacts} need {self.purpose.value} "
            f"keys: {', '.join(wanted)} (a key pinned for another purpose is not trusted for this one: check "
            f"that this is the file you meant; [{SECTION}] {self.purpose.value} in gkeys.conf lists the seeds "
            f"that may sign it)")


def purpose_pins(config: Config, pins: PinSet, purpose: Purpose) -> tuple[PinSet, PurposeScope]:
    """Restrict ``pins`` to ``purpose``: in each category where some pinned seed has a purpose, keep only the
    seeds of ``purpose``; a category where none has one keeps every seed.  Also returns the scope that words
    the refusal of a left-out seed's signature."""
    table = purpose_table(config)
    purposed = {ref for refs in table.values() for ref in refs}
    wanted = set(table[purpose])
    restricted = {pin.category for pin in pins.pins.values() if KeyRef(pin.category, pin.nick) in purposed}
    kept, excluded = [], []
    for pin in pins.pins.values():
        if pin.category not in restricted or KeyRef(pin.category, pin.nick) in wanted:
            kept.append(pin)
        else:
            excluded.append(pin)
    return PinSet.of(kept), PurposeScope(purpose, table, PinSet.of(excluded))


def named_pins(config: Config, pins: PinSet, purpose: Purpose, category: Category,
               subject: str) -> tuple[PinSet, PurposeScope]:
    """Only the seeds of ``pins`` that ``[purposes]`` (or the default) names for ``purpose``, and the scope that
    words the refusal of another purpose's key; ``subject`` (``this tree``) names what nothing may then sign.

    Raises :class:`NotVerifiedError` (missing trust, with what adds it) when ``category`` pins none of them.
    """
    kept, scope = purpose_pins(config, pins, purpose)
    wanted = set(purpose_table(config)[purpose])
    strict = PinSet.of(pin for pin in kept.pins.values() if KeyRef(pin.category, pin.nick) in wanted)
    if not len(strict):
        named = " ".join(str(ref) for ref in sorted(wanted, key=str)) or "none"
        raise NotVerifiedError(
            f"category {category} pins no {purpose.value} key (the seeds that sign {purpose.artifacts}: {named}), "
            f"so nothing may sign {subject} (missing trust, not an attack): gkeys update-seed -C {category}, or "
            f"name the seed in gkeys.conf: [{SECTION}] {purpose.value} = {category}/NICK")
    return strict, scope
