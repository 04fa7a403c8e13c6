"""Where this run of gkeys acts: the global options (``-c FILE``, ``--root DIR``) the user gave, known once per
process, so that every ``gkeys ACTION`` command gkeys prints as the next thing to run acts on the same
configuration and state (design.md §10 "Output").

The entry point records them (:func:`record`); the output door (``ui/output.py``) passes every line and every
``next_step``/``fix`` through :func:`for_this_user`.  Only a command that starts with the word ``gkeys``, a space
and an action name is rewritten: never ``gkeys-fetch``, ``/etc/gkeys/``, nor prose ("gkeys verifies ...").
``$GKEYS_CONFIG`` is not repeated: the user's environment is inherited by the command they run next.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from contextlib import contextmanager

#: every ``gkeys`` action (``tests/test_cli.py`` checks it against ``cli/main.py``'s ACTION_TOPICS)
ACTIONS = frozenset((
    "add-seed", "convert-seed", "fetch-seed", "list-cats", "list-seed", "list-seedfiles", "move-seed", "remove-seed",
    "search-key", "update-seed", "export-keyring", "import-key", "install-key", "list-key", "refresh-key",
    "remove-key", "sign", "verify", "build-keyring", "export-wkd", "send-key", "fetch-media", "verify-media",
    "verify-overlays", "verify-snapshot", "verify-tree", "check-key", "spec-check", "doctor", "setup-portage",
    "status", "binpkg-keyring", "demo", "history", "audit", "journal"))

#: the actions a refusal names for someone else to run, on their machine (a seed file's or a keyring bundle's
#: publisher: "ask its maintainer to re-sign it with 'gkeys sign --seed-category CAT'"): never given our options
FOR_PUBLISHERS = frozenset(("sign", "build-keyring", "export-wkd", "send-key"))

#: ``gkeys ACTION`` as a command for this user: not after a word character, ``/``, ``.`` or ``-`` (``/etc/gkeys``,
#: ``x-gkeys``), and the action a whole word (``gkeys verify`` is not ``gkeys verifies``)
_NAMES = "|".join(sorted(map(re.escape, ACTIONS - FOR_PUBLISHERS), key=len, reverse=True))
_COMMAND = re.compile(rf"(?<![\w/.-])gkeys (?=(?:{_NAMES})(?![\w-]))")

_options: tuple[str, ...] = ()


def record(*, config: str | None, root: str | None) -> None:
    """Remember this run's ``-c FILE`` and ``--root DIR`` (None: not given, the default)."""
    global _options
    _options = tuple((["-c", config] if config else []) + (["--root", root] if root else []))


def use_config(config: str) -> None:
    """This run acts on ``config`` although the user did not name it (``doctor --eroot R`` reads R's own config):
    the commands it prints name it too."""
    global _options
    rest = list(_options)
    if "-c" in rest:
        del rest[rest.index("-c"):rest.index("-c") + 2]
    _options = ("-c", config, *rest)


def options() -> tuple[str, ...]:
    """The global options recorded for this run (empty: the defaults, or none recorded)."""
    return _options


@contextmanager
def recorded(*, config: str | None, root: str | None) -> Iterator[None]:
    """:func:`record` for the time of a ``with`` block; the previous record is restored after it (a run inside a
    run, as the demo's steps)."""
    global _options
    saved = _options
    record(config=config, root=root)
    try:
        yield
    finally:
        _options = saved


def for_this_user(text: str) -> str:
    """``text`` with this run's global options inserted, shell-quoted, after ``gkeys`` in every ``gkeys ACTION``
    command it names; unchanged when the run used the default configuration and state."""
    if not _options or "gkeys " not in text:
        return text
    inserted = f"gkeys {shlex.join(_options)} "
    return _COMMAND.sub(lambda _match: inserted, text)


#: Where a fix's command may begin: at its start, or after "X, or " / "(or: " (an alternative that is one).
_FIX_COMMAND = re.compile(r"(?:^|(?<=, or )|(?<=\(or: ))(?:gkeys|emerge|rm|mv|chmod|chown|sed|pip|echo) ")
#: Where it ends: the prose after it.
_FIX_PROSE = re.compile(r" \(| once | and |; |, or |, then |\)$")


def fix_command(fix: str) -> str | None:
    """The command in a finding's fix (``gkeys refresh-key -C gentoo`` of "gkeys refresh-key -C gentoo (once
    its owner extended it)"); None when the fix is prose only (edit a file, set the clock)."""
    found = _FIX_COMMAND.search(fix)
    if found is None:
        return None
    command = fix[found.start():]
    if command.startswith("gkeys ") and command.split(" ", 2)[1] not in ACTIONS:
        return None
    end = _FIX_PROSE.search(command)
    return command[:end.start()] if end else command
