"""``gkeys demo``: build an offline world in a temporary directory and run the real commands in it.

The world is made of :class:`DemoWorld` (keys, a loopback server, a config).  Each topic adds its
scenes through a *step builder* (``(world) -> list[Step]``); the runner executes every step with
the real ``gkeys`` entry point, shows its output, and checks that it ended as expected — a
refusal of tampered data is a success of the demo.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gkeys_portage.core.seedbinding import category_notation
from gkeys_portage.core.seeds import Seed, dump_seeds
from gkeys_portage.core.types import Category, Nick
from gkeys_portage.demo.world import KeyFactory, LoopbackServer
from gkeys_portage.ui.output import Report, colour_wanted


@dataclass
class Step:
    """One command of the demo and the exit status it should end with."""

    title: str
    argv: list[str]
    expect: int = 0
    prepare: Callable[[], None] | None = None
    run: Callable[[], int] | None = None  # a non-gkeys step (e.g. emerge --sync); returns its exit status


@dataclass
class DemoWorld:
    """Everything the demo's scenes share."""

    workdir: Path
    keys: KeyFactory
    server: LoopbackServer
    config: Path
    state: Path
    extra: dict[str, object] = field(default_factory=dict)

    def gkeys(self, *argv: str) -> list[str]:
        """An argv for the gkeys entry point bound to the demo config."""
        return ["-c", str(self.config), *argv]

    def seed(self, nick: str) -> Seed:
        """A seed for one of the demo keys."""
        key = self.keys.keys[nick]
        return Seed(Nick(nick), key.name, nick, [key.fingerprint], [key.fingerprint, key.signing_subkey],
                    [key.uid])

    def publish_seeds(self, category: str, nicks: Sequence[str], signer: str = "gkeys") -> None:
        """Serve a signed seed file for ``category`` at /seeds/<category>.seeds (+ .sig)."""
        data = dump_seeds({Nick(n): self.seed(n) for n in nicks})
        self.server.publish(f"seeds/{category}.seeds", data)
        self.server.publish(f"seeds/{category}.seeds.sig",  # bound to its category, as `gkeys sign --seed-category`
                            self.keys.sign_bytes(signer, data, self.workdir, armor=False,
                                                 notations=category_notation(Category(category))))


StepBuilder = Callable[[DemoWorld], list[Step]]


def build_world(workdir: Path) -> DemoWorld:
    """Keys, server and config for the core scenes."""
    keys = KeyFactory(workdir / "secret-keys")
    for nick in ("gkeys", "releng", "alice", "bob", "mallory"):
        keys.create(nick)
    server = LoopbackServer()
    advanced, direct = server.wkd_templates()
    state = workdir / "state"
    config = workdir / "gkeys.conf"
    config.write_text(
        "[base]\n"
        f"gkeysdir = {state}\n"
        "[seedurls]\n"
        f"gentoo = {server.url}/seeds/gentoo.seeds\n"
        f"gentoo-devs = {server.url}/seeds/gentoo-devs.seeds\n"
        "[verify-seeds]\n"
        "gentoo = seed-signers gkeys\n"
        "gentoo-devs = seed-signers gkeys\n"
        "[sources]\n"
        f"keyservers = {server.url}\n"
        "wkd = yes\n"
        f"wkd-advanced-url = {advanced}\n"
        f"wkd-direct-url = {direct}\n"
        "timeout = 5\n"
        "retries = 1\n"
        "backoff = 0.1\n"
    )
    return DemoWorld(workdir, keys, server, config, state)


def serve_as(server: LoopbackServer, source: str, target: str, suffixes: Sequence[str] = ()) -> None:
    """Make the server answer ``target`` (and ``target + suffix``) with what it serves at ``source``."""
    for suffix in ("", *suffixes):
        server.publish(target + suffix, server.files["/" + source + suffix])


