"""Verify the OpenPGP signatures of git commits (``verify-tree``, the sync module and the hooks).

Every commit of a range must carry a ``gpgsig`` header whose signature is good and made by a key
whose *primary* fingerprint the seeds of one of the listed categories pin (default ``gentoo-devs``;
Gentoo's sync repositories need ``gentoo-devs gentoo-infra``, since the mirror's merge and metadata
commits lie between two syncs); merge commits are no exception.  The top commit may instead be
signed by a key of the top-commit category.  The time rules of
:func:`gkeys_portage.openpgp.verdict.decide` apply per commit.

Speed: commits are read in chunks by ``git cat-file --batch`` while gpg checks the chunks read before;
each chunk's parsed signatures and payloads are written to a private scratch directory (in memory when
``/dev/shm`` exists) and checked by one ``gpg --verify --multifile`` run, one per core at a time
(:meth:`GnuPG.verify_detached_many`), instead of the gpg process per commit that
``git log --format=%G?`` starts.  GnuPG stays the verifier of record: each commit gets its own status
lines, decided by the same pinning code as every signature.
Commits below the last verified revision (recorded per repository) are never checked again.

Memory stays flat over a whole history: the range's hashes wait in a file (:class:`Revisions`), the
commits are read a round at a time, only refused verdicts are kept, and no parent lists are held (the
first good ancestor of a refused range is asked of git afterwards, :mod:`.ancestry`).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path

from gkeys_portage.core import journal
from gkeys_portage.core.errors import (
    BadInputError,
    RollbackError,
    UsageError,
)
from gkeys_portage.installfiles import doc_file
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.purposes import Purpose, purpose_pins
from gkeys_portage.openpgp.engine import Capability, probe
from gkeys_portage.openpgp.second import worker as second_opinion
from gkeys_portage.openpgp.status import StatusReport
from gkeys_portage.openpgp.verdict import VerifyPolicy
from gkeys_portage.verify.git import accepted
from gkeys_portage.verify.git.ancestry import first_good_ancestor
from gkeys_portage.verify.git.commits import CommitVerdict, CommitVerifier, PreparedCommits
from gkeys_portage.verify.git.evidence import Evidence
from gkeys_portage.verify.git.objects import Commit, GitRepo
from gkeys_portage.verify.git.records import last_verified, record_verified
from gkeys_portage.verify.git.revisions import Revisions

DEFAULT_CATEGORY = "gentoo-devs"
POLICIES = ("top", "all")
BATCH = 1000  # most commits per gpg run of a whole-history check (bounds memory, paces progress reports)
PARTS_PER_JOB = 2  # gpg runs per parallel job (bench/tree.py: 2 beat 1, 4 and 8 on 2,001 commits)
FIRST_RUN = 64  # commits per gpg run in the first round, so gpg starts while git reads the rest
MAX_NAMED = 10  # refused commits a printed --accept step names one by one (more: one range)
READ_AHEAD = 2  # rounds of gpg runs (one per job) queued while git reads the next commits

Progress = Callable[[int, int], None]


def category_list(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """Categories from a space-separated string (``[tree] category``, ``sync-gkeys-category``) or from
    repeated ``-C`` options (each of which may itself hold several); duplicates dropped, order kept."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(value)
    return tuple(dict.fromkeys(word for item in items for word in item.split()))


@dataclass
class TreeOptions:
    """What to accept: the commit categories (a commit signed by a key pinned in *any* of them is
    good), an optional top-commit category, the first-run policy."""

    categories: tuple[str, ...] = (DEFAULT_CATEGORY,)
    top_category: str | None = None
    policy: str = "top"
    jobs: int = 0  # gpg processes in parallel; 0 = one per core
    max_age_days: float = 0.0  # refuse a top commit signed longer ago (a frozen mirror); 0 = off

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise UsageError(f"unknown tree policy {self.policy!r} (use top or all)")
        if not self.categories:
            raise UsageError("no category may sign commits (give -C CAT, or [tree] category)")

    @classmethod
    def from_config(cls, ctx: Gkeys, *, category: str | Sequence[str] | None = None,
                    top_category: str | None = None, policy: str | None = None) -> TreeOptions:
        """Options from arguments, falling back to ``[tree] category / top-category / policy``.

        ``category`` is one or more categories: a space-separated string or a list of them.
        """
        categories = category_list(category) or category_list(ctx.config.get("tree", "category", DEFAULT_CATEGORY))
        return cls(categories=categories,
                   top_category=top_category or ctx.config.get("tree", "top-category", "") or None,
                   policy=policy or ctx.config.get("tree", "policy", "top"),
                   max_age_days=ctx.config.number("tree", "max-age", 0.0))


