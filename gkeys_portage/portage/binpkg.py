"""Portage's binary package (GPKG) verification home, built from the seeds: a getuto that pins.

Portage verifies a GPKG's signatures with ``gpg --verify --batch --no-tty --no-auto-check-trustdb
--status-fd 2 --homedir $BINPKG_GPG_VERIFY_GPG_HOME`` run as ``nobody`` and accepts ``GOODSIG`` plus
``TRUST_ULTIMATE`` or ``TRUST_FULLY``.  ``PORTAGE_TRUST_HELPER`` is run (as root, without arguments)
before remote binary operations to prepare that home.  This module builds it so that:

* it holds only the keys pinned for binary packages (``[binpkg] category``/``nicks``, default
  ``gentoo``/``weekly``), exported from the category's keyring by exact primary fingerprint and
  imported with the clean import options (no third-party certifications);
* its gpg.conf says ``trust-model direct`` and each pinned key has *full* owner trust, so gpg reports
  ``TRUST_FULLY`` for the pins and nothing else: no key certifies another, and a home read with another
  trust model gives ``TRUST_UNDEFINED`` (refused), never more;
* nothing in it reaches the network (no keyserver, no key retrieval or import from signatures,
  dirmngr and gpg-agent never started, no lock files needed to read it);
* it is built in a staging directory next to the home and put in place by renaming a symlink over
  the home path: a killed run leaves the previous home working; files are 0644, directories 0755
  (readable by ``nobody``, writable only by root);
* a stamp of the pinned fingerprints and the category keybox makes a run with nothing to do return
  without starting gpg or touching the home.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import os
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gkeys_portage.core import journal
from gkeys_portage.core.config import Config, eprefix, load_config
from gkeys_portage.core.errors import BadInputError, ConfigError, GkeysError, StateError
from gkeys_portage.core.scratch import owned_prefix, remove_stale_dirs
from gkeys_portage.core.state import Layout, fsync_directory, read_json
from gkeys_portage.core.types import Fingerprint, Nick
from gkeys_portage.keys.seeds import SeedStore
from gkeys_portage.ui.output import neutralise

if TYPE_CHECKING:  # the check that nothing changed must not pay for importing gpg and HTTP (see main)
    from gkeys_portage.keys.context import Gkeys

#: gpg's keybox file name (``core.keyring.KEYBOX``; a test checks they agree).
KEYBOX = "pubring.kbx"
#: The state record of successful refreshes (``core.keyops.REFRESH_RECORD``; a test checks they agree).
REFRESH_RECORD = "refresh"
HOME_VARIABLE = "BINPKG_GPG_VERIFY_GPG_HOME"
STAMP_FILE = "gkeys-binpkg.stamp"
GPG_CONF = "gpg.conf"
#: Owner trust 5 ("full"): under ``trust-model direct`` that is the key's validity (``TRUST_FULLY``).
FULL_TRUST = 5
#: The only files a finished home holds.
HOME_FILES = frozenset({GPG_CONF, KEYBOX, "trustdb.gpg", STAMP_FILE})
STAMP_FORMAT = b"gkeys-binpkg-home v1\n"

GPG_CONF_TEXT = """\
# Written by gkeys-trust-helper (gkeys-portage); rebuilt from the seeds, do not edit.
# Portage's binary package verification home: only the keys pinned in [binpkg], each with full
# owner trust under the direct trust model (no key certifies another).  Never reach the network.
trust-model direct
no-auto-key-retrieve
no-auto-key-import
auto-key-locate local
disable-dirmngr
no-autostart
lock-never
"""


@dataclass
class BinpkgHome:
    """What a run did to the verification home."""

    home: Path
    changed: bool
    keys: list[Fingerprint] = field(default_factory=list)
    nicks: list[Nick] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    replaced: Path | None = None

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {"home": str(self.home), "changed": self.changed, "keys": list(self.keys),
                "nicks": list(self.nicks), "warnings": list(self.warnings),
                "replaced": str(self.replaced) if self.replaced else None}


def resolve_home(gnupghome: Path | None = None, eroot: Path | None = None) -> Path:
    """The home to build: ``--gnupghome``, else ``EROOT/etc/portage/gnupg`` for ``--eroot``, else
    ``$BINPKG_GPG_VERIFY_GPG_HOME``, else ``${ROOT}${EPREFIX}/etc/portage/gnupg`` (Portage's default)."""
    if gnupghome is not None:
        return Path(os.path.abspath(gnupghome))
    if eroot is not None:
        return Path(os.path.abspath(eroot)) / "etc/portage/gnupg"
    configured = os.environ.get(HOME_VARIABLE, "")
    if configured:
        return Path(os.path.abspath(configured))
    root = Path(os.path.abspath(os.environ.get("ROOT") or "/"))
    return root / eprefix().lstrip("/") / "etc/portage/gnupg"


def check_home_parent(home: Path) -> None:
    """Refuse a home whose directory (and the ones above it) another user could change.

    The home is swapped in by renaming a symlink in its parent, and Portage trusts whatever the home
    path then names: a parent owned by another user, or group- or world-writable, lets that user put a
    home trusting their own key there.  The parent must be owned by root or the caller and writable by
    its owner only; each directory above it owned by root or the caller and, if others may write to it,
    sticky (``/tmp``).  A directory that does not exist yet is judged by its nearest existing ancestor.
    Raises :class:`StateError` naming the directory and the fix.
    """
    mine = (0, os.getuid())
    parent = Path(os.path.abspath(home)).parent
    existing = next(p for p in (parent, *parent.parents) if os.path.lexists(p))
    real = existing.resolve()
    for folder in (real, *real.parents):
        info = folder.stat()
        why = ""
        if info.st_uid not in mine:
            why = f"is owned by uid {info.st_uid}"
        elif folder == real and existing == parent and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            why = f"is {'group' if info.st_mode & stat.S_IWGRP else 'world'}-writable"
        elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            why = "is writable by others (without the sticky bit)"
        if why:
            raise StateError(f"{folder} {why}: another user could replace the binary-package verification home "
                             f"{home} with one that trusts their key; fix: chown root:root {folder} && chmod "
                             f"go-w {folder}, or choose another home (--gnupghome, ${HOME_VARIABLE})")


def pinned_fingerprints(config: Config, seeds: SeedStore) -> list[Fingerprint]:
    """Every fingerprint the ``[binpkg]`` nicks' seeds accept (an unknown nick is an error)."""
    binpkg = config.binpkg
    try:
        return sorted(seeds.pins(binpkg.category, binpkg.nicks).pins)
    except BadInputError as exc:
        raise ConfigError(f"[binpkg] nicks: {exc} (fix [binpkg] in the config, or run 'gkeys fetch-seed "
                          f"-C {binpkg.category}')") from exc


def _file_digest(path: Path) -> bytes:
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").digest()
    except FileNotFoundError:
        return b"-"


def keyring_files(layout: Layout, config: Config) -> tuple[Path, Path]:
    """The ``[binpkg]`` category's live keybox and exported keyring (``core.keyring.Keyring``'s paths)."""
    category = config.binpkg.category
    return layout.keyrings_dir / category / KEYBOX, layout.keyrings_dir / f"{category}.asc"


def wanted_stamp(config: Config, layout: Layout) -> str:
    """The stamp the home must carry: the pins, the keybox they come from and the gpg.conf."""
    binpkg = config.binpkg
    digest = hashlib.sha256(STAMP_FORMAT)
    for part in (binpkg.category, *binpkg.nicks, *pinned_fingerprints(config, SeedStore(layout)), GPG_CONF_TEXT):
        digest.update(part.encode("utf-8") + b"\n")
    for path in keyring_files(layout, config):
        digest.update(_file_digest(path))
    return digest.hexdigest()


def refresh_due(config: Config, layout: Layout, now: float | None = None) -> bool:
    """True unless the ``[binpkg]`` category's keys were refreshed within ``[policy] refresh-interval``
    (``core.keyops.refresh_keys`` makes the same decision and is what actually refreshes)."""
    last = read_json(layout.record(REFRESH_RECORD), {}).get(config.binpkg.category)
    if not isinstance(last, int | float):
        return True
    return (time.time() if now is None else now) - last >= config.policy.refresh_interval


def is_current(config: Config, home: Path, *, refresh: bool = True) -> bool:
    """True when nothing is to be done: no refresh due (if ``refresh``) and the home's stamp matches.

    Reads only the config, the seeds, the refresh record and the keybox: no gpg, no lock, no write.
    """
    layout = Layout(config.gkeysdir)
    if refresh and refresh_due(config, layout):
        return False
    stamp = current_stamp(home)
    return stamp is not None and stamp == wanted_stamp(config, layout)


def current_stamp(home: Path) -> str | None:
    """The stamp of the home in place (None if there is none or it cannot be read)."""
    try:
        return (home / STAMP_FILE).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def update_home(ctx: Gkeys, home: Path, *, refresh: bool = True, force: bool = False) -> BinpkgHome:
    """Make ``home`` Portage's verification home for the ``[binpkg]`` pins; return what was done.

    Keys are refreshed first when the refresh policy says they are due (a failed refresh is a warning
    within ``[policy] max-refresh-age``, an error after it).  When the stamp in the home matches the
    pins and the keybox, nothing is touched (unless ``force``).
    """
    from gkeys_portage.keys.refresh import refresh_keys

    binpkg = ctx.config.binpkg
    result = BinpkgHome(home=home, changed=False, nicks=list(binpkg.nicks))
    check_home_parent(home)
    ctx.ensure_layout()
    with ctx.lock:
        if refresh and ctx.keyring(binpkg.category).exists():
            outcome = refresh_keys(ctx, binpkg.category)
            if outcome.warning:
                result.warnings.append(outcome.warning)
        stamp = wanted_stamp(ctx.config, ctx.layout)
        if not force and current_stamp(home) == stamp:
            return result
        result.keys, missing = _select_keys(ctx)
        if missing:
            result.warnings.append(f"no key installed for {', '.join(missing)} in {binpkg.category}; binary "
                                   f"packages they sign will be refused (run 'gkeys install-key -C "
                                   f"{binpkg.category} -n {missing[0]}')")
        result.replaced, unusable = _build_and_swap(ctx, home, result.keys, stamp)
        result.changed = True
        journal.record(ctx, "binpkg-home", {"home": str(home), "keys": result.keys, "unusable": unusable})
        if unusable:
            result.warnings.append(f"pinned key(s) revoked or expired: {', '.join(unusable)}; binary packages "
                                   f"they sign are refused (run 'gkeys refresh-key -C {binpkg.category}' "
                                   "if a new expiry was published)")
    return result


def _select_keys(ctx: Gkeys) -> tuple[list[Fingerprint], list[Nick]]:
    """The installed primaries of the pinned seeds, and the pinned nicks with no installed key."""
    binpkg = ctx.config.binpkg
    keyring = ctx.keyring(binpkg.category)
    fix = f"run 'gkeys install-key -C {binpkg.category} -n {binpkg.nicks[0]}'"
    if not keyring.exists():
        raise StateError(f"no {binpkg.category} keyring is installed, so no key can sign binary packages ({fix})")
    seeds = ctx.seeds.load(binpkg.category)
    pinned = set(pinned_fingerprints(ctx.config, ctx.seeds))  # raises for a nick that is not in the seeds
    installed = set(keyring.installed())
    missing = [nick for nick in binpkg.nicks if not (seeds[nick].accepted() & installed)]
    keys = sorted(pinned & installed)
    if not keys:
        raise StateError(f"none of the keys pinned for binary packages ({binpkg.category}: "
                         f"{', '.join(binpkg.nicks)}) is installed ({fix})")
    return keys, missing


def _build_and_swap(ctx: Gkeys, home: Path, keys: list[Fingerprint],
                    stamp: str) -> tuple[Path | None, list[Fingerprint]]:
    """Build the home in a staging directory beside ``home`` and swap it in; return where a replaced
    real directory was moved (None when the home was already ours or absent) and the unusable pins."""
    parent = home.parent
    parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    check_home_parent(home)  # again, now that the parent exists (a umask may have made it group-writable)
    previous = os.readlink(home) if home.is_symlink() else None
    for prefix in (f".{home.name}.gkeys-", f".{home.name}.link-"):  # what killed runs left (never the live one)
        remove_stale_dirs(parent, prefix, files=True, keep=frozenset({previous or ""}))
    staging = Path(tempfile.mkdtemp(prefix=owned_prefix(f".{home.name}.gkeys-"), dir=parent))
    try:
        unusable = _build(ctx, staging, keys, stamp)
        replaced = _swap(home, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _prune(home, keep={staging.name, previous or ""})
    return replaced, unusable


def _build(ctx: Gkeys, staging: Path, keys: list[Fingerprint], stamp: str) -> list[Fingerprint]:
    """Import the pinned keys, trust them fully, write gpg.conf and the stamp, check, seal; return the
    pinned keys gpg calls revoked or expired (they stay, and gpg refuses their signatures)."""
    from gkeys_portage.openpgp.gnupg import GnuPG

    binpkg = ctx.config.binpkg
    selection = ctx.keyring(binpkg.category).gpg().export_exact(keys)
    gpg = GnuPG(staging, timeout=ctx.config.policy.gpg_timeout)
    imported = set(gpg.import_keys(selection.data)) if selection.kept else set()
    if imported != set(keys):
        raise StateError(f"binary package home: {len(imported)} of {len(keys)} pinned key(s) imported; "
                         f"the previous home is kept (run 'gkeys install-key -C {binpkg.category}')")
    gpg.import_ownertrust(dict.fromkeys(keys, FULL_TRUST))
    conf = staging / GPG_CONF
    conf.write_text(GPG_CONF_TEXT, encoding="ascii")
    validity = gpg.direct_validity(conf)
    # "f": trusted.  A revoked ("r") or expired ("e") pin stays in the home so that gpg reports
    # REVKEYSIG/EXPKEYSIG and Portage refuses it: keeping the previous home would keep trusting it.
    wrong = sorted(f"{fpr}={letter}" for fpr, letter in validity.items()
                   if fpr not in keys or letter not in ("f", "r", "e"))
    if wrong or set(validity) != set(keys):
        raise StateError("binary package home: gpg computes unexpected validity "
                         f"({', '.join(wrong) or 'keys missing'}); the previous home is kept")
    (staging / STAMP_FILE).write_text(stamp + "\n", encoding="ascii")
    _seal(staging)
    return sorted(fpr for fpr, letter in validity.items() if letter != "f")


def _seal(staging: Path) -> None:
    """Keep only the home's files, make them readable by everyone and writable by nobody but the
    owner, and flush them to disk."""
    for entry in staging.iterdir():
        if entry.name not in HOME_FILES:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    for entry in staging.iterdir():
        os.chmod(entry, 0o644)
        with open(entry, "rb") as handle:
            os.fsync(handle.fileno())
    os.chmod(staging, 0o755)
    fsync_directory(staging)


def _swap(home: Path, generation: Path) -> Path | None:
    """Point ``home`` at ``generation`` by renaming a new symlink over it (atomic when ``home`` is
    absent or a symlink).  A real directory there (e.g. getuto's) is exchanged for the symlink in one
    ``renameat2(RENAME_EXCHANGE)`` where the kernel and filesystem allow, else renamed aside first; it
    is kept as ``.NAME.replaced-TIME``."""
    parent = home.parent
    link = parent / (owned_prefix(f".{home.name}.link-") + "0")
    with contextlib.suppress(FileNotFoundError):
        link.unlink()
    os.symlink(generation.name, link)
    replaced = None
    if home.is_dir() and not home.is_symlink():
        replaced = parent / f".{home.name}.replaced-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
        if _exchange(link, home):
            os.rename(link, replaced)      # ``link`` now names the old directory
            fsync_directory(parent)
            return replaced
        os.rename(home, replaced)
    elif home.exists() and not home.is_symlink():
        link.unlink()
        raise StateError(f"{home} exists and is not a directory; move it away and run again")
    os.replace(link, home)
    fsync_directory(parent)
    return replaced


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2`` with ``RENAME_EXCHANGE``); False if unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return bool(renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange) == 0)


