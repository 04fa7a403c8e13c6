"""Verifiers, one module per artifact kind (release media, overlay list, tree commits)."""
