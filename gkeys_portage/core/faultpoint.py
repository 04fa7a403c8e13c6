"""Named points between the steps of a multi-file change, where the test suite's kill campaign stops a run.

Production never sets ``GKEYS_TEST_PAUSE_AT``, and then :func:`checkpoint` only reads the environment.  The
kill campaign (tests/test_kill_campaign.py) sets it to ``NAME=PATH``: the run that reaches checkpoint ``NAME``
creates ``PATH`` and sleeps until it is killed, so a SIGKILL lands exactly in the window between two renames
(between a file and its record, between the keybox and its export) instead of wherever a random delay falls.
"""

from __future__ import annotations

import os
import time

VARIABLE = "GKEYS_TEST_PAUSE_AT"


def checkpoint(name: str) -> None:
    """Stop here for ever (until killed) when the test environment asks for checkpoint ``name``."""
    wanted = os.environ.get(VARIABLE)
    if not wanted:
        return
    point, _, marker = wanted.partition("=")
    if point != name or not marker:
        return
    with open(marker, "w", encoding="ascii") as handle:
        handle.write(f"{os.getpid()}\n")
    while True:
        time.sleep(60)