def _prune(home: Path, keep: set[str]) -> None:
    """Remove older generations and leftovers of killed runs (the current and previous stay)."""
    for entry in home.parent.glob(f".{home.name}.gkeys-*"):
        if entry.name not in keep:
            shutil.rmtree(entry, ignore_errors=True)
    for entry in home.parent.glob(f".{home.name}.link-*"):
        with contextlib.suppress(OSError):
            entry.unlink()


def build_parser() -> argparse.ArgumentParser:
    """``gkeys-trust-helper``'s options (Portage runs it without any)."""
    parser = argparse.ArgumentParser(
        prog="gkeys-trust-helper",
        description="Prepare Portage's binary package verification home from the gkeys seeds "
                    "(use as PORTAGE_TRUST_HELPER).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  gkeys-trust-helper                      # as Portage runs it (make.conf PORTAGE_TRUST_HELPER)\n"
               "  gkeys-trust-helper --eroot /mnt/gentoo --no-refresh\n"
               "  gkeys-trust-helper --gnupghome /tmp/binpkg-home -q\n")
    parser.add_argument("--eroot", type=Path, help="build EROOT/etc/portage/gnupg")
    parser.add_argument("--gnupghome", type=Path,
                        help=f"the home to build (default: ${HOME_VARIABLE}, "
                             "else ${ROOT}${EPREFIX}/etc/portage/gnupg)")
    parser.add_argument("--no-refresh", action="store_true", help="do not refresh keys even when due")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only warnings and errors")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``gkeys-trust-helper``: exit 0 when the home is ready, non-zero (one line why) otherwise."""
    args = build_parser().parse_args(argv)
    try:
        config = load_config()
        home = resolve_home(args.gnupghome, args.eroot)
        check_home_parent(home)  # also on the fast path: a home others could have swapped is not "ready"
        if is_current(config, home, refresh=not args.no_refresh):
            return 0    # Portage runs this before every remote binary operation: stay cheap
        from gkeys_portage.keys.context import Gkeys

        done = update_home(Gkeys(config), home, refresh=not args.no_refresh)
    except GkeysError as exc:
        print(neutralise(f"gkeys-trust-helper: {exc}"), file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(neutralise(f"gkeys-trust-helper: {exc.filename or ''}: {exc.strerror}; the previous home is kept"),
              file=sys.stderr)
        return 1
    for warning in done.warnings:
        print(neutralise(f"gkeys-trust-helper: warning: {warning}"), file=sys.stderr)
    if done.replaced is not None:
        print(neutralise(f"gkeys-trust-helper: moved the previous home to {done.replaced}"), file=sys.stderr)
    if done.changed and not args.quiet:
        print(neutralise(f"gkeys-trust-helper: {done.home}: trusting {', '.join(done.keys)} for binary packages"))
    return 0
