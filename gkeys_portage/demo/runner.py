"""``gkeys demo``: build an offline world in a temporary directory and run the real commands in it.

The world is made of :class:`~gkeys_portage.demo.scene.DemoWorld` (keys, a loopback server, a
config).  Each topic adds its scenes through a *step builder* (``(world) -> list[Step]``); the runner
executes every step with the real ``gkeys`` entry point, shows its output, and checks that it ended as expected — a
refusal of tampered data is a success of the demo.
"""

from __future__ import annotations

import argparse
import functools
import shlex
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gkeys_portage.demo import (
    checks_steps,
    core_steps,
    fetch_steps,
    journal_steps,
    media_steps,
    overlays_steps,
    tree_steps,
)
from gkeys_portage.demo.scene import DemoWorld, StepBuilder, build_world
from gkeys_portage.ui.output import Report, colour_wanted


def step_builders() -> list[StepBuilder]:
    """The scenes of the demo, in order: core, then one module per verifier."""
    return [core_steps.steps, media_steps.steps, overlays_steps.steps, tree_steps.steps, checks_steps.steps,
            fetch_steps.steps, journal_steps.steps]


def run(args: argparse.Namespace, gkeys_main: Callable[[Sequence[str]], int]) -> Report:
    """Run the demo; the report summarises which steps behaved as expected.

    ``gkeys_main`` is the entry point of the ``gkeys`` console script, handed down by the ``demo`` action
    (so every step runs exactly what a user's ``gkeys`` runs, and nothing below ``cli/`` imports it)."""
    workdir = Path(tempfile.mkdtemp(prefix="gkeys-demo-"))
    console = args.console
    world = build_world(workdir)
    url = world.server.url
    results: list[dict[str, Any]] = []
    console.message("info", f"$DEMO below: {workdir}, the demo's directory ("
                    + ("kept: --keep" if args.keep else "removed at the end; --keep keeps it") + ")")
    console.message("info", f"$SERVER below: {world.server.url}, its mirror, keyserver and git host on 127.0.0.1")
    console.message("plain", "")
    try:
        for builder in step_builders():
            for step in builder(world):
                title = fit(step.title, workdir, url).replace("\n", " ")
                console.message("info", f"\033[1m{title}\033[0m" if colour_wanted(sys.stdout) else title)
                if step.prepare:
                    step.prepare()
                quiet = args.json or args.quiet
                if step.run is not None:
                    status = _quietly(step.run) if quiet else _beside_title(step.run, workdir, url)
                else:
                    for line in fit("   $ gkeys " + shlex.join(step.argv[2:]), workdir, url).split("\n"):
                        console.message("plain", line)
                    call = functools.partial(gkeys_main, step.argv)
                    status = _quietly(call) if quiet else _beside_title(call, workdir, url)
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
        report.info(f"demo files kept in {workdir}; the keys, seeds, keyrings and journal stay usable offline:")
        for command in kept_commands(world):
            report.plain(f"  {command}")
    if good != len(results):
        for r in results:
            if not r["as_expected"]:
                report.error(f"unexpected exit {r['exit']} (wanted {r['expected']}): {r['title']}")
        report.exit_code = 1
    return report


#: The widest line the demo prints (a terminal's width, with room).
WIDTH = 120


def fit(text: str, workdir: Path, server: str = "") -> str:
    """``text`` with the demo's directory as ``$DEMO``, its server's URL as ``$SERVER`` and lines over
    :data:`WIDTH` wrapped at spaces."""
    lines = []
    text = text.replace(str(workdir), "$DEMO")
    if server:
        text = text.replace(server, "$SERVER")
    for line in text.split("\n"):
        if len(line) <= WIDTH:
            lines.append(line)
            continue
        lines += textwrap.wrap(line, WIDTH, subsequent_indent="     ", break_long_words=False,
                               break_on_hyphens=False) or [line]
    return "\n".join(lines)


def kept_commands(world: DemoWorld) -> list[str]:
    """What to try in a kept demo directory (offline: the demo's server is gone)."""
    gkeys = f"gkeys -c {shlex.quote(str(world.config))}"
    return [f"{gkeys} status", f"{gkeys} list-key -C gentoo-devs", f"{gkeys} history",
            f"{gkeys} audit --key {world.keys.keys['releng'].fingerprint} --recheck",
            f"{gkeys} journal verify", f"{gkeys} doctor --eroot {shlex.quote(str(world.workdir))}"]


def _beside_title(run: Callable[[], int], workdir: Path, url: str) -> int:
    """Run a step with its error lines beside its output, so ``gkeys demo > log`` keeps each refusal's reason
    next to its title (stderr would take them elsewhere), fitted to :data:`WIDTH` columns."""
    import contextlib
    import io

    sys.stdout.flush()
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            return run()
    finally:
        if said.getvalue():
            sys.stdout.write(fit(said.getvalue().rstrip("\n"), workdir, url) + "\n")
            sys.stdout.flush()


def _quietly(run: Callable[[], int]) -> int:
    """Run a step without letting its output into the demo's own output (JSON or quiet mode)."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return run()
