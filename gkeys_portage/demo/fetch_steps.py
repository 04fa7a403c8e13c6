"""Demo scenes for the fetch wrapper: ``gkeys-fetch`` called the way Portage's FETCH_WRAPPER calls it."""

from __future__ import annotations

import contextlib
import hashlib
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from gkeys_portage.demo.media_steps import STAMP, make_media
from gkeys_portage.demo.scene import DemoWorld, Step
from gkeys_portage.portage.fetch import DOWNLOAD_SUFFIX
from gkeys_portage.portage.fetch import main as fetch_main

#: The "real" download command of the demo (Portage's would be wget).
DOWNLOAD = "import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])"


def _wrapper_argv(world: DemoWorld, url: str, target: Path) -> list[str]:
    """What Portage passes: the wrapper's own words expanded, then the fetch command as ONE word."""
    command = shlex.join([sys.executable, "-c", DOWNLOAD, url, str(target)])
    return ["-c", str(world.config), "--uri", url, "--file", str(target), "--", command]


def _runner(argv: list[str], target: Path) -> Callable[[], int]:
    def run() -> int:
        # The runner does not tell a step whether it prints JSON: stdout is the demo's, so talk on stderr.
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.redirect_stdout(sys.stderr):
            print("   $ gkeys-fetch " + shlex.join(argv[:-1]) + " '<the download command>'")
            return fetch_main(argv)

    return run


def steps(world: DemoWorld) -> list[Step]:
    """A signed stage3 passes, a stage3 changed on the mirror is removed, an ordinary distfile passes."""
    keys, server, work = world.keys, world.server, world.workdir
    source, distdir = work / "fetch-mirror", work / "distfiles"
    good = make_media(keys, source, f"stage3-amd64-desktop-openrc-{STAMP}.tar.xz", hashlib.sha512(b"d").digest() * 8192)
    bad = make_media(keys, source, f"stage3-amd64-musl-{STAMP}.tar.xz", hashlib.sha512(b"m").digest() * 8192)
    bad.data = bad.data[:-6] + b"evil!\n"  # changed on the mirror after releng signed it
    plain_url = server.publish("distfiles/hello-1.0.tar.gz", b"an ordinary distfile\n")
    scenes = [
        ("gkeys-fetch (FETCH_WRAPPER): download a stage3, fetch its signed siblings, verify: kept",
         good.publish(server), good.name + DOWNLOAD_SUFFIX, 0),
        ("REFUSED: gkeys-fetch removes a stage3 changed on the mirror, so Portage tries the next one",
         bad.publish(server), bad.name + DOWNLOAD_SUFFIX, 1),
        ("gkeys-fetch lets an ordinary distfile through untouched (no pattern matches)",
         plain_url, "hello-1.0.tar.gz" + DOWNLOAD_SUFFIX, 0),
    ]
    result = []
    for title, url, name, expect in scenes:
        argv = _wrapper_argv(world, url, distdir / name)
        result.append(Step(title, ["gkeys-fetch", *argv], expect=expect, run=_runner(argv, distdir / name)))
    return result
