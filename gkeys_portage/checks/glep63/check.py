"""Check one key against a GLEP 63 spec (the policy tables are in :mod:`.specs`).

The procedure follows glep63-check so that its codes and levels are reproduced exactly:

0. a revoked, expired or invalid key gets one ``validity:*`` error and nothing else;
1. the primary key: algorithm and size, expiry;
2. each subkey with a checked capability (``s``, plus ``e`` since v2.1), skipping revoked and
   expired ones: multipurpose use, algorithm and size, expiry; a missing dedicated subkey of a
   required type is an error, and a short expiry is only a warning when another good subkey
   of that type exists;
3. user ids: one valid @gentoo.org address is required.

``glep63-2.2`` adds SHA-2 self-signatures and the certify-only primary recommendation.
"""

from __future__ import annotations

import email.utils
import math
from collections.abc import Callable
from datetime import UTC, datetime

from gkeys_portage.checks.glep63.findings import Issue, Level, Target, cap_issues, key_issue, subkey_issue, uid_issue
from gkeys_portage.checks.glep63.keystate import (
    CURVE25519_NAMES,
    DSA_ALGORITHMS,
    ECC_ALGORITHMS,
    RSA_ALGORITHMS,
    RSA_SINGLE_PURPOSE,
    WEAK_HASHES,
    State,
    component_state,
    curve_name,
    newest_self_signature,
    own_capabilities,
    uid_state,
)
from gkeys_portage.checks.glep63.specs import DEFAULT_SPEC, Spec, get_spec
from gkeys_portage.openpgp.colons import PublicKey, SubKey

#: makes one finding about the component being checked: (code, level, message) -> Issue
Reporter = Callable[[str, Level, str], Issue]

_VALIDITY_MESSAGES = {
    State.INVALID: ("validity:invalid", "the public key is invalid"),
    State.REVOKED: ("validity:revoked", "the public key has been revoked"),
    State.EXPIRED: ("validity:expired", "the public key has expired"),
    State.NOT_YET: ("validity:notyet", "the public key was created after the evaluation time"),
}


def check_key(key: PublicKey, spec: str | Spec = DEFAULT_SPEC, at: datetime | None = None) -> list[Issue]:
    """Check ``key`` against ``spec`` as of ``at`` (default: now); return its findings.

    The key should come from a listing with signatures (``GnuPG.list_keys(sigs=True)``) for the
    self-signature checks, made with ``faked_time=at`` when ``at`` is not now.
    """
    policy = get_spec(spec)
    when = (at or datetime.now(UTC)).timestamp()
    state = component_state(key.primary, when)
    if state is not State.VALID:
        code, message = _VALIDITY_MESSAGES[state]
        return [key_issue(key, code, Level.ERROR, message)]
    issues = _check_component(key.primary, policy, "key", when,
                              lambda code, level, text: key_issue(key, code, level, text))
    issues += _check_primary_extras(key, policy)
    issues += _check_subkeys(key, policy, when)
    issues += _check_uids(key, policy, when)
    return cap_issues(issues)


def _check_component(component: SubKey, spec: Spec, role: str, at: float, report: Reporter) -> list[Issue]:
    """Algorithm, size and expiry of the primary key (``role`` key) or a subkey."""
    return _check_algorithm(component, spec, report) + _check_expiry(component, spec, role, at, report)


