"""The output door's rule, at the bottom floor: what never reaches a terminal or a log as itself.

:func:`neutralise` is re-exported by ``ui/output.py`` (the door every line passes); it lives here so that a
verifier below ``ui`` can write a name chosen by a mirror (a file name in a gemato refusal) into an error message
already escaped: the message then reaches the journal, ``emerge.log`` and a terminal as one harmless line.
"""

from __future__ import annotations

import re

#: what never reaches a terminal as itself: C0 controls but tab, DEL, C1 controls (0x80-0x9f: CSI, OSC, ... in
#: one character), the bidi embeddings and overrides U+202A-202E and the isolates U+2066-2069
_CONTROLS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def neutralise(text: str) -> str:
    """``text`` with every control character shown as its escape (``\\x1b``, ``\\u202e``): the one door every
    line passes on its way to a terminal or a log (design.md §10 "Output").

    A key's user id, a seed's name, a bundle, a file name or a commit subject can then neither move the cursor,
    erase lines, set the window title, reverse the text's direction nor start a line of its own (a newline is
    escaped too: one message, one line).  ``--json`` escapes the same characters (``\\u001b``) by itself.
    Applying it twice changes nothing more (a backslash is no control character)."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                         else f"\\u{ord(m.group()):04x}", text)
