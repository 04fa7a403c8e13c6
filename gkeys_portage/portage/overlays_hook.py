"""Entry point of the ``postsync.d/gkeys-overlays`` hook: refresh and verify the overlay list.

Portage runs ``postsync.d`` hooks once after ``emerge --sync`` (no arguments) and fails the sync if
one exits non-zero.  This hook downloads ``[overlays] url`` and ``[overlays] signature-url``,
verifies them (pinned signature of ``[overlays] category``, safe parsing, format and source-URL
rules) and replaces ``[overlays] output`` atomically only if everything passed.  On any failure it
prints one clear line, leaves the previous verified copy in place and exits non-zero.

It is exactly ``gkeys verify-overlays --install``, so the hook and the command cannot drift apart.
The configuration comes from ``$GKEYS_CONFIG`` or ``${EPREFIX}/etc/gkeys/gkeys.conf``; options
given to the hook (``-c FILE``, ``--root DIR``, ``-q``, ``-v``, ``--json``) are passed on.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gkeys verify-overlays --install`` with the hook's options; return its exit status."""
    from gkeys_portage.cli.main import main as gkeys_main

    options = list(sys.argv[1:] if argv is None else argv)
    return gkeys_main(["verify-overlays", "--install", *options])


if __name__ == "__main__":
    sys.exit(main())
