"""Authorization windows: when a pinned key was authorized to sign (issue 41 items 3 and 4; design.md §11).

In core (what every floor uses): the seeds (keys/), the verdict (openpgp/) and the tree verifier (verify/) share it.

A seed derived from an authority (GLEP 79: ``keys/authority.py``) authorizes a key only for signatures made
while an authority certification of its user id was valid: from the certification until it was revoked (a
retirement) or expired.  A hand-pinned seed carries no window and is authorized whenever its key is valid
(a seed removed is a key no longer trusted), unless the seed itself names one.

This module knows nothing of seeds: a :class:`Window` travels on the :class:`~gkeys_portage.openpgp.verdict.Pin`
that :func:`~gkeys_portage.openpgp.verdict.decide` judges, and is judged here:

* a signature dated outside every window of its pin is refused (``signer-retired`` after a closed window,
  ``signer-not-authorized`` before the first one);
* a signature dated inside a window that has since *closed* carries a date its signer chose: whoever holds
  a retired key can still write any date.  :meth:`Window.closed_at` names the moment after which nothing the key
  signs is trusted by its own date; the caller then needs evidence the signed object existed before it
  (:mod:`gkeys_portage.verify.git.tree`: the record, or a later commit by a key authorized then), and a caller
  without such evidence refuses it (:attr:`~gkeys_portage.openpgp.verdict.VerifyPolicy.dated_by_evidence`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from gkeys_portage.core.errors import OutsideWindowError, SignerRetiredError


def stamp(epoch: float) -> str:
    """``2024-05-01 12:00:00 UTC``."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def day(epoch: float) -> str:
    """``2024-05-01``."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d")


@dataclass(frozen=True)
class Window:
    """A span of time in which a key is authorized to sign: ``start`` (None: always before) up to ``end``
    (exclusive; None: still open), vouched for by ``certifier`` (``category/nick``), closed because
    ``closed`` (``certification revoked``, ``certification expired``, or a seed's own words)."""

    start: int | None = None
    end: int | None = None
    certifier: str = ""
    closed: str = ""

    def holds(self, when: float) -> bool:
        """True if ``when`` lies inside the window."""
        return (self.start is None or when >= self.start) and (self.end is None or when < self.end)

    def closed_at(self, now: float) -> int | None:
        """When the window closed, if it has by ``now`` (None: still open)."""
        return self.end if self.end is not None and self.end <= now else None

    def describe(self) -> str:
        """``2023-01-01 to 2024-05-01 (certification revoked), by gentoo-auth/l2-developers``."""
        start = day(self.start) if self.start is not None else "the beginning"
        end = f"{day(self.end)} ({self.closed or 'closed'})" if self.end is not None else "now (open)"
        return f"{start} to {end}" + (f", by {self.certifier}" if self.certifier else "")


def window_at(windows: Sequence[Window], when: float) -> Window | None:
    """The window holding ``when`` (None if none does; an empty sequence holds every time)."""
    if not windows:
        return Window()
    return next((w for w in windows if w.holds(when)), None)


def _closing(window: Window, default: str) -> str:
    """How ``window`` closed, for a refusal: the reason and the certifier that closed it."""
    by = f" by {window.certifier}" if window.certifier else ""
    return f"{window.closed or default}{by}"


def outside(windows: Sequence[Window], when: float, who: str) -> OutsideWindowError:
    """The refusal of a signature by ``who`` dated ``when``, outside every window."""
    before = [w for w in windows if w.end is not None and w.end <= when]
    if before:
        last = max(before, key=lambda w: w.end or 0)
        assert last.end is not None
        return SignerRetiredError(
            f"signature by {who} is dated {stamp(when)}, after the key was retired on {day(last.end)} "
            f"({_closing(last, 'its authorization closed')}); its commits and files from before stay good, "
            "this one is not authorized (only the authority can certify the key again: gkeys update-seed)")
    first = min((w for w in windows if w.start is not None), key=lambda w: w.start or 0, default=None)
    since = f" (authorized from {day(first.start)})" if first is not None and first.start is not None else ""
    return OutsideWindowError(f"signature by {who} is dated {stamp(when)}, before the key was authorized to "
                              f"sign{since}")


def unproven(window: Window, when: float, who: str, *, category: str = "") -> SignerRetiredError:
    """The refusal of a signature dated ``when`` inside ``window``, closed since, with no evidence it was made
    before: its date is the signer's word, and whoever holds a retired key can write any date.  With
    ``category`` (outside a tree, where no later commit can be evidence) it names the way on."""
    assert window.end is not None
    way = (f"; ask for a signature by a key authorized now, or, if the authority has certified this key again, "
           f"take that in: gkeys update-seed -C {category}") if category else ""
    return SignerRetiredError(
        f"signature by {who} is dated {stamp(when)}, inside its authorization that closed on {day(window.end)} "
        f"({_closing(window, 'closed')}), and nothing shows it was made before then: the date is the "
        f"signer's word (a backdated signature by a retired key?){way}",
        next_step=f"gkeys update-seed -C {category}" if category else "")
