"""A developer key's life over years, made by the signers' GnuPG with ``--faked-system-time`` (issue 41).

:class:`LifeKey` is one throwaway ed25519 key (certify-only primary, signing subkey) in a secret home of its own:
renewed (``--quick-set-expire``), its signing subkey rotated (a new one, the old one revoked with a reason),
revoked, and signing data, each "at" a number of days ago.  ``public(history=False)`` is the key as a source that
publishes only the newest self-signature sends it (a developer's own ``export-clean``, WKD, a bundle);
``public()`` is the key with every packet, as a keyserver merges it.  ``stolen()`` is a copy of the secret home
as it is now: whoever holds it signs later with whatever date they like.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from conftest import SIGNER_PROGRAM

from gkeys_portage.demo.world import past

#: RFC 9580 reason codes (5.2.3.31) -> the number GnuPG's revkey menu asks for
MENU = {0: 0, 2: 1, 1: 2, 3: 3}
SUPERSEDED, COMPROMISED, RETIRED, NO_REASON = 1, 2, 3, 0


class LifeKey:
    """One key in its own secret home; every step "at" ``days`` ago (a float)."""

    def __init__(self, home: Path, nick: str, *, created: float, expire: str = "1y") -> None:
        self.home, self.nick = home, nick
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.fingerprint = self._created("--quick-generate-key", f"{nick.capitalize()} <{nick}@gentoo.org>",
                                         "ed25519", "cert", expire, when=created)
        self.subkey = self._created("--quick-add-key", self.fingerprint, "ed25519", "sign", expire, when=created)
        self.subkeys = [self.subkey]

    @property
    def uid(self) -> str:
        """The key's user id."""
        return f"{self.nick.capitalize()} <{self.nick}@gentoo.org>"

    def gpg(self, *args: str, when: float | None = None, commands: str = "",
            data: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        """The signers' GnuPG on this home "at" ``when`` days ago, answering prompts with ``commands``."""
        faked = ["--faked-system-time", f"{int(past(when).timestamp())}!"] if when is not None else []
        done = subprocess.run([SIGNER_PROGRAM, "--homedir", str(self.home), "--batch", "--pinentry-mode", "loopback",
                               "--passphrase", "", "--status-fd", "2", *faked,
                               *(["--command-fd", "0"] if commands else []), *args],
                              input=commands.encode() or data, capture_output=True, check=False)
        assert done.returncode == 0, done.stderr.decode()
        return done

    def _created(self, *args: str, when: float) -> str:
        done = self.gpg(*args, when=when)
        return next(line.split()[-1] for line in done.stderr.decode().splitlines() if "KEY_CREATED" in line)

    def renew(self, when: float, expire: str = "2y") -> None:
        """Extend the primary key and every signing subkey (a new self-signature and new bindings)."""
        self.gpg("--quick-set-expire", self.fingerprint, expire, when=when)
        self.gpg("--quick-set-expire", self.fingerprint, expire, *self.subkeys, when=when)

    def rotate(self, when: float, reason: int = SUPERSEDED, expire: str = "2y") -> str:
        """A new signing subkey, and the current one revoked with ``reason`` (RFC code), both at ``when``."""
        old = self.subkey
        self.subkey = self._created("--quick-add-key", self.fingerprint, "ed25519", "sign", expire, when=when)
        self.subkeys.append(self.subkey)
        index = self.subkeys.index(old) + 1
        self.gpg("--edit-key", self.fingerprint, when=when,
                 commands=f"key {index}\nrevkey\ny\n{MENU[reason]}\n\ny\nsave\n")
        return self.subkey

    def revoke(self, when: float, reason: int = COMPROMISED) -> None:
        """Revoke the whole key with ``reason`` (RFC code) at ``when``."""
        self.gpg("--edit-key", self.fingerprint, when=when, commands=f"revkey\ny\n{MENU[reason]}\n\ny\nsave\n")

    def sign(self, data: bytes, when: float, subkey: str | None = None) -> bytes:
        """An armored detached signature over ``data`` by the current (or the named) signing subkey."""
        return self.gpg("--local-user", f"{subkey or self.subkey}!", "--armor", "--detach-sign",
                        when=when, data=data).stdout

    def public(self, *, history: bool = True) -> bytes:
        """The public key, armored: every packet, or (``history=False``) only the newest self-signatures."""
        return self.gpg("--armor", "--export-options", "no-export-clean" if history else "export-clean",
                        "--export", self.fingerprint).stdout

    def stolen(self, home: Path) -> LifeKey:
        """A copy of this secret home as it is now (its later steps do not reach the copy)."""
        shutil.copytree(self.home, home, ignore=shutil.ignore_patterns("S.*", "*.lock", ".#lk*"))
        copy = object.__new__(LifeKey)
        copy.__dict__.update(self.__dict__, home=home, subkeys=list(self.subkeys))
        return copy

    def close(self) -> None:
        """Stop the home's agent."""
        subprocess.run(["gpgconf", "--homedir", str(self.home), "--kill", "all"], capture_output=True, check=False)
