"""Which pinned keys may sign repository Manifests and webrsync snapshots, and a keyring of exactly them.

Gentoo signs rsync Manifests and webrsync snapshots with one key (the ebuild repository key,
``DCD05B71…``, seed ``snapshot`` of the packaged ``gentoo`` category); a category that also pins the
release-media or mirror keys must not let those sign a tree.  :func:`repository_pins` is the one place
that says which pins have that purpose.
"""

from __future__ import annotations

from gkeys_portage.core.errors import NotVerifiedError
from gkeys_portage.core.types import Nick
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.openpgp.verdict import PinSet

#: The seed whose keys sign repository Manifests and snapshots (until every seed carries its purposes).
REPOSITORY_NICK = Nick("snapshot")


def repository_pins(ctx: Gkeys, category: str) -> PinSet:
    """The pins of ``category`` whose purpose is the repository (Manifests and snapshots).

    Raises :class:`NotVerifiedError` (missing trust, with the command that adds it) when there are none.
    """
    cat = ctx.require_category(category)
    seeds = ctx.seeds.load(cat)
    seed = seeds.get(REPOSITORY_NICK)
    if seed is None:
        raise NotVerifiedError(
            f"category {cat} pins no repository key (no seed {REPOSITORY_NICK!r}): nothing may sign this tree "
            f"(missing trust, not an attack); gkeys update-seed -C {cat}, or add it with gkeys add-seed -C {cat} "
            f"-n {REPOSITORY_NICK} -N NAME -K FINGERPRINT")
    return PinSet.of(seed.pins(cat))


def purpose_keyring(ctx: Gkeys, category: str, pins: PinSet) -> bytes:
    """An armored keyring holding exactly the installed keys of ``pins`` (from ``category``'s keyring).

    Raises :class:`NotVerifiedError` when none of them is installed.
    """
    keyring = ctx.keyring(category)
    installed = keyring.installed()
    wanted = sorted(fpr for fpr in pins.pins if fpr in installed)
    if not wanted:
        raise NotVerifiedError(
            f"the repository key(s) pinned in {category} ({pins.describe()}) are not installed (missing trust, "
            f"not a bad signature): gkeys install-key -C {category} -n {REPOSITORY_NICK}")
    return keyring.gpg().export_keys(wanted, armor=True)
