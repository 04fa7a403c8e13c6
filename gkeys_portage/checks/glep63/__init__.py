"""Key checks: ``check-key`` (is a key usable?) and ``spec-check`` (GLEP 63 compliance).

Public API::

    from gkeys_portage.checks.glep63 import check_key, check_health, SPECS, DEFAULT_SPEC, Issue, Level

    issues = check_key(public_key, "glep63-2.2", at=datetime.now(UTC))
    errors = [i for i in issues if i.level is Level.ERROR]
"""

from gkeys_portage.checks.glep63.check import check_key
from gkeys_portage.checks.glep63.findings import Issue, Level, Target, exit_status, failed
from gkeys_portage.checks.glep63.health import DEFAULT_DAYS, check_health
from gkeys_portage.checks.glep63.specs import DEFAULT_SPEC, SPECS, Spec, get_spec

__all__ = ["DEFAULT_DAYS", "DEFAULT_SPEC", "SPECS", "Issue", "Level", "Spec", "Target", "check_health",
           "check_key", "exit_status", "failed", "get_spec"]
