"""``gkeys doctor``: everything that would make verification fail or be skipped, each with its fix.

Findings are data (a stable ``code``, the subject, what is wrong and the command that fixes it); the CLI
only renders them.  Checked, under ``EROOT`` and the gkeys state of the configuration:

* ``seeds:missing`` / ``seeds:old``: a category in use has no seeds, or seeds signed longer ago than
  ``[policy] max-seed-age``;
* ``keys:missing`` / ``keys:stale`` / ``keys:expired`` / ``keys:expiring``: no keyring, keys not refreshed
  within ``[policy] max-refresh-age``, a key expired, or expiring within 30 days;
* ``repo:unverified``: a repository with ``sync-type = git`` and no gkeys hooks, or ``rsync``/``webrsync``
  with verification switched off (each repository's verifier is listed under ``checked``);
* ``repo:not-git``: a ``sync-type = gkeys`` location holding a tree that is not a git repository (an old rsync
  tree): the first verified clone refuses to overwrite it;
* ``repo:hooks-on-change``: a ``sync-type = git`` repository the hooks protect with
  ``sync-hooks-only-on-change = true`` (Portage then skips the hooks exactly when a merge failed half-way);
* ``repo:shallow``: a hooked ``sync-type = git`` repository with ``clone-depth``/``sync-depth`` other than 0
  (commits between two syncs are not fetched, so they cannot be verified);
* ``hook:not-executable`` / ``hook:interpreter``: a gkeys hook Portage will not run, or whose ``#!`` is gone;
* ``fetch:no-wrapper``: ``FETCH_WRAPPER`` does not run gkeys-fetch; ``fetch:not-sourced``: setup-portage wrote
  ``etc/portage/gkeys-fetch.conf`` but make.conf (a file) does not ``source`` it (the fix is that line, as a command);
* ``portage:config``: an error Portage itself prints reading make.conf, or a ``source`` line whose file is gone;
* ``binpkg:trust-helper``: binary repositories are configured (``binrepos.conf``) but ``PORTAGE_TRUST_HELPER`` is
  not gkeys-trust-helper, so Portage verifies binary packages against getuto's home (every release key);
* ``gpg:missing`` / ``gpg:engine``: the OpenPGP engine (``[gpg] program``, ``$GKEYS_GPG``) cannot run, or lacks
  what verification or key installation needs (:mod:`gkeys_portage.openpgp.engine` probes it);
* ``clock:behind``: the clock is behind the newest signature seen or verification recorded, beyond the skew;
* ``keyring:unreadable``: the exported keyring cannot be read by the ``portage`` user (fetch, build phases);
* ``tree:failed``: a configured repository's last sync did not verify (the hooks' failure marker), so
  ``emerge --sync`` fails until a sync verifies; ``tree:stale-marker``: a marker of a repository that
  repos.conf no longer configures (it blocks nothing; the postsync hook removes it at the next sync);
* ``journal:unwritable`` / ``journal:broken``: the trust journal cannot be appended to, or its chain does not
  hold (:func:`gkeys_portage.core.journal.problems`).

"In use": the categories of the repositories' tree verification (``sync-gkeys-category``,
``sync-gkeys-top-category`` or ``[tree]``), and ``[fetch]``/``[media]`` category once a fetch wrapper is set.
"""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import stat
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from gkeys_portage.checks.glep63.health import DEFAULT_DAYS, check_health
from gkeys_portage.core import journal
from gkeys_portage.core.errors import BadInputError, GkeysError
from gkeys_portage.core.invocation import fix_command
from gkeys_portage.core.state import read_json
from gkeys_portage.core.types import Category, parse_category
from gkeys_portage.installfiles import doc_file
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.prerequisites import FIRST_STEP
from gkeys_portage.keys.refresh import REFRESH_RECORD, installed_at, last_refresh
from gkeys_portage.keys.seedfetch import SEED_RECORD
from gkeys_portage.openpgp.engine import WORKING_ENGINES, Capability, probe
from gkeys_portage.openpgp.sequoia import describe as describe_second_opinion
from gkeys_portage.portage.makeconf import fetch_wrapper, make_conf_value, portage_make_conf, trust_helper
from gkeys_portage.portage.makeconfsteps import FETCH_FRAGMENT, fetch_step, missing_sources, unsource_command
from gkeys_portage.portage.reposconf import RepoConfig, read_repos
from gkeys_portage.portage.rsyncsync import DEFAULT_CATEGORY as DEFAULT_RSYNC_CATEGORY
from gkeys_portage.portage.rsyncsync import is_rsync_uri
from gkeys_portage.portage.setup import ETC, HOOKS_ON_CHANGE, TREE_HOOKS, hooks_only_on_change
from gkeys_portage.verify.git.markers import failure_markers, location_key
from gkeys_portage.verify.git.tree import category_list

