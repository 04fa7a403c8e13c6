"""Mutations of SECURITY.md rows 330-399 (see table.py for what a mutation is)."""

from __future__ import annotations

from table import Mutation

LIFE = "tests/test_tree_lifecycle.py::"
AUTH = "tests/test_authority.py::"
STOLEN = LIFE + "test_a_stolen_retired_key_cannot_add_a_commit_on_top"
EVIDENCE = LIFE + "test_evidence_is_a_trusted_descendant_dated_before_the_window_closed"
FIRST_RUN = LIFE + "test_first_run_accepts_exactly_the_legitimate_commits_and_records_it"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation(330, "a signature inside a closed window needs no evidence", "gkeys_portage/verify/git/evidence.py",
             "        if verdict.good and verdict.closed_since:", "        if False:", (STOLEN,)),
    Mutation(330, "a signature dated after every window is authorized", "gkeys_portage/openpgp/verdict.py",
             "    if window is None:\n        raise outside(pin.windows, created, who)",
             "    if window is None:\n        return Window(), None", (STOLEN,)),
    Mutation(330, "a trusted commit above dated after the closing is evidence", "gkeys_portage/verify/git/evidence.py",
             "            elif above is None or above >= verdict.closed_since:", "            elif above is None:",
             (EVIDENCE,)),
    Mutation(331, "a soft revocation does not close the signer's window", "gkeys_portage/openpgp/verdict.py",
             "    if not dates or (closed is not None and closed <= min(dates)):\n        return window, closed",
             "    if True:\n        return window, closed", (STOLEN,)),
    Mutation(332, "any commit judged before is evidence, not only a descendant",
             "gkeys_portage/verify/git/evidence.py",
             "        above = self.bounds.pop(commit.hash, None)",
             "        above = self.bounds.pop(commit.hash, min(self.bounds.values(), default=None))", (EVIDENCE,)),
    Mutation(332, "a refused commit's date is evidence", "gkeys_portage/verify/git/evidence.py",
             "        trusted = verdict.signed if verdict.good else None", "        trusted = verdict.signed",
             (EVIDENCE,)),
    Mutation(332, "a commit accepted by hand is evidence", "gkeys_portage/verify/git/tree.py",
             "                evidence.judge(commit, verdict)",
             "                evidence.judge(commit, dataclasses.replace(verdict, reason='', code='', verified=True,"
             " closed_since=0) if commit.hash in self.accepted else verdict)", (STOLEN,)),
    Mutation(333, "a retired key leaves the seeds", "gkeys_portage/keys/certification.py",
             "        return self.verdict is Verdict.CERTIFIED or (bool(self.windows) and self.verdict in "
             "KEPT_WITH_WINDOWS)",
             "        return self.verdict is Verdict.CERTIFIED", (AUTH + "test_chain_keeps_exactly_the_certified_developers",)),
    Mutation(333, "a lapsed key leaves the seeds", "gkeys_portage/keys/certification.py",
             "KEPT_WITH_WINDOWS = (Verdict.RETIRED, Verdict.KEY_EXPIRED)", "KEPT_WITH_WINDOWS = (Verdict.RETIRED,)",
             (FIRST_RUN,)),
    Mutation(334, "one commit accepted by hand lets every refused commit pass", "gkeys_portage/verify/git/tree.py",
             "                if not verdict.good and commit.hash in self.accepted:",
             "                if not verdict.good and self.accepted:",
             (LIFE + "test_daily_syncs_through_retirement_and_replacement_never_freeze",)),
    Mutation(334, "a commit accepted by hand is not journaled", "gkeys_portage/verify/git/accepted.py",
             "    for commit in new:\n        journal.record(", "    for commit in []:\n        journal.record(",
             (FIRST_RUN,)),
    Mutation(334, "a refused run records nothing", "gkeys_portage/verify/git/tree.py",
             "        elif record and report.first_good and report.first_good != base:", "        elif False:",
             (FIRST_RUN,)),
    Mutation(335, "a window time without a zone is read as local time", "gkeys_portage/keys/seeds.py",
             "    if when.tzinfo is None:", "    if False:",
             (LIFE + "test_seed_windows_round_trip_and_old_seeds_load_unchanged",)),
    Mutation(335, "a window time that does not parse is no bound", "gkeys_portage/keys/seeds.py",
             "    except ValueError as exc:\n        raise SeedFormatError(f\"{where}: {text!r} is not an ISO 8601",
             "    except ValueError as exc:\n        return None\n        raise SeedFormatError(f\"{where}: {text!r} is not an ISO 8601",
             (LIFE + "test_seed_windows_round_trip_and_old_seeds_load_unchanged",)),
    Mutation(335, "'until' may come before 'from'", "gkeys_portage/keys/seeds.py",
             "            if start is not None and end is not None and end <= start:", "            if False:",
             (LIFE + "test_seed_windows_round_trip_and_old_seeds_load_unchanged",)),
    Mutation(335, "unknown window fields are read past", "gkeys_portage/keys/seeds.py",
             "            if unknown:\n                raise SeedFormatError(f\"{at}: unknown",
             "            if False:\n                raise SeedFormatError(f\"{at}: unknown",
             (LIFE + "test_seed_windows_round_trip_and_old_seeds_load_unchanged",)),
    Mutation(335, "a window of a key the seed does not hold is read", "gkeys_portage/keys/seeds.py",
             "        if fpr not in allowed:", "        if False:",
             (LIFE + "test_seed_windows_round_trip_and_old_seeds_load_unchanged",)),
    Mutation(335, "an empty list of windows is read", "gkeys_portage/keys/seeds.py",
             "        if not parsed:\n            raise SeedFormatError", "        if False:\n            raise SeedFormatError",
             (LIFE + "test_seed_windows_round_trip_and_old_seeds_load_unchanged",)),
    Mutation(336, "a key gone from the download is dropped with its past", "gkeys_portage/keys/authority.py",
             "            if not spans or fpr in present or fpr in revoked:\n                continue",
             "            if True:\n                continue",
             (LIFE + "test_a_retired_key_gone_from_the_keyring_download_still_judges_its_past",)),
    Mutation(336, "a key gone from the download stays authorized", "gkeys_portage/keys/authority.py",
             "            closed = [w if w.closed_at(when) is not None else Window(w.start, int(when), w.certifier, ABSENT)\n"
             "                      for w in spans]",
             "            closed = list(spans)",
             (LIFE + "test_a_retired_key_gone_from_the_keyring_download_still_judges_its_past",)),
    Mutation(336, "a key kept retired counts as present for max-shrink", "gkeys_portage/keys/authority.py",
             "                new = seeds_from(evaluation)\n",
             "                new = seeds_from(evaluation)\n                _retain_absent(old, new, set(downloaded), revoked, wall)\n",
             (AUTH + "test_truncated_keyring_is_refused_by_max_shrink",)),
    Mutation(337, "a refused update closes no window", "gkeys_portage/keys/authority.py",
             "    closing = {f: w for f, w in (retired or {}).items() if f in installed}", "    closing = {}",
             (AUTH + "test_a_retirement_applies_even_when_the_update_is_refused",)),
)

#: Rows 330-399 with no mutation yet, and why.
UNMUTATED: dict[int, str] = {
    **{row: "not yet: issue 47 (rows added by issues 41-46)" for row in (
        340, 341, 342, 350, 351, 352, 353, 354, 355, 356, 357, 358, 371, 373, 380)},
}
