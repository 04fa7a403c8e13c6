"""Where keys come from: HKP/HKPS keyservers, WKD (advanced and direct), a URL, a file.

This module only builds the list of candidate locations for a fingerprint; downloading and
fingerprint filtering happen in :mod:`gkeys_portage.keys.install`.
"""

from __future__ import annotations

import hashlib
import urllib.parse
from dataclasses import dataclass

from gkeys_portage.core.config import SourcesConfig
from gkeys_portage.core.errors import ConfigError
from gkeys_portage.core.types import Fingerprint

ZBASE32_ALPHABET = "ybndrfg8ejkmcpqxot1uwisza345h769"


def zbase32(data: bytes) -> str:
    """z-base-32 encoding (as used by WKD for the hashed local part)."""
    bits = "".join(f"{byte:08b}" for byte in data)
    bits += "0" * (-len(bits) % 5)
    return "".join(ZBASE32_ALPHABET[int(bits[i : i + 5], 2)] for i in range(0, len(bits), 5))


def wkd_hash(local_part: str) -> str:
    """The WKD hash of an address's local part: z-base-32 of SHA-1 of the lower-cased local part."""
    return zbase32(hashlib.sha1(local_part.lower().encode("utf-8")).digest())


@dataclass(frozen=True)
class KeyLocation:
    """One place to ask for a key."""

    kind: str  # "wkd-advanced", "wkd-direct", "keyserver", "url", "file"
    url: str
    #: The configured source this location belongs to (``wkd DOMAIN`` for both WKD methods, a keyserver as
    #: written in ``[sources] keyservers``): refresh records when each one last answered.
    source: str = ""

    def describe(self) -> str:
        """Short human description."""
        return f"{self.kind} {self.url}"


def wkd_locations(email: str, sources: SourcesConfig) -> list[KeyLocation]:
    """The advanced, then direct, WKD URLs for ``email`` (draft-koch-openpgp-webkey-service)."""
    local, sep, domain = email.rpartition("@")
    if not sep or not local or not domain:
        return []
    domain = domain.lower()
    suffix = f"/hu/{wkd_hash(local)}?l={urllib.parse.quote(local)}"
    return [
        KeyLocation("wkd-advanced", sources.wkd_advanced_url.format(domain=domain) + suffix, f"wkd {domain}"),
        KeyLocation("wkd-direct", sources.wkd_direct_url.format(domain=domain) + suffix, f"wkd {domain}"),
    ]


def keyserver_base(keyserver: str) -> str:
    """The HTTP base URL of a keyserver given as ``hkp://``, ``hkps://``, ``http://`` or ``https://``."""
    parts = urllib.parse.urlsplit(keyserver)
    if parts.scheme == "hkp":
        netloc = parts.netloc if parts.port else f"{parts.netloc}:11371"
        return urllib.parse.urlunsplit(("http", netloc, parts.path.rstrip("/"), "", ""))
    if parts.scheme == "hkps":
        return urllib.parse.urlunsplit(("https", parts.netloc, parts.path.rstrip("/"), "", ""))
    if parts.scheme in ("http", "https"):
        return keyserver.rstrip("/")
    raise ConfigError(f"keyserver {keyserver!r}: use hkp://, hkps://, http:// or https://")


def keyserver_location(keyserver: str, fingerprint: Fingerprint) -> KeyLocation:
    """The machine-readable HKP lookup URL for a full fingerprint."""
    base = keyserver_base(keyserver)
    return KeyLocation("keyserver", f"{base}/pks/lookup?op=get&options=mr&search=0x{fingerprint}", keyserver)


def candidate_locations(fingerprint: Fingerprint, emails: list[str], sources: SourcesConfig) -> list[KeyLocation]:
    """All places to try for one fingerprint, in order: WKD (advanced, direct) then keyservers."""
    found: list[KeyLocation] = []
    if sources.wkd:
        for email in emails:
            found += wkd_locations(email, sources)
    found += [keyserver_location(server, fingerprint) for server in sources.keyservers]
    return found
