"""The trust journal's actions: ``history``, ``audit``, ``journal verify`` (docs/journal.md); registered by
:mod:`gkeys_portage.cli.keys`.  Every string read from the journal passes :func:`printable`."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from gkeys_portage.core.errors import UnknownKeyError, UsageError
from gkeys_portage.core.journal import JournalPaths, read_entries, verify_chain
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.ui.output import Report, printable
from gkeys_portage.verify.audit import audit, fingerprints_in, history, parse_key, parse_since

JOURNAL = """\
The trust journal: one JSON line per event under ${EPREFIX}/var/lib/gkeys/state/journal/ (root only), each
entry carrying the SHA-256 of the one before, so an edited, removed or re-ordered entry breaks the chain.
Trust changes (seed files, keys added, refreshed, revoked or removed, certifier changes, bundles, config)
and every acceptance and refusal (git and rsync trees, webrsync snapshots, release files, files gkeys verify
-F accepted, the overlay list, the binary package home) are recorded; an acceptance once it is applied, under
the place it stays, with a strong digest of what was accepted.  Limits: root can rewrite every file; an entry
cut from the end shows only against the head copy kept beside the files (/usr/share/doc/gkeys-portage/journal.md).
"""

HISTORY_EPILOG = """\
output: one line per change: when (UTC), what, from where, why (real, two of its lines, wrapped; $T the
test's directory; /usr/share/doc/gkeys-portage/journal.md):
  2026-11-30 00:53:20  seed file gentoo-devs installed (sha256 c905a92b6893baaa…) from
    http://127.0.0.1:38663/seeds/gentoo-devs.seeds (signed by seed-signers/gkeys
    (18CE28AF554B76F0822EC0316AF0D75ADF06FEA0) at 2026-12-06T22:03:13+00:00)
  2026-12-03 00:53:20  key 0AF1D243E3B98531DBC02DE8160B3896E9B0C932 (gentoo-devs/carol) revoked:
    0AF1D243E3B98531DBC02DE8160B3896E9B0C932, 8A4252C64E5B17CCF6267911FFEA56FB2BA40663 revoked from keyserver
    http://127.0.0.1:38663/pks/lookup?op=get&options=mr&search=0x0AF1D243E3B98531DBC02DE8160B3896E9B0C932
    (sources that answered: http://127.0.0.1:38663, wkd gentoo.org)

examples:
  gkeys history
  gkeys history -C gentoo-devs --since 2026-11-01
  gkeys --json history
"""

AUDIT_EPILOG = """\
A primary fingerprint counts its subkeys too; a subkey fingerprint counts what that subkey signed (and the
git and rsync trees, which record the primary).  With --recheck, what is on disk is first compared with the
digest recorded of what was accepted: each artifact verifies, is refused, replaced (something else is there),
gone or not rechecked; exit status 1 when something the key signed is refused now (install the revocation
first: gkeys refresh-key).  An unreadable journal line is named and passed over; a broken chain is a warning.
A key that is known (installed, pinned or journaled) but signed nothing accepted: 0 acceptance(s), exit
status 0; a fingerprint nothing ever named (a mistyped one): exit status 2, reason unknown-key.

output of --recheck (real, lines left out and wrapped; $T the test's directory;
/usr/share/doc/gkeys-portage/journal.md):
  * key 0AF1D243E3B98531DBC02DE8160B3896E9B0C932 (with 8A4252C64E5B17CCF6267911FFEA56FB2BA40663): 2
    acceptance(s) of 2 artifact(s)
  git tree $T/repo
    2026-12-01 00:53:20  1 of 2 commit(s) in
      3713213c9628de1f22406729503f14588f50e4b7..7f17d773a2da795a937c7608b799399c2be13526
  release file $T/b/stage3-amd64-openrc-20260101T170000Z.tar.xz
    2026-12-01 00:53:20  262144 bytes, sha512 cf45fb863bd7000b…
  * refused: git tree $T/repo (accepted 2026-12-01 00:53:20): 1 of 2 commit(s) refused now: commit 48ba27b05777
    by carol <carol@gentoo.org>: signature by gentoo-devs/carol (0AF1D243E3B98531DBC02DE8160B3896E9B0C932): key
    is revoked

examples:
  gkeys audit --key 0123456789ABCDEF0123456789ABCDEF01234567
  gkeys audit --key 0123456789ABCDEF0123456789ABCDEF01234567 --since 2026-11-01 --recheck
"""

VERIFY_EPILOG = """\
exit status: 0 the chain holds, 1 a link is broken (named: file, line, entry).

output (real, wrapped; $T the test's directory; /usr/share/doc/gkeys-portage/journal.md):
  * $T/state/state/journal: 20 entries in 1 file(s), every link holds
  * $T/state/state/journal: chain broken at journal.jsonl line 12 (entry 12): does not follow entry 11
    (journal.jsonl line 11): an entry before it was changed or removed

examples:
  gkeys journal verify
  gkeys --json journal verify
"""


def _warn_unsound(ctx: Gkeys, out: Report, skipped: list[str]) -> None:
    """Warn of each unreadable line passed over and of a broken chain (what is listed may have been changed or
    removed); ``--json`` has them as ``warnings``."""
    chain = verify_chain(ctx.layout)
    where = JournalPaths.of(ctx.layout).root
    warnings = [f"{where}/{line}: passed over" for line in skipped]
    if not chain.ok and chain.broken not in skipped:
        warnings.append(f"{where}: the chain is broken at {chain.broken}: entries may have been changed or "
                        "removed (gkeys journal verify)")
    for text in warnings:
        out.warn(printable(text))
    out.data["warnings"] = warnings


def run_history(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """List the trust changes, one line each."""
    skipped: list[str] = []
    changes = history(ctx.layout, category=args.category, since=parse_since(args.since), skipped=skipped)
    out = Report(data={"changes": [c.to_json() for c in changes]})
    _warn_unsound(ctx, out, skipped)
    for change in changes:
        source = f" from {change.source}" if change.source else ""
        why = f" ({change.why})" if change.why else ""
        out.plain(printable(f"{change.when}  {change.what}{source}{why}"))
    if not changes:
        out.info("no trust changes journaled" + (" since then" if args.since else ""))
    return out


def run_audit(ctx: Gkeys, args: argparse.Namespace, distdir: Callable[[], Path | None] = lambda: None) -> Report:
    """List what the key signed that was accepted, by artifact; with --recheck, verify it again today (``distdir``:
    Portage's DISTDIR, the only place a file a build named is opened)."""
    key = parse_key(args.key)
    installed: dict[str, list[str]] = {fpr: [k.fingerprint for k in found.subkeys] for cat in ctx.seeds.categories()
                 if ctx.keyring(cat).exists() for fpr, found in ctx.keyring(cat).installed().items()}
    skipped: list[str] = []
    found = audit(ctx.layout, key, installed=installed, since=parse_since(args.since), skipped=skipped)
    if not found.hits and not _ever_known(ctx, key, installed):
        raise UnknownKeyError(f"key {key}: no keyring, seed or journal entry ever named it (a mistyped "
                              "fingerprint?), so there is nothing to audit; the keys gkeys knows: gkeys history",
                              next_step="gkeys history")
    out = Report(data=found.to_json())
    _warn_unsound(ctx, out, skipped)
    related = f" (with {', '.join(found.related)})" if found.related else ""
    groups = found.groups()
    out.info(printable(f"key {key}{related}: {len(found.hits)} acceptance(s) of {len(groups)} artifact(s)"))
    for (artifact, subject), hits in groups.items():
        out.plain(printable(f"{artifact} {subject}"))
        for hit in hits:
            out.plain(printable(f"  {hit.entry.when}  {hit.detail}"))
        out.plain(printable(f"  next: {hits[-1].next_step}"))
    if args.recheck:
        from gkeys_portage.verify.recheck import REFUSED, recheck  # loads every verifier: only when asked

        results = recheck(ctx, found, distdir)
        out.data["recheck"] = [r.to_json() for r in results]
        for result in results:
            line = printable(f"{result.status}: {result.hit.artifact} {result.hit.subject} (accepted "
                             f"{result.hit.entry.when}): {result.why}")
            (out.error if result.status == REFUSED else out.good if result.status == "verifies" else out.info)(line)
        refused = [r for r in results if r.status == REFUSED]
        if refused:
            out.exit_code = 1
            out.data["reason"] = refused[0].code or "not-verified"  # the first refusal's own code, as printed
    return out


def _ever_known(ctx: Gkeys, key: str, installed: dict[str, list[str]]) -> bool:
    """True if an installed keyring, a seed or a journal entry names ``key`` (primary or subkey)."""
    if any(key == primary or key in subkeys for primary, subkeys in installed.items()):
        return True
    if any(key in seed.fingerprint or key in seed.keys for _category, seed in ctx.seeds.iter_all()):
        return True
    return any(key in fingerprints_in(entry.data) for entry in read_entries(ctx.layout, skipped=[]))


def run_journal(ctx: Gkeys, args: argparse.Namespace, distdir: Callable[[], Path | None] = lambda: None) -> Report:
    """``journal verify``: check the chain end to end; ``journal ingest``: take in the spool (``distdir``:
    Portage's DISTDIR, the only place a build's claim is checked)."""
    if args.command == "ingest":
        return _ingest(ctx, distdir)
    chain = verify_chain(ctx.layout)
    out = Report(data=chain.to_json())
    where = JournalPaths.of(ctx.layout).root
    if not chain.ok:
        out.error(printable(f"{where}: chain broken at {chain.broken}"))
        out.exit_code = 1
        return out
    start = f" (from entry {chain.starts_at}: older files rotated away)" if chain.starts_at > 1 else ""
    out.good(printable(f"{where}: {chain.entries} entries in {len(chain.files)} file(s), every link holds{start}"))
    return out


def _ingest(ctx: Gkeys, distdir: Callable[[], Path | None]) -> Report:
    """``journal ingest``: what builds verified, confirmed by root (:mod:`gkeys_portage.verify.ingest`)."""
    from gkeys_portage.verify.ingest import ingest  # the verifiers: only when asked

    if os.geteuid() != 0:
        raise UsageError("gkeys journal ingest takes in what builds verified for root's journal: run it as root")
    done = ingest(ctx, distdir)
    out = Report(data=done.to_json())
    for path in done.confirmed:
        out.good(printable(f"{path}: verified again and journaled (reported by a build)"))
    for path in done.refused_now:
        out.error(printable(f"{path}: reported by a build, NOT verified now (journaled as refused)"))
    for path in done.unconfirmed:
        out.warn(printable(f"{path}: reported by a build, not confirmed (journaled as unconfirmed)"))
    for text in done.rejected:
        out.warn(printable(f"refused spool entry {text}"))
    counts = (len(done.confirmed), len(done.refused_now), len(done.unconfirmed), len(done.rejected))
    out.info(f"journal spool: {counts[0]} confirmed, {counts[1]} refused now, {counts[2]} unconfirmed, "
             f"{counts[3]} entries refused")
    return out
