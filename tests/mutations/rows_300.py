"""Mutations of SECURITY.md rows 300-329 (see table.py for what a mutation is)."""

from __future__ import annotations

from table import Mutation

MUTATIONS: tuple[Mutation, ...] = (
)

#: Rows 300-329 with no mutation yet, and why.
UNMUTATED: dict[int, str] = {
    **{row: "not yet: issue 47 (rows added by issues 41-46)" for row in (
        300, 301, 302, 303, 304, 305, 306, 307, 310, 311, 312, 313, 314, 315, 320, 321, 322, 323, 324, 325)},
}
