"""The top Manifest gemato reads is the text both OpenPGP implementations say was signed.

gemato verifies the top Manifest's signature with GnuPG alone and then parses the file itself.  GnuPG 2.2
hashes only the first 19,998 bytes of a cleartext line (GnuPG bug T6272): a mirror padded one genuinely signed
line past that limit, appended a second checksum pair, and gemato read the whole line (issue 34, case 1).  So
before gemato reads a byte, the top Manifest goes through gkeys' own cleartext check:

1. the file is one cleartext-signed block and nothing else, in the form gemato and GnuPG read alike: LF line
   endings, no dash-escaped line, no trailing blank, only printable ASCII in the signed text, no line longer than
   GnuPG 2.2 hashes (what a Manifest never needs; a difference is refused, not repaired);
2. GnuPG and Sequoia both verify it against exactly the pinned repository keys (``engines-disagree`` when only
   one accepts, :mod:`gkeys_portage.openpgp.sequoia`);
3. the text gemato will parse (the block's body) equals the text GnuPG returned and Sequoia checked.
"""

from __future__ import annotations

from gkeys_portage.core.errors import (
    NoSignatureError,
    NotVerifiedError,
    SignerNotPinnedError,
    UnknownSignerError,
    UnsignedDataError,
)
from gkeys_portage.core.scratch import private_dir
from gkeys_portage.openpgp.gnupg import GnuPG
from gkeys_portage.openpgp.packets import ARMOR_BEGIN, CLEARSIGN_BEGIN, find_clearsigned
from gkeys_portage.openpgp.verdict import PinSet, SignedData, VerifyResult, decide

#: The longest line GnuPG 2.2 hashes whole (longer ones are hashed only up to here: T6272).
MAX_HASHED_LINE = 19_998


def _framing_refusal(data: bytes) -> str | None:
    """Why ``data`` is not a top Manifest that every reader reads alike (None when it is)."""
    try:
        block = find_clearsigned(data)
    except NoSignatureError as exc:
        return exc.message
    if block.outside:
        return "it holds text outside its signed block"
    cut = block.canonical.index(b"\n" + ARMOR_BEGIN) + 1
    if data[:cut] != block.canonical[:cut]:
        return "its header or line endings are not the plain form (LF line endings, 'Hash:' lines only)"
    for number, line in enumerate(block.escaped, start=1):
        if len(line) > MAX_HASHED_LINE:
            return (f"signed line {number} is {len(line)} bytes long, more than GnuPG 2.2 hashes "
                    f"({MAX_HASHED_LINE}: the rest of the line would not be signed)")
        if line.startswith(b"- "):
            return f"signed line {number} is dash-escaped (no Manifest line starts with '-')"
        if line != line.rstrip(b" \t"):
            return f"signed line {number} ends in blanks (the signature does not cover them)"
        if any(byte < 0x20 or byte > 0x7E for byte in line):
            return (f"signed line {number} holds a control or non-ASCII byte (a form feed or carriage return "
                    "splits lines differently for each reader)")
    return None


def check_top_manifest(data: bytes, keyring: bytes, pins: PinSet, where: str) -> VerifyResult:
    """Verify the top Manifest ``data`` with both implementations against ``keyring`` (exactly the keys of
    ``pins``) and make sure gemato will read the text they checked; raise the :class:`NotVerifiedError`
    subclass that says why not."""
    if CLEARSIGN_BEGIN not in data:
        raise NoSignatureError(f"{where}: the top Manifest is not OpenPGP-signed; refused")
    refusal = _framing_refusal(data)
    if refusal is not None:
        raise UnsignedDataError(f"{where}: the top Manifest is refused before gemato reads it: {refusal}")
    with private_dir("gkeys-top-manifest-") as home:  # owned: a killed sync's is removed by the next
        gpg = GnuPG(home)
        gpg.import_keys(keyring, options=())  # exactly the pinned keys, exported by gkeys (as gemato imports them)
        report, plaintext = gpg.verify_clearsigned(data)
        try:
            result = decide(report, pins, {key.fingerprint: key for key in gpg.list_keys()},
                            signed=SignedData.CLEARTEXT)
        except (UnknownSignerError, SignerNotPinnedError) as exc:
            raise SignerNotPinnedError(
                f"{where}: the top Manifest is signed by a key that is not a pinned repository key (pinned: "
                f"{pins.describe()}); refused (a developer or release-media key may not sign a tree)",
                detail=exc.message) from exc
        except NotVerifiedError as exc:
            raise exc.reworded(f"{where}: the top Manifest: {exc.message}") from exc
    if plaintext != find_clearsigned(data).text + b"\n":
        raise UnsignedDataError(f"{where}: the text GnuPG verified in the top Manifest is not the text gemato "
                                "would read; refused")
    return result
