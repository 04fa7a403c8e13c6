#!/usr/bin/env python3
"""What ``verify-tree`` holds per commit for a whole history, built as its code builds it, without a repository.

``GitRepo.rev_list`` captures ``git rev-list``'s whole output, decodes and splits it into one list of
hashes; ``TreeVerifier.verify`` keeps every commit's parent list for ``first_good_ancestor``.  This builds
the same three objects for ``N`` synthetic commits (one parent each, fresh strings as ``parse_commit``
makes) and prints the peak RSS of the interpreter: the part of a run's memory that grows with history.

Usage: python3 bench/tree_memory.py [N ...]    (default: 20000 1000000; each N in its own process)
"""

from __future__ import annotations

import hashlib
import resource
import subprocess
import sys


def measure(count: int) -> str:
    """Build the structures for ``count`` commits; one line with the peak RSS after each step."""
    start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = b"".join(hashlib.sha1(i.to_bytes(4, "big")).hexdigest().encode() + b"\n" for i in range(count))
    hashes = out.decode("ascii").split()  # GitRepo.rev_list: captured bytes, decoded str, list: all alive
    listed = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    del out
    parents: dict[str, list[str]] = {}
    for index, name in enumerate(hashes):  # TreeVerifier.verify: parents[commit.hash] = commit.parents
        parents[name] = [hashes[index + 1][:20] + hashes[index + 1][20:]] if index + 1 < count else []
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return (f"{count} commits: interpreter {start / 1024:.0f} MiB; after rev_list {listed / 1024:.0f} MiB; "
            f"with the parents map {peak / 1024:.0f} MiB peak (+{(peak - start) / 1024:.0f} MiB, "
            f"{(peak - start) * 1024 / count:.0f} bytes a commit)")


def main() -> int:
    if len(sys.argv) == 2:
        print(measure(int(sys.argv[1])))
        return 0
    for count in sys.argv[1:] or ["20000", "1000000"]:
        subprocess.run([sys.executable, __file__, count], check=True)  # a fresh peak for each
    return 0


if __name__ == "__main__":
    sys.exit(main())
