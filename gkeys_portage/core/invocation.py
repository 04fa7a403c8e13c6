"""Where this run of gkeys acts: the global options (``-c FILE``, ``--root DIR``) the user gave, and the root
(``--eroot DIR``) of an action that takes one, known once per process, so that every ``gkeys ACTION`` command gkeys
prints as the next thing to run acts on the same configuration, state and root (design.md §10 "Output"): a user
who chose ``--eroot`` to stay off the host is never sent back to it.

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

#: the actions that take ``--eroot DIR`` (``tests/test_next_steps.py`` checks it against their parsers)
EROOT_ACTIONS = frozenset(("setup-portage", "status", "doctor", "binpkg-keyring"))

#: ``gkeys ACTION`` as a command for this user: not after a word character, ``/``, ``.`` or ``-`` (``/etc/gkeys``,
#: ``x-gkeys``), and the action a whole word (``gkeys verify`` is not ``gkeys verifies``)
_NAMES = "|".join(sorted(map(re.escape, ACTIONS - FOR_PUBLISHERS), key=len, reverse=True))
_COMMAND = re.compile(rf"(?<![\w/.-])gkeys (?P<action>{_NAMES})(?![\w-])(?P<eroot> --eroot)?")

_options: tuple[str, ...] = ()
_eroot: str | None = None


def record(*, config: str | None, root: str | None, eroot: str | None = None) -> None:
    """Remember this run's ``-c FILE`` and ``--root DIR``, and the action's ``--eroot DIR`` (None: not given)."""
    global _options, _eroot
    _options = tuple((["-c", config] if config else []) + (["--root", root] if root else []))
    _eroot = eroot or None


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


def eroot() -> str | None:
    """The ``--eroot DIR`` recorded for this run (None: not given)."""
    return _eroot


@contextmanager
def recorded(*, config: str | None, root: str | None, eroot: str | None = None) -> Iterator[None]:
    """:func:`record` for the time of a ``with`` block; the previous record is restored after it (a run inside a
    run, as the demo's steps)."""
    global _options, _eroot
    saved = _options, _eroot
    record(config=config, root=root, eroot=eroot)
    try:
        yield
    finally:
        _options, _eroot = saved


def _rewrite(match: re.Match[str]) -> str:
    """One ``gkeys ACTION`` command with this run's options: the global ones after ``gkeys``, ``--eroot DIR`` after
    an action that takes it (unless the command names its own)."""
    words = ["gkeys", *_options, match.group("action")]
    if match.group("eroot"):
        words.append("--eroot")
    elif _eroot and match.group("action") in EROOT_ACTIONS:
        words += ["--eroot", _eroot]
    return shlex.join(words[:1]) + "".join(" " + shlex.quote(word) for word in words[1:])


def for_this_user(text: str) -> str:
    """``text`` with this run's options inserted, shell-quoted, in every ``gkeys ACTION`` command it names: the
    global ones after ``gkeys``, ``--eroot DIR`` after an action that takes it; unchanged when the run used the
    default configuration, state and root."""
    if not (_options or _eroot) or "gkeys " not in text:
        return text
    return _COMMAND.sub(_rewrite, text)


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
