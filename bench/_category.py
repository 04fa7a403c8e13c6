"""A gentoo-devs category of ``count`` fresh developer keys, pinned and installed: the setting of the
bundle and checks benchmarks (imported by them; not a benchmark itself)."""

from __future__ import annotations

from pathlib import Path

from gkeys_portage.core.state import Layout
from gkeys_portage.core.types import Category, Nick
from gkeys_portage.demo.world import DemoKey, KeyFactory
from gkeys_portage.keys.keyring import Keyring
from gkeys_portage.keys.seeds import Seed, SeedStore


def developer_category(work: Path, count: int, *, pin_subkeys: bool = False) -> tuple[Layout, list[DemoKey], Path]:
    """Generate ``count`` ed25519 keys under ``work``, pin them in gentoo-devs (their signing subkeys too if
    ``pin_subkeys``) and install them; return the layout, the keys and a config file naming the layout."""
    factory = KeyFactory(work / "secret")
    nicks = [Nick(f"dev{i:03d}") for i in range(count)]
    keys = [factory.create(nick) for nick in nicks]
    exported = factory.gpg.export_keys([k.fingerprint for k in keys])
    factory.close()
    layout = Layout(work / "state").ensure()
    SeedStore(layout).save(Category("gentoo-devs"), {
        nick: Seed(nick, key.name, nick, [key.fingerprint],
                   [key.fingerprint, key.signing_subkey] if pin_subkeys else [key.fingerprint], [key.uid])
        for nick, key in zip(nicks, keys, strict=True)})
    with Keyring(layout, Category("gentoo-devs")).update() as staging:
        staging.import_keys(exported)
    config = work / "gkeys.conf"
    config.write_text(f"[base]\ngkeysdir = {layout.root}\n")
    return layout, keys, config
