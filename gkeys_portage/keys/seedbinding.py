"""Bind a seed file's signature to its category (so one category's seeds cannot pose as another's).

Seed files carry no category, and one seed-signing key usually signs every category.  Without a
binding, a mirror could serve the (validly signed, newer) developers' seed file at the release seed
URL and the developers' keys would be installed as release keys.  So the seed maintainer signs with
a notation in the signature's *hashed* area::

    seed-category@gentoo.org=<category>

and ``fetch-seed`` requires every good signature to name exactly the category being fetched.
GnuPG reports only hashed notations (the unhashed area is not covered by the signature), so the
binding cannot be added or changed without the signing key.  Signatures without the notation
(made before this rule) are accepted only for categories listed in ``[policy] unbound-seeds``,
which asserts that their signer signs no other category's seeds.
"""

from __future__ import annotations

from dataclasses import dataclass

from gkeys_portage.core.errors import NoSignatureError, SeedCategoryError, UnboundSeedError
from gkeys_portage.core.types import Category
from gkeys_portage.openpgp.verdict import GoodSignature

#: The notation name.  Scoped to seeds ("category" alone could mean a package category).
CATEGORY_NOTATION = "seed-category@gentoo.org"


def category_notation(category: Category) -> dict[str, str]:
    """The notation(s) a seed maintainer signs ``category``'s seed file with."""
    return {CATEGORY_NOTATION: category}


def signed_categories(signature: GoodSignature) -> list[str]:
    """The categories one good signature was made for (empty: an unbound, old-style signature)."""
    return [n.value for n in signature.notations if n.name == CATEGORY_NOTATION]


@dataclass(frozen=True)
class Binding:
    """How a seed file's signature is tied to its category."""

    category: Category
    bound: bool  # False: an unbound signature, accepted because [policy] unbound-seeds allows it

    def describe(self) -> str:
        """Short human wording for reports."""
        return (f"signed for category {self.category}" if self.bound
                else "unbound signature (allowed by [policy] unbound-seeds)")


def check_binding(signatures: list[GoodSignature], category: Category, url: str, *,
                  allow_unbound: bool, what: str = "seed file", resign: str = "") -> Binding:
    """Require every good signature over a seed file (or another signed file of a category, ``what``:
    a keyring bundle) to be made for ``category``.

    Raises :class:`SeedCategoryError` when a signature names any other category (or several), and
    :class:`UnboundSeedError` when one names none and ``allow_unbound`` is false; ``resign`` is the
    command that signs it bound (default: ``gkeys sign --seed-category CAT``).
    """
    resign = resign or f"gkeys sign --seed-category {category}"
    if not signatures:  # a VerifyResult always holds one; never let "no signature" pass as "all bound"
        raise NoSignatureError(f"{what} {url}: no good signature to check the category of")
    bound = True
    for signature in signatures:
        named = signed_categories(signature)
        who = f"{signature.pin.category}/{signature.pin.nick}"
        if not named:
            if not allow_unbound:
                raise UnboundSeedError(
                    f"{what} {url} is signed by {who} without a category binding (an old-style "
                    f"signature), so it could be another category's; ask its maintainer to re-sign it "
                    f"with '{resign}', or, only if {who} signs no other "
                    f"category's seeds, allow it with '[policy] unbound-seeds = {category}'"
                )
            bound = False
            continue
        if any(name != category for name in named):
            raise SeedCategoryError(
                f"{what} {url} was signed by {who} for category {', '.join(sorted(set(named)))}, "
                f"not {category}: refusing to install it as {category}'s (the server may be serving "
                f"another category's {what}); check [{'seedurls' if what == 'seed file' else 'keyrings'}] "
                f"{category}"
            )
    return Binding(category, bound)
