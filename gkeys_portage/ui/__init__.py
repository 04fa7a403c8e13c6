"""Presentation shared by both faces (``cli/`` and ``portage/``): `` * `` lines, colour, progress, reports.

Below ``cli/`` and ``portage/``; imports neither."""
