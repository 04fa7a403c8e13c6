"""Signing with the key configured in ``[sign]`` (seed category/nick; secret key in a GnuPG home)."""

from __future__ import annotations

from pathlib import Path

from gkeys_portage.core.errors import BadInputError, SeedFormatError, UsageError
from gkeys_portage.core.state import atomic_write
from gkeys_portage.core.types import Category
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.seedbinding import category_notation
from gkeys_portage.keys.seeds import MAX_SEED_FILE, parse_seeds
from gkeys_portage.openpgp.gnupg import GnuPG


def _is_seed_file(path: Path) -> bool:
    """True if ``path`` holds a valid seed file (read only up to the seed-file size limit)."""
    with open(path, "rb") as handle:
        data = handle.read(MAX_SEED_FILE + 1)
    if len(data) > MAX_SEED_FILE or not data.lstrip().startswith(b"{"):
        return False
    try:
        parse_seeds(data, str(path))
    except SeedFormatError:
        return False
    return True


def sign_file(ctx: Gkeys, path: Path, *, clearsign: bool = False, output: Path | None = None,
              seed_category: Category | None = None) -> Path:
    """Sign ``path`` with the ``[sign]`` key; write ``output`` (default ``path.asc``) atomically.

    With ``seed_category`` the signature is bound to that seed category (a hashed
    ``seed-category@gentoo.org`` notation), as ``fetch-seed`` requires of seed files; a file that
    is a seed file is never signed without it (an unbound seed signature fits every category).
    """
    category, nick = ctx.config.sign_category, ctx.config.sign_nick
    if category is None or nick is None:
        raise UsageError("no signing key configured: set [sign] category and nick in the config")
    seeds = ctx.seeds.load(category)
    if nick not in seeds:
        raise UsageError(f"[sign] names {category}/{nick}, but there is no such seed")
    if not path.is_file():
        raise BadInputError(f"{path}: no such file")
    if seed_category is None and _is_seed_file(path):
        raise UsageError(f"{path} is a seed file: sign it for its category with --seed-category CAT "
                         "(fetch-seed refuses seed signatures that name no category)")
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