#: What Portage's side of gkeys cannot work without (multifile verdicts only make it faster).
NEEDED_CAPABILITIES = (Capability.STATUS, Capability.SAFE_IMPORT)
TREE_RECORD = "tree-revisions"


@dataclass(frozen=True)
class Finding:
    """One thing that would make verification fail or be skipped; ``fix`` is what the text prints after "fix:"."""

    code: str
    subject: str
    message: str
    fix: str

    def to_json(self) -> dict[str, object]:
        """``fix``: the command alone (None for prose only); ``fix_note``: the whole fix, if it says more."""
        command = fix_command(self.fix)
        return {**asdict(self), "fix": command, "fix_note": self.fix if self.fix != command else None}


@dataclass
class Diagnosis:
    """All findings for one root; ``checked`` says what was looked at."""

    eroot: Path
    findings: list[Finding] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return not self.findings

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {"eroot": str(self.eroot), "ok": self.ok, "checked": self.checked,
                "findings": [f.to_json() for f in self.findings]}

    def add(self, code: str, subject: str, message: str, fix: str) -> None:
        """Record one finding."""
        self.findings.append(Finding(code, subject, message, fix))


def _hooks(eroot: Path) -> list[Path]:
    return [eroot / ETC / hook for hook in TREE_HOOKS]


def _categories(value: str) -> set[Category]:
    """The categories of ``sync-gkeys-category`` or ``[tree] category``: a space-separated list, read
    as the sync module and the hooks read it (:func:`gkeys_portage.verify.git.tree.category_list`)."""
    return {parse_category(name) for name in category_list(value)}


def _first_word(value: str | None) -> str:
    """The program a make.conf value runs (its shell quoting, then the words Portage splits it into)."""
    try:
        words = shlex.split(" ".join(shlex.split(value or "")))
    except ValueError:
        words = []
    return words[0] if words else ""


def can_read(path: Path, user: pwd.struct_passwd) -> bool:
    """True if ``user`` may read ``path`` (every directory above it searchable), by permission bits."""
    if user.pw_uid == 0:
        return True
    groups = {user.pw_gid} | {g.gr_gid for g in grp.getgrall() if user.pw_name in g.gr_mem}

    def allowed(info: os.stat_result, bits: tuple[int, int, int]) -> bool:
        if info.st_uid == user.pw_uid:
            return bool(info.st_mode & bits[0])
        if info.st_gid in groups:
            return bool(info.st_mode & bits[1])
        return bool(info.st_mode & bits[2])

    try:
        resolved = path.resolve(strict=True)
        for directory in reversed(resolved.parents):
            if not allowed(directory.stat(), (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)):
                return False
        return allowed(resolved.stat(), (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH))
    except OSError:
        return False


