"""Mutations of SECURITY.md row 395 (see table.py for what a mutation is)."""

from __future__ import annotations

from table import Mutation

SWITCH = "tests/test_rsync_syncuser.py::"
RSYNC = SWITCH + "test_root_then_nobody_then_root_each_sync_succeeds"
LEFTOVER = SWITCH + "test_a_leftover_staging_directory_of_the_previous_sync_user_is_removed_with_a_warning"
GIT = SWITCH + "test_a_git_repository_root_then_nobody_then_root_each_sync_succeeds"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation(395, "rsync --link-dest into the previous sync user's tree", "gkeys_portage/portage/rsyncsync.py",
             "    linked = request.spawn.owns(request.location) and any(request.location.iterdir())",
             "    linked = request.location.is_dir() and any(request.location.iterdir())", (RSYNC,)),
    Mutation(395, "the staging directory gets the previous sync user as owner", "gkeys_portage/portage/rsyncsync.py",
             "            spawn.prepare_directory(staging, like=location if spawn.owns(location) else None)",
             "            spawn.prepare_directory(staging, like=location if location.is_dir() else None)", (RSYNC,)),
    Mutation(395, "the no-change path keeps the previous sync user's tree", "gkeys_portage/portage/rsyncsync.py",
             "            or not request.spawn.owns(request.location)):",
             "            or not request.location.is_dir()):", (RSYNC,)),
    Mutation(395, "a previous sync user's leftover is removed without a word",
             "gkeys_portage/verify/manifest/custody.py",
             "                if owners and uid is not None and uid not in owners:", "                if False:",
             (LEFTOVER,)),
    Mutation(395, "git: the previous sync user's tree reused as the sync user's", "gkeys_portage/portage/treesync.py",
             "    own = request.spawn.owns(location)  # False", "    own = True  # False", (GIT,)),
    Mutation(395, "git: root's copy of .git keeps the previous sync user's files",
             "gkeys_portage/verify/git/staging.py",
             "    how = [\"-a\"] if link else [\"-a\", \"--no-preserve=ownership\"]", "    how = [\"-a\"]", (GIT,)),
    Mutation(395, "git: the new sync user links the previous user's distfiles", "gkeys_portage/portage/treesync.py",
             "request.spawn, by_root=not own)", "request.spawn, by_root=False)", (GIT,)),
)

#: Rows 395-399 with no mutation yet, and why.
UNMUTATED: dict[int, str] = {}
