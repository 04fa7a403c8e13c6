"""``check-key``: is a key usable right now (or as of a given time)?

Findings (codes are stable):

* ``validity:invalid`` / ``validity:revoked`` / ``validity:expired`` / ``validity:notyet`` (error): the
  primary key (``notyet``: created after the evaluation time);
* ``subkey:none:s`` (error): no usable signing key at all; (warning): only the primary key signs;
* ``expire:soon`` (warning): the primary key or a usable subkey expires within N days;
* ``subkey:revoked`` / ``subkey:expired`` / ``subkey:notyet`` (note), ``subkey:invalid`` (warning): one subkey.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gkeys_portage.checks.glep63.findings import Issue, Level, cap_issues, key_issue, subkey_issue
from gkeys_portage.checks.glep63.keystate import State, component_state, own_capabilities
from gkeys_portage.openpgp.colons import PublicKey, SubKey

DEFAULT_DAYS = 30

_PRIMARY_STATES = {
    State.INVALID: ("validity:invalid", "the key is invalid (GnuPG rejects its self-signatures)"),
    State.REVOKED: ("validity:revoked", "the key has been revoked"),
    State.EXPIRED: ("validity:expired", "the key expired"),
    State.NOT_YET: ("validity:notyet", "the key was created after the evaluation time"),
}
_SUBKEY_STATES = {
    State.INVALID: ("subkey:invalid", Level.WARNING, "the subkey is invalid"),
    State.REVOKED: ("subkey:revoked", Level.NOTE, "the subkey has been revoked"),
    State.EXPIRED: ("subkey:expired", Level.NOTE, "the subkey has expired"),
    State.NOT_YET: ("subkey:notyet", Level.NOTE, "the subkey was created after the evaluation time"),
}


def _date(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d")


def _expires_within(component: SubKey, when: float, days: int) -> bool:
    return component.expires is not None and component.expires - when < days * 86400


def check_health(key: PublicKey, at: datetime | None = None, days: int = DEFAULT_DAYS) -> list[Issue]:
    """Check that ``key`` is valid and can sign as of ``at`` (default now), warning ``days`` ahead of expiry."""
    when = (at or datetime.now(UTC)).timestamp()
    state = component_state(key.primary, when)
    if state is not State.VALID:
        code, message = _PRIMARY_STATES[state]
        if state is State.EXPIRED and key.primary.expires is not None:
            message += f" on {_date(key.primary.expires)}"
        elif state is State.EXPIRED:
            message = "the key has expired"
        return [key_issue(key, code, Level.ERROR, message)]
    issues: list[Issue] = []
    if _expires_within(key.primary, when, days) and key.primary.expires is not None:
        issues.append(key_issue(key, "expire:soon", Level.WARNING,
                                f"the key expires on {_date(key.primary.expires)} (within {days} days)"))
    signing_subkeys = 0
    for subkey in key.subkeys:
        sub_state = component_state(subkey, when)
        if sub_state is not State.VALID:
            code, level, message = _SUBKEY_STATES[sub_state]
            issues.append(subkey_issue(key, subkey, code, level, message))
            continue
        if "s" in own_capabilities(subkey):
            signing_subkeys += 1
        if _expires_within(subkey, when, days) and subkey.expires is not None:
            issues.append(subkey_issue(key, subkey, "expire:soon", Level.WARNING,
                                       f"the subkey expires on {_date(subkey.expires)} (within {days} days)"))
    if not signing_subkeys:
        if "s" in own_capabilities(key.primary):
            issues.append(key_issue(key, "subkey:none:s", Level.WARNING,
                                    "no usable signing subkey; only the primary key can sign"))
        else:
            issues.append(key_issue(key, "subkey:none:s", Level.ERROR, "no usable signing (sub)key"))
    return cap_issues(issues)

