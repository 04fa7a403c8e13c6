"""Helpers for the release-media tests: a releng keyring in category gentoo and signed media sets."""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.demo.world import KeyFactory, LoopbackServer

STAMP = "20260101T170000Z"
STAGE3 = f"stage3-amd64-openrc-{STAMP}.tar.xz"
AUTOBUILDS = "releases/amd64/autobuilds"


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


def digest_block(algorithm: str, data: bytes, name: str) -> str:
    """One ``# ALGO HASH`` block for ``name``."""
    library = {"SHA512": "sha512", "BLAKE2B": "blake2b", "SHA256": "sha256", "MD5": "md5"}[algorithm]
    return f"# {algorithm} HASH\n{hashlib.new(library, data).hexdigest()}  {name}\n"


@dataclass
class MediaSet:
    """A release file and the siblings written beside it."""

    folder: Path
    name: str
    data: bytes
    files: dict[str, bytes] = field(default_factory=dict)  # suffix -> bytes

    @property
    def path(self) -> Path:
        """The release file."""
        return self.folder / self.name

    def write(self) -> MediaSet:
        """Write the file and its siblings to ``folder``."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path.write_bytes(self.data)
        for suffix, content in self.files.items():
            (self.folder / (self.name + suffix)).write_bytes(content)
        return self

    def publish(self, server: LoopbackServer, directory: str = f"{AUTOBUILDS}/{STAMP}") -> str:
        """Serve the file and siblings under ``directory``; return the file's URL."""
        for suffix, content in self.files.items():
            server.publish(f"{directory}/{self.name}{suffix}", content)
        return server.publish(f"{directory}/{self.name}", self.data)


def make_media(keys: KeyFactory, folder: Path, name: str = STAGE3, data: bytes | None = None, *,
               signer: str = "releng", siblings: tuple[str, ...] = (".asc", ".DIGESTS", ".sha256", ".CONTENTS.gz"),
               digests_text: str | None = None) -> MediaSet:
    """A signed media set: ``.asc`` (detached), ``.DIGESTS`` (clearsigned SHA512 + BLAKE2B for the file
    and its CONTENTS.gz), ``.sha256`` (clearsigned), ``.CONTENTS.gz``; only the ``siblings`` asked for."""
    folder.mkdir(parents=True, exist_ok=True)
    data = data if data is not None else hashlib.sha512(name.encode()).digest() * 4096  # 256 KiB
    contents = gzip.compress(b"drwxr-xr-x root/root 0 2026-01-01 ./\n", mtime=0)
    media = MediaSet(folder, name, data)
    text = digests_text if digests_text is not None else (
        digest_block("BLAKE2B", data, name) + digest_block("SHA512", data, name)
        + digest_block("BLAKE2B", contents, name + ".CONTENTS.gz")
        + digest_block("SHA512", contents, name + ".CONTENTS.gz"))
    produced = {
        ".asc": lambda: keys.sign_bytes(signer, data, folder),
        ".DIGESTS": lambda: keys.sign_bytes(signer, text.encode(), folder, clearsign=True),
        ".sha256": lambda: keys.sign_bytes(signer, digest_block("SHA256", data, name).encode(), folder,
                                           clearsign=True),
        ".CONTENTS.gz": lambda: contents,
    }
    for suffix in siblings:
        media.files[suffix] = produced[suffix]()
    return media.write()


def latest_text(*lines: str) -> str:
    """The text of a latest-*.txt file."""
    return "# Latest as of Thu, 01 Jan 2026 17:40:02 +0000\n# ts=1767289202\n" + "".join(f"{ln}\n" for ln in lines)


def publish_latest(keys: KeyFactory, server: LoopbackServer, work: Path, flavour: str, *lines: str,
                   signer: str = "releng") -> None:
    """Serve a clearsigned ``latest-<flavour>.txt`` in the mirror layout."""
    signed = keys.sign_bytes(signer, latest_text(*lines).encode(), work, clearsign=True)
    server.publish(f"{AUTOBUILDS}/latest-{flavour}.txt", signed)
