"""Carry coverage measurement into every child process a test starts (CI: ``.ci/run``).

``.ci/run`` exports ``COVERAGE_PROCESS_START`` (the ``[tool.coverage]`` section of pyproject.toml); coverage's
``.pth`` file then measures every Python process that inherits it: pytest itself, the console scripts, the
hooks, ``emerge`` and the sync module it loads.  ``patch = subprocess`` adds ``COVERAGE_PROCESS_CONFIG``.  Tests
and fixtures build child environments by hand (``subprocess_environment``, ``env={...}``), which would drop
both variables; :func:`carry_coverage_into_children` puts them back into any explicit ``env=`` — and does
nothing at all when coverage is not requested, so a plain ``python3 -m pytest`` runs exactly as before.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

#: The variables coverage's start-up hook reads in a new Python process.
COVERAGE_VARIABLES = ("COVERAGE_PROCESS_START", "COVERAGE_PROCESS_CONFIG")


def with_coverage(env: dict[str, str] | None) -> dict[str, str] | None:
    """``env`` plus the coverage variables of this process that it lacks (``None`` stays ``None``: inherit)."""
    if env is None:
        return None
    missing = {name: os.environ[name] for name in COVERAGE_VARIABLES if name in os.environ and name not in env}
    return {**env, **missing} if missing else env


def carry_coverage_into_children() -> None:
    """Under coverage only: make ``subprocess.Popen`` add the coverage variables to explicit environments."""
    if not any(name in os.environ for name in COVERAGE_VARIABLES):
        return
    original = subprocess.Popen.__init__

    def init(self: subprocess.Popen[Any], *args: Any, env: Any = None, **kwargs: Any) -> None:
        original(self, *args, env=with_coverage(env), **kwargs)

    subprocess.Popen.__init__ = init  # type: ignore[method-assign]
