"""The OpenPGP engine gkeys runs, and what it can do: the one place that knows the engine (issue 25).

Gentoo's ``app-alternatives/gpg`` makes ``gpg`` GnuPG 2.4 (stable), 2.5 (LibrePGP), a FreePG build or
Sequoia's ``gpg-sq`` (sequoia-chameleon-gnupg).  Which program gkeys runs is chosen in
:mod:`~gkeys_portage.openpgp.process` (``$GKEYS_GPG``, else ``[gpg] program``, else ``gpg``); what that
program can do is decided here, by *probing* it at first use, never by its version number: ``gpg-sq``
0.13.1 calls itself "2.2.40", and GnuPG 2.5 (not packaged by Debian, so untested here) is judged by the
same probes as any engine.  Each probe runs the real program once, in a throwaway home, on a constant
key and signature (:data:`PROBE_KEY`), and is cached per program for the life of the process.

What an engine lacks gets an :class:`~gkeys_portage.core.errors.EngineError` that names the engine,
what is missing and the engines that have it (:meth:`Engine.require`): never a weaker check.  The one
fallback is the same check done slower: without ``--verify --multifile`` verdicts, each signature gets a
``gpg --verify`` of its own (:mod:`~gkeys_portage.openpgp.multifile`).

Capabilities (:class:`Capability`), and the engines measured here (``docs/engines.md``):

==================== ============ ============ ===========================================================
capability           GnuPG 2.2.40 GnuPG 2.4.7  gpg-sq 0.13.1
==================== ============ ============ ===========================================================
verdict status lines yes          yes          yes (plus ``TRUST_UNDEFINED`` after ``VALIDSIG``)
multifile verdicts   yes          yes          no: ``FILE_START``, ``NODATA``, ``FILE_DONE``; no verdict
cleartext --decrypt  yes          yes          no: ``NODATA`` (``--verify`` works, without the last newline)
safe import options  yes          yes          no: ``self-sigs-only`` unknown, ``import-clean`` ambiguous
keep certifications  yes          yes          no: ``no-self-sigs-only`` unknown
trust model direct   yes          yes          no: "Trust model Direct not implemented"
export filter        yes          yes          yes
loopback pinentry    yes          yes          no: a key made with an empty passphrase cannot be used
read-only verify     yes          yes          no: writes a signature verification cache (sqlite) into the home
==================== ============ ============ ===========================================================

Version-keyed workarounds, now keyed to a capability (each tested on every engine by ``tests/test_engines.py``):

* **Imports and ``--show-keys`` run under ``--trust-model direct``** (:meth:`Engine.import_trust_options`).
  Under ``--trust-model always`` GnuPG 2.2 dies ("Fatal: can't open trustdb.gpg") after merging a
  revocation into a home without a trustdb, and on ``--show-keys`` of a revoked key; ``direct`` needs no
  trustdb.  An import never uses trust (pins decide), so an engine without ``direct`` (gpg-sq) imports
  under ``always``: the same import, without the 2.2 crash it never had.
* **``--faked-system-time`` is given as seconds since the epoch** (``EPOCH!``): GnuPG reads both that
  and ``YYYYMMDDTHHMMSS!``, gpg-sq only the former (:func:`~gkeys_portage.openpgp.process.faked_time_option`).
"""

from __future__ import annotations

import base64
import enum
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gkeys_portage.core import children
from gkeys_portage.core.errors import EngineError, GpgError
from gkeys_portage.core.scratch import owned_prefix, remove_stale_dirs
from gkeys_portage.openpgp import process

#: A constant ed25519 key (no secret part anywhere) and its detached SHA-512 signature over
#: :data:`PROBE_DATA`: what every probe verifies, so a probe needs no key generation.
PROBE_FINGERPRINT = "C670AE1773F7EA5B1989C6B4BCB38F39A337861F"
PROBE_KEY = base64.b64decode(
    "mDMEaxIedRYJKwYBBAHaRw8BAQdAO7Y7RaQ8pqUAAURzAfgKX9jIJO3n1xiHaH4MrLrQjcC0KGdrZXlzIGVuZ2luZSBwcm9iZSA8cHJvYmVA"
    "Z2tleXMuaW52YWxpZD6IkAQTFggAOBYhBMZwrhdz9+pbGYnGtLyzjzmjN4YfBQJrEh51AhsDBQsJCAcCBhUKCQgLAgQWAgMBAh4BAheAAAoJ"
    "ELyzjzmjN4YfE/8BAJ46OE1YTaocaC3EImbXRHDjQur8FS4uMIPWSsW4lim8AQDdgHpxQGG55Ieaw0t5tSZO07qx56vUSTjB7j7aW1ZyAw==")
