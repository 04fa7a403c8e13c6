"""Helpers for the release-media tests: a releng keyring in category gentoo, and the demo's media builders."""

from __future__ import annotations

from pathlib import Path

from gkeys_portage.demo.media_steps import (  # noqa: F401 - re-exported for the tests
    AUTOBUILDS,
    STAGE3,
    STAMP,
    MediaSet,
    digest_block,
    make_media,
    publish_latest,
)


def install_release_key(env: object, nick: str = "releng") -> None:
    """Install a gentoo seed file pinning only ``nick`` and import its key (no network needed).

    (The packaged default gentoo seeds pin the real Gentoo keys; this replaces them for the test.)
    """
    seeds_dir: Path = env.state / "seeds"  # type: ignore[attr-defined]
    seeds_dir.mkdir(parents=True, exist_ok=True)
    (seeds_dir / "gentoo.seeds").write_bytes(env.seed_bytes(nick))  # type: ignore[attr-defined]
    keyfile: Path = env.root / f"{nick}.pub.asc"  # type: ignore[attr-defined]
    keyfile.write_bytes(env.keys.public(nick))  # type: ignore[attr-defined]
    result = env.run("import-key", "-C", "gentoo", "-n", nick, "-F", str(keyfile))  # type: ignore[attr-defined]
    assert result.code == 0, result.text