@dataclass
class TreeReport:
    """The verdicts on a range of commits: how many were checked, and the refused ones, newest first.

    Only refused verdicts are kept (a whole-history run over a large repository keeps no per-commit
    record of the good ones: the report names only what was refused).
    """

    repo: Path
    tip: str
    base: str | None
    refused: list[CommitVerdict] = field(default_factory=list)
    checked: int = 0
    first_good: str | None = None  # newest commit on tip's first-parent line with only good history
    signers: dict[str, int] = field(default_factory=dict)  # primary fingerprint -> good commits it signed
    accepted: list[CommitVerdict] = field(default_factory=list)  # refused, but accepted by hand (--accept)
    shown_as: Path | None = None  # where the repository lives (a sync verifies a staging copy)
    recorded: str | None = None  # a refused run: the first good ancestor, recorded as verified

    @property
    def bad(self) -> list[CommitVerdict]:
        """The refused commits."""
        return [v for v in self.refused if not v.good]

    @property
    def ok(self) -> bool:
        """True if every commit of the range verified."""
        return not self.bad

    def reason(self) -> str:
        """Why the range is not verified (or that it is), without the repository path."""
        if self.ok:
            return f"{self.checked} commit(s) verified up to {self.tip[:12]}"
        first = self.bad[0]
        more = f" (and {len(self.bad) - 1} more bad commit(s))" if len(self.bad) > 1 else ""
        return f"commit {first.commit[:12]} by {first.author}: {first.reason}{more}"

    def summary(self) -> str:
        """One line: the repository and :meth:`reason`."""
        return f"{self.repo}: {self.reason()}"

    def describe(self) -> list[tuple[str, str]]:
        """Human lines as ``(level, text)``: ``good``, ``error`` or ``info`` (shared by CLI, sync module, hooks)."""
        by_hand = [("info", f"commit {v.commit[:12]} (author {v.author}) was accepted by hand (gkeys verify-tree "
                            f"--accept; see gkeys history): {v.reason}") for v in self.accepted]
        if self.ok:
            if self.base == self.tip:
                return [*by_hand, ("good", f"{self.repo}: no new commits; top {self.tip[:12]} checked again")]
            base = f" above {self.base[:12]}" if self.base else ""
            return [*by_hand, ("good", f"{self.repo}: {self.checked} commit(s){base} verified, top {self.tip[:12]}")]
        lines = [*by_hand, *(("error", f"bad commit {v.commit[:12]} (author {v.author}): {v.reason}")
                             for v in self.bad)]
        lines.append(("info", f"first good ancestor: {self.first_good[:12]}" if self.first_good
                      else "no good ancestor in the checked range"))
        if self.recorded:
            lines.append(("info", f"recorded {self.recorded[:12]} as verified: the next run checks only the "
                                  "commits above it"))
        lines.append(("error", f"{self.repo}: NOT verified: {len(self.bad)} of {self.checked} "
                      "commit(s) refused"))
        lines.append(("info", self.accept_step()))
        return lines

    def accept_command(self) -> str:
        """The command that accepts the refused commits by name, with a reason (journaled)."""
        named = " ".join(f"--accept {v.commit}" for v in self.bad[:MAX_NAMED])
        if len(self.bad) > MAX_NAMED:
            named = f"--accept {self.first_good + '..' if self.first_good else ''}{self.tip}"
        return f"gkeys verify-tree {shlex.quote(str(self.shown_as or self.repo))} {named} --reason 'WHY'"

    def accept_step(self) -> str:
        """The deliberate way on past these refusals: :meth:`accept_command`, and when to run it."""
        return (f"if you have checked these commits by other means (or you accept them as they are), accept them "
                f"deliberately, recorded in the trust journal: {self.accept_command()} "
                "(nothing else is accepted; do not if you do not know why they were refused)")

    def journal(self, repo: Path, options: TreeOptions) -> dict[str, object]:
        """The trust journal's entry: the live location, the range (the tip is the commit id accepted), how many
        commits, each signer with its count (or the refusals)."""
        entry: dict[str, object] = {"repo": str(repo), "base": self.base, "tip": self.tip,
                                    "checked": self.checked, "signers": self.signers,
                                    "categories": list(options.categories), "top_category": options.top_category}
        if not self.ok:
            entry.update(code=self.bad[0].code, refused=len(self.bad), first_good=self.first_good)
        return entry

    def to_json(self) -> dict[str, object]:
        """Machine-readable form."""
        return {"repo": str(self.repo), "tip": self.tip, "base": self.base, "verified": self.ok,
                "checked": self.checked, "bad": [v.to_json() for v in self.bad],
                "first_good_ancestor": self.first_good,
                "accepted_by_hand": [{"commit": v.commit, "author": v.author, "refusal": v.reason, "code": v.code}
                                     for v in self.accepted],
                "recorded": self.recorded or (self.tip if self.ok else None),
                **({"accept_step": self.accept_command()} if self.bad else {})}


