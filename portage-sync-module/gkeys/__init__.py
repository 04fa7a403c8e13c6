"""Placeholder: the gkeys sync module for Portage is filled in by the tree-commits issue."""
