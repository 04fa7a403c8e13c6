"""gemato's GnuPG homes: marked as gkeys' while a verification runs, removed once that run is gone.

gemato verifies in a temporary GnuPG home (``$TMPDIR/gemato.XXXXXXXX``) whose ``gpg --import`` starts a
``gpg-agent``; closing the environment kills the agent and removes the home.  A sync killed by SIGKILL (or the
OOM killer) closes nothing: the home and its agent would stay until the next reboot, one more after every such
kill.  So each home gkeys opens gets an owner file naming the process (pid and start time, so a reused pid does
not count), and every verification first removes the homes whose owner is gone.  Removing the home is enough to
end its agent: gpg-agent watches its home directory and exits when it disappears.  Homes without gkeys' owner
file (Portage's own rsync module and emerge-webrsync run gemato too) are never touched.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from gkeys_portage.core.scratch import remove_stale_dirs

OWNER_FILE = "gkeys-owner"
PREFIX = "gemato."


def _started(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (``/proc/PID/stat`` field 22), or None
    when there is no such process."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()  # after the command name, which may hold spaces and ')'
    return fields[19].decode("ascii", "replace") if len(fields) > 19 else None


def claim(home: str) -> None:
    """Mark gemato's ``home`` as this process's: removed by :func:`remove_stale` once this process is gone."""
    fd = os.open(os.path.join(home, OWNER_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as owner:
        owner.write(f"{os.getpid()} {_started(os.getpid()) or '-'}\n")


def _owner_gone(home: Path) -> bool:
    """True when ``home`` carries gkeys' owner file and the process it names is gone (or is another one now)."""
    try:
        words = (home / OWNER_FILE).read_text(encoding="ascii").split()
    except (OSError, UnicodeDecodeError):
        return False  # not gkeys' home, or not readable: left alone
    if len(words) != 2 or not words[0].isascii() or not words[0].isdigit():
        return False
    pid = int(words[0])
    started = _started(pid)
    if started is None:
        return True
    return words[1] != "-" and started != words[1]


def remove_stale(parent: str | None = None) -> int:
    """Remove the gemato homes under ``parent`` (default: where gemato makes them, ``tempfile.gettempdir()``)
    that gkeys claimed for a process that is gone; returns how many.  Only directories of this user, private
    to it (mode 0700) and not symlinks are looked at: ``$TMPDIR`` is usually world-writable."""
    def stale(home: Path, info: os.stat_result) -> bool:
        return not stat.S_IMODE(info.st_mode) & 0o077 and _owner_gone(home)

    return remove_stale_dirs(parent if parent is not None else tempfile.gettempdir(), PREFIX, stale=stale)
