"""The Portage sync module ``sync-type = gkeys``: git underneath, every new commit verified first.

Installed into Portage as the leaf package ``portage/sync/modules/gkeys`` (``portage-sync-module/``, a
distribution of its own that depends on Portage), which only re-exports :data:`module_spec` and
:class:`GkeysSync` from here.  ``repos.conf`` example::

    [gentoo]
    location = /var/db/repos/gentoo
    sync-type = gkeys
    sync-uri = https://github.com/gentoo-mirror/gentoo.git
    sync-gkeys-category = gentoo-devs gentoo-infra
    sync-gkeys-policy = top

An ``rsync://`` or ``ssh+rsync://`` ``sync-uri`` is synced by :mod:`gkeys_portage.portage.rsyncsync`
instead: the tree is built beside the live one, its signed Manifest tree verified with gemato against the
pinned repository key of ``sync-gkeys-category`` (default ``gentoo``), and swapped in atomically;
``sync-gkeys-max-age`` (hours, default 24, 0 = none) bounds the age of its ``TIMESTAMP``.

``sync-gkeys-category`` is a space-separated list: a commit signed by a key pinned in any of them
is good (the sync repositories' mirror commits lie between two syncs, so ``gentoo-infra`` belongs
there; ``sync-gkeys-top-category`` admits a category for the top commit only).

The sync itself is :mod:`gkeys_portage.portage.treesync` (no Portage imports); this module only
reads the options, builds the gkeys context and reports through ``portage.output``.
"""

from __future__ import annotations

import configparser
import io
import os
import shlex
from pathlib import Path
from typing import Any

import portage
from portage.const import USER_CONFIG_PATH
from portage.output import EOutput
from portage.sync.config_checks import CheckSyncConfig
from portage.sync.syncbase import NewBase
from portage.util import _recursive_file_list, writemsg_level
from portage.util.configparser import SafeConfigParser, read_configs

from gkeys_portage.core import invocation
from gkeys_portage.core.config import load_config
from gkeys_portage.core.configschema import unknown_name
from gkeys_portage.core.errors import GkeysError, UsageError
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.portage.rsyncsync import DEFAULT_CATEGORY, RsyncRequest, is_rsync_uri, sync_rsync
from gkeys_portage.portage.treesync import SyncOutcome, SyncRequest, clone_verified, update_verified
from gkeys_portage.ui.output import neutralise
from gkeys_portage.verify.git.objects import GitRepo
from gkeys_portage.verify.git.spawn import SpawnSettings
from gkeys_portage.verify.git.tree import POLICIES, TreeOptions
from gkeys_portage.verify.manifest.marks import DEFAULT_MAX_AGE_HOURS

DOC = """gkeys plug-in module for portage.
Syncs git repositories and verifies the OpenPGP signature of every new commit against keys
pinned by gkeys seeds before the new revision is merged."""

GKEYS_OPTIONS = ("sync-gkeys-category", "sync-gkeys-top-category", "sync-gkeys-policy", "sync-gkeys-config",
                 "sync-gkeys-max-age")
GIT_OPTIONS = ("sync-git-clone-env", "sync-git-clone-extra-opts", "sync-git-env", "sync-git-pull-env",
               "sync-git-pull-extra-opts")


class CheckGkeysConfig(CheckSyncConfig):
    """repos.conf checks for ``sync-type = gkeys``."""

    def __init__(self, repo: Any, logger: Any) -> None:
        CheckSyncConfig.__init__(self, repo, logger)
        self.checks.append("check_gkeys_policy")

    def check_gkeys_policy(self) -> None:
        """``sync-gkeys-policy`` must be top or all."""
        policy = self.repo.module_specific_options.get("sync-gkeys-policy", "top")
        if policy not in POLICIES:
            writemsg_level(f"!!! sync-gkeys-policy must be one of {', '.join(POLICIES)}, not {policy!r}\n",
                           level=self.logger.ERROR, noiselevel=-1)


