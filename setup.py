"""Packaging for gkeys-portage.

This installs the ``gkeys_portage`` package only.  The Portage sync module, a tiny leaf package in Portage's
sync-module directory (``portage/sync/modules/gkeys``, the way layman shipped ``laymansync``), is a
distribution of its own, ``portage-sync-module/`` (it depends on Portage): installed without Portage, this
one leaves nothing named ``portage`` behind.  ``pip install ".[portage]" ./portage-sync-module`` installs both;
the Gentoo ebuild puts the leaf into Portage's own directory.

The files outside the package (hooks, eclass, bashrc snippet, sample config, man pages, bash
completion) are listed once, in ``gkeys_portage/installfiles.py``; it is loaded by path so that a
build needs none of the package's dependencies.
"""

import importlib.util
import sys
from pathlib import Path

from setuptools import find_packages, setup

_spec = importlib.util.spec_from_file_location(
    "_gkeys_installfiles", Path(__file__).resolve().parent / "gkeys_portage" / "installfiles.py")
assert _spec is not None and _spec.loader is not None
installfiles = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = installfiles  # dataclasses look their module up there
_spec.loader.exec_module(installfiles)

setup(
    packages=find_packages(include=["gkeys_portage", "gkeys_portage.*"]),
    package_data={"gkeys_portage": ["data/*"]},
    data_files=installfiles.data_files("share"),
)
