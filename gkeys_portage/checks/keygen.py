"""Generate a GLEP 63 (v2.2) compliant developer key through the GnuPG door.

The key that :func:`generate` makes:

* a **certify-only** primary key (ed25519, or RSA 4096/2048),
* a separate **signing** subkey and an **encryption** subkey (cv25519, or RSA of the same size),
* the same expiry on all three, at most 900 days ahead (default one year, GLEP 63's recommendation),
* SHA-2 only preferences and SHA-512 self- and binding signatures,
* one user id ``Name <address>``, an ``@gentoo.org`` address unless explicitly allowed otherwise.

It then exports the public key and GnuPG's revocation certificate next to each other, and checks the
result with the ``glep63-2.2`` spec (the same code as ``gkeys spec-check``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from gkeys_portage.checks.glep63 import DEFAULT_SPEC, Issue, Level, check_key
from gkeys_portage.core.errors import BadInputError, GpgError, UsageError
from gkeys_portage.core.state import atomic_write
from gkeys_portage.core.types import Fingerprint
from gkeys_portage.openpgp.gnupg import GnuPG

#: Algorithms offered: name -> (primary, signing subkey, encryption subkey) as gpg spells them.
ALGORITHMS: dict[str, tuple[str, str, str]] = {
    "ed25519": ("ed25519", "ed25519", "cv25519"),
    "rsa4096": ("rsa4096", "rsa4096", "rsa4096"),
    "rsa2048": ("rsa2048", "rsa2048", "rsa2048"),
}
DEFAULT_ALGORITHM = "ed25519"

#: SHA-2 digests first (no SHA-1, no MD5), strong ciphers, then compression.
PREFERENCES = ("SHA512", "SHA384", "SHA256", "SHA224", "AES256", "AES192", "AES", "ZLIB", "BZIP2", "ZIP",
               "Uncompressed")
CERT_DIGEST = "SHA512"

DEFAULT_EXPIRE = "1y"
MAX_EXPIRE_DAYS = 900
#: GLEP 63 wants renewal at least two weeks before expiry, so a new key must live longer than that.
MIN_EXPIRE_DAYS = 15
GENTOO_DOMAIN = "gentoo.org"

#: the GLEP 63 error codes ``--allow-any-email`` accepts (reported as exceptions, never as compliance)
ACCEPTED_WITH_ANY_EMAIL = frozenset({"uid:nogentoo"})

_EXPIRE_RE = re.compile(r"\A(\d{1,5})([dwmy]?)\Z")
_UNIT_DAYS = {"": 1, "d": 1, "w": 7, "m": 30, "y": 365}
_EMAIL_RE = re.compile(r"\A[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\Z")
_BAD_NAME_RE = re.compile(r"[<>()\x00-\x1f\x7f]")


@dataclass(frozen=True)
class KeySpec:
    """What to generate: the user id parts, algorithm and lifetime (validated by :func:`key_spec`)."""

    name: str
    email: str
    algorithm: str
    expire_days: int
    #: the user asked for an address outside @gentoo.org: ``uid:nogentoo`` is then expected, not an error
    allow_any_email: bool = False

    @property
    def uid(self) -> str:
        """The user id, ``Name <address>``."""
        return f"{self.name} <{self.email}>"


@dataclass
class GeneratedKey:
    """The outcome of :func:`generate`."""

    fingerprint: Fingerprint
    signing_subkey: Fingerprint
    encryption_subkey: Fingerprint
    uid: str
    algorithm: str
    expires: datetime
    homedir: Path
    public_key_file: Path
    revocation_file: Path
    issues: list[Issue] = field(default_factory=list)
    #: issue codes the user accepted in advance (``uid:nogentoo`` with ``--allow-any-email``)
    accepted: frozenset[str] = frozenset()

    @property
    def errors(self) -> list[Issue]:
        """GLEP 63 errors found on the new key (none, unless GnuPG changed its defaults)."""
        return [issue for issue in self.issues if issue.level is Level.ERROR and issue.code not in self.accepted]

    @property
    def accepted_errors(self) -> list[str]:
        """The codes of GLEP 63 errors found on the key that the user accepted in advance: the key is
        *not* compliant with the spec, only with the exceptions asked for (sorted, no duplicates)."""
        return sorted({issue.code for issue in self.issues if issue.level is Level.ERROR
                       and issue.code in self.accepted})

    @property
    def compliant(self) -> bool:
        """True only when the key meets the spec without exceptions."""
        return not self.errors and not self.accepted_errors

    def next_steps(self) -> list[str]:
        """What the developer does next: back up, keep the revocation offline, publish, renew."""
        home = f"--homedir {self.homedir} "
        return [
            f"back up the secret key offline: gpg {home}--export-secret-keys --armor {self.fingerprint} > backup.asc",
            f"keep {self.revocation_file} offline, apart from the backup: importing it revokes the key",
            f"upload the public key: gpg {home}--keyserver hkps://keys.gentoo.org --send-keys {self.fingerprint}",
            f"set gpgfingerprint in your LDAP entry to {self.fingerprint} (WKD and the gentoo-devs seeds follow)",
            f"renew at least 2 weeks before {self.expires:%Y-%m-%d}: "
            f"gpg {home}--quick-set-expire {self.fingerprint} 1y '*' (and the primary without '*')",
        ]

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {
            "fingerprint": self.fingerprint, "signing_subkey": self.signing_subkey,
            "encryption_subkey": self.encryption_subkey, "uid": self.uid, "algorithm": self.algorithm,
            "expires": self.expires.isoformat(), "homedir": str(self.homedir),
            "public_key_file": str(self.public_key_file), "revocation_file": str(self.revocation_file),
            "spec": DEFAULT_SPEC, "issues": [issue.to_json() for issue in self.issues],
            "compliant": self.compliant, "accepted": self.accepted_errors,
            "next_steps": self.next_steps(),
        }


def parse_expire(text: str, today: date | None = None) -> int:
    """Days until expiry for ``1y``, ``18m``, ``52w``, ``400d``, ``400`` or an ISO date ``2027-01-31``.

    Units follow gpg (``m`` = 30 days, ``y`` = 365 days).  "Never" (``0``) and anything outside
    15..900 days is refused: GLEP 63 caps expiry at 900 days and wants renewal two weeks ahead.
    """
    cleaned = text.strip().lower()
    match = _EXPIRE_RE.match(cleaned)
    if match:
        days = int(match.group(1)) * _UNIT_DAYS[match.group(2)]
    else:
        try:
            target = date.fromisoformat(cleaned)
        except ValueError:
            raise UsageError(f"invalid expiry {text!r}: use e.g. 1y, 18m, 52w, 400d or a date YYYY-MM-DD") from None
        days = (target - (today or datetime.now(UTC).date())).days
    if days > MAX_EXPIRE_DAYS:
        raise UsageError(f"expiry {text!r} is {days} days ahead; GLEP 63 allows at most {MAX_EXPIRE_DAYS} days")
    if days < MIN_EXPIRE_DAYS:
        raise UsageError(f"expiry {text!r} is {days} days ahead; a key must be valid for at least "
                         f"{MIN_EXPIRE_DAYS} days (0 / never-expiring keys are not allowed)")
    return days


def key_spec(name: str, email: str, *, algorithm: str = DEFAULT_ALGORITHM, expire: str = DEFAULT_EXPIRE,
             allow_any_email: bool = False) -> KeySpec:
    """Validate the user's choices; raise :class:`UsageError`/:class:`BadInputError` with one clear line."""
    name = name.strip()
    email = email.strip()
    if not name:
        raise BadInputError("the name must not be empty")
    if _BAD_NAME_RE.search(name) or len(name) > 200:
        raise BadInputError(f"invalid name {name!r}: no <, >, parentheses or control characters (at most 200)")
    if not _EMAIL_RE.match(email):
        raise BadInputError(f"invalid e-mail address {email!r}")
    if not allow_any_email and email.rsplit("@", 1)[1].lower() != GENTOO_DOMAIN:
        raise BadInputError(f"{email} is not an @{GENTOO_DOMAIN} address (GLEP 63 requires one); "
                            "use --allow-any-email for a key outside Gentoo")
    if algorithm not in ALGORITHMS:
        raise UsageError(f"unknown algorithm {algorithm!r}: choose one of {', '.join(ALGORITHMS)}")
    return KeySpec(name=name, email=email, algorithm=algorithm, expire_days=parse_expire(expire),
                   allow_any_email=allow_any_email)


