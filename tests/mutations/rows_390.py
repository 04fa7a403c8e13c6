"""Mutations of SECURITY.md rows 390-399: the journal spool and where a media refusal is journaled (see table.py
for what a mutation is)."""

from __future__ import annotations

from table import Mutation

SPOOL = "tests/test_journal_spool.py::"
ECLASS = SPOOL + "test_the_eclass_leaves_each_verdict_for_root_which_verifies_it_again_and_audit_lists_it"
UNPRIV = SPOOL + "test_a_build_as_an_unprivileged_user_is_confirmed_by_root_or_journaled_unconfirmed"
FORGED = SPOOL + "test_forged_malformed_and_foreign_records_are_refused_removed_and_never_trusted"
FULL = SPOOL + "test_a_full_spool_takes_no_more_and_the_build_goes_on"
PATHS = SPOOL + "test_root_opens_a_claim_only_below_distdir_never_through_a_link_a_fifo_or_a_file_its_owner_cannot_read"
SAME = SPOOL + "test_root_verifies_the_inode_it_hashed_even_when_the_name_is_replaced_meanwhile"
SWAP = SPOOL + "test_a_claimed_file_swapped_for_a_fifo_or_another_file_again_and_again_never_blocks_or_misleads_root"
INGEST = "gkeys_portage/verify/ingest.py"
CLAIMED = "gkeys_portage/verify/claimed.py"
RECORDS = "gkeys_portage/verify/spool.py"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation(390, "a claim root could not confirm is journaled as confirmed", INGEST,
             '"signatures": [{"fingerprint": f} for f in data["signers"]], "confirmed": False, "why": why',
             '"signatures": [{"fingerprint": f} for f in data["signers"]], "confirmed": True, "why": why',
             (UNPRIV,)),
    Mutation(390, "a file changed since the build verified it is taken as the file described", INGEST,
             'if digest[0] != data["sha256"]:', "if False:", (UNPRIV,)),
    Mutation(390, "root's verdict journaled without who reported it", INGEST,
             'journal_file(ctx, signed, category, result, {**reported, "confirmed": True}, digest)',
             'journal_file(ctx, signed, category, result, {"confirmed": True}, digest)', (ECLASS, UNPRIV)),
    Mutation(390, "the record names the link in the build's ${DISTDIR}: root never confirms it",
             "gkeys_portage/verify/file.py",
             'names = {key: value if value == "inline" else os.path.realpath(value) for key, value in '
             '_names(signed).items()}', "names = _names(signed)", (ECLASS,)),
    Mutation(391, "a symbolic link in the spool is followed", RECORDS,
             "fd = os.open(spool / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)",
             "fd = os.open(spool / name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)", (FORGED,)),
    Mutation(391, "a hard link to a record elsewhere is read", RECORDS,
             "if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:", "if not stat.S_ISREG(info.st_mode):",
             (FORGED,)),
    Mutation(391, "a record with a field more is read", RECORDS,
             "if not isinstance(data, dict) or set(data) != set(checks):",
             "if not isinstance(data, dict) or not set(checks) <= set(data):", (FORGED,)),
    Mutation(391, "an oversized record is read (cut at the limit)", RECORDS,
             "    if len(raw) > MAX_RECORD:\n        raise Refused", "    if False:\n        raise Refused", (FORGED,)),
    Mutation(391, "a record owned by a uid that is no user is read", RECORDS,
             'raise Refused(f"owned by uid {uid}, which is no user") from exc', "return str(uid)", (FORGED,)),
    Mutation(392, "a full spool takes more records", RECORDS,
             "if sum(1 for _ in zip(names, range(MAX_RECORDS), strict=False)) >= MAX_RECORDS:", "if False:", (FULL,)),
    Mutation(392, "a record that cannot be written fails the build", RECORDS,
             "    except (OSError, ValueError, TypeError) as exc:\n"
             '        journal.warn_once(f"cannot leave this verdict',
             "    except (ValueError, TypeError) as exc:\n"
             '        journal.warn_once(f"cannot leave this verdict', (FULL,)),
    Mutation(393, "fetch-media journals a refusal at the quarantine path", "gkeys_portage/verify/media/fetch.py",
             "refusal_journaled(ctx, dest_dir / file_name(url), category, url=url):",
             "refusal_journaled(ctx, folder / file_name(url), category, url=url):",
             ("tests/test_journal_after_verdict.py::"
              "test_a_refused_release_file_is_journaled_where_the_user_asked_for_it_never_at_a_scratch_path",)),
    Mutation(393, "a refusal journaled without the URL it came from", "gkeys_portage/verify/media/record.py",
             '{"file": place, **({"url": url} if url else {}), "category": category,',
             '{"file": place, "category": category,',
             ("tests/test_journal_after_verdict.py::"
              "test_a_refused_release_file_is_journaled_where_the_user_asked_for_it_never_at_a_scratch_path",
              "tests/test_fetch.py::test_unverified_stage3_is_removed")),
    Mutation(394, "root waits on a FIFO a claim names", CLAIMED,
             "FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC",
             "FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC", (PATHS,)),
    Mutation(394, "a FIFO a claim names is read as a file", CLAIMED,
             '"it is not a regular file (a FIFO, a device or a socket)" if not stat.S_ISREG(info.st_mode) else',
             '"it is not a regular file (a FIFO, a device or a socket)" if False else', (PATHS, SWAP)),
    Mutation(394, "root reads a file the record's owner may not read", CLAIMED,
             "    if uid == 0:\n        return True\n    if info.st_uid == uid:",
             "    if True:\n        return True\n    if info.st_uid == uid:", (PATHS,)),
    Mutation(394, "a path outside DISTDIR is opened", CLAIMED,
             'if os.path.normpath(named) != named or not named.startswith(top.rstrip("/") + "/"):',
             "if os.path.normpath(named) != named:", (PATHS,)),
    Mutation(394, "a symlinked directory below DISTDIR is followed", CLAIMED,
             "inner = open_dir(part, level)", "inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=level)",
             (PATHS,)),
    Mutation(394, "gpg and Sequoia read the claimed file by its name, not the descriptor hashed", INGEST,
             "body: bytes | OpenFile = OpenFile(fd)", "body: bytes | OpenFile | Path = Path(name)", (SAME,)),
    Mutation(394, "audit --recheck opens a file a build named by its name", "gkeys_portage/verify/recheck.py",
             '    if isinstance(data.get("reported_by"), dict):\n        return _claimed(ctx, data, distdir)',
             '    if False:\n        return _claimed(ctx, data, distdir)', (PATHS,)),
)

#: Rows 390-399 with no mutation yet, and why.
UNMUTATED: dict[int, str] = {}
