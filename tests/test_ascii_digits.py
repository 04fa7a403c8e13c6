"""Numbers in attacker-controlled text are ASCII digits only.

Python's ``str.isdigit()`` is true for "²" (and other Unicode digits) while ``int("²")`` raises
``ValueError``: a parser that checks with ``isdigit()`` and converts with ``int()`` crashes with a
traceback instead of refusing the input.  Each parser below once did (the fuzzer found it in the status
parser); each must now refuse or ignore such a number with its own error.
"""

from __future__ import annotations

import pytest

from gkeys_portage.core.errors import BadInputError
from gkeys_portage.openpgp.colons import parse_colons
from gkeys_portage.verify.media.digests import parse_latest
from gkeys_portage.verify.overlays.urls import Severity, check_source

SUPERSCRIPT_TWO = "\u00b2"


def test_latest_file_size_with_a_unicode_digit_is_bad_input() -> None:
    with pytest.raises(BadInputError, match="expected '<path> <size>'"):
        parse_latest(f"20261201T170321Z/stage3-amd64-openrc-20261201T170321Z.tar.xz 12{SUPERSCRIPT_TWO}\n")


def test_overlay_port_with_a_unicode_digit_is_reported_not_raised() -> None:
    issues = check_source("git", f"https://example.org:44{SUPERSCRIPT_TWO}/repo.git")
    assert any(issue.severity in (Severity.WARNING, Severity.ERROR) and "port" in issue.message for issue in issues)


def test_colon_listing_time_with_a_unicode_digit_is_not_a_crash() -> None:
    fpr = "A" * 40
    listing = (f"pub:u:255:22:{fpr[-16:]}:16{SUPERSCRIPT_TWO}0000000:::u:::scESC:::::ed25519:::0:\n"
               f"fpr:::::::::{fpr}:\n")
    keys = parse_colons(listing)
    assert keys and keys[0].primary.created is None
