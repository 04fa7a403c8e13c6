"""Packaging for gkeys-portage.

Besides the ``gkeys_portage`` package this installs a tiny leaf package into
Portage's sync-module directory (``portage/sync/modules/gkeys``), the way
layman shipped ``laymansync``.  Only the leaf is shipped: Portage's own
``portage/__init__.py`` and ``portage/sync/__init__.py`` are never touched.

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
    packages=find_packages(include=["gkeys_portage", "gkeys_portage.*"])
    + ["portage.sync.modules.gkeys"],
    package_dir={"portage.sync.modules.gkeys": "portage-sync-module/gkeys"},
    package_data={"gkeys_portage": ["data/*"]},
    data_files=installfiles.data_files("share"),
)
