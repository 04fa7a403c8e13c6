"""``gkeys demo``: build an offline world in a temporary directory and run the real commands in it.

The world is made of :class:`~gkeys_portage.demo.scene.DemoWorld` (keys, a loopback server, a
config).  Each topic adds its scenes through a *step builder* (``(world) -> list[Step]``); the runner
executes every step with the real ``gkeys`` entry point, shows its output, and checks that it ended as expected — a
refusal of tampered data is a success of the demo.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gkeys_portage.demo import checks_steps, core_steps, fetch_steps, media_steps, overlays_steps, tree_steps
from gkeys_portage.demo.scene import StepBuilder, build_world
from gkeys_portage.ui.output import Report, colour_wanted


def step_builders() -> list[StepBuilder]:
    """The scenes of the demo, in order: core, then one module per verifier."""
    return [core_steps.steps, media_steps.steps, overlays_steps.steps, tree_steps.steps, checks_steps.steps,
            fetch_steps.steps]


def run(args: argparse.Namespace, gkeys_main: Callable[[Sequence[str]], int]) -> Report:
    """Run the demo; the report summarises which steps behaved as expected.

    ``gkeys_main`` is the entry point of the ``gkeys`` console script, handed down by the ``demo`` action
    (so every step runs exactly what a user's ``gkeys`` runs, and nothing below ``cli/`` imports it)."""
    workdir = Path(tempfile.mkdtemp(prefix="gkeys-demo-"))
    console = args.console
    world = build_world(workdir)
    results: list[dict[str, Any]] = []
    try:
        for builder in step_builders():
            for step in builder(world):
                console.message("info", f"\033[1m{step.title}\033[0m" if colour_wanted(sys.stdout) else step.title)
                if step.prepare:
                    step.prepare()
                quiet = args.json or args.quiet
                if step.run is not None:
                    status = _quietly(step.run) if quiet else _beside_title(step.run)
                else:
                    console.message("plain", "   $ gkeys " + " ".join(step.argv[2:]))
                    call = functools.partial(gkeys_main, step.argv)
                    status = _quietly(call) if quiet else _beside_title(call)
                results.append({"title": step.title, "argv": step.argv, "exit": status, "expected": step.expect,
                                "as_expected": status == step.expect})
                console.message("plain", "")
    finally:
        world.server.close()
        world.keys.close()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    good = sum(r["as_expected"] for r in results)
    report = Report(data={"steps": results, "as_expected": good, "total": len(results),
                          "workdir": str(workdir) if args.keep else None})
    refused = sum(1 for r in results if r["expected"] != 0 and r["as_expected"])
    report.info(f"demo: {good}/{len(results)} steps ended as expected "
                f"({refused} refusals of bad input, {good - refused} successes)")
    if args.keep:
        report.info(f"demo files kept in {workdir}")
    if good != len(results):
        for r in results:
            if not r["as_expected"]:
                report.error(f"unexpected exit {r['exit']} (wanted {r['expected']}): {r['title']}")
        report.exit_code = 1
    return report


def _beside_title(run: Callable[[], int]) -> int:
    """Run a step with its error lines on stdout, so ``gkeys demo > log`` keeps each refusal's reason
    next to its title (stderr would take them elsewhere)."""
    import contextlib

    sys.stdout.flush()
    with contextlib.redirect_stderr(sys.stdout):
        return run()


def _quietly(run: Callable[[], int]) -> int:
    """Run a step without letting its output into the demo's own output (JSON or quiet mode)."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return run()
