"""The top Manifest gemato reads is the text both OpenPGP implementations checked (issue 34, case 1).

GnuPG 2.2 (the default ``gpg`` here) hashes only the first 19,998 bytes of a cleartext line (T6272).  A mirror
pads a line of the genuinely signed top Manifest past that limit and appends a second checksum pair for a
tampered file of the same size: GnuPG says good signature, gemato reads the whole line and keeps the last
checksum.  A real ``rsync --daemon`` serves the tree; ``sync_rsync`` (``sync-type = gkeys``) must refuse it and
leave the live tree as it was.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rsync_helpers import CATEGORY, RsyncDaemon, make_tree, pin_repository_keys

from gkeys_portage.core.config import load_config
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.portage.rsyncsync import RsyncRequest, sync_rsync

pytestmark = pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v rsync"], capture_output=True).returncode,
                                reason="rsync is not installed")

SKELETON = "EAPI=8\n# skeleton\n"
TAMPERED = "EAPI=8\n# pwned!!!\n"  # the same size: the signed size still fits


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[RsyncDaemon]:
    served = RsyncDaemon(tmp_path / "rsyncd")
    yield served
    served.close()


def _pad_and_append(tree: Path, name: str, content: str) -> None:
    """Pad the top Manifest's line for ``name`` past 19,998 bytes, append checksums of ``content``, write it."""
    data = content.encode()
    top = tree / "Manifest"
    lines = top.read_bytes().split(b"\n")
    (index,) = [i for i, line in enumerate(lines) if line.startswith(b"DATA " + name.encode() + b" ")]
    forged = b" BLAKE2B " + hashlib.blake2b(data).hexdigest().encode() + b" SHA512 " + \
        hashlib.sha512(data).hexdigest().encode()
    lines[index] += b" " * (20_000 - len(lines[index])) + forged
    top.write_bytes(b"\n".join(lines))
    (tree / name).write_bytes(data)


def test_a_manifest_line_padded_past_what_gnupg_hashes_is_refused_before_gemato_reads_it(
        env: Any, daemon: RsyncDaemon, tmp_path: Path) -> None:
    pinned = pin_repository_keys(env)
    tree = make_tree(tmp_path / "mirror", pinned.keys, "infra", files={"skel.ebuild": SKELETON})
    _pad_and_append(tree, "skel.ebuild", TAMPERED)
    gpg = subprocess.run(["gpg", "--homedir", str(pinned.keys.home), "--status-fd", "1", "--verify",
                          str(tree / "Manifest")], capture_output=True, text=True, check=False)
    if "[GNUPG:] GOODSIG" not in gpg.stdout:
        pytest.skip("this gpg hashes long cleartext lines whole (the attack needs GnuPG 2.2)")
    daemon.serve(tree)
    location = tmp_path / "repos" / "gentoo"
    lines: list[str] = []
    outcome = sync_rsync(Gkeys(load_config(pinned.config)),
                         RsyncRequest(location=location, uri=daemon.url, category=CATEGORY, quiet=True),
                         lambda level, text: lines.append(f"{level}: {text}"))
    assert not outcome.ok, lines
    assert "19998" in outcome.reason.replace(",", "") and "GnuPG 2.2" in outcome.reason, outcome.reason
    assert not (location / "skel.ebuild").exists() or (location / "skel.ebuild").read_text() != TAMPERED
    assert not os.path.exists(location / "Manifest")
