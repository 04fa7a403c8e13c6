"""Command line: argument parsing and presentation only (no logic)."""