PROBE_SIGNATURE = base64.b64decode(
    "iHUEABYKAB0WIQTGcK4Xc/fqWxmJxrS8s485ozeGHwUCaxIedQAKCRC8s485ozeGH00TAQDPoxFOxKlWsCrUyiv3LLf9tmfA1VFViiu8jh/b"
    "lKLalgEA7OSiQoCRxbEawDmWZ/CcSsIySwqdwU/sOEXXRMuW5Ao=")
PROBE_DATA = b"gkeys engine probe\n"
#: :data:`PROBE_DATA` clearsigned by the same key.
PROBE_CLEARSIGNED = b"""-----BEGIN PGP SIGNED MESSAGE-----
Hash: SHA512

gkeys engine probe
-----BEGIN PGP SIGNATURE-----

iHUEARYKAB0WIQTGcK4Xc/fqWxmJxrS8s485ozeGHwUCaxIhRgAKCRC8s485ozeG
H8n/AQDbt0bWebyFWzmiLX1JgtX7bUC/oIwhwlxKpocQunoTSwEA76snBNW67qFu
mSW2KsqPuw9Y7rLNTwvydpkluB+mlg8=
=e2Fs
-----END PGP SIGNATURE-----
"""
PROBE_TIMEOUT = 60.0

#: The engines that have every capability gkeys uses (named in every refusal).
WORKING_ENGINES = "GnuPG 2.2 or 2.4 (app-crypt/gnupg)"
#: How to choose another engine (named in every refusal).
CHOOSE_ENGINE = "set [gpg] program = /usr/bin/gpg in gkeys.conf (or $GKEYS_GPG) to a GnuPG binary"

#: How gkeys imports key data: no third-party certification is stored (trust comes from pins, and a flood of them
#: must not grow a keyblock), and nothing is cleaned: ``import-clean`` keeps only the newest self-signature of each
#: user id, the key's history that a signature made before a renewal is judged by (issue 41).
SAFE_IMPORT = ("self-sigs-only", "no-import-clean")
ProbeFunction = Callable[[str], "bool | dict[Capability, bool]"]
KEEP_CERTIFICATIONS = ("no-import-clean", "no-self-sigs-only", "no-import-minimal")


class Capability(enum.Enum):
    """What gkeys asks of an engine; the value says it as a refusal does ("it lacks ...")."""

    STATUS = "VALIDSIG/BADSIG status lines for a detached signature"
    MULTIFILE = "per-file verdicts from gpg --verify --multifile"
    CLEARTEXT = "cleartext-signed messages through gpg --decrypt (verdict and signed text)"
    SAFE_IMPORT = "--import-options " + ",".join(SAFE_IMPORT)
    KEEP_CERTIFICATIONS = "--import-options " + ",".join(KEEP_CERTIFICATIONS)
    TRUST_DIRECT = "--trust-model direct"
    EXPORT_FILTER = "--export-filter keep-uid=..."
    LOOPBACK = "unprotected keys through --pinentry-mode loopback"
    READ_ONLY = "verification that leaves the keyring home unwritten (--lock-never)"


