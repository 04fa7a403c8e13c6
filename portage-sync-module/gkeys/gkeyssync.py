"""The class Portage loads for ``sync-type = gkeys`` (``sourcefile`` of the module spec)."""

from gkeys_portage.portage.sync_module import GkeysSync

__all__ = ["GkeysSync"]
