"""Demo scenes for release media: a stage3 and an ISO on a mirror layout on 127.0.0.1.

The mirror (``releases/amd64/autobuilds/…``) is signed by the demo's releng key (category
``gentoo``, installed by the core scenes): clearsigned ``latest-*.txt``, ``.asc``, ``.DIGESTS``,
``.sha256`` and ``.CONTENTS.gz`` for the stage3; ``.asc`` and the older clearsigned
``.DIGESTS.asc`` for the ISO.  A systemd stage3 changed on the mirror after signing and a latest
file that points outside the mirror are refused.

The builders (:func:`make_media`, :func:`publish_latest`) are shared with the tests.
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.demo.scene import DemoWorld, Step
from gkeys_portage.demo.world import KeyFactory, LoopbackServer

STAMP = "20260101T170000Z"
AUTOBUILDS = "releases/amd64/autobuilds"
STAGE3 = f"stage3-amd64-openrc-{STAMP}.tar.xz"
ISO = f"install-amd64-minimal-{STAMP}.iso"
DEFAULT_SIBLINGS = (".asc", ".DIGESTS", ".sha256", ".CONTENTS.gz")


def digest_block(algorithm: str, data: bytes, name: str) -> str:
    """One ``# ALGO HASH`` block listing ``name``."""
    library = {"SHA512": "sha512", "BLAKE2B": "blake2b", "SHA256": "sha256", "MD5": "md5"}[algorithm]
    return f"# {algorithm} HASH\n{hashlib.new(library, data).hexdigest()}  {name}\n"


@dataclass
class MediaSet:
    """A release file and the siblings written beside it."""

    folder: Path
    name: str
    data: bytes
    files: dict[str, bytes] = field(default_factory=dict)  # suffix -> content

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
        """Serve the file and its siblings under ``directory``; return the file's URL."""
        for suffix, content in self.files.items():
            server.publish(f"{directory}/{self.name}{suffix}", content)
        return server.publish(f"{directory}/{self.name}", self.data)


def make_media(keys: KeyFactory, folder: Path, name: str = STAGE3, data: bytes | None = None, *,
               signer: str = "releng", siblings: tuple[str, ...] = DEFAULT_SIBLINGS,
               digests_text: str | None = None) -> MediaSet:
    """A signed media set with the ``siblings`` asked for: ``.asc`` (detached), ``.DIGESTS`` (clearsigned
    BLAKE2B + SHA512 of the file and its CONTENTS.gz, or ``digests_text``), ``.sha256`` (clearsigned),
    ``.CONTENTS.gz``."""
    folder.mkdir(parents=True, exist_ok=True)
    data = data if data is not None else hashlib.sha512(name.encode()).digest() * 4096  # 256 KiB
    contents = gzip.compress(b"drwxr-xr-x root/root 0 2026-01-01 ./\n", mtime=0)
    text = digests_text if digests_text is not None else "".join(
        digest_block(algorithm, content, filename)
        for content, filename in ((data, name), (contents, name + ".CONTENTS.gz"))
        for algorithm in ("BLAKE2B", "SHA512"))
    produce = {
        ".asc": lambda: keys.sign_bytes(signer, data, folder),
        ".DIGESTS": lambda: keys.sign_bytes(signer, text.encode(), folder, clearsign=True),
        ".DIGESTS.asc": lambda: keys.sign_bytes(signer, text.encode(), folder, clearsign=True),
        ".sha256": lambda: keys.sign_bytes(signer, digest_block("SHA256", data, name).encode(), folder,
                                           clearsign=True),
        ".CONTENTS.gz": lambda: contents,
    }
    media = MediaSet(folder, name, data, {suffix: produce[suffix]() for suffix in siblings})
    return media.write()


def latest_text(*lines: str, ts: int = 1767289202) -> str:
    """The text of a ``latest-*.txt`` file with the given entry lines."""
    return f"# Latest as of Thu, 01 Jan 2026 17:40:02 +0000\n# ts={ts}\n" + "".join(f"{ln}\n" for ln in lines)


def publish_latest(keys: KeyFactory, server: LoopbackServer, work: Path, flavour: str, *lines: str,
                   signer: str = "releng", ts: int = 1767289202) -> None:
    """Serve a clearsigned ``latest-<flavour>.txt`` (with ``# ts=``) in the mirror layout."""
    signed = keys.sign_bytes(signer, latest_text(*lines, ts=ts).encode(), work, clearsign=True)
    server.publish(f"{AUTOBUILDS}/latest-{flavour}.txt", signed)


def steps(world: DemoWorld) -> list[Step]:
    """Fetch and verify a stage3 and an ISO; refuse a tampered stage3 and a latest file leaving the mirror."""
    keys, server, work = world.keys, world.server, world.workdir
    source = work / "media-mirror"
    stage3 = make_media(keys, source, STAGE3, hashlib.sha512(b"stage3").digest() * 32768)  # 2 MiB
    stage3.publish(server)
    publish_latest(keys, server, work, "stage3-amd64-openrc", f"{STAMP}/{STAGE3} {len(stage3.data)}")
    iso = make_media(keys, source, ISO, hashlib.sha512(b"iso").digest() * 16384, siblings=(".asc", ".DIGESTS.asc"))
    iso_url = iso.publish(server)

    systemd_name = f"stage3-amd64-systemd-{STAMP}.tar.xz"
    systemd = make_media(keys, source, systemd_name)
    systemd.data = systemd.data[:-6] + b"evil!\n"  # changed on the mirror after releng signed it
    systemd.publish(server)
    publish_latest(keys, server, work, "stage3-amd64-systemd", f"{STAMP}/{systemd_name} {len(systemd.data)}")
    publish_latest(keys, server, work, "stage3-amd64-hardened", "../../../../elsewhere/stage3.tar.xz 1000")

    downloads = work / "media-downloads"
    return [
        Step("fetch the newest stage3: verify the signed latest file, download, verify every sibling, install",
             world.gkeys("fetch-media", "--latest", "stage3-amd64-openrc", "--mirror", server.url,
                         "-d", str(downloads))),
        Step("verify the downloaded stage3 again, offline (the handbook's four commands in one)",
             world.gkeys("verify-media", str(downloads / STAGE3))),
        Step("verify an ISO straight from the mirror (detached .asc and the older clearsigned .DIGESTS.asc)",
             world.gkeys("verify-media", iso_url, "-n", "releng")),
        Step("REFUSED: the systemd stage3 was changed on the mirror after signing (kept in quarantine only)",
             world.gkeys("fetch-media", "--latest", "stage3-amd64-systemd", "--mirror", server.url,
                         "-d", str(downloads)), expect=1),
        Step("REFUSED: a signed latest file that points outside the mirror",
             world.gkeys("fetch-media", "--latest", "stage3-amd64-hardened", "--mirror", server.url,
                         "-d", str(downloads)), expect=2),
    ]
