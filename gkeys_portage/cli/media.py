"""CLI actions ``verify-media`` and ``fetch-media`` (stage3 tarballs, LiveCD/ISO images)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from gkeys_portage.cli.common import SubParsers, add_action, add_category, add_nick
from gkeys_portage.core.errors import UsageError
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.ui.output import Report
from gkeys_portage.verify.media.fetch import (
    DEFAULT_CATEGORY,
    DEFAULT_MIRROR,
    Fetched,
    LatestChoice,
    fetch_latest,
    fetch_media,
    verify_url,
)
from gkeys_portage.verify.media.record import journal_media, refusal_journaled
from gkeys_portage.verify.media.verifier import (
    MediaVerification,
    MediaVerifier,
    SignedBy,
    all_digests,
    media_signatures,
)


def _category(ctx: Gkeys, args: argparse.Namespace) -> str:
    return str(args.category or ctx.config.get("media", "category", DEFAULT_CATEGORY))


def _signed_line(signed: SignedBy) -> str:
    sig = signed.signature
    return (f"{signed.source}: good signature by {sig.pin.category}/{sig.pin.nick} ({sig.pin.fingerprint}) "
            f"made {sig.created_at:%Y-%m-%d %H:%M:%S} UTC")


def _signed_lines(signed: Sequence[SignedBy]) -> list[str]:
    """One line per signing key: ``A, B, C: good signature by CAT/NICK (FPR) made ...`` (the same key
    signing three siblings is said once, not three times)."""
    groups: dict[tuple[str, str, str], list[SignedBy]] = {}
    for item in signed:
        pin = item.signature.pin
        groups.setdefault((pin.category, pin.nick, pin.fingerprint), []).append(item)
    lines = []
    for items in groups.values():
        first = _signed_line(items[-1])
        sources = ", ".join(str(item.source) for item in items)
        lines.append(sources + first[len(str(items[-1].source)):])
    return lines


def describe(report: Report, result: MediaVerification) -> Report:
    """Add the facts of a verification: signers, digests per file and source, notes."""
    for line in _signed_lines(result.signed):
        report.good(line)
    for aside in result.asides:  # a sibling not needed for the verdict, and how it was compared
        report.info(aside)
    groups: dict[tuple[str, str], list[str]] = {}
    for check in result.checks:
        if check.outcome == "match":
            groups.setdefault((check.filename, check.source), []).append(check.algorithm)
    for (filename, source), algorithms in groups.items():
        report.good(f"{filename}: {', '.join(algorithms)} match {source}")
    for note in result.notes:
        report.warn(note)
    name = Path(result.file).name
    report.good(f"{name}: name bound ({result.name_rule}): {result.name_detail}")
    report.good(f"{name}: verified ({len(result.signed)} signed sibling(s), "
                f"{sum(c.outcome == 'match' for c in result.checks)} digest(s) matched)")
    report.data.update(result.to_json())
    return report


def run_verify_media(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Verify a local or remote stage3/ISO against all its signed siblings."""
    category = _category(ctx, args)
    name = Path(args.target).name
    if "://" in args.target:
        progress = args.console.progress(f"downloading {name}", unit="MiB")
        with refusal_journaled(ctx, args.target, category):  # the URL asked for, never the quarantine
            fetched = verify_url(ctx, args.target, category=category, nick=args.nick, progress=progress,
                                 allow_unnamed=args.allow_unnamed, bind_by_date=args.bind_by_date)
        report = Report()
        for skipped in fetched.skipped:
            report.info(f"{skipped}: not on the server; skipped")
        return describe(report, fetched.verification)
    media = MediaVerifier(media_signatures(ctx, category, args.nick), category, allow_unnamed=args.allow_unnamed,
                          bind_by_date=args.bind_by_date, all_digests=all_digests(ctx.config))
    with refusal_journaled(ctx, Path(args.target), category):
        verified = media.verify(Path(args.target), args.console.progress(f"verifying {name}", unit="MiB"))
    journal_media(ctx, verified, Path(args.target))  # the file stays where it is: the verdict applies there
    return describe(Report(), verified)


