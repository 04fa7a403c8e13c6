"""The commits of a range as ``git rev-list`` lists them, kept in a file instead of in memory.

A whole-history ``verify-tree --policy all`` over Gentoo's repository names about a million commits; a
Python list of their hashes alone takes ~90 MiB (a 40-character ``str`` is 89 bytes), so the hashes stay
in an unnamed temporary file that git writes and the verifier reads in rounds.  Every line is a hash of
the same length plus a newline, so the count is the file's size over the line width: nothing is walked
twice, and a length that does not divide is refused (git wrote something else).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO

from gkeys_portage.core.errors import BadInputError
from gkeys_portage.verify.git.objects import GitRepo


class Revisions:
    """Commits reachable from ``tip`` and not from ``exclude``, children before parents (``--topo-order``),
    or ``only_tip``: the tip alone, listed without git (a topological order walks the whole history first,
    even for one commit).  ``len()`` is their number; iterating reads them from the file."""

    def __init__(self, repo: GitRepo, tip: str, exclude: Iterable[str] = (), *, only_tip: bool = False) -> None:
        self.repo = repo
        self.tip = tip
        self.exclude = tuple(exclude)
        self.only_tip = only_tip
        if only_tip:
            self._file: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
            self._file.write(tip.encode("ascii") + b"\n")
            self._file.flush()
        else:
            self._file = self.listing()
        width = len(tip) + 1
        size = os.fstat(self._file.fileno()).st_size
        if size % width:
            self._file.close()
            raise BadInputError(f"{repo.path}: git rev-list printed {size} bytes, not whole {width - 1}-digit hashes")
        self._count = size // width

    def arguments(self, *options: str) -> list[str]:
        """The ``git rev-list`` arguments of this range, with extra ``options`` (``--reverse``, ``--parents``)."""
        limit = ["--max-count", "1"] if self.only_tip else []
        return ["rev-list", "--topo-order", *options, *limit, self.tip, *[f"^{e}" for e in self.exclude], "--"]

    def listing(self, *options: str) -> IO[bytes]:
        """``git rev-list`` of this range with ``options``, written to an unnamed temporary file (read from its
        start); raises :class:`BadInputError` if git fails."""
        out = tempfile.TemporaryFile()  # noqa: SIM115 - kept open for the readers, closed by them
        try:
            self.repo.run(*self.arguments(*options), stdout=out)
        except BaseException:
            out.close()
            raise
        out.seek(0)
        return out

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        self._file.seek(0)
        for line in self._file:
            yield line[:-1].decode("ascii")

    def close(self) -> None:
        """Remove the temporary file (also done when the object is collected)."""
        self._file.close()

    def __enter__(self) -> Revisions:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
