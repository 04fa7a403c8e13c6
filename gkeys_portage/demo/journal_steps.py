"""Demo scene for the trust journal: what a compromise audit answers (docs/journal.md).

Runs last, so the journal holds what every scene before it did: the seed files and keys installed, the release
media, trees and overlay lists accepted and refused.  ``history`` lists the trust changes; ``audit --key`` asks
"the release key was stolen: what did we accept that it signed?"; ``journal verify`` checks the hash chain.
"""

from __future__ import annotations

from gkeys_portage.demo.scene import DemoWorld, Step


def steps(world: DemoWorld) -> list[Step]:
    """This topic's demo steps."""
    releng = world.keys.keys["releng"].fingerprint
    return [
        Step("the trust journal: every trust change of this demo, one line each (when, what, from where, why)",
             world.gkeys("history", "-C", "gentoo")),
        Step("a compromise audit: the release key leaked; what did gkeys accept that it signed, and what now?",
             world.gkeys("audit", "--key", releng)),
        Step("the journal is a hash chain: an entry edited, removed or re-ordered is named here",
             world.gkeys("journal", "verify")),
    ]