def repos_conf(settings: Any) -> configparser.ConfigParser:
    """repos.conf as Portage reads it (``PORTAGE_REPOSITORIES``, else the global file and
    ``${PORTAGE_CONFIGROOT}/etc/portage/repos.conf``, a file or a directory), with every key kept:
    Portage itself drops the keys no sync module declares, typos included."""
    parser = SafeConfigParser()
    given = os.environ.get("PORTAGE_REPOSITORIES")  # settings has its own, rebuilt without unknown keys
    if given is not None:
        read_configs(parser, [io.StringIO(given)])
        return parser
    paths = [os.path.join(settings.global_config_path, "repos.conf"),
             os.path.join(settings["PORTAGE_CONFIGROOT"], USER_CONFIG_PATH, "repos.conf")]
    read_configs(parser, [found for path in paths for found in _recursive_file_list(path)])
    return parser


def check_gkeys_options(parser: configparser.ConfigParser, repo_name: str) -> None:
    """Refuse an unknown ``sync-gkeys-*`` key of ``repo_name`` (or of [DEFAULT]): a typo such as
    ``sync-gkeys-polcy = all`` must not leave the default (a shallow, top-only first check)."""
    section = repo_name if parser.has_section(repo_name) else None
    keys = parser.options(section) if section else list(parser.defaults())
    for key in keys:
        if key.startswith("sync-gkeys-") and key not in GKEYS_OPTIONS:
            raise UsageError(f"repos.conf [{section or 'DEFAULT'}]: "
                             + unknown_name("option", key, GKEYS_OPTIONS)
                             + "; fix it in repos.conf and sync again")


def _env_option(options: dict[str, str], name: str) -> dict[str, str]:
    """``KEY=value`` assignments of a ``sync-git-*-env`` option."""
    pairs = (item.partition("=") for item in shlex.split(options.get(name, "")))
    return {key: value for key, _, value in pairs if key}


