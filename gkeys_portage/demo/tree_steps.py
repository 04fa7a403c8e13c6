"""Demo scenes for tree commits: ``verify-tree`` and ``emerge --sync`` with ``sync-type = gkeys``.

An upstream repository of commits signed by alice and bob (pinned by the ``gentoo-devs`` seeds the
core scenes installed) is served over git's dumb HTTP protocol on 127.0.0.1.  A real ``emerge --sync``
in a temporary PORTAGE_CONFIGROOT clones it through the gkeys sync module; then mallory (whom no seed
pins) slips a commit in below a good top commit by alice, and the next sync is refused with the tree
left at the verified revision.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from gkeys_portage.demo.scene import DemoWorld, Step
from gkeys_portage.demo.tree_repo import PortageSandbox, RepoBuilder, serve_repo, sync_module_missing
from gkeys_portage.verify.git.objects import GitRepo

SHOWN = (" * ", ">>> ", "!!! gkeys", "=== ", "Action: ")


def _show(text: str) -> None:
    """emerge's lines about the sync (not its complaints about the empty demo configuration)."""
    for line in text.splitlines():
        if line.startswith(SHOWN):
            sys.stdout.write(f"   | {line}\n")
    sys.stdout.flush()


def _sync_step(sandbox: PortageSandbox, location_head: Callable[[], str | None], *,
               must_stay: Callable[[], str | None] | None = None) -> Callable[[], int]:
    """A step body: run emerge --sync; when ``must_stay`` is given, a failed sync must leave that revision."""

    def run() -> int:
        before = must_stay() if must_stay else None
        result = sandbox.sync("demo-tree")
        _show(result.stdout)
        if must_stay is not None and location_head() != before:
            sys.stdout.write("   | the work tree MOVED despite the failure\n")
            return 99
        return 0 if result.returncode == 0 else 1

    return run


def steps(world: DemoWorld) -> list[Step]:
    """Verify a signed repository, sync it with emerge, then refuse a bad commit below a good top."""
    work = world.workdir / "tree"
    upstream = RepoBuilder(work / "upstream", world.keys, name="demo-tree")
    upstream.commit("alice", message="add dev-demo/hello")
    upstream.commit("bob", message="dev-demo/hello: bump")
    upstream.commit("alice", message="profiles: update")
    url = serve_repo(world.server, upstream.path, "demo-tree.git")

    def inject() -> None:
        upstream.commit("mallory", message="dev-demo/hello: innocent-looking change")
        upstream.commit("alice", message="metadata: regenerate")
        serve_repo(world.server, upstream.path, "demo-tree.git")

    result = [
        Step("verify-tree: every commit of the upstream repository is signed by a pinned developer",
             world.gkeys("verify-tree", str(upstream.path), "--policy", "all", "--no-record")),
    ]
    missing = sync_module_missing()
    if missing:
        return [*result, Step(f"emerge --sync scenes skipped: {missing}", [], run=lambda: 0),
                Step("REFUSED: mallory's commit below alice's good top commit",
                     world.gkeys("verify-tree", str(upstream.path), "--policy", "all", "--no-record"),
                     prepare=inject, expect=1)]

    sandbox = PortageSandbox(work / "portage", world.config)
    location = sandbox.add_repo("demo-tree", url, "gkeys", sync_gkeys_policy="all")

    def location_head() -> str | None:
        return GitRepo(location).resolve("HEAD") if (location / ".git").exists() else None

    return [
        *result,
        Step(f"emerge --sync (sync-type = gkeys) from {url}: cloned aside, verified, then moved into place",
             [], run=_sync_step(sandbox, location_head)),
        Step("REFUSED: mallory slipped a commit in below alice's good top commit; emerge --sync fails, the tree "
             "stays", [], prepare=inject,
             run=_sync_step(sandbox, location_head, must_stay=location_head), expect=1),
        Step("verify-tree names the bad commit, its author and the first good ancestor",
             world.gkeys("verify-tree", str(upstream.path), "--policy", "all", "--no-record"), expect=1),
    ]