def _check_algorithm(component: SubKey, spec: Spec, report: Reporter) -> list[Issue]:
    issues: list[Issue] = []
    algorithm, bits = component.algorithm, component.length
    if algorithm in RSA_SINGLE_PURPOSE:
        issues.append(report("algo:rsa:deprecated_only", Level.WARNING,
                             "sign-only and encrypt-only RSA keys are deprecated"))
    if algorithm in DSA_ALGORITHMS:
        if spec.dsa is Level.ERROR:
            issues.append(report("algo:dsa", Level.ERROR, "DSA keys are not allowed (RSA is recommended)"))
        elif bits < spec.dsa_min_length:
            issues.append(report("algo:dsa:tooshort", Level.ERROR,
                                 f"DSA key too short ({bits} bits, at least {spec.dsa_min_length} required)"))
        elif spec.dsa is not None:
            issues.append(report("algo:dsa:discouraged", spec.dsa, "DSA keys are discouraged (RSA is recommended)"))
    elif algorithm in RSA_ALGORITHMS:
        if bits < spec.rsa_min_length:
            issues.append(report("algo:rsa:tooshort", Level.ERROR,
                                 f"RSA key too short ({bits} bits, at least {spec.rsa_min_length} required)"))
        elif bits < spec.rsa_recommended_length:
            issues.append(report("algo:rsa:short", Level.WARNING,
                                 f"RSA key short ({bits} bits, {spec.rsa_recommended_length} recommended)"))
    elif algorithm in ECC_ALGORITHMS:
        curve = curve_name(component)
        if spec.ecc is not None:
            issues.append(report("algo:ecc", spec.ecc, "ECC keys are not allowed (RSA is recommended)"))
        elif curve not in CURVE25519_NAMES:
            issues.append(report("algo:ecc:invalid", Level.ERROR,
                                 f"ECC curve {curve or 'unknown'} is not allowed (only Curve 25519)"))
    else:
        issues.append(report("algo:invalid", spec.unknown_algorithm,
                             f"unexpected public-key algorithm {algorithm}"))
    return issues


def _describe_limit(spec: Spec, role: str) -> str:
    maximum, recommended = spec.expire_max(role), spec.expire_recommended(role)
    limit = f"{maximum:g} days max" if maximum is not None else "no maximum"
    return f"<{recommended:g} days recommended, {limit}" if recommended is not None else limit


def _check_expiry(component: SubKey, spec: Spec, role: str, at: float, report: Reporter) -> list[Issue]:
    maximum, recommended = spec.expire_max(role), spec.expire_recommended(role)
    if maximum is None and recommended is None:
        return []
    limit = _describe_limit(spec, role)
    if component.expires is None:
        level = Level.ERROR if maximum is not None else Level.WARNING
        return [report("expire:none", level, f"no expiration date ({limit})")]
    days_left = math.floor((component.expires - at) / 86400)  # whole days, as timedelta.days counts
    expiry = datetime.fromtimestamp(component.expires, UTC).strftime("%Y-%m-%d")
    if maximum is not None and days_left > maximum:
        return [report("expire:long", Level.ERROR, f"expiration date too far ahead ({expiry}, {limit})")]
    if recommended is not None and days_left > recommended:
        return [report("expire:long", Level.WARNING, f"expiration date far ahead ({expiry}, {limit})")]
    for level, threshold in ((Level.ERROR, spec.expire_short_error_days),
                             (Level.WARNING, spec.expire_short_warning_days)):
        if threshold is not None and days_left < threshold:
            return [report("expire:short", level, f"expires soon ({expiry}); renew at least {threshold} days before")]
    return []


def _weak_hash(signature_hash: int | None) -> str | None:
    return WEAK_HASHES.get(signature_hash) if signature_hash is not None else None


def _check_primary_extras(key: PublicKey, spec: Spec) -> list[Issue]:
    """v2.2: a certify-only primary is recommended."""
    capabilities = own_capabilities(key.primary)
    if spec.primary_not_certify_only is None or capabilities in ("c", ""):
        return []
    return [key_issue(key, "key:notcertifyonly", spec.primary_not_certify_only,
                      f"the primary key can [{capabilities}]; a certify-only primary kept offline is "
                      "recommended, with subkeys for signing and encryption")]