class GkeysSync(NewBase):
    """Git sync that verifies every new commit before the work tree moves."""

    short_desc = "Perform verified sync operations on git repositories"

    @staticmethod
    def name() -> str:
        """The class name Portage shows."""
        return "GkeysSync"

    def __init__(self) -> None:
        NewBase.__init__(self, "git", portage.const.GIT_PACKAGE_ATOM)

    def exists(self, **kwargs: Any) -> bool:
        """True if the repository location holds a git repository."""
        if kwargs:
            self._kwargs(kwargs)
        if is_rsync_uri(self.repo.sync_uri):
            return os.path.exists(os.path.join(self.repo.location, "Manifest"))
        return os.path.exists(os.path.join(self.repo.location, ".git"))

    def new(self, **kwargs: Any) -> tuple[int, bool]:
        """First clone: into a staging directory, moved into place only once verified."""
        if kwargs:
            self._kwargs(kwargs)
        return self._sync(first=True)

    def update(self) -> tuple[int, bool]:
        """Fetch, verify every new commit, then move the work tree."""
        return self._sync(first=False)

    def retrieve_head(self, **kwargs: Any) -> tuple[int, str | bool]:
        """The commit the work tree is at."""
        if kwargs:
            self._kwargs(kwargs)
        if is_rsync_uri(self.repo.sync_uri):
            return 1, False  # a Manifest tree has no head; its last verified TIMESTAMP is in gkeys status
        try:
            return os.EX_OK, GitRepo(Path(self.repo.location), spawn=self._spawn()).resolve("HEAD") + "\n"
        except GkeysError:
            return 1, False

    # -- internals ---------------------------------------------------------------------------------

    def _spawn(self) -> SpawnSettings:
        """Portage's uid/gid/umask for this repository (``sync-user``, ``FEATURES=usersync``, ``sync-umask``)."""
        return SpawnSettings.from_portage(getattr(self, "spawn_kwargs", None))

    def _request(self, ctx: Gkeys) -> SyncRequest | RsyncRequest:
        if is_rsync_uri(self.repo.sync_uri):
            return self._rsync_request()
        opts: dict[str, str] = self.repo.module_specific_options
        options = TreeOptions.from_config(ctx, category=opts.get("sync-gkeys-category"),
                                          top_category=opts.get("sync-gkeys-top-category"),
                                          policy=opts.get("sync-gkeys-policy"))
        env = _env_option(opts, "sync-git-env")
        clone_env = {**env, **_env_option(opts, "sync-git-clone-env")}
        pull_env = {**env, **_env_option(opts, "sync-git-pull-env")}
        first = not self.exists()
        depth = self.repo.clone_depth
        return SyncRequest(
            location=Path(self.repo.location), uri=self.repo.sync_uri or "", options=options,
            clone_depth=int(depth) if depth is not None else None,
            git_env=clone_env if first else pull_env,
            clone_opts=shlex.split(opts.get("sync-git-clone-extra-opts", "")),
            fetch_opts=shlex.split(opts.get("sync-git-pull-extra-opts", "")),
            quiet=self.settings.get("PORTAGE_QUIET") == "1",
            spawn=self._spawn(),
            keep_local=bool(getattr(self.repo, "volatile", False)),  # Portage's own decision for this repository
        )

    def _rsync_request(self) -> RsyncRequest:
        opts: dict[str, str] = self.repo.module_specific_options
        text = opts.get("sync-gkeys-max-age", "").strip()
        try:
            max_age = float(text) if text else DEFAULT_MAX_AGE_HOURS
        except ValueError:
            max_age = -1.0
        if max_age < 0 or max_age != max_age:
            raise UsageError(f"repos.conf [{self.repo.name}] sync-gkeys-max-age = {text!r}: expected hours "
                             "(a number, 0 for no maximum); fix it in repos.conf and sync again")
        category = (opts.get("sync-gkeys-category") or "").split()
        if len(category) > 1:
            raise UsageError(f"repos.conf [{self.repo.name}] sync-gkeys-category: an rsync tree is signed by one "
                             f"category's repository key, not {len(category)}; name one")
        return RsyncRequest(location=Path(self.repo.location), uri=self.repo.sync_uri or "",
                            category=category[0] if category else DEFAULT_CATEGORY,
                            max_age_hours=max_age, quiet=self.settings.get("PORTAGE_QUIET") == "1",
                            spawn=self._spawn())

    def _sync(self, *, first: bool) -> tuple[int, bool]:
        out = EOutput(quiet=self.settings.get("PORTAGE_QUIET") == "1")
        printers = {"info": out.einfo, "good": out.einfo, "warn": out.ewarn, "error": out.eerror}

        config = self.repo.module_specific_options.get("sync-gkeys-config")

        def log(level: str, text: str) -> None:
            with invocation.recorded(config=config, root=None):  # a next step acts on the config that was used
                printers.get(level, out.einfo)(neutralise(invocation.for_this_user(text)))  # the output door

        try:
            check_gkeys_options(repos_conf(self.settings), self.repo.name)
            # EPREFIX as Portage has it (PORTAGE_OVERRIDE_EPREFIX puts it in the settings, not the environment)
            ctx = Gkeys(load_config(Path(config) if config else None, prefix=self.settings.get("EPREFIX", "")))
            request = self._request(ctx)
            outcome = (sync_rsync(ctx, request, log) if isinstance(request, RsyncRequest)
                       else (clone_verified if first else update_verified)(ctx, request, log))
        except GkeysError as exc:
            outcome = SyncOutcome(False, reason=f"gkeys: {exc.message}")
            log("error", outcome.reason)
        except Exception as exc:  # a bug must still fail the sync, never pass it
            outcome = SyncOutcome(False, reason=f"gkeys: internal error: {type(exc).__name__}: {exc}")
            log("error", outcome.reason)
        if not outcome.ok:
            self.logger(self.xterm_titles, f"!!! {neutralise(outcome.reason)}")  # emerge.log: one line, escaped
            return 1, False
        return os.EX_OK, outcome.changed


module_spec = {
    "name": "gkeys",
    "description": DOC,
    "provides": {
        "gkeys-module": {
            "name": "gkeys",
            "sourcefile": "gkeyssync",
            "class": "GkeysSync",
            "description": DOC,
            "functions": ["sync", "new", "exists", "retrieve_head"],
            "func_desc": {
                "sync": "Fetches, verifies every new commit, then updates the repository",
                "new": "Clones into a staging directory and moves it into place once verified",
                "exists": "Returns whether the location holds a git repository",
                "retrieve_head": "Returns the head commit hash",
            },
            "validate_config": CheckGkeysConfig,
            "module_specific_options": GKEYS_OPTIONS + GIT_OPTIONS,
        }
    },
}
