"""What updating a category needs first: the categories it depends on, and the pinned authority keys.

A seed file is checked with the key of its ``[verify-seeds]`` signer; an ``[authority-seeds]`` category with the
keys of its certifiers and of the ``[authority]`` roots.  :func:`update_order` updates those first, which lets a
first install run ``gkeys update-seed`` once, with no category named (the authority keys before the developers
they certify).

Installed keyrings keep no third-party certifications (their keys are imported with self-signatures only), yet
an authority update needs a root's certification of each certifier.  Online it comes from the certifier as WKD
and keyservers publish it; on an air-gapped machine it comes from the file the keys were imported from
(``import-key -F``, a ``[keyrings]`` file): :func:`keep_certifier_copies` keeps the pinned roots' and
certifiers' keyblocks as that file held them, and :func:`kept_certifier_copies` hands them to the update, where
GnuPG checks every certification against the pinned root all the same (a kept copy is evidence, not trust).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gkeys_portage.core.config import Config
from gkeys_portage.core.errors import GpgError, StateError
from gkeys_portage.core.state import atomic_write
from gkeys_portage.core.types import Category, Fingerprint
from gkeys_portage.installfiles import doc_file
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.openpgp.keyblocks import dearmor_public_keys, select_keyblocks

#: The first step of an install, as docs/portage.md, the ebuild's message and ``gkeys doctor`` name it.
FIRST_STEP = "gkeys update-seed"
#: Where the keys come from without a network: Gentoo's own key packages, as ``[keyrings]`` files.
OFFLINE_WAY = ("without a network, use Gentoo's own key files (sec-keys/openpgp-keys-gentoo-release, "
               "openpgp-keys-gentoo-auth, openpgp-keys-gentoo-developers): '[keyrings] gentoo = "
               "/usr/share/openpgp-keys/gentoo-release.asc' and the other lines of "
               f"{doc_file('portage.md')} "
               "('Offline first install'), then run 'gkeys update-seed' again")
MAX_COPY_BYTES = 4 * 1024 * 1024  # one root or certifier key as a file holds it
COPIES_DIR = "certifier-copies"


class MissingKeysError(StateError):
    """Root or certifier keys an update needs are not installed (``categories``: where they belong)."""

    def __init__(self, message: str, categories: Sequence[Category]) -> None:
        super().__init__(message)
        self.categories = tuple(categories)


def needs(config: Config, category: Category) -> set[Category]:
    """The categories whose installed keys updating ``category`` uses (never itself)."""
    found: set[Category] = set()
    source = config.authority.sources.get(category)
    if source is not None:
        found |= {ref.category for ref in (*source.certifiers, *config.authority.roots)}
    elif category in config.seedurls and category in config.verify_seeds:
        found.add(config.verify_seeds[category][0])
    found.discard(category)
    return found


def update_order(config: Config, categories: Iterable[Category]) -> list[Category]:
    """``categories`` with every one after those it :func:`needs` among them; alphabetical where free.

    Needs outside ``categories`` are not waited for; categories that need each other in a circle keep
    alphabetical order (updating them then says which key is missing).
    """
    todo = sorted(set(categories))
    wanted = set(todo)
    done: list[Category] = []
    while todo:
        ready = [c for c in todo if not (needs(config, c) & wanted) - set(done)]
        step = ready[0] if ready else todo[0]
        done.append(step)
        todo.remove(step)
    return done


def pinned_material(ctx: Gkeys, pinned: Mapping[Fingerprint, str]) -> bytes:
    """The installed root and certifier keys (``pinned``: fingerprint -> category/nick), from their keyrings."""
    chunks = []
    for category in sorted({name.split("/")[0] for name in pinned.values()}):
        keyring = ctx.keyring(category)
        wanted = [f for f, name in pinned.items() if name.split("/")[0] == category]
        have = [f for f in wanted if f in keyring.installed()]
        missing = [pinned[f] for f in wanted if f not in have]
        if missing:
            raise MissingKeysError(f"key(s) {', '.join(sorted(set(missing)))} not installed: "
                                   f"run 'gkeys update-seed -C {category}' first", [Category(category)])
        chunks.append(keyring.gpg().export_keys(have, armor=False))
    return b"".join(chunks)


def _authority_keys(ctx: Gkeys, category: Category) -> set[Fingerprint]:
    """The fingerprints ``category``'s seeds pin for the authority's roots and certifiers."""
    authority = ctx.config.authority
    refs = [*authority.roots, *(ref for source in authority.sources.values() for ref in source.certifiers)]
    nicks = {ref.nick for ref in refs if ref.category == category}
    if not nicks:
        return set()
    seeds = ctx.seeds.load(category)
    return {fpr for nick in nicks if nick in seeds for fpr in seeds[nick].keys}


def keep_certifier_copies(ctx: Gkeys, category: str, data: bytes, installed: Iterable[Fingerprint], *,
                          any_key: bool = False) -> None:
    """Keep the keyblocks of ``data`` (a key file or bundle) of the keys just ``installed`` for ``category`` as
    the file holds them (with the roots' certifications); unreadable data keeps nothing.

    Only the keys the configured authority pins as roots or certifiers, unless ``any_key`` (``import-key``: a
    few keys imported by hand, perhaps before ``[authority-seeds]`` is configured).
    """
    wanted = sorted(set(installed) if any_key else _authority_keys(ctx, Category(category)) & set(installed))
    if not wanted:
        return
    try:
        binary = dearmor_public_keys(data) if data.lstrip().startswith(b"-----") else data
        selection = select_keyblocks(binary, wanted)
    except GpgError:
        return
    directory = ctx.layout.state_dir / COPIES_DIR
    directory.mkdir(mode=0o755, exist_ok=True)
    for block in selection.kept:
        if len(block.data) <= MAX_COPY_BYTES:
            atomic_write(directory / f"{block.primary}.gpg", block.data)


def kept_certifier_copies(ctx: Gkeys, fingerprints: Iterable[Fingerprint]) -> list[bytes]:
    """The kept copies (see :func:`keep_certifier_copies`) of ``fingerprints`` that exist."""
    directory = ctx.layout.state_dir / COPIES_DIR
    found = []
    for fpr in sorted(set(fingerprints)):
        path = directory / f"{fpr}.gpg"
        if path.is_file() and path.stat().st_size <= MAX_COPY_BYTES:
            found.append(path.read_bytes())
    return found