@dataclass
class Engine:
    """One OpenPGP program as probed: its name and, lazily, each :class:`Capability`."""

    program: str
    banner: str  # the first line of --version, as the engine prints it
    name: str  # "GnuPG 2.4.7", "Sequoia Chameleon 0.13.1": for people, never for decisions
    _known: dict[Capability, bool] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _probing: dict[ProbeFunction, threading.Lock] = field(default_factory=dict, repr=False)

    def describe(self) -> str:
        """``gpg-sq (Sequoia Chameleon 0.13.1)``: the program and what it is."""
        return f"{self.program} ({self.name})"

    def has(self, capability: Capability) -> bool:
        """Whether the engine can do ``capability`` (probed once, then remembered).

        Threads may ask at once: each probe runs once (a lock per probe), and different probes run side by
        side (the tree verifier probes ``--multifile`` while the keyring is listed)."""
        function = PROBES[capability]
        with self._lock:
            if capability in self._known:
                return self._known[capability]
            gate = self._probing.setdefault(function, threading.Lock())
        with gate:
            with self._lock:
                if capability in self._known:
                    return self._known[capability]
            found = function(self.program)
            with self._lock:
                self._known.update(found if isinstance(found, dict) else {capability: found})
                return self._known[capability]

    def require(self, capability: Capability, what: str) -> None:
        """Raise :class:`EngineError` unless the engine can do ``capability``; ``what`` is the job asked."""
        if not self.has(capability):
            raise EngineError(f"{self.describe()} cannot {what}: it lacks {capability.value}; "
                              f"{WORKING_ENGINES} can: {CHOOSE_ENGINE}", capability=capability.name)

    def capabilities(self) -> dict[str, bool]:
        """Every capability by name (probes them all): for ``gkeys doctor`` and ``gkeys status``."""
        return {cap.name.lower(): self.has(cap) for cap in Capability}

    def import_trust_options(self) -> list[str]:
        """The trust model for imports and ``--show-keys`` (see the module docstring): ``direct`` where the
        engine has it (GnuPG 2.2 crashes on a revocation under ``always``), else the base ``always``."""
        return ["--trust-model", "direct"] if self.has(Capability.TRUST_DIRECT) else []


_ENGINES: dict[str, Engine] = {}
PROBE_PREFIX = "gkeys-engine-"  # the throwaway homes of the probes, under $TMPDIR
_ENGINES_LOCK = threading.Lock()


def probe(program: str | None = None) -> Engine:
    """The :class:`Engine` of ``program`` (default: the selected one), probed at first use and cached.

    A program that cannot run is a :class:`GpgError` naming it.
    """
    program = program or process.selected_program()
    with _ENGINES_LOCK:
        engine = _ENGINES.get(program)
        if engine is None:
            remove_stale_dirs(tempfile.gettempdir(), PROBE_PREFIX)  # the probe homes of runs that were killed
            process.refuse_untrusted(program)
            banner, name = _identify(program)
            engine = _ENGINES[program] = Engine(program, banner, name)
        return engine


def forget(program: str) -> None:
    """Drop the cached probe of ``program`` (a binary replaced while gkeys runs; tests)."""
    with _ENGINES_LOCK:
        _ENGINES.pop(program, None)


