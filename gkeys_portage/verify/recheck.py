"""``gkeys audit --key FPR --recheck``: verify again, against today's keyrings, what an audit found that is
still on disk, so a revocation published after the fact shows what it hits.

What is rechecked, per artifact (nothing is re-downloaded, nothing recorded as a new acceptance):

- a git tree: the commits of each recorded range, at their recorded revisions, in the repository still at
  its place (``--policy all`` over the range, the recorded categories);
- an rsync tree: the live tree's top Manifest, if it is still the recorded one (its signature against
  today's keyring; the files are not hashed again);
- a webrsync snapshot or a seed file: its signature again, if the file still has the recorded digest;
- a release file: the whole ``verify-media`` check again, if the file is still there.

- a file ``gkeys verify -F`` accepted: its signature again, if the file still has the recorded digest; a file a
  build named (``reported_by``) is opened only as the journal spool's claims are (below Portage's DISTDIR, no link
  followed, a plain file: :mod:`gkeys_portage.verify.claimed`), never by its name.

What is on disk is first compared with the digest the entry recorded of what was accepted (a file's SHA-256 or
SHA-512, a tree's top Manifest, a commit id): only the very thing accepted is verified again.  An overlay list
keeps no signature on disk: it is listed, to be fetched and verified again.  Each result is ``refused`` (with the
reason code), ``verifies``, ``replaced`` (something else now sits at the place: another file, another tree),
``gone`` (nothing is there any more) or ``not rechecked``; the run is journaled as one ``audit-recheck`` entry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gkeys_portage.core import journal
from gkeys_portage.core.errors import GkeysError, NotVerifiedError
from gkeys_portage.core.state import read_limited
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.verify.audit import Audit, Hit
from gkeys_portage.verify.claimed import Unconfirmable
from gkeys_portage.verify.file import locate, verify_input
from gkeys_portage.verify.git.objects import GitRepo
from gkeys_portage.verify.git.revisions import Revisions
from gkeys_portage.verify.git.tree import TreeOptions, TreeVerifier
from gkeys_portage.verify.ingest import verify_claimed
from gkeys_portage.verify.manifest.purpose import purpose_keyring, repository_pins
from gkeys_portage.verify.manifest.tree import verify_tree
from gkeys_portage.verify.media.record import JOURNALED
from gkeys_portage.verify.media.verifier import MediaVerifier, media_signatures

REFUSED, VERIFIES, REPLACED, GONE, UNCHECKED = "refused", "verifies", "replaced", "gone", "not rechecked"


@dataclass(frozen=True)
class Recheck:
    """What became of one accepted artifact when verified again today."""

    hit: Hit
    status: str
    why: str = ""
    code: str = ""

    def to_json(self) -> dict[str, Any]:
        """Machine-readable form."""
        return {"artifact": self.hit.artifact, "subject": self.hit.subject, "accepted": self.hit.entry.when_zoned,
                "status": self.status, "why": self.why, "code": self.code or None}


@dataclass(frozen=True)
class _Absent:
    """What was accepted is no longer at its place: ``status`` is :data:`GONE` or :data:`REPLACED`."""

    status: str
    why: str


def _digest(path: Path, name: str = "sha256") -> str:
    digest = hashlib.new(name)
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _compare(path: Path, digests: dict[str, Any], what: str = "file") -> _Absent | None:
    """None if ``path`` is the file accepted (the strongest digest recorded matches), else why not; raises
    :class:`_Unchecked` for an entry that recorded no strong digest (journaled before gkeys recorded one)."""
    if not path.is_file():
        return _Absent(GONE, f"no {what} at {path} any more (removed since)")
    name = next((name for name in JOURNALED if digests.get(name)), None)
    if name is None:
        raise _Unchecked(f"the entry records no strong digest of {path}, so it cannot tell that file from another: "
                         f"verify it again (gkeys verify-media {path}, or gkeys verify -F {path})")
    if _digest(path, name) != digests[name]:
        return _Absent(REPLACED, f"another {what} now sits at {path} (its {name} differs from the one accepted): "
                                 "what was accepted is gone")
    return None


def _tree(ctx: Gkeys, data: dict[str, Any]) -> str | _Absent:
    """Re-verify the recorded range; the refusal propagates as :class:`NotVerifiedError`."""
    path = Path(data["repo"])
    if not (path / ".git").exists() and not (path / "HEAD").exists():
        return _Absent(GONE, f"no git repository at {path} any more")
    repo = GitRepo(path)
    tip, base = str(data["tip"]), data.get("base")
    if not repo.has_commit(tip):
        return _Absent(REPLACED, f"the repository at {path} no longer holds the accepted commit {tip[:12]} "
                                 "(cloned afresh, or its history rewritten since)")
    options = TreeOptions(categories=tuple(data.get("categories") or ()) or TreeOptions.from_config(ctx).categories,
                          top_category=data.get("top_category"), policy="all")
    verifier = TreeVerifier(ctx, options)
    if base and base != tip:
        hashes = Revisions(repo, tip, [base])
    else:
        hashes = Revisions(repo, tip, only_tip=base == tip or data.get("checked") == 1)
    report = verifier.verify(repo, hashes, tip=tip, base=base)
    if not report.ok:
        raise _TreeRefused(f"{len(report.bad)} of {report.checked} commit(s) refused now: {report.reason()}",
                           report.bad[0].code)
    return f"{report.checked} commit(s) verify"


class _TreeRefused(NotVerifiedError):
    """A recorded range that does not verify today (carries the first refused commit's code)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code or self.reason


def _rsync(ctx: Gkeys, data: dict[str, Any]) -> str | _Absent:
    location = Path(data["location"])
    top = location / "Manifest"
    if not top.is_file():
        return _Absent(GONE, f"no tree at {location} any more (no top Manifest)")
    if hashlib.sha256(top.read_bytes()).hexdigest() != data.get("manifest_sha256"):
        return _Absent(REPLACED, f"{location} holds another tree now (its top Manifest is not the one accepted: "
                                 "synced since)")
    category = str(data.get("signer", "")).split("/", 1)[0]
    pins, _ = repository_pins(ctx, category)
    tree = verify_tree(location, purpose_keyring(ctx, category, pins), pins, where=str(location),
                       known_digest=str(data["manifest_sha256"]))
    return f"top Manifest signed by {tree.signer.category}/{tree.signer.nick}"


def _signed_file(ctx: Gkeys, path: Path, signature: Path, digest: str, signer: dict[str, Any],
                 repository: bool) -> str | _Absent:
    if (absent := _compare(path, {"sha256": digest})) is not None:
        return absent
    if not signature.is_file():
        return _Absent(GONE, f"the signature {signature} is no longer on disk")
    category = str(signer.get("category", ""))
    if repository:
        verifier = ctx.verifier(category, pins=repository_pins(ctx, category)[0])
    else:
        verifier = ctx.verifier(category, [str(signer.get("nick", ""))])
    result = verifier.detached(read_limited(signature, 1 << 20, "signature"), path)
    return f"signed by {result.signer.pin.category}/{result.signer.pin.nick}"


def _media(ctx: Gkeys, data: dict[str, Any]) -> str | _Absent:
    path = Path(data["file"])
    if (absent := _compare(path, data.get("digests") or {})) is not None:
        return absent
    category = str(data.get("category", "gentoo"))
    verified = MediaVerifier(media_signatures(ctx, category), category,
                             allow_unnamed=ctx.config.flag("fetch", "allow-unnamed", False),
                             bind_by_date=ctx.config.flag("fetch", "bind-by-date", False)).verify(path)
    return f"verified ({len(verified.signed)} signed sibling(s))"


def _claimed(ctx: Gkeys, data: dict[str, Any], distdir: Path | None) -> str | _Absent:
    """A file a build named (``reported_by``): opened only as the spool's claims are (:mod:`~.claimed`), never by
    its name, verified again if it is still the file accepted."""
    name, by = str(data["file"]), data["reported_by"]
    try:
        _, _, result, _ = verify_claimed(ctx, data, (str(by.get("user")), int(by.get("uid", -1))), distdir)
    except Unconfirmable as exc:
        if str(exc) == "the file is gone":
            return _Absent(GONE, f"no file at {name} any more (removed since)")
        if str(exc) == "the file changed since the build verified it":
            return _Absent(REPLACED, f"another file now sits at {name} (its sha256 differs from the one accepted): "
                                     "what was accepted is gone")
        raise _Unchecked(f"{exc}: a file a build named is verified again only where a build verifies it "
                         f"(Portage's DISTDIR, as a plain file): gkeys verify -F {name}") from exc
    return f"signed by {result.signer.pin.category}/{result.signer.pin.nick}"


def _file(ctx: Gkeys, data: dict[str, Any], distdir: Path | None) -> str | _Absent:
    """A file ``gkeys verify -F`` accepted: verified again if it is still the file accepted."""
    name = str(data["file"])
    if isinstance(data.get("reported_by"), dict):
        return _claimed(ctx, data, distdir)
    if "://" in name:
        raise _Unchecked(f"{name} was verified as downloaded and not kept: verify it again (gkeys verify -F {name})")
    if (absent := _compare(Path(name), {"sha256": data.get("sha256")})) is not None:
        return absent
    signature = data.get("signature")
    signed = locate(ctx, name, None if signature in (None, "", "inline") else str(signature))
    _, result = verify_input(ctx, signed, [str(data["category"])], data.get("nick") or None)
    return f"signed by {result.signer.pin.category}/{result.signer.pin.nick}"


def _one(ctx: Gkeys, hit: Hit, distdir: Callable[[], Path | None]) -> str | _Absent:
    """The recheck of one hit: what verifies, or why it is no longer there; raises the refusal."""
    data = hit.entry.data
    kind = hit.entry.kind
    if kind == "tree-accepted":
        return _tree(ctx, data)
    if kind in ("file-accepted", "file-reported"):  # a build's unconfirmed claim: verified if the file is back
        return _file(ctx, data, distdir())
    if kind == "rsync-accepted":
        return _rsync(ctx, data)
    if kind == "snapshot-accepted":
        path = Path(data["file"])
        return _signed_file(ctx, path, path.with_name(path.name + ".gpgsig"), str(data.get("sha256")),
                            data.get("signer", {}), repository=True)
    if kind == "media-accepted":
        return _media(ctx, data)
    if kind == "seed-installed":
        path = ctx.seeds.path(data["category"])
        return _signed_file(ctx, path, path.with_name(path.name + ".sig"), str(data.get("sha256")),
                            data.get("signer", {}), repository=False)
    if kind == "binpkg-home":
        raise _Unchecked("Portage verified each binary package itself; gkeys kept no record of them: see the next "
                         "step")
    raise _Unchecked("the signature is not kept on disk: fetch and verify it again (gkeys verify-overlays)")


class _Unchecked(Exception):
    """An artifact that cannot be verified again from what is on disk."""


def recheck(ctx: Gkeys, found: Audit, distdir: Callable[[], Path | None] = lambda: None) -> list[Recheck]:
    """Verify again every artifact of ``found`` (newest first, one result per artifact); journal the run.
    ``distdir``: Portage's DISTDIR, the only place a file a build named is opened (None: not rechecked)."""
    results: list[Recheck] = []
    with journal.suspended():
        for hits in found.groups().values():
            for hit in hits[::-1]:
                try:
                    said = _one(ctx, hit, distdir)
                    results.append(Recheck(hit, said.status, said.why) if isinstance(said, _Absent) else
                                   Recheck(hit, VERIFIES, said))
                except NotVerifiedError as exc:
                    results.append(Recheck(hit, REFUSED, exc.message, getattr(exc, "code", exc.reason)))
                except _Unchecked as exc:
                    results.append(Recheck(hit, UNCHECKED, str(exc)))
                except (GkeysError, OSError) as exc:
                    results.append(Recheck(hit, UNCHECKED, f"cannot recheck: {exc}"))
    journal.record(ctx, "audit-recheck", {"key": found.key, "refused": [
        {"artifact": r.hit.artifact, "subject": r.hit.subject, "code": r.code} for r in results
        if r.status == REFUSED], "checked": len(results)})
    return results