def _undo(gpg: GnuPG, primary: Fingerprint, exc: GpgError) -> None:
    """Remove a primary key whose subkeys could not be added: a half-made key must not stay behind."""
    try:
        gpg.delete_secret_and_public(primary)
    except GpgError as cleanup:
        exc.message += f" (the incomplete key {primary} is still in {gpg.homedir}: {cleanup})"
    else:
        exc.message += f" (the incomplete key {primary} was removed again)"


def generate(spec: KeySpec, homedir: Path, outdir: Path, *, passphrase: str = "",
             timeout: float = 600.0) -> GeneratedKey:
    """Generate the key described by ``spec`` in the GnuPG home ``homedir``.

    Writes ``<FPR>.pub.asc`` (public key) and ``<FPR>.rev.asc`` (revocation certificate) into ``outdir``
    and checks the new key against GLEP 63 v2.2.  An empty ``passphrase`` leaves the secret key
    unprotected (the caller decides whether that was asked for).  The gpg-agent is stopped afterwards
    only if this call created ``homedir`` (a user's own agent keeps running).
    """
    primary_algo, sign_algo, encrypt_algo = ALGORITHMS[spec.algorithm]
    expire = f"{spec.expire_days}d"
    new_home = not homedir.exists()
    gpg = GnuPG(homedir, timeout=timeout)
    try:
        if any(uid.text == spec.uid for key in gpg.list_keys(secret=True) for uid in key.uids):
            raise BadInputError(f"{homedir} already holds a secret key for {spec.uid!r}; "
                                "use another --homedir or revoke the old key first")
        primary = gpg.generate_key(spec.uid, algorithm=primary_algo, usage="cert", expire=expire,
                                   passphrase=passphrase, preferences=PREFERENCES, cert_digest=CERT_DIGEST)
        try:
            signing = gpg.add_subkey(primary, algorithm=sign_algo, usage="sign", expire=expire,
                                     passphrase=passphrase, cert_digest=CERT_DIGEST)
            encryption = gpg.add_subkey(primary, algorithm=encrypt_algo, usage="encr", expire=expire,
                                        passphrase=passphrase, cert_digest=CERT_DIGEST)
        except GpgError as exc:
            _undo(gpg, primary, exc)
            raise
        public = gpg.export_keys([primary], armor=True)
        revocation = gpg.revocation_certificate(primary)
        listed = gpg.list_keys([primary], sigs=True)
    finally:
        if new_home:
            gpg.close()
    if not listed:
        raise GpgError(f"the new key {primary} is not listed in {homedir}")
    outdir.mkdir(parents=True, exist_ok=True)
    public_file = outdir / f"{primary}.pub.asc"
    revocation_file = outdir / f"{primary}.rev.asc"
    atomic_write(public_file, public)
    atomic_write(revocation_file, revocation, mode=0o600)
    key = listed[0]
    expires = (datetime.fromtimestamp(key.primary.expires, UTC) if key.primary.expires
               else datetime.now(UTC) + timedelta(days=spec.expire_days))
    return GeneratedKey(
        fingerprint=primary, signing_subkey=signing, encryption_subkey=encryption, uid=spec.uid,
        algorithm=spec.algorithm, expires=expires, homedir=homedir, public_key_file=public_file,
        revocation_file=revocation_file, issues=check_key(key, DEFAULT_SPEC),
        accepted=ACCEPTED_WITH_ANY_EMAIL if spec.allow_any_email else frozenset(),
    )
