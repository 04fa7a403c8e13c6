"""gkeys-portage: pinned OpenPGP keyrings and verifiers for Gentoo's package manager."""

__version__ = "0.1.0"