def _binding_hash_issue(key: PublicKey, subkey: SubKey, spec: Spec) -> list[Issue]:
    if spec.weak_self_signature is None:
        return []
    binding = newest_self_signature(subkey.signatures, key.primary, ("18",))
    weak = _weak_hash(binding.hash_algorithm) if binding is not None else None
    if weak is None:
        return []
    return [subkey_issue(key, subkey, "sig:sha1" if weak == "SHA-1" else "sig:weakhash", spec.weak_self_signature,
                         f"the subkey binding signature uses {weak}; SHA-2 is required")]


def _check_subkeys(key: PublicKey, spec: Spec, at: float) -> list[Issue]:
    issues: list[Issue] = []
    has_dedicated: set[str] = set()
    good_capabilities: set[str] = set()
    for subkey in key.subkeys:
        capabilities = own_capabilities(subkey)
        state = component_state(subkey, at)
        if state in (State.REVOKED, State.EXPIRED, State.NOT_YET):
            continue
        issues += _binding_hash_issue(key, subkey, spec)
        if not any(t in capabilities for t in spec.subkey_types):
            continue
        found: list[Issue] = []

        def report(code: str, level: Level, text: str, subkey: SubKey = subkey) -> Issue:
            return subkey_issue(key, subkey, code, level, text)

        if state is State.INVALID:
            found.append(report("validity:invalid", Level.ERROR, "the subkey is invalid"))
        if len(capabilities) > 1 and spec.multipurpose is not None:
            found.append(report("subkey:multipurpose", spec.multipurpose,
                                f"the subkey has several capabilities [{capabilities}]; use dedicated subkeys"))
        else:
            has_dedicated.update(capabilities)
        found += _check_component(subkey, spec, "subkey", at, report)
        if not any(i.level is Level.ERROR for i in found):
            good_capabilities.update(capabilities)
        issues += found
    for wanted in spec.subkey_types:
        if wanted in good_capabilities:
            issues = [_soften_short_expiry(i, key, wanted) for i in issues]
        if wanted not in has_dedicated and spec.subkey_none is not None:
            purpose = "signing" if wanted == "s" else "encryption"
            issues.append(key_issue(key, f"subkey:none:{wanted}", spec.subkey_none,
                                    f"a dedicated {purpose} subkey is required"))
    return issues


def _soften_short_expiry(issue: Issue, key: PublicKey, capability: str) -> Issue:
    """A subkey expiring soon is only a warning when another good subkey of its kind exists."""
    if issue.on is not Target.SUBKEY or issue.code != "expire:short" or issue.level is not Level.ERROR:
        return issue
    subkey = key.find(issue.subkey)
    if subkey is None or own_capabilities(subkey) != capability:
        return issue
    return Issue(issue.code, Level.WARNING, issue.on, issue.message + "; another valid subkey exists",
                 issue.key, issue.subkey, issue.subkey_id)


def _check_uids(key: PublicKey, spec: Spec, at: float) -> list[Issue]:
    issues: list[Issue] = []
    has_gentoo = False
    for uid in key.uids:
        state = uid_state(uid, at)
        if state is State.INVALID:
            issues.append(uid_issue(key, uid, "validity:invalid", Level.ERROR, "the user id is invalid"))
        if state in (State.REVOKED, State.EXPIRED):
            continue
        _name, address = email.utils.parseaddr(uid.text)
        if address.lower().endswith("@gentoo.org"):
            has_gentoo = True
        if spec.weak_self_signature is not None:
            selfsig = newest_self_signature(uid.signatures, key.primary, ("10", "11", "12", "13"))
            weak = _weak_hash(selfsig.hash_algorithm) if selfsig is not None else None
            if weak is not None:
                issues.append(uid_issue(key, uid, "sig:sha1" if weak == "SHA-1" else "sig:weakhash",
                                        spec.weak_self_signature,
                                        f"the self-signature on this user id uses {weak}; SHA-2 is required"))
    if not has_gentoo and spec.uid_nogentoo is not None:
        issues.append(key_issue(key, "uid:nogentoo", spec.uid_nogentoo, "no valid user id with an @gentoo.org address"))
    return issues
