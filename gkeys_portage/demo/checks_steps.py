"""Demo scenes for key checks: ``check-key`` and ``spec-check`` over two developer keys.

``dana`` follows GLEP 63 v2.2 (certify-only ed25519 primary, signing and encryption subkeys,
one-year expiry); ``eve`` does not (a five-year expiry and no encryption subkey).  Both are pinned
by hand in their own category, ``gentoo-checks``, with ``add-seed`` + ``import-key``.
"""

from __future__ import annotations

import time

from gkeys_portage.demo.scene import DemoWorld, Step

CATEGORY = "gentoo-checks"


def steps(world: DemoWorld) -> list[Step]:
    """Pin a compliant and a non-compliant key, then check both."""
    keys, work = world.keys, world.workdir
    dana = keys.create("dana", expire="1y")
    keys.gpg.add_subkey(dana.fingerprint, algorithm="cv25519", usage="encr", expire="1y")
    eve = keys.create("eve", expire="5y")
    checks = work / "checks"
    checks.mkdir(exist_ok=True)
    (checks / "dana.asc").write_bytes(keys.public("dana"))
    (checks / "eve.asc").write_bytes(keys.public("eve"))

    result: list[Step] = []
    for nick, key in (("dana", dana), ("eve", eve)):
        result += [
            Step(f"pin {nick}'s key by hand in the category {CATEGORY}",
                 world.gkeys("add-seed", "-C", CATEGORY, "-n", nick, "-N", key.name, "-K", key.fingerprint,
                             "-u", key.uid)),
            Step(f"import {nick}'s key from a file (fingerprint-checked)",
                 world.gkeys("import-key", "-C", CATEGORY, "-n", nick, "-F", str(checks / f"{nick}.asc"))),
        ]
    return result + [
        Step("check-key: both keys are valid, unrevoked and can sign", world.gkeys("check-key", "-C", CATEGORY)),
        Step("check-key as of three years from now: dana's key will have expired (eve's lasts five years)",
             world.gkeys("check-key", "-C", CATEGORY, "--at", _years_ahead(3)), expect=1),
        Step("spec-check: dana's key complies with GLEP 63 v2.2",
             world.gkeys("spec-check", "-C", CATEGORY, "-n", "dana")),
        Step("REFUSED by spec-check: eve's key expires too late and has no encryption subkey",
             world.gkeys("spec-check", "-C", CATEGORY, "-n", "eve"), expect=1),
    ]


def _years_ahead(count: int) -> str:
    """An ``--at`` value ``count`` years from now."""
    return f"@{int(time.time() + count * 365.25 * 86400)}"
