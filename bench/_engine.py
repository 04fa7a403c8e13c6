"""The OpenPGP engine a benchmark runs, on both sides (issue 25): ``--gpg PATH`` (imported by the
benchmarks; not a benchmark itself).

gkeys gets it as ``$GKEYS_GPG``; the baselines get the same program: git as ``-c gpg.program=PATH``,
the handbook's and gentoo-keys' commands as their ``gpg``.  Keys are generated before the engine is
selected (with ``gpg`` from ``PATH``): what is measured is verification and import, not key generation
(gpg-sq cannot generate keys unattended)."""

from __future__ import annotations

import argparse
import os

from gkeys_portage.openpgp.engine import Capability, probe
from gkeys_portage.openpgp.process import DEFAULT_PROGRAM, PROGRAM_VARIABLE


def add_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--gpg PATH`` to a benchmark's options."""
    parser.add_argument("--gpg", metavar="PATH", help="the OpenPGP engine for gkeys and the baseline alike "
                        "(e.g. /opt/gkeys-engines/bin/gpg-2.4); default: gpg from PATH")


def select(program: str | None) -> str:
    """Make ``program`` (None: ``gpg``) the engine of gkeys (``$GKEYS_GPG``, inherited by its processes);
    return it, for the baseline's command line."""
    chosen = program or DEFAULT_PROGRAM
    os.environ[PROGRAM_VARIABLE] = chosen
    return chosen


def describe(program: str) -> str:
    """One line naming the engine: its version and whether it gives ``--verify --multifile`` verdicts."""
    engine = probe(program)
    multifile = "multifile" if multifile_verdicts(program) else "no multifile: one --verify per signature"
    return f"engine: {engine.describe()}; {multifile}"


def multifile_verdicts(program: str) -> bool:
    """Whether ``program`` gives per-file verdicts from ``gpg --verify --multifile`` (the probe's answer)."""
    return probe(program).has(Capability.MULTIFILE)


def git_options(program: str) -> list[str]:
    """git's options that make it verify with ``program``."""
    return ["-c", f"gpg.program={program}"]
