"""The demo's world and its steps: keys, a loopback server and a config, and one command per step."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.core.types import Category, Nick
from gkeys_portage.demo.world import KeyFactory, LoopbackServer
from gkeys_portage.keys.seedbinding import category_notation
from gkeys_portage.keys.seeds import Seed, dump_seeds


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
