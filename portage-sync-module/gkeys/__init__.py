"""Portage sync module ``sync-type = gkeys`` (installed as ``portage/sync/modules/gkeys``).

A thin shim, the way layman shipped ``laymansync``: the implementation lives in
:mod:`gkeys_portage.portage.sync_module`.  If gkeys-portage cannot be imported, the module
still loads (so ``emerge`` keeps working) but offers no sync type, and repositories that
ask for ``sync-type = gkeys`` fail to sync instead of syncing unverified.
"""

try:
    from gkeys_portage.portage.sync_module import module_spec
except ImportError as _exc:  # never break emerge itself; fail closed for gkeys repos only
    module_spec = {
        "name": "gkeys",
        "description": f"gkeys sync module unavailable: {_exc}",
        "provides": {},
    }
