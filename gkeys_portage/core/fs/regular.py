"""Open a file named by a path for reading, refusing anything but a regular file and never waiting on it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gkeys_portage.core.errors import BadInputError


def open_regular(path: Path) -> int:
    """Open ``path`` for reading and return its descriptor (blocking reads, closed on exec).

    The open never waits (``O_NONBLOCK``, ``O_NOCTTY``) and anything but a regular file is refused: a FIFO or a
    device put at the name after it was looked at would make the open, or every read, wait for ever.  Raises
    :class:`BadInputError` with one line naming ``path``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError as exc:
        raise BadInputError(f"{path}: no such file") from exc
    except OSError as exc:
        raise BadInputError(f"cannot read {path}: {exc.strerror}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadInputError(f"{path}: not a regular file (a pipe or a device cannot be verified: name the file itself)")
    os.set_blocking(fd, True)
    return fd
