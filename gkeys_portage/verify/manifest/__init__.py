"""Signed GLEP 74 Manifest trees (rsync repositories) and webrsync snapshots, verified with gemato."""
