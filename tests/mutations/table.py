"""One small code change per SECURITY.md row that removes the row's protection, and the tests that must then fail.

tests/mutations/run.py applies each in a copy of the project (never the checkout) and requires every test it
names to fail; tests/test_security_rows.py checks, without running anything, that each old text is still in its
file exactly once and that the row cites each named test.  A row whose protection is several checks gets one
mutation per check.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    """Row ``row``'s protection ``name``, removed by replacing ``old`` with ``new`` in ``file``; each of
    ``tests`` (``tests/FILE.py::test``, all its parameters) must then fail."""

    row: int
    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]


SO = "tests/test_second_opinion.py::"
REV = "tests/test_revocation_rule.py::"
SQ = "tests/test_status_forgery_sq.py::"
DIFF = "tests/test_differential_engines.py::"
SHAPE = "tests/test_manifest_shape.py::"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation(48, "an .asc made before the build stamp binds the name too", "gkeys_portage/verify/media/verifier.py",
             "if built is not None and made_at >= built:", "if built is not None:",
             ("tests/test_media.py::test_old_release_under_a_newer_name_is_refused",)),
    Mutation(48, "a file nothing binds is accepted", "gkeys_portage/verify/media/verifier.py",
             "        if self.allow_unnamed:\n            result.name_rule",
             "        if True:\n            result.name_rule",
             ("tests/test_media.py::test_old_release_under_a_newer_name_is_refused",
              "tests/test_media.py::test_asc_only_without_build_stamp_needs_allow_unnamed")),
    Mutation(150, "a top Manifest line longer than GnuPG 2.2 hashes", "gkeys_portage/verify/manifest/signedtext.py",
             "if len(line) > MAX_HASHED_LINE:", "if False:",
             ("tests/test_rsync_signed_text.py::"
              "test_a_manifest_line_padded_past_what_gnupg_hashes_is_refused_before_gemato_reads_it",)),
    Mutation(150, "the top Manifest's verdict is GnuPG's alone", "gkeys_portage/verify/manifest/signedtext.py",
             "            result = decide(report, pins,",
             "            report.second = __import__('gkeys_portage.openpgp.sequoia').openpgp.sequoia.SecondOpinion(\n"
             "                __import__('gkeys_portage.openpgp.sequoia').openpgp.sequoia.Opinion.OFF)\n"
             "            result = decide(report, pins,",
             (SO + "test_fooled_engine_never_verifies_a_top_manifest",)),
    Mutation(151, "the second opinion's verdict is not asked", "gkeys_portage/openpgp/sequoia.py",
             "        if second is not None and second.accepts(primary, signing):\n            continue",
             "        if True:\n            continue",
             (SO + "test_fooled_engine_never_verifies_alone", SO + "test_fooled_engine_never_verifies_cleartext",
              SO + "test_fooled_engine_never_verifies_a_signed_message",
              SO + "test_fooled_engine_never_verifies_a_batch",
              SO + "test_fooled_engine_never_verifies_a_top_manifest")),
    Mutation(152, "Sequoia's good signature by any key confirms GnuPG's", "gkeys_portage/openpgp/sequoia.py",
             "return self.opinion is Opinion.ACCEPTED and (primary.upper(), signing.upper()) in self.signers",
             "return self.opinion is Opinion.ACCEPTED",
             (SQ + "test_sequoia_credits_bob_when_gpg_sq_s_status_stream_says_alice",)),
    Mutation(157, "a cleartext text Sequoia read otherwise is accepted", "gkeys_portage/openpgp/signatures.py",
             "    if second.opinion is not Opinion.ACCEPTED or second.text is None:\n        return second",
             "    if True:\n        return second",
             (SO + "test_a_signed_text_sequoia_read_otherwise_is_its_refusal",)),
    Mutation(158, "decide() refuses everything (the property would compare nothing)",
             "gkeys_portage/openpgp/verdict.py", "    policy = policy or VerifyPolicy()\n",
             "    raise BadInputError('refused by a mutation')\n",
             (DIFF + "test_the_unmutated_inputs_and_each_valid_change_verify_on_all_three",
              DIFF + "test_a_mutated_detached_signature_is_verified_only_when_both_engines_accept",
              DIFF + "test_a_mutated_cleartext_is_verified_only_when_both_engines_accept_the_text_gkeys_returns")),
    Mutation(159, "an empty keyring export is kept for the process", "gkeys_portage/openpgp/sequoia.py",
             "    if found.blobs:  # an empty or failed export is never kept",
             "    if True:  # an empty or failed export is never kept",
             (SO + "test_an_empty_keyring_export_is_never_kept",)),
    Mutation(159, "the certificates are read while gpg runs in the home", "gkeys_portage/openpgp/sequoia.py",
             "        with contextlib.suppress(Exception):  # the check itself reports what went wrong\n"
             "            _certificates(homedir, export)",
             "        pass",
              (SO + "test_the_certificates_are_read_before_gpg_runs_in_the_home",)),
    Mutation(165, "a notation name with control characters reaches the engine", "gkeys_portage/openpgp/packets.py",
             "elif kind == NOTATION and _has_control(", "elif False and _has_control(",
             (SQ + "test_a_notation_name_forging_gpg_sq_status_lines_does_not_make_bob_alice",)),
    Mutation(166, "gkeys' revocation rule marks nothing revoked", "gkeys_portage/openpgp/revocations.py",
             "                part.validity = REVOKED", "                pass",
             (REV + "test_the_rule_revokes_what_the_engine_listing_leaves_valid",)),
    Mutation(166, "a revocation the engine does not find good counts", "gkeys_portage/openpgp/revocations.py",
             "if sig.good and _issuer(sig, [key.fingerprint, *designated])",
             "if _issuer(sig, [key.fingerprint, *designated])",
             (REV + "test_the_rule_counts_only_a_good_revocation_by_the_key_or_its_designated_revoker",)),
    Mutation(167, "designated revocations are not imported again", "gkeys_portage/openpgp/keyio.py",
             "        if not revocations:\n            return", "        if True:\n            return",
             (REV + "test_a_key_revoked_by_its_pinned_designated_revoker_is_revoked",)),
    Mutation(167, "a designated revoker need not be pinned", "gkeys_portage/openpgp/keyblocks.py",
             "for sig in candidates if any(sig.by(fpr) for fpr in revokers & known)]",
             "for sig in candidates if any(sig.by(fpr) for fpr in revokers)]",
             (REV + "test_only_a_revocation_by_a_pinned_designated_revoker_is_imported_again",)),
    Mutation(370, "a refusal for any capability is an expected failure", "tests/engine_expectations.py",
             "    if not all(caps and caps <= lacks for _, caps in refusals):\n        return None\n", "",
             ("tests/test_engines.py::test_only_a_capability_in_the_engines_table_makes_an_expected_failure",)),
    Mutation(372, "a skip under CI=true is a skip", "tests/conftest.py",
             'if os.environ.get("CI") == "true" and report.skipped', 'if False and report.skipped',
             ("tests/test_ci_skips.py::test_a_skip_outside_the_allow_list_fails_under_ci",)),
    Mutation(153, "a report without a second opinion counts as confirmed", "gkeys_portage/openpgp/sequoia.py",
             "        if second is not None and second.accepts(primary, signing):\n            continue",
             "        if second is None or second.accepts(primary, signing):\n            continue",
             (SO + "test_a_report_without_a_second_opinion_is_not_verified",)),
    Mutation(154, "a missing pysequoia is GnuPG alone", "gkeys_portage/openpgp/sequoia.py",
             "    if second is not None and second.opinion is Opinion.MISSING:",
             "    if second is not None and second.opinion is Opinion.MISSING and False:",
             (SO + "test_missing_pysequoia_refuses_naming_the_fix_and_off_is_gnupg_alone",)),
    Mutation(155, "an RSA MPI padded to the modulus size is refused", "gkeys_portage/openpgp/mpis.py",
             "padded = algorithm in RSA_ALGORITHMS and actual < bits", "padded = False",
             ("tests/test_realworld_signers.py::test_every_commit_of_a_real_github_history_gets_the_verdict_git_gives",)),
    Mutation(155, "the padded MPI reaches Sequoia as it came", "gkeys_portage/openpgp/mpis.py",
             "    if start is None or body[2] not in RSA_ALGORITHMS:\n        return body",
             "    if True:\n        return body",
             ("tests/test_realworld_signers.py::test_every_commit_of_a_real_github_history_gets_the_verdict_git_gives",)),
    Mutation(156, "a SHA-1 binding is not named as the cause", "gkeys_portage/openpgp/sequoia.py",
             "        why = (sha1_cause(primary) if second is not None and primary.upper() in second.sha1_bindings\n"
             "               else UNKNOWN_CAUSE)",
             "        why = UNKNOWN_CAUSE",
             (SO + "test_a_key_bound_with_sha1_is_a_disagreement_naming_cause_and_fix",)),
    Mutation(161, "a child's answer of any shape counts", "gkeys_portage/openpgp/sequoia.py",
             "    if len(valid) != len(answer[\"valid\"]) or len(said) != len(answer[\"said\"]):\n"
             "        raise ValueError(\"a field of the wrong shape\")",
             "    pass",
             (SO + "test_a_garbled_or_missing_answer_from_the_child_is_a_refusal",)),
    Mutation(161, "a child that failed is heard", "gkeys_portage/openpgp/sequoia.py",
             "    if done.returncode != 0 or len(done.stdout) > MAX_ANSWER:",
             "    if len(done.stdout) > MAX_ANSWER:",
             (SO + "test_a_garbled_or_missing_answer_from_the_child_is_a_refusal",)),
    Mutation(168, "-o writes gpg's output of a signed message", "gkeys_portage/openpgp/signatures.py",
             "text = result.stdout if expected is not None else literal", "text = result.stdout",
             ("tests/test_sig_redteam.py::test_verify_output_of_a_text_mode_message_keeps_the_signed_carriage_returns",)),
    Mutation(169, "an engine others can replace runs", "gkeys_portage/core/config.py",
             "        if writable_by_others(info) or group_write:", "        if False:",
             ("tests/test_engine_owner.py::test_an_engine_others_can_replace_is_refused",)),
    Mutation(170, "a stale bundle is installed", "gkeys_portage/keys/bundle.py",
             "    if time.time() - made > limit:", "    if False:",
             ("tests/test_bundle_consume.py::test_a_bundle_signed_longer_ago_than_max_bundle_age_is_stale",)),
    Mutation(171, "a SHA-1 back-signature is no cut-off finding", "gkeys_portage/checks/cutoffs.py",
             "            elif not sub.revoked and sub.back_signature_hash == HASH_IDS[name]:",
             "            elif False:",
             ("tests/test_cutoffs.py::test_a_sha1_back_signature_is_a_cutoff_finding_like_a_sha1_binding",)),
    Mutation(180, "a covered file keeps the mirror's mode", "gkeys_portage/verify/manifest/shape.py",
             "    return EXECUTABLE_MODE if served & 0o111 else FILE_MODE", "    return stat.S_IMODE(served)",
             (SHAPE + "test_a_set_user_id_file_is_replaced_by_a_plain_copy_never_changed_in_place",
              SHAPE + "test_modes_follow_only_the_served_execute_bit")),
    Mutation(180, "a directory keeps the mirror's mode", "gkeys_portage/verify/manifest/shape.py",
             "            if stat.S_IMODE(os.fstat(fd).st_mode) != DIRECTORY_MODE:", "            if False:",
             (SHAPE + "test_directories_get_0755_whatever_they_had",)),
    Mutation(182, "entries no Manifest covers stay", "gkeys_portage/verify/manifest/shape.py",
             "            self._drop(entry)\n            self.result.dropped.append(path)",
             "            pass",
             (SHAPE + "test_devices_fifos_dot_entries_and_ignored_paths_are_dropped_and_named",)),
    Mutation(183, "a covered path that is not a regular file is installed", "gkeys_portage/verify/manifest/shape.py",
             "        if not stat.S_ISREG(st.st_mode):\n            raise TreeMismatchError(",
             "        if False:\n            raise TreeMismatchError(",
             (SHAPE + "test_a_covered_path_that_is_not_a_regular_file_is_refused",)),
    Mutation(183, "a covered link out of the tree is kept", "gkeys_portage/verify/manifest/shape.py",
             "if inside == b\"..\" or inside.startswith(b\"../\") or os.path.isabs(inside) or name not in kept:",
             "if False:",
             (SHAPE + "test_a_covered_link_out_of_the_tree_or_to_an_uncovered_entry_is_refused",)),
    Mutation(197, "a snapshot must be signed on the day its name says", "gkeys_portage/verify/manifest/snapshot.py",
             "SNAPSHOT_WINDOW = timedelta(days=2)", "SNAPSHOT_WINDOW = timedelta(days=1) - timedelta(seconds=1)",
             ("tests/test_rsync_snapshot.py::test_a_snapshot_made_at_0045_the_next_day_is_verified_as_emerge_webrsync_does",)),
    Mutation(198, "a source with % is accepted", "gkeys_portage/verify/overlays/urls.py",
             "    if \"%\" in url:", "    if False:",
             ("tests/test_overlays_readers.py::test_a_source_the_readers_would_read_differently_refuses_the_list",)),
    Mutation(199, "an old-format <overlay> entry is a warning", "gkeys_portage/verify/overlays/format.py",
             "            elif child.tag == \"overlay\":", "            elif False:",
             ("tests/test_overlays_readers.py::test_a_source_the_readers_would_read_differently_refuses_the_list",)),
    Mutation(199, "attributes on <source> are read past", "gkeys_portage/verify/overlays/format.py",
             "        for attribute in sorted(set(element.attrib) - {\"type\"}):", "        for attribute in []:",
             ("tests/test_overlays_readers.py::test_a_source_the_readers_would_read_differently_refuses_the_list",)),
    Mutation(215, "a gitlink is checked out as nothing", "gkeys_portage/verify/git/contents.py",
             "        if fields[0] == GITLINK:", "        if False:",
             ("tests/test_tree_sync_swap.py::test_a_symlink_out_of_the_tree_or_a_submodule_is_never_checked_out",)),
    Mutation(214, "a symlink out of the tree is checked out", "gkeys_portage/verify/git/contents.py",
             "            if not _resolve(path, symlinks):", "            if False:",
             ("tests/test_tree_sync_swap.py::test_a_symlink_out_of_the_tree_or_a_submodule_is_never_checked_out",)),
    Mutation(257, "a changed entry still links", "gkeys_portage/core/journal.py",
             "            elif entry.prev != last.digest:", "            elif False:",
             ("tests/test_journal.py::test_chain_holds_across_rotation_and_names_the_first_broken_link",)),
    Mutation(258, "the end of the journal is not compared with head", "gkeys_portage/core/journal.py",
             "    if head and named != head.get(\"hash\"):", "    if False:",
             ("tests/test_journal.py::test_chain_holds_across_rotation_and_names_the_first_broken_link",)),
    Mutation(240, "the output door lets control characters through", "gkeys_portage/core/text.py",
             "_CONTROLS = re.compile(\"[", "_CONTROLS = re.compile(\"(?!)[",
             ("tests/test_output_door.py::test_hostile_uid_name_and_file_name_never_reach_the_terminal",
              "tests/test_output_door.py::test_neutralise_shows_controls_as_escapes")),
    Mutation(259, "a journal that cannot be written fails the verification", "gkeys_portage/core/journal.py",
             "    except (StateError, OSError, ValueError, TypeError) as exc:\n        warn_once(str(exc))\n"
             "        return None",
             "    except (StateError, OSError, ValueError, TypeError) as exc:\n        raise",
             ("tests/test_journal.py::test_a_journal_that_cannot_be_written_is_one_warning_and_never_a_failure",)),
    Mutation(260, "the journal is never rotated", "gkeys_portage/core/journal.py",
             "            if paths.current.exists() and paths.current.stat().st_size + len(line) > MAX_FILE:",
             "            if False:",
             ("tests/test_journal.py::test_chain_holds_across_rotation_and_names_the_first_broken_link",)),
    Mutation(261, "a config change is not journaled", "gkeys_portage/core/journal.py",
             "    if kept == now:\n        return None", "    if True:\n        return None",
             ("tests/test_journal.py::test_a_config_change_of_pins_or_engine_is_journaled_once",)),
    Mutation(227, "a killed run's scratch waits a day", "gkeys_portage/core/scratch.py",
             "                if owner is not None:\n                    gone = owner_gone(*owner)",
             "                if owner is not None:\n                    gone = info.st_mtime < cutoff",
             ("tests/test_kill_windows.py::test_scratch_of_a_killed_run_is_removed_by_the_next_at_once",)),
    Mutation(243, "setup-portage takes a category gkeys does not know", "gkeys_portage/cli/portage_actions.py",
             "    if cat in known:\n        return cat", "    if True:\n        return cat",
             ("tests/test_setup_doctor_agree.py::test_setup_portage_refuses_a_category_gkeys_does_not_know",)),
    Mutation(245, "a config value is checked only when a command reads it", "gkeys_portage/core/configschema.py",
             "            if why:\n                raise ConfigError(f\"{where}[{section}] {key}: {why}\")",
             "            if why and False:\n                raise ConfigError(f\"{where}[{section}] {key}: {why}\")",
             ("tests/test_config_values.py::test_every_value_is_checked_by_every_command",)),
    Mutation(213, "the hook rolls back any tree with a .git", "gkeys_portage/portage/hooks.py",
             "    if sync_type is not None and sync_type != \"git\":", "    if False:",
             ("tests/test_tree_hooks.py::test_an_rsync_repository_with_a_leftover_git_is_never_rolled_back",)),
    Mutation(248, "the host guard sees no change", "tests/host_guard.py",
             "    lines = [f\"created {p}\" for p in after.keys() - before.keys()]",
             "    return []\n    lines = [f\"created {p}\" for p in after.keys() - before.keys()]",
             ("tests/test_host_guard.py::test_guard_names_files_created_changed_and_removed",)),
    Mutation(242, "--undo removes a file make.conf still sources", "gkeys_portage/cli/portage_actions.py",
             "    if not lines:\n        return None\n    report = Report(data={\"action\": \"setup-portage\", "
             "\"undo\": True,",
             "    if True:\n        return None\n    report = Report(data={\"action\": \"setup-portage\", "
             "\"undo\": True,",
             ("tests/test_setup_doctor_agree.py::test_undo_refuses_while_make_conf_sources_its_file",)),
    Mutation(200, "any pin of the category verifies the overlay list", "gkeys_portage/keys/purposes.py",
             "    strict = PinSet.of(pin for pin in kept.pins.values() if KeyRef(pin.category, pin.nick) in wanted)",
             "    strict = pins",
             ("tests/test_overlays_cli.py::test_the_list_needs_an_overlay_list_key_not_the_git_mirror_key",)),
    Mutation(186, "the no-change path trusts the live tree without its inventory",
             "gkeys_portage/verify/manifest/inventory.py",
             "    return count == expected.entries and found == expected.digest", "    return True",
             ("tests/test_rsync_shape.py::test_the_no_change_path_does_not_keep_a_local_edit",)),
)

#: Rows from 150 with no mutation yet, and why (each is a gap in the proof, not a permanent exemption).
UNMUTATED: dict[int, str] = {}

# More rows, one file per range (each holds MUTATIONS and UNMUTATED of its own); rows_*.py import Mutation from
# here, so they are read last.
from rows_150 import MUTATIONS as _M150, UNMUTATED as _U150  # noqa: E402
from rows_300 import MUTATIONS as _M300, UNMUTATED as _U300  # noqa: E402
from rows_330 import MUTATIONS as _M330, UNMUTATED as _U330  # noqa: E402
from rows_390 import MUTATIONS as _M390, UNMUTATED as _U390  # noqa: E402
from rows_395 import MUTATIONS as _M395, UNMUTATED as _U395  # noqa: E402
from rows_396 import MUTATIONS as _M396, UNMUTATED as _U396  # noqa: E402

MUTATIONS = MUTATIONS + _M150 + _M300 + _M330 + _M390 + _M395 + _M396
UNMUTATED.update(_U150)
UNMUTATED.update(_U300)
UNMUTATED.update(_U330)
UNMUTATED.update(_U390)
UNMUTATED.update(_U395)
UNMUTATED.update(_U396)