class Doctor:
    """Runs every check against one root and one gkeys configuration."""

    def __init__(self, ctx: Gkeys, eroot: Path, *, portage_user: str | None = None, now: float | None = None,
                 expiry_days: int = DEFAULT_DAYS) -> None:
        """``portage_user``: who fetches and builds (None: make.conf's ``PORTAGE_USERNAME``, else ``portage``)."""
        self.ctx = ctx
        self.eroot = eroot
        self.portage_user = portage_user or make_conf_value(eroot, "PORTAGE_USERNAME") or "portage"
        self.now = time.time() if now is None else now
        self.expiry_days = expiry_days
        self.result = Diagnosis(eroot)

    def run(self) -> Diagnosis:
        """All checks; the findings in a stable order."""
        if not self.eroot.is_dir():
            raise BadInputError(f"{self.eroot} is not a directory: give --eroot the root that holds etc/portage")
        self.check_first_install()
        repos = read_repos(self.eroot)
        categories = self.check_repos(repos)
        self.check_markers(repos)
        self.check_hooks()
        self.check_portage_config()
        wrapper = self.check_fetch_wrapper()
        if wrapper:
            categories.add(parse_category(self.ctx.config.get("fetch", "category",
                                                              self.ctx.config.get("media", "category", "gentoo"))))
        self.check_trust_helper()
        self.check_gpg()
        self.check_second_opinion()
        for category in sorted(categories):
            self.check_category(category)
        self.check_clock()
        for code, message, fix in journal.problems(self.ctx.layout):
            self.result.add(code, "trust journal", message, fix)
        return self.result

    def check_first_install(self) -> None:
        """Nothing installed at all: the first step, the one docs/portage.md and the ebuild's message name."""
        if any(self.ctx.keyring(category).exists() for category in self.ctx.seeds.categories()):
            return
        self.result.add("install:first", "gkeys", "no keys of any category are installed yet: nothing can be "
                        f"verified (offline: {doc_file('portage.md')}, 'Offline first install')", FIRST_STEP)

    # -- Portage configuration -------------------------------------------------------------------

    def check_repos(self, repos: dict[str, RepoConfig]) -> set[Category]:
        """Repositories that would sync unverified or hide commits; returns the categories in use."""
        tree = self.ctx.config
        categories: set[Category] = set()
        hooked = all(path.is_file() for path in _hooks(self.eroot))
        self.result.checked.append(f"repos.conf: {len(repos)} repositories")
        for name, repo in sorted(repos.items()):
            sync_type = repo.get("sync-type")
            where = repo.origin.get("sync-type") or self.eroot / ETC / "repos.conf"
            self.result.checked.append(f"repository {name}: sync-type {sync_type or 'unset'}, verified by "
                                       f"{verified_by(repo, hooked)}")
            if sync_type == "gkeys" and is_rsync_uri(repo.get("sync-uri")):
                categories |= _categories(repo.get("sync-gkeys-category") or DEFAULT_RSYNC_CATEGORY)
                continue  # a Manifest tree, not a git clone: nothing below applies
            if sync_type in ("rsync", "webrsync") and verified_by(repo, hooked) == "nothing":
                self.result.add("repo:unverified", name, f"syncs with {sync_type} ({where}) with verification "
                                "switched off: nothing verifies it",
                                f"set sync-type = gkeys for [{name}] in {where} (an rsync:// sync-uri stays rsync: "
                                "gkeys verifies the Manifest tree against the pinned repository key, with rollback "
                                "protection)")
            if sync_type == "gkeys":
                categories |= _categories(repo.get("sync-gkeys-category") or tree.get("tree", "category",
                                                                                     "gentoo-devs"))
                top = repo.get("sync-gkeys-top-category") or tree.get("tree", "top-category", "")
                if top:
                    categories.add(parse_category(top))
                blocked = repo.blocks_first_clone()
                if blocked is not None:
                    self.result.add("repo:not-git", name, f"{blocked} holds files but no git repository: the first "
                                    "gkeys sync refuses to clone over it, so emerge --sync fails",
                                    f"mv {blocked} {blocked}.old")
            elif sync_type == "git":
                categories |= _categories(tree.get("tree", "category", "gentoo-devs"))
                if not hooked:
                    switch = self._switch_command(name, repo)
                    self.result.add("repo:unverified", name, f"syncs with git ({where}) and the gkeys hooks are not "
                                    "installed: its commits are not verified" + (
                                        "; in the fix, CAT is the gkeys category whose seeds pin its committers "
                                        "(gkeys list-cats)" if switch.endswith(" CAT") else ""), switch)
                    continue
                if hooks_only_on_change(repo):
                    self.result.add("repo:hooks-on-change", name, f"{HOOKS_ON_CHANGE} = {repo.get(HOOKS_ON_CHANGE)} "
                                    f"({repo.origin.get(HOOKS_ON_CHANGE)}): Portage runs the gkeys hook only when it "
                                    "counts a sync as a change, so a merge that fails half-way (HEAD unchanged, "
                                    "files written) is never verified, rolled back or marked",
                                    f"set {HOOKS_ON_CHANGE} = false for [{name}] in {where} (or verify before "
                                    f"merging: {self._switch_command(name, repo)})")
                shallow = [f"{key} = {repo.get(key) or 'unset (Portage: 1)'}" for key in ("clone-depth", "sync-depth")
                           if repo.get(key) != "0"]
                if shallow:
                    self.result.add("repo:shallow", name, f"{', '.join(shallow)}: commits between two syncs are "
                                    "not fetched, so the hook cannot verify them",
                                    f"set clone-depth = 0 and sync-depth = 0 for [{name}] in {where} "
                                    f"(or: {self._switch_command(name, repo)})")
        return categories

    def check_markers(self, repos: dict[str, RepoConfig]) -> None:
        """Failure markers the git hooks left: each fails ``emerge --sync`` while its repository is configured
        (matched by name or location, as the postsync hook matches them)."""
        locations = {location_key(repo.get("location") or ""): name for name, repo in repos.items()}
        for marker in failure_markers(self.ctx.layout):
            name, reason = marker.get("repo", ""), marker.get("reason", "no reason recorded")
            clear = f"gkeys verify-tree --clear-marker {shlex.quote(name)}"
            configured = name if name in repos else locations.get(location_key(marker.get("location", "")))
            if configured is None:
                self.result.add("tree:stale-marker", name, f"a failure marker of a repository that repos.conf no "
                                f"longer configures (it had failed: {reason}); it blocks nothing", clear)
            else:
                self.result.add("tree:failed", configured, f"its last sync did not verify ({reason}), so emerge "
                                "--sync fails until a sync verifies",
                                f"emerge --sync {shlex.quote(configured)} once upstream is fixed "
                                f"({doc_file('tree.md')}); "
                                f"only if you checked the tree by other means: {clear}")

    def _switch_command(self, name: str, repo: RepoConfig) -> str:
        """The setup-portage command that switches ``name`` to ``sync-type = gkeys`` (an overlay needs the
        category that pins its committers, which only the user knows)."""
        command = f"gkeys setup-portage --eroot {self.eroot} --repo {name}"
        if name != "gentoo" and not repo.get("sync-gkeys-category"):
            command += " --category CAT"
        return command

    def check_hooks(self) -> None:
        """gkeys hooks that Portage would not run (not executable, or their interpreter is gone)."""
        for path in [*_hooks(self.eroot), self.eroot / ETC / "postsync.d" / "gkeys-overlays"]:
            if not path.is_file():
                continue
            self.result.checked.append(f"hook {path}")
            if not os.access(path, os.X_OK) or not path.stat().st_mode & 0o111:
                self.result.add("hook:not-executable", str(path), "Portage skips hooks that are not executable",
                                f"chmod 755 {path}")
                continue
            first = path.read_bytes().split(b"\n", 1)[0].decode(errors="replace")
            interpreter = first[2:].strip().split()[0] if first.startswith("#!") and first[2:].strip() else ""
            if not interpreter or not os.access(interpreter, os.X_OK):
                self.result.add("hook:interpreter", str(path), f"its interpreter {interpreter or '(none)'} cannot run",
                                f"rm {path} && gkeys setup-portage --eroot {self.eroot}")

    def check_fetch_wrapper(self) -> str | None:
        """``FETCH_WRAPPER`` must run an executable gkeys-fetch (its first word)."""
        value = fetch_wrapper(self.eroot)
        self.result.checked.append(f"FETCH_WRAPPER = {value}" if value else "FETCH_WRAPPER: not set")
        program = _first_word(value)
        fix = f"gkeys setup-portage --eroot {self.eroot} --fetch-wrapper"
        step = fetch_step(self.eroot)  # make.conf (a file) does not source the fragment setup-portage writes
        if step and Path(program).name != "gkeys-fetch":
            written = (self.eroot / FETCH_FRAGMENT).is_file()
            self.result.add("fetch:not-sourced" if written else "fetch:no-wrapper", "FETCH_WRAPPER",
                            f"{self.eroot / FETCH_FRAGMENT} is not sourced by make.conf: release media fetched by "
                            "Portage are not verified" if written else "not set to gkeys-fetch: release media fetched "
                            "by Portage are not verified", step if written else f"{fix} && {step}")
            return None
        if Path(program).name != "gkeys-fetch":
            self.result.add("fetch:no-wrapper", "FETCH_WRAPPER",
                            "not set to gkeys-fetch: release media fetched by Portage are not verified"
                            if not value else f"set to {value!r}, which does not run gkeys-fetch", fix)
            return None
        if not os.access(program, os.X_OK):
            self.result.add("fetch:no-wrapper", "FETCH_WRAPPER", f"{program} cannot be run: every fetch fails",
                            f"reinstall gkeys-portage, or {fix}")
            return None
        return value

    def check_portage_config(self) -> None:
        """What Portage itself would complain about in make.conf: a ``source`` line whose file is gone (after a
        removal by hand), and every error Portage's own reader prints (each one on every Portage command)."""
        missing = missing_sources(self.eroot)
        for file, line, target in missing:
            self.result.add("portage:config", str(file), f"the line '{line}' sources {target}, which does not "
                            "exist: every Portage command prints an error", unsource_command(file, line))
        for error in portage_make_conf(self.eroot)[1]:
            if not any(str(target) in error for _, _, target in missing):
                self.result.add("portage:config", "make.conf", f"Portage reports: {error}",
                                f"correct it in {self.eroot / ETC / 'make.conf'} (emerge --info shows it too)")

    def check_trust_helper(self) -> None:
        """With binary repositories configured, Portage's trust helper must be gkeys-trust-helper."""
        binrepos = self.eroot / ETC / "binrepos.conf"
        if not binrepos.exists():
            self.result.checked.append("binary packages: no binrepos.conf")
            return
        value = trust_helper(self.eroot)
        self.result.checked.append(f"PORTAGE_TRUST_HELPER = {value}" if value else "PORTAGE_TRUST_HELPER: not set")
        if Path(_first_word(value)).name == "gkeys-trust-helper":
            return
        what = (f"set to {value!r}" if value else "not set (Portage runs getuto)")
        self.result.add("binpkg:trust-helper", "PORTAGE_TRUST_HELPER",
                        f"{what}: binary packages are verified against a home that trusts every release key "
                        "(the mirror and snapshot keys too), not only the keys pinned for binary packages",
                        f'add PORTAGE_TRUST_HELPER="gkeys-trust-helper" to {self.eroot / ETC}/make.conf, '
                        "then run gkeys binpkg-keyring")

    # -- tools and time --------------------------------------------------------------------------

    def check_gpg(self) -> None:
        """The OpenPGP engine runs and can verify and install keys (named, with what it lacks)."""
        try:
            engine = probe()
            lacking = [cap for cap in Capability if not engine.has(cap)]
        except GkeysError:
            self.result.checked.append("OpenPGP engine: not found")
            self.result.add("gpg:missing", "gpg", "GnuPG cannot be run: nothing can be verified",
                            "emerge app-crypt/gnupg (or set [gpg] program or $GKEYS_GPG to its path)")
            return
        self.result.checked.append(f"OpenPGP engine: {engine.describe()}" + (
            f"; lacks {', '.join(cap.value for cap in lacking)}" if lacking else ""))
        blocking = [cap for cap in NEEDED_CAPABILITIES if cap in lacking]
        if blocking:
            self.result.add("gpg:engine", "gpg", f"{engine.describe()} lacks {'; '.join(c.value for c in blocking)}: "
                            "keys cannot be verified or installed safely with it",
                            f"emerge --update app-crypt/gnupg and set [gpg] program to it ({WORKING_ENGINES})")

    def check_second_opinion(self) -> None:
        """Sequoia confirms GnuPG's verdicts (on by default); turned off or missing is a finding."""
        state, said = describe_second_opinion()
        self.result.checked.append(f"second opinion: {said}")
        if state == "off":
            self.result.add("gpg:second-opinion-off", "gpg", "the second opinion is turned off: every signature "
                            "rests on GnuPG's word alone", "remove 'second-opinion = no' from [gpg] in gkeys.conf")
        elif state == "missing":
            self.result.add("gpg:second-opinion-missing", "gpg", f"pysequoia is missing, so no signature verifies "
                            f"({said})", "pip install pysequoia (or emerge dev-python/pysequoia)")

    def check_clock(self) -> None:
        """The clock must not be earlier than the newest verification recorded (beyond the clock skew)."""
        layout = self.ctx.layout
        times: list[float] = []
        tree = read_json(layout.record(TREE_RECORD), {})
        for entry in tree.values() if isinstance(tree, dict) else ():
            stamp = entry.get("verified") if isinstance(entry, dict) else None
            if isinstance(stamp, str):
                try:
                    times.append(datetime.fromisoformat(stamp).timestamp())
                except ValueError:
                    continue
        seeds = read_json(layout.record(SEED_RECORD), {})
        times += [float(entry["signed"]) for entry in (seeds.values() if isinstance(seeds, dict) else ())
                  if isinstance(entry, dict) and isinstance(entry.get("signed"), int | float)]
        refresh = read_json(layout.record(REFRESH_RECORD), {})
        times += [float(v) for v in (refresh.values() if isinstance(refresh, dict) else ())
                  if isinstance(v, int | float)]
        if not times:
            return
        newest = max(times)
        skew = self.ctx.config.policy.clock_skew
        self.result.checked.append(f"clock: newest record {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(newest))} "
                                   "UTC")
        if newest > self.now + skew:
            self.result.add("clock:behind", "clock", f"the system clock is {(newest - self.now) / 60:.0f} minutes "
                            "behind the newest signature or verification recorded (more than the clock skew): "
                            "signatures will look like they come from the future",
                            "set the clock (e.g. chronyd -q or ntpd -gq), then run gkeys doctor again")

    # -- keys ------------------------------------------------------------------------------------

    def check_category(self, category: Category) -> None:
        """Seeds, keyring, refresh age, expiry and readability of one category in use."""
        ctx = self.ctx
        policy = ctx.config.policy
        self.result.checked.append(f"category {category}")
        try:
            seeds = ctx.seeds.load(category)
        except GkeysError as exc:
            seeds = {}
            self.result.add("seeds:missing", category, f"its seed file cannot be read: {exc.message}",
                            f"gkeys update-seed -C {category}")
            return
        if not seeds:
            self.result.add("seeds:missing", category, "no seeds installed: nothing can be verified for it",
                            f"gkeys update-seed -C {category}")
            return
        signed = self._seed_signed(category)
        if policy.max_seed_age and signed is not None and self.now - signed > policy.max_seed_age:
            self.result.add("seeds:old", category, f"seed file signed {(self.now - signed) / 86400:.0f} days ago, more "
                            f"than [policy] max-seed-age ({policy.max_seed_age / 86400:g} days)",
                            f"gkeys update-seed -C {category}")
        keyring = ctx.keyring(category)
        if not keyring.exists():
            self.result.add("keys:missing", category, "no keyring: nothing can be verified for it",
                            f"gkeys install-key -C {category}")
            return
        last = last_refresh(ctx, category)
        since = last if last is not None else installed_at(ctx, category)  # an install is not "stale" at once
        if since is None or self.now - since > policy.max_refresh_age:
            days = "" if since is None else f"{(self.now - since) / 86400:.0f} days ago"
            age = ("never refreshed" if since is None else f"last refreshed {days}" if last is not None
                   else f"never refreshed since installed {days}")
            self.result.add("keys:stale", category, f"{age}, more than [policy] max-refresh-age "
                            f"({policy.max_refresh_age / 86400:g} days): verification fails until refreshed",
                            f"gkeys refresh-key -C {category}")
        self._check_expiry(category)
        self._check_readable(category)

    def _seed_signed(self, category: Category) -> float | None:
        """When the installed seed file of ``category`` was signed (from fetch-seed's record)."""
        record = read_json(self.ctx.layout.record(SEED_RECORD), {})
        entry = record.get(category) if isinstance(record, dict) else None
        signed = entry.get("signed") if isinstance(entry, dict) else None
        return float(signed) if isinstance(signed, int | float) else None

    def _check_expiry(self, category: Category) -> None:
        """One finding per key that expired or expires within ``expiry_days`` (primary or a subkey)."""
        if any(f.code == "gpg:missing" for f in self.result.findings):
            return  # the keyring cannot be listed without gpg; already reported
        at = datetime.fromtimestamp(self.now, UTC)
        try:
            keys = self.ctx.keyring(category).installed()
        except GkeysError as exc:
            self.result.add("keys:missing", category, f"its keyring cannot be read: {exc.message}",
                            f"gkeys install-key -C {category}")
            return
        for fingerprint, key in sorted(keys.items()):
            issues = [i for i in check_health(key, at, self.expiry_days)
                      if i.code in ("expire:soon", "validity:expired")]
            if issues:  # an expired key is keys:expired (list-key: [expired]), one about to expire keys:expiring
                code = "keys:expired" if issues[0].code == "validity:expired" else "keys:expiring"
                self.result.add(code, f"{category} {fingerprint}", issues[0].message,
                                f"gkeys refresh-key -C {category} (once its owner extended it)")

    def _check_readable(self, category: Category) -> None:
        try:
            user = pwd.getpwnam(self.portage_user)
        except KeyError:
            if f"no {self.portage_user!r} user" not in " ".join(self.result.checked):
                self.result.checked.append(f"no {self.portage_user!r} user: keyring readability not checked")
            return
        export = self.ctx.keyring(category).export_path
        if not can_read(export, user):
            self.result.add("keyring:unreadable", category, f"{export} cannot be read by the {user.pw_name!r} user, "
                            "so fetch and build phases (userfetch, userpriv) cannot verify",
                            f"chmod a+rX {self.ctx.layout.root} {self.ctx.layout.keyrings_dir} && "
                            f"gkeys install-key -C {category}")