def run_fetch_media(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Download (resuming), verify in quarantine, then install into the destination directory."""
    category = _category(ctx, args)
    dest = Path(args.destination)
    console = args.console
    if bool(args.url) == bool(args.latest):
        raise UsageError("give either a URL or --latest NAME (with --mirror)")
    name = args.latest or Path(args.url).name
    progress = console.progress(f"downloading {name}", unit="MiB")
    verify_progress = console.progress(f"verifying {name}", unit="MiB")
    if args.latest:
        mirror = args.mirror or ctx.config.get("media", "mirror", DEFAULT_MIRROR)

        def chosen(choice: LatestChoice) -> None:  # said before the download starts, not after it
            for message in _choice_lines(choice).messages:
                console.message(message.level, message.text)

        fetched = fetch_latest(ctx, args.latest, mirror, dest, category=category, nick=args.nick,
                               arch=args.arch, progress=progress, allow_unnamed=args.allow_unnamed,
                               bind_by_date=args.bind_by_date, verify_progress=verify_progress, chosen=chosen)
    else:
        fetched = fetch_media(ctx, args.url, dest, category=category, nick=args.nick, progress=progress,
                              allow_unnamed=args.allow_unnamed, bind_by_date=args.bind_by_date,
                              verify_progress=verify_progress)
    return _fetch_report(fetched, dest, announced=bool(args.latest) and not console.json_mode)


def _choice_lines(choice: LatestChoice) -> Report:
    """The verified latest file and the entry chosen from it."""
    report = Report()
    report.good(_signed_line(choice.signed))
    size = f", {choice.entry.size} bytes" if choice.entry.size is not None else ""
    report.info(f"{choice.latest}: newest entry {choice.entry.path}{size}")
    return report


def _fetch_report(fetched: Fetched, dest: Path, *, announced: bool = False) -> Report:
    report = Report()
    if fetched.latest is not None:
        choice = fetched.latest
        if not announced:
            report.messages.extend(_choice_lines(choice).messages)
        report.data["latest"] = {"file": choice.latest, "path": choice.entry.path, "size": choice.entry.size,
                                 "url": choice.url, **choice.signed.to_json()}
    for skipped in fetched.skipped:
        report.info(f"{skipped}: not on the mirror; skipped")
    describe(report, fetched.verification)
    report.data["installed"] = [str(p) for p in fetched.installed]
    report.data["already"] = fetched.already
    name = Path(fetched.verification.file).name
    if fetched.already:
        report.good(f"{name}: already verified in {dest}; nothing downloaded")
    else:
        report.good(f"installed into {dest}: {', '.join(p.name for p in fetched.installed)}")
    return report


VERIFY_DESCRIPTION = """\
Verify a stage3 tarball or a LiveCD/ISO image (a local PATH, or a URL that is downloaded into a
private quarantine folder and deleted afterwards) against every signed sibling found beside it:

  FILE.asc          detached signature over the file
  FILE.DIGESTS      clearsigned digests (SHA512, BLAKE2B, ... of FILE and FILE.CONTENTS.gz)
  FILE.DIGESTS.asc  the older clearsigned form
  FILE.sha256       clearsigned SHA256
  FILE.CONTENTS.gz / FILE.CONTENTS   checked against their DIGESTS entries when present

Every sibling found must verify or agree; at least one signed sibling is required.  The file must be bound
to its name by signed text that names it: a signed .DIGESTS/.sha256 lists it (rule "listed"), or
(fetch-media --latest) the signed latest-*.txt entry it was chosen from names it with its size
(rule "listed-in-latest").  A detached FILE.asc names no file, and an unsigned .DIGESTS names
nothing: such a file is refused, saying what is missing.  --bind-by-date accepts an .asc made at or
after the build stamp in the name (stage3-...-20261201T170321Z.tar.xz; rule "signed-after-build"):
a date, not a name (another product's build signed later passes it); --allow-unnamed accepts
anything a pinned key signed.  Signatures count only
from keys pinned by the seeds of the category (default: [media] category, else gentoo).  Only the
text gpg says was signed is parsed.  Each signed statement is checked on one strong digest: SHA512
(what the handbook's sha512sum -c checks), else BLAKE2B, else SHA256; its other digests are not
computed ([media] all-digests = yes checks every listed one, reporting those this Python lacks, e.g.
WHIRLPOOL, as skipped).  Weak digests (MD5, SHA1) never count.  When a signed statement lists the
file, it is read once, every digest computed from that read; an .asc beside it is not needed and not
verified, but one that signs other bytes (its digest prefix, from the same read) is refused.  Only an
.asc: gpg and Sequoia read the file side by side, held still by a read lease (a file changed
meanwhile is refused); without a lease one read feeds gpg and the digest."""

VERIFY_EPILOG = """\
examples:
  gkeys verify-media stage3-amd64-openrc-20240107T170309Z.tar.xz
  gkeys verify-media install-amd64-minimal-20240107T170309Z.iso -n releng
  gkeys verify-media https://distfiles.gentoo.org/releases/amd64/autobuilds/20240107T170309Z/stage3-amd64-openrc-20240107T170309Z.tar.xz

exit status: 0 verified; 1 not verified (bad or unpinned signature, digest mismatch, nothing signed
the file or binds it to its name); 2 bad input (unsafe or conflicting DIGESTS entries); 3 network failure."""

FETCH_DESCRIPTION = """\
Download a release file with its siblings, verify it exactly as verify-media does, and only then
move it (and its siblings) into DIR.  With --latest NAME the mirror's clearsigned
releases/ARCH/autobuilds/latest-NAME.txt is verified first and its newest NAME-<stamp>.<ext> entry
is fetched (a list naming no file of NAME is refused, and so is a build older than one fetched
before); the size it announces is enforced (a server that sends more is refused).

Downloads go to a quarantine folder under the state directory (state/quarantine/media/).  A partial
download is resumed with an HTTP Range request by the next run; a download that stalls for
[media] stall-timeout seconds (default 60) is retried, then given up (exit 3).  A file that fails
verification is kept there as NAME.rejected and nothing is written to DIR.  Siblings the mirror does
not have (HTTP 404) are skipped; if it has no signed sibling at all, nothing is downloaded."""

FETCH_EPILOG = """\
config ([media] section, all optional):
  category = gentoo                      keyring/seeds that must sign release media
  mirror = https://distfiles.gentoo.org  default for --mirror
  stall-timeout = 60                     seconds without data before a download attempt is aborted
  max-size = 17179869184                 refuse files larger than this (bytes)

examples:
  gkeys fetch-media --latest stage3-amd64-openrc --mirror https://distfiles.gentoo.org -d /mnt/gentoo
  gkeys fetch-media --latest install-amd64-minimal -d ~/iso
  gkeys fetch-media -d . \\
      https://example.org/releases/amd64/autobuilds/20240107T170309Z/stage3-amd64-openrc-20240107T170309Z.tar.xz
"""


def add_binding_options(p: argparse.ArgumentParser) -> None:
    """--bind-by-date and --allow-unnamed: the explicit opt-ins for a file nothing signed names."""
    p.add_argument("--bind-by-date", action="store_true",
                   help="accept FILE.asc made at or after the build stamp in FILE's name as binding it: a date, "
                        "not a name (another product's genuine build signed later passes it too)")
    p.add_argument("--allow-unnamed", action="store_true",
                   help="accept a file that only a detached .asc signs although nothing signed binds it to its name "
                        "(no signed DIGESTS, .sha256 or latest list names it)")


def register(sub: SubParsers) -> None:
    """Register verify-media and fetch-media."""
    p = add_action(sub, "verify-media", run_verify_media, verifies="target",
                   summary="verify a stage3 tarball or ISO image",
                   description=VERIFY_DESCRIPTION, epilog=VERIFY_EPILOG)
    p.add_argument("target", metavar="PATH|URL", help="the tarball or image (siblings are found beside it)")
    add_category(p, help_text="category whose pinned keys must sign (default: [media] category, else gentoo)")
    add_nick(p, help_text="accept only this seed's keys")
    add_binding_options(p)

    p = add_action(sub, "fetch-media", run_fetch_media, verifies="url",
                   summary="download, verify and install a stage3 or ISO",
                   description=FETCH_DESCRIPTION, epilog=FETCH_EPILOG)
    p.add_argument("url", nargs="?", metavar="URL", help="the file to fetch (or use --latest)")
    p.add_argument("--latest", metavar="NAME", help="fetch the newest NAME (e.g. stage3-amd64-openrc) "
                                                   "named by the mirror's signed latest-NAME.txt")
    p.add_argument("--mirror", metavar="URL", help="mirror base URL for --latest (default: [media] mirror, "
                                                  f"else {DEFAULT_MIRROR})")
    p.add_argument("--arch", metavar="ARCH", help="releases/ARCH/ directory for --latest (default: from NAME)")
    p.add_argument("-d", "--destination", default=".", metavar="DIR", help="where verified files go (default: .)")
    add_category(p, help_text="category whose pinned keys must sign (default: [media] category, else gentoo)")
    add_nick(p, help_text="accept only this seed's keys")
    add_binding_options(p)
