"""Mutations of SECURITY.md rows 300-329 (see table.py for what a mutation is)."""

from __future__ import annotations

from table import Mutation

FD = "tests/test_fdtree.py::"
CUSTODY = "tests/test_rsync_custody.py::"
LEFT = "tests/test_rsync_leftovers.py::"
FDTREE = "gkeys_portage/core/fs/fdtree.py"
TAKE = "gkeys_portage/verify/manifest/custody.py"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation(300, "the holder is open to everyone", TAKE, "HOLDER_MODE = 0o700", "HOLDER_MODE = 0o755",
             (CUSTODY + "test_the_takeover_makes_the_tree_roots_and_breaks_away_from_writers",)),
    Mutation(300, "a directory stays the sync user's while root lists it", TAKE,
             "    if (st.st_uid, st.st_gid) != (0, 0):\n        os.fchown(fd, 0, 0)\n"
             "    os.fchmod(fd, HELD_DIRECTORY_MODE)",
             "    pass",
             (CUSTODY + "test_the_takeover_makes_the_tree_roots_and_breaks_away_from_writers",)),
    Mutation(300, "a file or link stays the sync user's", TAKE,
             "                if st.st_uid != 0 or st.st_gid != 0:\n                    os.chown(",
             "                if False:\n                    os.chown(",
             (CUSTODY + "test_the_takeover_makes_the_tree_roots_and_breaks_away_from_writers",)),
    Mutation(300, "the takeover's chown follows a link out of the tree", TAKE,
             "os.chown(entry.name, 0, 0, dir_fd=entry.parent, follow_symlinks=False)",
             "os.chown(entry.name, 0, 0, dir_fd=entry.parent, follow_symlinks=True)",
             (CUSTODY + "test_the_takeover_makes_the_tree_roots_and_breaks_away_from_writers",)),
    Mutation(300, "a level is opened through a link", FDTREE,
             "DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC",
             "DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC",
             (FD + "test_open_dir_never_opens_through_a_link",)),
    Mutation(300, "a level opened need not be the inode lstat saw", FDTREE,
             "    if expect is not None and not same(os.fstat(fd), expect):",
             "    if False:",
             (FD + "test_a_directory_replaced_by_another_directory_is_changed",)),
    Mutation(300, "a level opened through whatever its name now is", FDTREE,
             "    fd = os.open(name, DIRECTORY_FLAGS, dir_fd=dir_fd)\n"
             "    if expect is not None and not same(os.fstat(fd), expect):",
             "    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=dir_fd)\n    if False:",
             (FD + "test_a_directory_swapped_for_a_link_after_lstat_is_never_entered",)),
    Mutation(300, "the walk's stat follows a link", FDTREE,
             "                st = lstat_at(fd, name)\n            except FileNotFoundError:\n"
             "                raise Changed(os.fsdecode(path)) from None",
             "                st = os.stat(name, dir_fd=fd)\n            except FileNotFoundError:\n"
             "                raise Changed(os.fsdecode(path)) from None",
             (FD + "test_a_swap_between_levels_is_seen_as_a_link",)),
    Mutation(301, "a change after the takeover is not compared", "gkeys_portage/verify/manifest/shape.py",
             "        if self.taken is not None and self.taken.get(entry.rel) != fingerprint(st):",
             "        if False:",
             (CUSTODY + "test_a_change_after_the_takeover_refuses_the_shaping",)),
    Mutation(301, "the record leaves out the change time", "gkeys_portage/verify/manifest/shape.py",
             "_FINGERPRINT.pack(st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)",
             "_FINGERPRINT.pack(st.st_ino, st.st_size, st.st_mtime_ns, 0, st.st_mode)",
             (CUSTODY + "test_a_change_after_the_takeover_refuses_the_shaping",)),
    Mutation(301, "a file open for writing stays in the tree", TAKE,
             "                    if _written(entry):", "                    if False:",
             (CUSTODY + "test_the_takeover_makes_the_tree_roots_and_breaks_away_from_writers",)),
    Mutation(301, "a refused read lease is no writer", FDTREE,
             "        return True if exc.errno == errno.EAGAIN else None", "        return None",
             (FD + "test_open_for_writing_sees_a_writer_and_a_shared_writable_mapping",)),
    Mutation(302, "an entry of a third user is taken over", TAKE,
             "    if st.st_uid not in owners:", "    if False:",
             (CUSTODY + "test_an_entry_of_another_owner_refuses_the_takeover",)),
    Mutation(303, "a mirror may send any depth", "gkeys_portage/verify/manifest/shape.py",
             "TREE_LIMITS = fdtree.Limits(depth=64, entries=1_000_000)",
             "TREE_LIMITS = fdtree.Limits(depth=2_000, entries=1_000_000)",
             (CUSTODY + "test_a_tree_deeper_than_64_levels_is_refused_naming_the_path",)),
    Mutation(303, "the walk has no depth bound", FDTREE,
             "            if depth + 1 > limits.depth:", "            if False:",
             (FD + "test_walk_is_bounded_and_never_recursive",)),
    Mutation(303, "the walk has no entry bound", FDTREE,
             "            if count > limits.entries:", "            if False:",
             (FD + "test_walk_is_bounded_and_never_recursive",)),
    Mutation(303, "removal holds a descriptor per level", FDTREE,
             "            if len(stack) >= fd_depth:", "            if False:",
             (FD + "test_remove_tree_removes_1010_levels_without_recursion_within_few_descriptors",)),
    Mutation(303, "a killed sync's leftover stays beside the location", "gkeys_portage/portage/rsyncsync.py",
             "    removed, warnings = custody.remove_stale(location.parent, staging_prefix(location))",
             "    removed, warnings = 0, []",
             (LEFT + "test_a_deep_leftover_of_a_killed_sync_is_removed_by_the_next",)),
    Mutation(304, "a leftover gkeys cannot remove fails the sync", TAKE,
             "    except fdtree.NotRemoved as exc:\n        return (f\"could not remove",
             "    except fdtree.NotRemoved as exc:\n        raise\n        return (f\"could not remove",
             (LEFT + "test_a_leftover_gkeys_cannot_remove_is_a_warning_never_a_failed_sync",)),
    Mutation(305, "the walk enters a mount point", FDTREE,
             "            if not visit(entry) or not stat.S_ISDIR(st.st_mode) or st.st_dev != device:",
             "            if not visit(entry) or not stat.S_ISDIR(st.st_mode):",
             (FD + "test_walk_and_remove_never_cross_a_mount_point",)),
    Mutation(305, "removal descends into a mount point", FDTREE,
             "            if st.st_dev != device:\n                left.append(os.fsdecode(path))",
             "            if False:\n                left.append(os.fsdecode(path))",
             (FD + "test_walk_and_remove_never_cross_a_mount_point",)),
    Mutation(305, "removal of a mount point itself", FDTREE,
             "    if st.st_dev != os.fstat(parent).st_dev:\n        raise NotRemoved",
             "    if False:\n        raise NotRemoved",
             (FD + "test_walk_and_remove_never_cross_a_mount_point",)),
    Mutation(306, "a user's directory is not carried", "gkeys_portage/portage/rsyncsync.py",
             "                fdtree.link_tree(live, name, tree)", "                pass",
             (LEFT + "test_the_users_entries_stay_what_they_were_links_included",)),
    Mutation(306, "a user's link is not carried", "gkeys_portage/portage/rsyncsync.py",
             "            os.symlink(os.readlink(name, dir_fd=live), name, dir_fd=tree)\n",
             "            continue\n",
             (LEFT + "test_the_users_entries_stay_what_they_were_links_included",)),
    Mutation(306, "a mount point moves with the swapped tree", "gkeys_portage/portage/rsyncsync.py",
             "                    if mounted:\n                        for name in LOCAL_DIRECTORIES:",
             "                    if False:\n                        for name in LOCAL_DIRECTORIES:",
             (LEFT + "test_a_mount_point_at_distfiles_stays_and_never_blocks_a_sync",)),
    Mutation(307, "what sits at .NAME.previous is followed", "gkeys_portage/core/fs/swap.py",
             "        st = os.lstat(parked)", "        st = os.stat(parked)",
             (LEFT + "test_a_link_at_the_previous_name_is_a_warning_never_a_blocked_sync",)),
)

#: Rows 300-329 with no mutation yet, and why.
UNMUTATED: dict[int, str] = {
    **{row: "not yet: issue 47 (rows added by issues 41-46)" for row in (
        310, 311, 312, 313, 314, 315, 320, 321, 322, 323, 324, 325)},
}