def diagnose(ctx: Gkeys, eroot: Path, *, portage_user: str | None = None, now: float | None = None) -> Diagnosis:
    """Every finding for ``eroot`` and the gkeys state of ``ctx`` (``portage_user``: see :class:`Doctor`)."""
    return Doctor(ctx, eroot, portage_user=portage_user, now=now).run()


def _yes(repo: RepoConfig, key: str, default: str = "no") -> bool:
    return repo.get(key, default).strip().lower() in ("yes", "true", "1")


def verified_by(repo: RepoConfig, hooked: bool) -> str:
    """What verifies a repository's sync, in words (the same facts ``gkeys doctor`` reasons about)."""
    kind, uri = repo.get("sync-type"), repo.get("sync-uri")
    if kind == "gkeys":
        return "gkeys rsync" if is_rsync_uri(uri) else "gkeys git"
    if kind == "git":
        if hooked:
            return "gkeys git hook"
        return "Portage (top commit only)" if _yes(repo, "sync-git-verify-commit-signature") else "nothing"
    if kind == "rsync":
        return ("Portage (gemato, any key in sync-openpgp-key-path; no rollback check)"
                if _yes(repo, "sync-rsync-verify-metamanifest") else "nothing")
    if kind == "webrsync":
        return "Portage (emerge-webrsync)" if _yes(repo, "sync-webrsync-verify-signature") else "nothing"
    return "nothing" if kind else "not synced"
