"""``gkeys status``: one screen of facts gkeys already keeps, read without touching the network.

* every category: how many seeds and installed pinned keys, the next expiry among them, when the keys
  were last refreshed and when each key source last answered;
* every repository Portage knows (repos.conf as Portage merges it, :mod:`gkeys_portage.portage.reposconf`):
  its sync type, what verifies it, the last verified git revision or the high-water mark (the newest
  verified Manifest ``TIMESTAMP`` or snapshot) gkeys keeps for it;
* the OpenPGP engine gkeys runs (``[gpg] program``, ``$GKEYS_GPG``: :mod:`gkeys_portage.openpgp.engine`);
* how many findings ``gkeys doctor`` has.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gkeys_portage.core.errors import GkeysError
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.refresh import last_refresh, source_refreshes
from gkeys_portage.openpgp.engine import probe
from gkeys_portage.openpgp.sequoia import describe as describe_second_opinion
from gkeys_portage.portage.doctor import diagnose, verified_by
from gkeys_portage.portage.reposconf import read_repos
from gkeys_portage.portage.rsyncsync import mark_key
from gkeys_portage.portage.setup import ETC, TREE_HOOKS
from gkeys_portage.verify.git.records import last_verified
from gkeys_portage.verify.manifest.marks import Mark, all_marks


@dataclass
class CategoryStatus:
    """One category's keys and refreshes (times are epoch seconds, None: never / no expiry)."""

    name: str
    seeds: int
    keys: int  # pinned keys installed
    next_expiry: int | None
    last_refresh: float | None
    sources: dict[str, float | None] = field(default_factory=dict)  # configured source -> last answer
    #: authorization windows (issue 41): keys kept for their past signatures, every window closed (retired)
    retired: dict[str, str] = field(default_factory=dict)  # "nick FPR" -> its last window, described
    expired: dict[str, int | None] = field(default_factory=dict)  # pinned key that expired -> when (as list-key)


@dataclass
class RepoStatus:
    """One repository: how it syncs, what verifies it, and what gkeys last verified of it."""

    name: str
    location: str
    sync_type: str
    sync_uri: str
    verified_by: str  # gkeys rsync | gkeys git | gkeys git hook | Portage ... | nothing
    revision: str | None = None  # last verified git revision
    mark: dict[str, str] | None = None  # high-water mark (rsync Manifest TIMESTAMP or snapshot)


@dataclass
class Status:
    """Everything ``gkeys status`` shows."""

    categories: list[CategoryStatus]
    repositories: list[RepoStatus]
    doctor_findings: int | None  # None: doctor was not run, or could not run (doctor_error says why)
    doctor_error: str = ""
    engine: str = ""  # "gpg (GnuPG 2.2.40)"; "" when it cannot run (engine_error says why)
    engine_error: str = ""
    second_opinion: tuple[str, str] = ("on", "")  # (on | off | missing, what it says): openpgp.sequoia.describe

    def to_json(self) -> dict[str, object]:
        """The one JSON document of ``gkeys --json status``."""
        return {"categories": [asdict(c) for c in self.categories],
                "repositories": [asdict(r) for r in self.repositories],
                "doctor": {"findings": self.doctor_findings, "error": self.doctor_error or None},
                "engine": {"name": self.engine or None, "error": self.engine_error or None},
                "second_opinion": {"state": self.second_opinion[0], "detail": self.second_opinion[1]}}


def _category(ctx: Gkeys, name: str) -> CategoryStatus:
    cat = ctx.require_category(name)
    pins = ctx.seeds.pins(cat)
    keyring = ctx.keyring(cat)
    installed = {fpr: key for fpr, key in keyring.installed().items() if pins.get(fpr) is not None}
    now = time.time()
    expiries = [sub.expires for key in installed.values() for sub in key.all_keys()
                if sub.expires is not None and sub.expires > now and not sub.revoked
                and (sub is key.primary or sub.can("s"))]
    answered = source_refreshes(ctx, cat)
    sources: dict[str, float | None] = {source: None for source in ctx.config.sources.keyservers}
    sources.update(answered)  # WKD answers are named per domain ("wkd gentoo.org")
    if ctx.config.sources.wkd and not any(source.startswith("wkd") for source in sources):
        sources["wkd"] = None
    seeds = ctx.seeds.load(cat)
    expired = {str(fpr): key.primary.expires for fpr, key in installed.items() if not key.primary.revoked
               and (key.primary.validity == "e" or (key.primary.expires is not None and key.primary.expires <= now))}
    retired = {f"{seed.nick} {fpr}": window.describe() for seed in seeds.values()
               for fpr, window in sorted(seed.retired(now).items())}
    return CategoryStatus(str(cat), len(seeds), len(installed), min(expiries) if expiries else None,
                          last_refresh(ctx, cat), sources, retired, expired)


def collect_status(ctx: Gkeys, eroot: Path, *, doctor: bool = True) -> Status:
    """The status of ``ctx``'s state and of the repositories configured below ``eroot`` (with ``doctor``, also
    the number of ``gkeys doctor`` findings)."""
    hooked = all((eroot / ETC / hook).is_file() for hook in TREE_HOOKS)
    categories = [_category(ctx, name) for name in ctx.seeds.categories()]
    marks: dict[str, Mark] = all_marks(ctx) if ctx.layout.state_dir.is_dir() else {}
    repos = []
    for name, repo in sorted(read_repos(eroot).items()):
        location = repo.get("location")
        revision = last_verified(ctx.layout, Path(location)) if location else None
        mark = marks.get(mark_key(Path(location))) if location else None
        mark = mark or marks.get(f"snapshot:{name}")
        repos.append(RepoStatus(name, location, repo.get("sync-type"), repo.get("sync-uri"), verified_by(repo, hooked),
                                revision, mark.to_json() if mark else None))
    findings, error = None, ""
    if doctor:
        try:
            findings = len(diagnose(ctx, eroot).findings)
        except GkeysError as exc:  # status still shows the rest; the reason is printed
            error = exc.message
    try:
        engine, engine_error = probe().describe(), ""
    except GkeysError as exc:  # the engine cannot run: status says so, doctor names the fix
        engine, engine_error = "", exc.message
    return Status(categories, repos, findings, error, engine, engine_error, describe_second_opinion())
