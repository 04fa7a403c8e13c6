"""The DIGESTS parser and GNU coreutils must read the same file names from the same bytes.

A signed DIGESTS is parsed by gkeys, but a user may also run ``sha512sum -c`` on it: if the two read a
line differently (``str.splitlines`` splitting at a Unicode line separator, say), one signed line could
mean two things.  Property: whatever names ``parse_digests`` accepts, ``sha512sum -c --strict`` finds the
same files (created under the names gkeys parsed) and matches their hashes.  Trailing blanks are the one
intended difference: a cleartext signature does not cover them, so they are not part of a name (coreutils
keeps a trailing space, drops a trailing CR).
Budget: ``GKEYS_FUZZ_EXAMPLES`` (default 200, at most 100 here: each example runs sha512sum).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gkeys_portage.core.errors import BadInputError
from gkeys_portage.verify.media.digests import parse_digests

SHA512SUM = shutil.which("sha512sum")
EXAMPLES = min(100, int(os.environ.get("GKEYS_FUZZ_EXAMPLES", "200")))
#: Characters a file name may hold (no "/", NUL, LF; no backslash, which coreutils treats as an escape).
ALPHABET = list("ab#*-. \t\r\x0b\x0c\x1c\x1e\x85\u2028\u2029\u00e9\u0430")
file_names = st.text(st.sampled_from(ALPHABET), min_size=1, max_size=8).filter(lambda n: n.strip(" ") not in
                                                                                  ("", ".", ".."))


def _listing(names: list[str]) -> str:
    """A DIGESTS text listing each name with the SHA512 of its own UTF-8 bytes."""
    return "# SHA512 HASH\n" + "".join(f"{hashlib.sha512(n.encode()).hexdigest()}  {n}\n" for n in names)


def _coreutils_reads(names: list[str], text: str) -> bool:
    """True if ``sha512sum -c --strict`` verifies ``text`` against files named exactly ``names``."""
    with tempfile.TemporaryDirectory(prefix="gkeys-diff-") as folder:
        for name in names:
            (Path(folder) / name).write_bytes(name.encode())
        (Path(folder) / "DIGESTS").write_text(text, encoding="utf-8")
        return subprocess.run([SHA512SUM or "sha512sum", "-c", "--strict", "--quiet", "DIGESTS"], cwd=folder,
                              capture_output=True, check=False, timeout=60).returncode == 0


@pytest.mark.skipif(SHA512SUM is None, reason="GNU coreutils sha512sum is not installed")
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(file_names, min_size=1, max_size=4, unique=True))
def test_accepted_names_are_the_names_sha512sum_reads(names: list[str]) -> None:
    text = _listing(names)
    try:
        parsed = parse_digests(text)
    except BadInputError:
        return  # refused: nothing is verified against it, whatever coreutils would say
    ours = [e.filename for e in parsed.entries]
    assert ours == [n.rstrip() for n in names]
    if ours == names:  # no trailing blanks: coreutils must find exactly the files gkeys names
        assert _coreutils_reads(ours, text)
    for entry, name in zip(parsed.entries, names, strict=True):
        assert entry.hexdigest == hashlib.sha512(name.encode()).hexdigest()


@pytest.mark.parametrize("name", ["a\u2028#", "a\x85# x", "a\x0c#", "-"])
def test_names_the_two_parsers_read_differently_are_refused(name: str) -> None:
    """Cases the property found on the old parser: a name holding U+2028 (or NEL, form feed) and then '#'
    was read by gkeys as an entry for the part before it plus a comment, by coreutils as one name; "-" is
    standard input to coreutils, a file name to gkeys.  Now each is an unusable name."""
    with pytest.raises(BadInputError, match="unusable file name"):
        parse_digests(_listing([name]))