def core_steps(world: DemoWorld) -> list[Step]:
    """Seeds, keys and generic verification."""
    keys, server, work = world.keys, world.server, world.workdir
    world.publish_seeds("gentoo", ["gkeys", "releng"])
    world.publish_seeds("gentoo-devs", ["alice", "bob"])
    # The keyserver answers alice's fingerprint with alice's key *and* mallory's (a substitution try).
    server.hkp[keys.keys["alice"].fingerprint] = keys.public("alice") + b"\n" + keys.public("mallory")
    server.hkp[keys.keys["releng"].fingerprint] = keys.public("releng")
    server.publish_wkd(keys.keys["bob"].email, keys.public("bob", armor=False))
    server.publish_wkd(keys.keys["gkeys"].email, keys.public("gkeys", armor=False), method="direct")
    (work / "gkeys.asc").write_bytes(keys.public("gkeys"))

    files = work / "files"
    files.mkdir()
    good = files / "announcement.txt"
    good.write_text("Gentoo demo: this file is signed by alice.\n")
    (files / "announcement.txt.asc").write_bytes(keys.sign("alice", good))
    tampered = files / "tampered.txt"
    tampered.write_text("Gentoo demo: this file is signed by alice.\n")
    (files / "tampered.txt.asc").write_bytes(keys.sign("alice", tampered))
    tampered.write_text("Gentoo demo: this file was changed after alice signed it.\n")
    forged = files / "mallory.txt"
    forged.write_text("Trust me, I am a Gentoo developer.\n")
    (files / "mallory.txt.asc").write_bytes(keys.sign("mallory", forged))
    releng_note = files / "release-note.txt"
    releng_note.write_text("Release note, clearsigned by releng.\n")
    (files / "release-note.txt.asc").write_bytes(keys.sign("releng", releng_note, clearsign=True))

    gkeys_fpr = keys.keys["gkeys"].fingerprint
    return [
        Step("bootstrap the root of trust by hand: the seed-signing key's fingerprint",
             world.gkeys("add-seed", "-C", "seed-signers", "-n", "gkeys", "-N", "Demo Gentoo-keys", "-K", gkeys_fpr)),
        Step("import its key from a file: accepted only because the fingerprint matches",
             world.gkeys("import-key", "-C", "seed-signers", "-n", "gkeys", "-F", str(work / "gkeys.asc"))),
        Step("fetch the signed release seed file (signature pinned to seed-signers/gkeys)",
             world.gkeys("fetch-seed", "-C", "gentoo")),
        Step("install the release keys (WKD first, then the keyserver)",
             world.gkeys("install-key", "-C", "gentoo")),
        Step("update the developer seeds and keys; mallory's key offered by the keyserver is dropped",
             world.gkeys("update-seed", "-C", "gentoo-devs")),
        Step("REFUSED: the developers' seed file served at the release seed URL (signed for gentoo-devs)",
             world.gkeys("update-seed", "-C", "gentoo"), expect=1, prepare=functools.partial(
                 serve_as, server, "seeds/gentoo-devs.seeds", "seeds/gentoo.seeds", (".sig",))),
        Step("list the developer keys", world.gkeys("list-key", "-C", "gentoo-devs")),
        Step("verify a file alice signed", world.gkeys("verify", "-F", str(good), "-C", "gentoo-devs")),
        Step("verify a clearsigned release note", world.gkeys("verify", "-F", str(files / "release-note.txt.asc"),
                                                              "-C", "gentoo")),
        Step("REFUSED: the file was changed after signing", world.gkeys("verify", "-F", str(tampered)), expect=1),
        Step("REFUSED: signed by mallory, whom no seed pins", world.gkeys("verify", "-F", str(forged)), expect=1),
        Step("REFUSED: alice's signature is not good enough when only bob is accepted",
             world.gkeys("verify", "-F", str(good), "-C", "gentoo-devs", "-n", "bob"), expect=1),
    ]


def step_builders() -> list[StepBuilder]:
    """The scenes of the demo, in order: core, then one module per verifier."""
    from gkeys_portage.demo import checks_steps, fetch_steps, media_steps, overlays_steps, tree_steps

    return [core_steps, media_steps.steps, overlays_steps.steps, tree_steps.steps, checks_steps.steps,
            fetch_steps.steps]


def run(args: argparse.Namespace) -> Report:
    """Run the demo; the report summarises which steps behaved as expected."""
    from gkeys_portage.cli.main import main as gkeys_main

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
