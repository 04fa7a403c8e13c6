"""The key management core: config, seeds, keyrings, key sources and signature verification.

This package never imports Portage, so it works on any distribution.
"""
