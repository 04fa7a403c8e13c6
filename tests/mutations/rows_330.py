"""Mutations of SECURITY.md rows 330-399 (see table.py for what a mutation is)."""

from __future__ import annotations

from table import Mutation

MUTATIONS: tuple[Mutation, ...] = (
)

#: Rows 330-399 with no mutation yet, and why.
UNMUTATED: dict[int, str] = {
    **{row: "not yet: issue 47 (rows added by issues 41-46)" for row in (
        330, 331, 332, 333, 334, 335, 336, 337, 340, 341, 342, 350, 351, 352, 353, 354, 355, 356, 357, 358, 371, 373, 380)},
}
