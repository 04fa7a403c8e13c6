"""Which pinned keys may sign repository Manifests and webrsync snapshots, and a keyring of exactly them.

Gentoo signs rsync Manifests and webrsync snapshots with one key (the ebuild repository key,
``DCD05B71…``, seed ``gentoo/snapshot``); a category that also pins the release-media or mirror keys must not
let those sign a tree.  The purposes themselves are :mod:`gkeys_portage.keys.purposes`; this module is
stricter than its general rule in one way: a category where *no* seed has the repository purpose (a user's
own category, ``gentoo-devs``) yields no repository key at all, instead of letting every seed of it sign a
tree, because a developer key must never sign one.
"""

from __future__ import annotations

from gkeys_portage.core.errors import NotVerifiedError, RevokedKeyError
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.purposes import Purpose, PurposeScope, named_pins
from gkeys_portage.openpgp.verdict import PinSet


def repository_pins(ctx: Gkeys, category: str) -> tuple[PinSet, PurposeScope]:
    """The pins of ``category`` whose purpose is the repository (Manifests and snapshots), and the scope that
    words the refusal of another purpose's key.

    Raises :class:`NotVerifiedError` (missing trust, with what adds it) when there are none.
    """
    cat = ctx.require_category(category)
    return named_pins(ctx.config, ctx.seeds.pins(cat), Purpose.REPOSITORY, cat, "this tree")


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
            f"not a bad signature): gkeys install-key -C {category}")
    exported = keyring.export_for_verifier(wanted)  # gkeys' revocation rule holds for gemato and Portage too
    if not exported:
        raise RevokedKeyError(f"every key pinned in {category} for this ({pins.describe()}) is revoked: ask for its "
                              f"replacement to be pinned, then gkeys update-seed -C {category}")
    return exported


def repository_keyring(ctx: Gkeys, category: str) -> bytes:
    """An armored keyring of exactly the installed repository keys of ``category`` (what emerge-webrsync may
    accept); raises :class:`NotVerifiedError` when the category pins or has installed none."""
    return purpose_keyring(ctx, category, repository_pins(ctx, category)[0])
