"""GnuPG bound to one home: every job the package asks of gpg, each from its own module.

* :mod:`~gkeys_portage.openpgp.process` runs gpg (the one door: explicit home, environment, options, timeouts,
  bounded output),
* :mod:`~gkeys_portage.openpgp.keyio` lists, imports and exports keys,
* :mod:`~gkeys_portage.openpgp.signatures` verifies one signature and signs,
* :mod:`~gkeys_portage.openpgp.multifile` verifies many detached signatures in few gpg processes,
* :mod:`~gkeys_portage.openpgp.keyedit` generates and changes keys.

Nothing else in the package knows gpg's arguments.
"""

from __future__ import annotations

from gkeys_portage.openpgp.keyedit import KeyEditing
from gkeys_portage.openpgp.keyio import KeyIO
from gkeys_portage.openpgp.multifile import BatchVerify
from gkeys_portage.openpgp.signatures import Signatures


class GnuPG(KeyIO, Signatures, BatchVerify, KeyEditing):
    """GnuPG bound to one home directory.

    ``faked_time`` evaluates everything as of that moment; ``timeout`` bounds every call; ``read_only``
    homes are never written by this object (no lock files).
    """
