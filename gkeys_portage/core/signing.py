"""Signing with the key configured in ``[sign]`` (seed category/nick; secret key in a GnuPG home)."""

from __future__ import annotations

from pathlib import Path

from gkeys_portage.core.context import Gkeys
from gkeys_portage.core.errors import BadInputError, UsageError
from gkeys_portage.core.gpg import GnuPG
from gkeys_portage.core.seedbinding import category_notation
from gkeys_portage.core.state import atomic_write
from gkeys_portage.core.types import Category


def sign_file(ctx: Gkeys, path: Path, *, clearsign: bool = False, output: Path | None = None,
              seed_category: Category | None = None) -> Path:
    """Sign ``path`` with the ``[sign]`` key; write ``output`` (default ``path.asc``) atomically.

    With ``seed_category`` the signature is bound to that seed category (a hashed
    ``seed-category@gentoo.org`` notation), as ``fetch-seed`` requires of seed files.
    """
    category, nick = ctx.config.sign_category, ctx.config.sign_nick
    if category is None or nick is None:
        raise UsageError("no signing key configured: set [sign] category and nick in the config")
    seeds = ctx.seeds.load(category)
    if nick not in seeds:
        raise UsageError(f"[sign] names {category}/{nick}, but there is no such seed")
    if not path.is_file():
        raise BadInputError(f"{path}: no such file")
    home = ctx.config.sign_homedir or ctx.keyring(category).home
    gpg = GnuPG(home)
    try:
        signature = gpg.sign(path, seeds[nick].keys[0], clearsign=clearsign,
                             notations=category_notation(seed_category) if seed_category else None)
    finally:
        gpg.close()
    target = output or path.with_name(path.name + ".asc")
    atomic_write(target, signature)
    return target
