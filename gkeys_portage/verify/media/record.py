"""The trust journal's record of an accepted release file (``media-accepted``), written by the caller that
applied the verdict, where the file stays (design.md §11 "After the verdict"): ``verify-media`` (the file in
place), ``fetch-media`` (installed, never the quarantine), ``gkeys-fetch`` (``DISTDIR/FILE``, never the scratch
link).  The verifier decides; it journals neither an acceptance nor a refusal: a refusal (``media-refused``) is
journaled by the same callers, under the live name or the URL the user asked for (:func:`refusal_journaled`),
never the quarantine or the ``.gkeys-fetch-…`` scratch path the verifier read."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from gkeys_portage.core import journal
from gkeys_portage.core.errors import NotVerifiedError
from gkeys_portage.keys.context import Gkeys

#: The hashlib names of the strong digests an entry may record (``audit --recheck`` compares the first found);
#: the verifier computes SHA-256 when no signed list asks for one of them (a lone ``.asc``).
JOURNALED = ("sha512", "sha256", "blake2b")


class Accepted(Protocol):
    """What a :class:`~gkeys_portage.verify.media.verifier.MediaVerification` gives the entry (read only)."""

    @property
    def size(self) -> int: ...
    @property
    def digests(self) -> dict[str, str]: ...
    @property
    def category(self) -> str: ...
    @property
    def signed(self) -> Sequence[Any]: ...  # SignedBy, each with to_json()


def journal_media(ctx: Gkeys, result: Accepted, live: Path) -> None:
    """Journal ``result`` for the file at ``live`` (made absolute): its size and strong digests of exactly what
    was verified, the category, every signed sibling's signer."""
    journal.record(ctx, "media-accepted", {
        "file": str(live.absolute()), "size": result.size, "digests": result.digests, "category": result.category,
        "signatures": [signed.to_json() for signed in result.signed]})


@contextlib.contextmanager
def refusal_journaled(ctx: Gkeys, live: Path | str, category: str, url: str | None = None) -> Iterator[None]:
    """Journal a :class:`NotVerifiedError` raised inside the block as ``media-refused`` for ``live`` (the file
    where it stays, or the URL: what the user asked for, made absolute; never a scratch path) with ``url`` when
    it came from one; the refusal still propagates."""
    try:
        yield
    except NotVerifiedError as exc:
        place = live if isinstance(live, str) and "://" in live else str(Path(live).absolute())
        journal.record(ctx, "media-refused", {"file": place, **({"url": url} if url else {}), "category": category,
                                              "code": exc.reason, "why": exc.message[:400]})
        raise
