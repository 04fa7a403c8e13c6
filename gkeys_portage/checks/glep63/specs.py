"""The GLEP 63 policy tables: one :class:`Spec` per version of the GLEP.

Only data lives here; :mod:`gkeys_portage.checks.glep63.check` applies it.  The first six specs
reproduce glep63-check's (same names, codes and levels); ``glep63-2.2`` is the current text:

    bare minimum: SHA-2 self-signatures; a signing subkey separate from the primary, with no
    other capability; an encryption subkey; primary and signing subkey RSA >= 2048 (v4) or
    curve25519; expiry of key and all subkeys at most 900 days ahead; renewal at least 2 weeks
    before expiry; a UID with an @gentoo.org address.

and recommends a certify-only primary key (reported as a note).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gkeys_portage.checks.glep63.findings import Level
from gkeys_portage.core.errors import UsageError

ERROR, WARNING, NOTE = Level.ERROR, Level.WARNING, Level.NOTE


def years(count: int) -> float:
    """A number of years in days, as glep63-check counts them (365.24 days a year)."""
    return count * 365.24


@dataclass(frozen=True)
class Spec:
    """One key policy.  ``None`` means "not checked"; a :class:`Level` is how a violation is reported."""

    name: str
    doc: str
    #: subkey capabilities that are checked and required (``s`` signing, ``e`` encryption)
    subkey_types: tuple[str, ...] = ("s",)
    #: DSA/ElGamal keys: ERROR forbids them, WARNING discourages them
    dsa: Level | None = WARNING
    dsa_min_length: int = 0
    rsa_min_length: int = 2048
    #: RSA keys shorter than this get a warning (0: no recommendation)
    rsa_recommended_length: int = 0
    #: ECC keys: ERROR forbids them; None allows curve 25519 only
    ecc: Level | None = ERROR
    #: any other public-key algorithm
    unknown_algorithm: Level = ERROR
    #: maximum days to expiry (error) and recommended maximum (warning), for the primary and subkeys
    expire_max_key: float | None = None
    expire_max_subkey: float | None = None
    expire_recommended_key: float | None = None
    expire_recommended_subkey: float | None = None
    #: expiring in fewer than this many days is an error / a warning (renewal is late); None: not checked
    expire_short_error_days: int | None = None
    expire_short_warning_days: int | None = 14
    #: a subkey with more than one capability
    multipurpose: Level | None = WARNING
    #: no dedicated subkey of a required type
    subkey_none: Level | None = ERROR
    #: no user id with an @gentoo.org address
    uid_nogentoo: Level | None = WARNING
    #: self-signatures or binding signatures made with SHA-1 (or weaker)
    weak_self_signature: Level | None = None
    #: a primary key with capabilities besides certification
    primary_not_certify_only: Level | None = None

    def expire_max(self, role: str) -> float | None:
        """Maximum days to expiry for ``role`` (``key`` or ``subkey``)."""
        return self.expire_max_key if role == "key" else self.expire_max_subkey

    def expire_recommended(self, role: str) -> float | None:
        """Recommended maximum days to expiry for ``role`` (``key`` or ``subkey``)."""
        return self.expire_recommended_key if role == "key" else self.expire_recommended_subkey


def _derive(base: Spec, name: str, doc: str, **changes: object) -> Spec:
    return dataclasses.replace(base, name=name, doc=doc, **changes)  # type: ignore[arg-type]


GLEP63_1_RSA2048 = Spec(
    name="glep63-1-rsa2048",
    doc="GLEP 63 v1 without the RSA 4096 preference",
    dsa=WARNING, dsa_min_length=2048, rsa_min_length=2048, ecc=ERROR,
    expire_max_key=years(5), expire_max_subkey=years(5),
    expire_recommended_key=years(3), expire_recommended_subkey=years(1),
    expire_short_error_days=None, expire_short_warning_days=14, uid_nogentoo=WARNING,
)
GLEP63_1_STRICT = _derive(GLEP63_1_RSA2048, "glep63-1-strict", "GLEP 63 v1 with the RSA 4096 preference",
                          rsa_recommended_length=4096)
GLEP63_1_RSA2048_EC25519 = _derive(GLEP63_1_RSA2048, "glep63-1-rsa2048-ec25519",
                                   "GLEP 63 v1 with the RSA 2048 preference, Curve 25519 allowed", ecc=None)
GLEP63_2_DRAFT_20180707 = Spec(
    name="glep63-2-draft-20180707",
    doc="GLEP 63 v2 draft as of 2018-07-07",
    dsa=ERROR, rsa_min_length=2048, ecc=None,
    expire_max_key=900, expire_max_subkey=900,
    expire_short_error_days=14, expire_short_warning_days=28, uid_nogentoo=WARNING,
)
GLEP63_2 = _derive(GLEP63_2_DRAFT_20180707, "glep63-2", "GLEP 63 v2 as approved by the Council on 2018-07-29",
                   uid_nogentoo=ERROR)
GLEP63_2_1 = _derive(GLEP63_2, "glep63-2.1", "GLEP 63 v2.1 (2019-04-14): an encryption subkey is required",
                     subkey_types=("s", "e"))
GLEP63_2_2 = _derive(GLEP63_2_1, "glep63-2.2",
                     "GLEP 63 v2.2 (current): v2.1 plus SHA-2 self-signatures; a certify-only primary "
                     "key is recommended",
                     weak_self_signature=ERROR, primary_not_certify_only=NOTE)

SPECS: dict[str, Spec] = {spec.name: spec for spec in (
    GLEP63_1_RSA2048, GLEP63_1_STRICT, GLEP63_1_RSA2048_EC25519, GLEP63_2_DRAFT_20180707, GLEP63_2,
    GLEP63_2_1, GLEP63_2_2,
)}

DEFAULT_SPEC = GLEP63_2_2.name


def get_spec(spec: str | Spec) -> Spec:
    """The spec called ``spec`` (a :class:`Spec` is returned as is); unknown names are a usage error."""
    if isinstance(spec, Spec):
        return spec
    try:
        return SPECS[spec]
    except KeyError:
        raise UsageError(f"unknown spec {spec!r} (known: {', '.join(SPECS)})") from None