def _identify(program: str) -> tuple[str, str]:
    """The first line of ``program --version`` and a name for people."""
    with tempfile.TemporaryDirectory(prefix=owned_prefix(PROBE_PREFIX)) as home:
        done = _run(program, Path(home), ["--version"])
    lines = [line.strip() for line in done.stdout.decode("utf-8", "replace").splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        raise GpgError(f"cannot run gpg: {program} --version failed (exit {done.returncode})")
    banner = lines[0]
    for line in lines[1:3]:
        if line.startswith("Sequoia gpg Chameleon "):
            return banner, "Sequoia Chameleon " + line.rsplit(" ", 1)[-1]
    if "(GnuPG)" in banner:
        return banner, "GnuPG " + banner.rsplit(" ", 1)[-1]
    return banner, banner


def _run(program: str, home: Path, args: Sequence[str], stdin: bytes = b"", *,
         agent: bool = False) -> subprocess.CompletedProcess[bytes]:
    """Run ``program`` in the probe home ``home`` with the door's base options; no gpg-agent unless ``agent``
    (none is needed to verify or import, and an agent socket under a long ``$TMPDIR`` cannot be made)."""
    process.prepare_home(home)
    extra = [] if agent else ["--no-autostart"]
    try:
        return subprocess.run(children.tied([program, "--homedir", str(home), *process.BASE_OPTIONS, *extra, *args]),
                              input=stdin,
                              capture_output=True, env=process.minimal_environment(home), timeout=PROBE_TIMEOUT,
                              check=False, preexec_fn=children.preexec_for())
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GpgError(f"cannot run gpg: {program}: {exc}") from exc


def _status(program: str, home: Path, args: Sequence[str], stdin: bytes = b"", *,
            agent: bool = False) -> tuple[int, list[str]]:
    """Exit status and ``[GNUPG:]`` keywords+arguments of one probe run (status on stdout)."""
    done = _run(program, home, ["--status-fd", "1", *args], stdin, agent=agent)
    prefix = process.STATUS_LINE_PREFIX
    return done.returncode, [line[len(prefix):] for line in done.stdout.decode("latin-1").split("\n")
                             if line.startswith(prefix)]


def _probe_home(program: str, parent: str) -> Path:
    """A home holding :data:`PROBE_KEY` (plain import: every engine has it), and the probe files."""
    home = Path(parent) / "home"
    _status(program, home, ["--batch", "--import"], PROBE_KEY)
    (home / "good.sig").write_bytes(PROBE_SIGNATURE)
    (home / "good").write_bytes(PROBE_DATA)
    (home / "bad.sig").write_bytes(PROBE_SIGNATURE)
    (home / "bad").write_bytes(PROBE_DATA + b"changed\n")
    return home


def _verdicts(lines: Sequence[str]) -> list[str]:
    """The verdict keywords of a status listing, with VALIDSIG reduced to whether it names the probe key
    as the primary (field 10)."""
    out = []
    for line in lines:
        keyword, _, value = line.partition(" ")
        if keyword == "VALIDSIG":
            fields = value.split(" ")
            out.append("VALIDSIG" if len(fields) >= 10 and fields[9] == PROBE_FINGERPRINT else "VALIDSIG?")
        elif keyword in ("GOODSIG", "BADSIG", "ERRSIG", "NO_PUBKEY", "NODATA", "FILE_START", "FILE_DONE"):
            out.append(keyword)
    return out


def _probe_verify(program: str) -> dict[Capability, bool]:
    """One good and one changed detached signature, ``--lock-never``: :attr:`Capability.STATUS` (the verdict
    lines) and :attr:`Capability.READ_ONLY` (the home unwritten) from the same two runs."""
    with tempfile.TemporaryDirectory(prefix=owned_prefix(PROBE_PREFIX)) as parent:
        home = _probe_home(program, parent)
        before = _listing(home)
        args = ["--batch", "--lock-never", "--verify"]
        _, good = _status(program, home, [*args, str(home / "good.sig"), str(home / "good")])
        _, bad = _status(program, home, [*args, str(home / "bad.sig"), str(home / "bad")])
        unwritten = _listing(home) == before
    good_verdicts, bad_verdicts = _verdicts(good), _verdicts(bad)
    status = ("VALIDSIG" in good_verdicts and "GOODSIG" in good_verdicts and "BADSIG" not in good_verdicts
              and "BADSIG" in bad_verdicts and not any(v.startswith("VALIDSIG") for v in bad_verdicts))
    return {Capability.STATUS: status, Capability.READ_ONLY: unwritten}


def _probe_cleartext(program: str) -> bool:
    """``gpg --decrypt`` of a cleartext-signed message must give a good verdict and the signed text."""
    with tempfile.TemporaryDirectory(prefix=owned_prefix(PROBE_PREFIX)) as parent:
        home = _probe_home(program, parent)
        done = _run(program, home, ["--batch", "--status-fd", "2", "--decrypt"], PROBE_CLEARSIGNED)
    status = [line[len(process.STATUS_LINE_PREFIX):] for line in done.stderr.decode("latin-1").split("\n")
              if line.startswith(process.STATUS_LINE_PREFIX)]
    return "VALIDSIG" in _verdicts(status) and done.stdout == PROBE_DATA


def _probe_multifile(program: str) -> bool:
    """One ``--verify --multifile`` run over a good and a changed file must give each its own verdict
    (without ``--batch``: in batch mode gpg does not pair a signature with its data file)."""
    with tempfile.TemporaryDirectory(prefix=owned_prefix(PROBE_PREFIX)) as parent:
        home = _probe_home(program, parent)
        _, lines = _status(program, home, ["--verify", "--multifile", str(home / "good.sig"), str(home / "bad.sig")])
    blocks: list[list[str]] = []
    for verdict in _verdicts(lines):
        if verdict == "FILE_START":
            blocks.append([])
        elif blocks and verdict != "FILE_DONE":
            blocks[-1].append(verdict)
    return (len(blocks) == 2 and "VALIDSIG" in blocks[0] and "BADSIG" not in blocks[0]
            and "BADSIG" in blocks[1] and not any(v.startswith("VALIDSIG") for v in blocks[1]))


def _probe_import(options: Sequence[str]) -> ProbeFunction:
    """The probe key must be imported with ``options`` (an engine that does not know one imports nothing;
    gpg's exit status also counts an unreachable agent, as :mod:`~gkeys_portage.openpgp.keyio` knows)."""
    def run(program: str) -> bool:
        with tempfile.TemporaryDirectory(prefix=owned_prefix(PROBE_PREFIX)) as parent:
            _, lines = _status(program, Path(parent) / "home",
                               ["--batch", "--import-options", ",".join(options), "--import"], PROBE_KEY)
        return any(line.startswith("IMPORT_OK ") for line in lines) \
            and not any(line.startswith("FAILURE option-parser") for line in lines)
    return run


def _probe_direct(program: str) -> bool:
    with tempfile.TemporaryDirectory(prefix=owned_prefix(PROBE_PREFIX)) as parent:
        home = _probe_home(program, parent)
        code, lines = _status(program, home, ["--batch", "--trust-model", "direct", "--with-colons", "--list-keys"])
    return code == 0 and not any(line.startswith("FAILURE") for line in lines)


def _listing(home: Path) -> list[tuple[str, int, int]]:
    """Every file of ``home`` with its size and mtime (agent sockets aside: the agent is not the engine)."""
    return sorted((str(path.relative_to(home)), info.st_size, info.st_mtime_ns) for path in home.rglob("*")
                  if not path.name.startswith("S.gpg-agent") and path.is_file()
                  for info in (path.stat(),))


def _probe_export_filter(program: str) -> bool:
    with tempfile.TemporaryDirectory(prefix=owned_prefix(PROBE_PREFIX)) as parent:
        home = _probe_home(program, parent)
        done = _run(program, home, ["--batch", "--export-filter", "keep-uid=mbox=probe@gkeys.invalid",
                                    "--export", PROBE_FINGERPRINT])
    return done.returncode == 0 and len(done.stdout) > 100


def _probe_loopback(program: str) -> bool:
    """A key generated with an empty passphrase through loopback pinentry must take a subkey and sign
    (gpg-sq 0.13.1 makes the key, then answers "No passphrase given" to every use of it)."""
    # a short parent directory: the agent's socket must fit a socket name (108 bytes)
    short = "/tmp" if os.access("/tmp", os.W_OK | os.X_OK) else None
    with tempfile.TemporaryDirectory(prefix=owned_prefix(PROBE_PREFIX), dir=short) as parent:
        home = Path(parent) / "home"
        loopback = ["--batch", "--pinentry-mode", "loopback", "--passphrase-fd", "0"]
        try:
            _, made = _status(program, home, [*loopback, "--quick-generate-key", "probe <probe@gkeys.invalid>",
                                              "ed25519", "cert", "1d"], b"\n", agent=True)
            created = [line.split(" ")[-1] for line in made if line.startswith("KEY_CREATED ")]
            if not created:
                return False
            code, added = _status(program, home, [*loopback, "--quick-add-key", created[0], "ed25519", "sign", "1d"],
                                  b"\n", agent=True)
            return code == 0 and any(line.startswith("KEY_CREATED ") for line in added)
        finally:
            if shutil.which("gpgconf"):
                subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True,
                               env=process.minimal_environment(home), timeout=30, check=False)


PROBES: dict[Capability, ProbeFunction] = {
    Capability.STATUS: _probe_verify,
    Capability.MULTIFILE: _probe_multifile,
    Capability.CLEARTEXT: _probe_cleartext,
    Capability.SAFE_IMPORT: _probe_import(SAFE_IMPORT),
    Capability.KEEP_CERTIFICATIONS: _probe_import(KEEP_CERTIFICATIONS),
    Capability.TRUST_DIRECT: _probe_direct,
    Capability.EXPORT_FILTER: _probe_export_filter,
    Capability.LOOPBACK: _probe_loopback,
    Capability.READ_ONLY: _probe_verify,
}
