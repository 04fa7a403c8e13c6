"""What each OpenPGP engine is known to lack, and which test failures that makes expected (issue 47).

CI runs the verdict tests again under GnuPG 2.4 and gpg-sq (``.ci/run``).  A test that fails there because gkeys
refused a job the engine cannot do (:meth:`gkeys_portage.openpgp.engine.Engine.require`) is an expected failure,
but only for a capability in that engine's row of :data:`KNOWN_LACKS`: a refusal for anything else (a probe that
broke, an engine that lost a capability) stays a failure, and tests/test_engines.py asserts that each engine's
probes find exactly its row.
"""

from __future__ import annotations

import re

from gkeys_portage.openpgp.engine import Capability, Engine

#: By the engine's name for people (:attr:`Engine.name` without the version's last part): what it is known to
#: lack.  An engine not named here is expected to lack nothing.
KNOWN_LACKS: dict[str, frozenset[Capability]] = {
    "GnuPG 2.2": frozenset(),
    "GnuPG 2.4": frozenset(),
    "Sequoia Chameleon": frozenset({
        Capability.MULTIFILE,  # FILE_START, NODATA, FILE_DONE: no data file is paired
        Capability.CLEARTEXT,  # no verdict or signed text through --decrypt
        Capability.SAFE_IMPORT,  # no import-clean,self-sigs-only
        Capability.KEEP_CERTIFICATIONS,
        Capability.TRUST_DIRECT,
        Capability.LOOPBACK,  # makes a key with an empty passphrase, then cannot use it
        Capability.READ_ONLY,  # keeps a verification cache in pubring.cert.d
    }),
}

#: How ``Engine.require`` words a refusal ("PROGRAM (NAME) cannot WHAT: it lacks CAPABILITY; ..."), also when
#: pytest cut the message short ("cannot import keys without ...").
ENGINE_REFUSAL = re.compile(r"\) cannot ([^:{}\n]+?)(?:: it lacks ([^;{}\n]+);| \.\.\.)")

#: The jobs ``Engine.require`` is asked for (the WHAT of a refusal), for a message cut before its capability.
JOBS: dict[str, Capability] = {
    "verify signatures": Capability.STATUS,
    "verify cleartext-signed messages": Capability.CLEARTEXT,
    "sign with a passphrase given to gkeys": Capability.LOOPBACK,
    "import keys without third-party certifications": Capability.SAFE_IMPORT,
    "set owner trust for a trust-model direct home": Capability.TRUST_DIRECT,
    "check a trust-model direct home": Capability.TRUST_DIRECT,
    "import keys with their certifications": Capability.KEEP_CERTIFICATIONS,
    "generate keys": Capability.LOOPBACK,
    "add subkeys": Capability.LOOPBACK,
    "certify keys": Capability.LOOPBACK,
    "revoke certifications": Capability.LOOPBACK,
    "change expiry dates": Capability.LOOPBACK,
}


def known_lacks(engine: Engine) -> frozenset[Capability]:
    """The capabilities ``engine`` is known to lack (its :data:`KNOWN_LACKS` row; none for an unknown engine)."""
    for family, lacks in KNOWN_LACKS.items():
        if engine.name == family or engine.name.startswith((family + ".", family + " ")):
            return lacks
    return frozenset()


def _refused(text: str) -> list[tuple[str, set[Capability]]]:
    """Each engine refusal in ``text``: the job, and the capabilities it may name (one, or several for a
    message cut before its capability whose job is cut too)."""
    by_value = {cap.value: cap for cap in Capability}
    found = []
    for match in ENGINE_REFUSAL.finditer(text):
        job, value = match.group(1), match.group(2)
        if value is not None:
            found.append((job, {by_value[value]} if value in by_value else set()))
        else:
            found.append((job, {cap for what, cap in JOBS.items() if what.startswith(job)}))
    return found


def expected_failure(engine: Engine, text: str) -> str | None:
    """Why a failure whose report is ``text`` is expected under ``engine`` (None: it is a failure).

    Expected only when the report holds an engine refusal and every capability it may name is in the engine's
    row of :data:`KNOWN_LACKS`."""
    refusals = _refused(text)
    if not refusals:
        return None
    lacks = known_lacks(engine)
    if not all(caps and caps <= lacks for _, caps in refusals):
        return None
    names = sorted({cap.value for _, caps in refusals for cap in caps})
    return f"{engine.name} lacks {' and '.join(names)} (to {refusals[0][0]})"