def journal_tree(ctx: Gkeys, report: TreeReport, options: TreeOptions, location: Path,
                 refused: tuple[str, str] | None = None) -> None:
    """Journal the final verdict on a range, once, by the caller that applied it (design.md §11 "After the
    verdict"): ``tree-accepted`` after the verified revision is live at ``location`` (never a staging path),
    else ``tree-refused``: the commits' refusal, or ``refused``, a check after the signatures (what gkeys never
    checks out, a work tree that is not the revision) that refused a signed revision, as ``(code, why)``."""
    entry = report.journal(location, options)
    if refused is not None:
        entry.update(code=refused[0], why=refused[1][:400])
    journal.record(ctx, "tree-accepted" if report.ok and refused is None else "tree-refused", entry)


class TreeVerifier:
    """Verify ranges of commits of git repositories and keep the per-repository records."""

    def __init__(self, ctx: Gkeys, options: TreeOptions | None = None) -> None:
        self.ctx = ctx
        self.options = options or TreeOptions.from_config(ctx)
        self.shown_as: Path | None = None  # the live location (a sync verifies staging): named in next steps
        self.accepted = accepted.accepted_commits(ctx.layout)  # commits accepted by hand (--accept)
        ctx.ensure_layout()
        # a commit inside a closed authorization window is judged here, against the commits above it
        policy = dataclasses.replace(ctx.policy(), dated_by_evidence=True)
        self.verifiers = [self._verifier(category, policy) for category in self.options.categories]
        self.top = self._verifier(self.options.top_category, policy) if self.options.top_category else None

    def _verifier(self, category: str, policy: VerifyPolicy) -> CommitVerifier:
        keyring = self.ctx.keyring(category)
        pins = self.ctx.seeds.pins(keyring.category)
        if not len(pins):
            self.ctx.require_category(category)  # a typo lists the installed categories instead
            raise UsageError(f"no seeds installed for category {category!r} (run: gkeys update-seed -C {category})")
        pins, scope = purpose_pins(self.ctx.config, pins, Purpose.GIT_MIRROR)  # never a release/snapshot key
        return CommitVerifier(keyring, pins, policy, self.options.jobs, scope)

    # -- ranges ------------------------------------------------------------------------------------

    def plan(self, repo: GitRepo, tip: str, recorded: str | None) -> tuple[str | None, Revisions]:
        """The commits to check for ``tip``: those above the last verified revision, else by policy.

        Raises :class:`RollbackError` when the recorded revision is no ancestor of ``tip`` (upstream
        rewrote verified history).  With ``max_age_days`` set the tip is always checked, even when it
        is the recorded revision itself: a mirror frozen at an accepted tip must still age out.
        """
        if recorded:
            if not repo.has_commit(recorded) or not repo.is_ancestor(recorded, tip):
                shallow = repo.is_shallow()
                hint = ("; the clone is shallow, so commits in between are missing: sync with full history "
                        "(sync-depth = 0)") if shallow else (
                    " (force-pushed upstream?); nothing is accepted. To accept a rewrite you have checked by other "
                    f"means, remove {repo.path} and sync again: a first clone is verified afresh "
                    f"({doc_file('tree.md')})")
                raise RollbackError(f"{repo.path}: history was rewritten: the last verified commit "
                                    f"{recorded[:12]} is not an ancestor of {tip[:12]}{hint}",
                                    next_step="" if shallow else
                                    f"rm -rf {shlex.quote(str(repo.path))} && emerge --sync")
            hashes = Revisions(repo, tip, [recorded])
            if not len(hashes) and self.options.max_age_days:
                hashes = Revisions(repo, tip, only_tip=True)  # nothing new: the recorded tip again, for its age
            return recorded, hashes
        if self.options.policy == "top":
            return None, Revisions(repo, tip, only_tip=True)
        return None, Revisions(repo, tip)

    def verify(self, repo: GitRepo, hashes: Revisions, *, tip: str, base: str | None,
               progress: Progress | None = None) -> TreeReport:
        """Verify the range's commits (newest first); the tip may use the top-commit category.

        The commits are read in rounds, each round split into ``jobs`` interleaved gpg runs that run at
        once; git reads the next round while gpg checks the current one (at most ``READ_AHEAD`` rounds
        queued), so a whole-history run keeps little in memory and gpg starts at once.  Verdicts are
        taken in the order of ``hashes``.
        """
        report = TreeReport(repo.path, tip, base, shown_as=self.shown_as)
        evidence = Evidence(base)
        verifiers = (*self.verifiers, *([self.top] if self.top else []))
        for verifier in verifiers:
            verifier.location = str(repo.path)
        listed_keys = warm_up(verifiers)  # the judging waits for it; git and the first gpg run do not
        scratch = scratch_parent()
        total = len(hashes)
        first = self.verifiers[0]
        jobs = first.jobs
        size = max(1, min(BATCH, -(-total // (jobs * PARTS_PER_JOB))))
        Lanes = list[tuple[PreparedCommits, Future[dict[str, StatusReport | None]]]]
        pending: deque[tuple[list[str], dict[str, Commit], Lanes]] = deque()

        def settle() -> None:
            listed_keys.result()
            names, commits, lanes = pending.popleft()
            verdicts = {name: verdict for prepared, lane in lanes
                        for name, verdict in self._judge(prepared.commits, lane.result(), scratch).items()}
            for name in names:
                commit = commits[name]
                verdict = verdicts[commit.hash]
                if not verdict.good and commit.hash == tip and self.top is not None:
                    verdict = self._judge_top(commit, verdict, scratch)
                if verdict.good and commit.hash == tip:
                    self._check_age(verdict)
                evidence.judge(commit, verdict)
                report.checked += 1
                if not verdict.good and commit.hash in self.accepted:
                    report.accepted.append(verdict)  # accepted by hand (journaled then): no evidence for others
                elif not verdict.good:
                    report.refused.append(verdict)
                else:
                    report.signers[verdict.fingerprint] = report.signers.get(verdict.fingerprint, 0) + 1
            if progress:
                progress(report.checked, total)

        # a long range: Sequoia's worker process starts now, beside git and gpg, and ends with the run
        with second_opinion.run(total), ThreadPoolExecutor(max_workers=jobs) as pool:
            listed = iter(hashes)
            span = jobs * min(size, FIRST_RUN)  # a short first round: gpg starts soon
            while names := list(islice(listed, span)):
                span = jobs * size
                commits = repo.read_commits(names)
                # every jobs-th commit to one gpg run: neighbours often share a signer (a branch, a busy
                # developer), and keys differ in cost (ed25519 ~4x RSA in GnuPG), so the runs stay even
                # the files are written here, while the workers' gpg checks the round before; the workers
                # only run gpg (judging here keeps the next gpg run from waiting on Python)
                prepared = [first.prepare([commits[h] for h in names[lane::jobs]], scratch)
                            for lane in range(min(jobs, len(names)))]
                pending.append((names, commits, [(part, pool.submit(first.finish, part)) for part in prepared]))
                while len(pending) > READ_AHEAD:
                    settle()
            while pending:
                settle()
        if report.checked != total:
            raise BadInputError(f"{repo.path}: git listed {total} commit(s), {report.checked} were read")
        below = base is not None and base != tip  # a re-checked recorded tip: what lies below is no better
        report.first_good = first_good_ancestor(hashes, {v.commit for v in report.bad}, below=below)
        return report  # decided, not journaled: the caller that applies it journals it (journal_tree)

    def _judge(self, commits: Sequence[Commit], statuses: Mapping[str, StatusReport | None],
               scratch: str | None) -> dict[str, CommitVerdict]:
        """Verdicts against the listed categories in order, from the first category's gpg ``statuses``: a
        commit whose signer is unknown to (or not pinned in) one category is checked again against the next
        one; the first good verdict wins, otherwise the first category's refusal stands.  A bad, revoked or
        future signature in a category that knows the key is final (never retried elsewhere)."""
        first, *others = self.verifiers
        verdicts = {c.hash: first.judge(c, statuses[c.hash]) for c in commits}
        for verifier in others:
            retry = [c for c in commits if verdicts[c.hash].code in ("unknown-signer", "signer-not-pinned")]
            if not retry:
                break
            more = verifier.statuses(retry, scratch)
            for commit in retry:
                verdict = verifier.judge(commit, more[commit.hash])
                if verdict.good or verdict.code not in ("unknown-signer", "signer-not-pinned"):
                    verdicts[commit.hash] = verdict
        return verdicts

    def _check_age(self, verdict: CommitVerdict) -> None:
        """Refuse a top commit signed longer ago than ``max_age_days`` (a mirror frozen in the past)."""
        days = self.options.max_age_days
        if days and time.time() - verdict.signed > days * 86400:
            stamp = datetime.fromtimestamp(verdict.signed, UTC).strftime("%Y-%m-%d")
            verdict.reason = (f"the top commit was signed {stamp}, more than {days:g} days ago "
                              f"([tree] max-age): the mirror may be frozen")
            verdict.code = "stale"

    def _judge_top(self, commit: Commit, dev_verdict: CommitVerdict, scratch: str | None) -> CommitVerdict:
        assert self.top is not None
        if dev_verdict.code not in ("unknown-signer", "signer-not-pinned"):
            return dev_verdict
        top = self.top.judge(commit, self.top.statuses([commit], scratch)[commit.hash])
        return top if top.good or top.code == "wrong-purpose" else dev_verdict  # a pinned key: name it

    def verify_repo(self, path: Path, *, revision: str = "HEAD", commit_range: str | None = None,
                    record: bool = True, progress: Progress | None = None, accept: Sequence[str] = (),
                    reason: str = "") -> TreeReport:
        """Verify a repository: ``commit_range`` (``A..B``), or from its last verified revision to
        ``revision``.  Records ``revision`` as verified when everything passed and ``record`` is set; when
        something was refused, the newest commit whose whole history passed (the first good ancestor) is
        recorded instead, so a whole-history run is never lost and the next run checks only what lies above.

        ``accept`` (commits, or ``A..B`` ranges) with ``reason`` is the deliberate way past commits that must
        stay refused (a compromised key's): they are recorded and journaled (:mod:`.accepted`) before the
        verification, which then lets them pass, and every later one (a sync, the hooks) as well.
        """
        if accept and not reason.strip():
            raise UsageError("--accept needs --reason TEXT: why these refused commits are accepted (it goes to "
                             "the trust journal)")
        repo = open_repo(path)
        if accept:
            accepted.accept(self.ctx, accepted.resolve(repo, accept), reason, str(self.shown_as or repo.path))
            self.accepted = accepted.accepted_commits(self.ctx.layout)
        if commit_range:
            start, sep, end = commit_range.partition("..")
            if not sep or not end:
                raise UsageError(f"--range must look like A..B, not {commit_range!r}")
            tip = repo.resolve(end)
            base = repo.resolve(start) if start else None
            hashes = Revisions(repo, tip, [base] if base else [])
            if not len(hashes):
                raise UsageError(f"--range {commit_range} holds no commits ({end} is {start} or one of its "
                                 "ancestors); nothing to verify")
            return self.verify(repo, hashes, tip=tip, base=base, progress=progress)
        tip = repo.resolve(revision)
        base, hashes = self.plan(repo, tip, last_verified(self.ctx.layout, repo.path))
        report = self.verify(repo, hashes, tip=tip, base=base, progress=progress)
        if record and report.ok:
            record_verified(self.ctx, repo.path, tip)
        elif record and report.first_good and report.first_good != base:
            record_verified(self.ctx, repo.path, report.first_good)  # the part that passed
            report.recorded = report.first_good
        return report


def warm_up(verifiers: Sequence[CommitVerifier]) -> Future[None]:
    """Start what the first verdict needs besides gpg's run, in the background: the keyring listings (read
    once, before the judging shares them) and the engine's ``--multifile`` probe.  The listings' future
    carries their errors; the probe's are met again where gpg runs."""
    def list_keys() -> None:
        for verifier in verifiers:
            verifier.keys  # noqa: B018 - the listing is cached by the keyring

    early = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gkeys-warm-up")
    early.submit(lambda: probe().has(Capability.MULTIFILE))
    listed = early.submit(list_keys)
    early.shutdown(wait=False)
    return listed


def scratch_parent() -> str | None:
    """Where to write signatures and payloads for gpg: ``/dev/shm`` if usable (fast), else the default."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def open_repo(path: Path, extra_env: Mapping[str, str] | None = None) -> GitRepo:
    """A :class:`GitRepo` for ``path``, or a clear error if it is not a git repository."""
    repo = GitRepo(path, extra_env=extra_env)
    if not repo.is_repository():
        raise BadInputError(f"{path} is not a git repository")
    return repo

