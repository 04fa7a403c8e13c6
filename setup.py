"""Packaging for gkeys-portage.

Besides the ``gkeys_portage`` package this installs a tiny leaf package into
Portage's sync-module directory (``portage/sync/modules/gkeys``), the way
layman shipped ``laymansync``.  Only the leaf is shipped: Portage's own
``portage/__init__.py`` and ``portage/sync/__init__.py`` are never touched.
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["gkeys_portage", "gkeys_portage.*"])
    + ["portage.sync.modules.gkeys"],
    package_dir={"portage.sync.modules.gkeys": "portage-sync-module/gkeys"},
    package_data={"gkeys_portage": ["data/*"]},
)
