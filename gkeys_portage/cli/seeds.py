"""CLI actions on seeds: list-cats, list-seed, list-seedfiles, add/remove/move-seed, search-key,
fetch-seed, update-seed, convert-seed."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from gkeys_portage.cli.common import SubParsers, add_action, add_category, add_nick, bundle_notes
from gkeys_portage.cli.keys import outcome_lines
from gkeys_portage.core.config import KeyRef, default_config_path
from gkeys_portage.core.configedit import set_option
from gkeys_portage.core.errors import EXIT_NETWORK, BadInputError, GkeysError, UsageError
from gkeys_portage.core.state import atomic_write, read_limited
from gkeys_portage.core.types import Category, Nick, parse_category, parse_fingerprint, parse_nick
from gkeys_portage.core.windows import day
from gkeys_portage.keys import authority, refresh, seedfetch
from gkeys_portage.keys.certification import Verdict
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.install import KeyStatus, summarize_failure
from gkeys_portage.keys.prerequisites import OFFLINE_WAY, MissingKeysError, update_order
from gkeys_portage.keys.purposes import SECTION, Purpose, has_purposes, with_purpose
from gkeys_portage.keys.seeds import Seed, convert_old_seeds, dump_seeds, packaged_categories
from gkeys_portage.ui.output import Report


def seed_lines(report: Report, category: str, seed: Seed) -> None:
    """Human lines for one seed."""
    report.info(f"{category}/{seed.nick}: {seed.name}")
    report.plain(f"      keys: {' '.join(seed.keys)}")
    extra = [f for f in seed.fingerprint if f not in seed.keys]
    if extra:
        report.plain(f"      also: {' '.join(extra)}")
    for uid in seed.uid:
        report.plain(f"      uid:  {uid}")
    for fpr, windows in sorted(seed.windows.items()):
        for window in windows:
            report.plain(f"      window: {fpr} {window.describe()}")


def _filtered(ctx: Gkeys, args: argparse.Namespace) -> list[tuple[Category, Seed]]:
    categories = [parse_category(args.category)] if args.category else ctx.seeds.categories()
    found: list[tuple[Category, Seed]] = []
    for category in categories:
        for seed in ctx.seeds.load(category).values():
            if args.nick and seed.nick != args.nick:
                continue
            if getattr(args, "name", None) and args.name.lower() not in seed.name.lower():
                continue
            if getattr(args, "fingerprint", None) and parse_fingerprint(args.fingerprint) not in seed.accepted():
                continue
            found.append((category, seed))
    return found


def run_list_cats(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """List seed categories."""
    categories = ctx.seeds.categories()
    report = Report(data={"categories": categories})
    for category in categories:
        where = "installed" if ctx.seeds.is_installed(category) else "packaged default"
        report.info(f"{category} ({len(ctx.seeds.load(category))} seeds, {where})")
    return report


def run_list_seed(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """List seeds, filtered by category, nick, name or fingerprint."""
    found = _filtered(ctx, args)
    report = Report(data={"seeds": [dict(seed.to_json(), category=cat) for cat, seed in found]})
    for category, seed in found:
        seed_lines(report, category, seed)
    if not found:
        report.warn("no seed matches")
        report.exit_code = 1
    return report


def run_list_seedfiles(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """List installed seed files with their URLs."""
    rows = []
    for category in ctx.seeds.categories():
        path = ctx.seeds.path(category)
        rows.append({"category": category, "path": str(path) if path.exists() else None,
                     "url": ctx.config.seedurls.get(category)})
    report = Report(data={"seedfiles": rows})
    for row in rows:
        report.info(f"{row['category']}: {row['path'] or '(packaged default)'}  <- {row['url'] or 'no URL'}")
    return report


def run_add_seed(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Add a seed by hand."""
    category = parse_category(args.category)
    nick = parse_nick(args.nick)
    keys = [parse_fingerprint(k) for k in args.keys]
    fingerprints = [parse_fingerprint(f) for f in args.fingerprint] if args.fingerprint else list(keys)
    for key in keys:
        if key not in fingerprints:
            fingerprints.insert(0, key)
    seeds = ctx.seeds.load(category)
    if nick in seeds:
        raise BadInputError(f"seed {category}/{nick} already exists (remove it first or use another nick)")
    purpose = Purpose(args.purpose) if args.purpose else None
    if purpose is not None and ctx.config.path is None:
        raise UsageError(f"--purpose is kept in gkeys.conf ([purposes]), and there is none ({default_config_path()}):"
                         f" create it with the line '[purposes]' then '{purpose.value} = "
                         f"{with_purpose(ctx.config, purpose, KeyRef(category, nick))}', or give -c FILE")
    seed = Seed(nick, args.name, args.keydir or nick, keys, fingerprints, list(args.uid or []))
    seeds[nick] = seed
    path = ctx.seeds.save(category, seeds)
    report = Report(data={"added": dict(seed.to_json(), category=category), "path": str(path),
                          "purpose": purpose.value if purpose else None})
    report.good(f"added seed {category}/{nick} to {path}")
    if purpose is not None and ctx.config.path is not None:
        value = with_purpose(ctx.config, purpose, KeyRef(category, nick))
        set_option(ctx.config.path, SECTION, purpose.value, value)
        report.good(f"{category}/{nick} signs {purpose.artifacts}: [{SECTION}] {purpose.value} = {value} "
                    f"in {ctx.config.path}")
    elif purpose is None and (purposed := has_purposes(ctx.config, category)):
        report.warn(f"{category} has key purposes ({', '.join(map(str, purposed))}): {category}/{nick} has none, so "
                    f"no verifier of release media, Manifests, mirror commits or the overlay list accepts its "
                    f"signatures; give it one "
                    f"(PURPOSE: {', '.join(p.value for p in Purpose)}): gkeys remove-seed -C {category} -n {nick} && "
                    f"{_add_seed_again(args, category, nick)} --purpose PURPOSE")
    return report


def _add_seed_again(args: argparse.Namespace, category: Category, nick: Nick) -> str:
    """The add-seed command line that adds this seed again (to give it a purpose)."""
    words = ["gkeys", "add-seed", "-C", category, "-n", nick, "-N", args.name, "-K", *args.keys]
    words += ["-f", *args.fingerprint] if args.fingerprint else []
    words += ["-u", *args.uid] if args.uid else []
    words += ["-r", args.keydir] if args.keydir else []
    return shlex.join(words)


def run_remove_seed(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Remove a seed (its keys stay until 'remove-key')."""
    category = parse_category(args.category)
    seeds = ctx.seeds.load(category)
    if args.nick not in seeds:
        raise BadInputError(f"no seed {args.nick!r} in category {category!r}")
    del seeds[Nick(args.nick)]
    ctx.seeds.save(category, seeds)
    return Report(data={"removed": {"category": category, "nick": args.nick}}).good(
        f"removed seed {category}/{args.nick}")


def run_move_seed(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Move a seed to another category."""
    source, dest = parse_category(args.category), parse_category(args.destination)
    if source == dest:
        raise UsageError("source and destination categories are the same")
    seeds, targets = ctx.seeds.load(source), ctx.seeds.load(dest)
    if args.nick not in seeds:
        raise BadInputError(f"no seed {args.nick!r} in category {source!r}")
    if args.nick in targets:
        raise BadInputError(f"seed {dest}/{args.nick} already exists")
    nick = Nick(args.nick)
    targets[nick] = seeds.pop(nick)
    ctx.seeds.save(dest, targets)
    ctx.seeds.save(source, seeds)
    return Report(data={"moved": {"nick": nick, "from": source, "to": dest}}).good(
        f"moved seed {nick} from {source} to {dest}")


def run_search_key(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Search all seeds for a nick, name, uid or fingerprint fragment."""
    found = [(cat, seed) for cat, seed in ctx.seeds.iter_all() if seed.matches(args.text)]
    if args.category:
        found = [(cat, seed) for cat, seed in found if cat == args.category]
    report = Report(data={"seeds": [dict(seed.to_json(), category=cat) for cat, seed in found]})
    for category, seed in found:
        seed_lines(report, category, seed)
    if not found:
        report.warn(f"nothing matches {args.text!r}")
        report.exit_code = 1
    return report


def _categories_to_fetch(ctx: Gkeys, args: argparse.Namespace) -> list[Category]:
    if args.category:
        return [parse_category(args.category)]
    return sorted(ctx.config.seedurls)


def _categories_to_update(ctx: Gkeys, args: argparse.Namespace) -> list[Category]:
    if args.category:
        return [parse_category(args.category)]
    return update_order(ctx.config, set(ctx.config.seedurls) | set(ctx.config.authority.sources)
                        | set(packaged_categories()))


def _no_seed_url(ctx: Gkeys, category: Category, action: str) -> str | None:
    """Why ``category`` has nothing to download as a seed file (None: it has a seed URL)."""
    if category in ctx.config.seedurls:
        return None
    if category in ctx.config.authority.sources:
        return (f"{category}: seeds come from authority certifications ([authority-seeds]), not a seed file; "
                f"run 'gkeys update-seed -C {category}'")
    if category in packaged_categories():
        return (f"{category}: seeds are packaged with gkeys-portage (no seed URL configured)"
                + ("" if action == "update-seed" else f"; 'gkeys update-seed -C {category}' installs their keys"))
    return None


def run_fetch_seed(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Download, verify (signer pinned by [verify-seeds]) and install seed files."""
    report = Report(data={"fetched": []})
    if not _categories_to_fetch(ctx, args):
        report.info("no seed URL configured ([seedurls]); the packaged categories and [authority-seeds] need "
                    "none: 'gkeys update-seed' installs their keys")
    for category in _categories_to_fetch(ctx, args):
        why = _no_seed_url(ctx, category, "fetch-seed")
        if why:
            report.info(why)
            report.data["fetched"].append({"category": category, "skipped": why})
            continue
        result = seedfetch.fetch_seed(ctx, category)
        report.data["fetched"].append(result.to_json())
        signer = result.signer
        state = "unchanged" if result.unchanged else "installed"
        report.good(f"{category}: seed file {state}, signed by {signer.pin.category}/{signer.pin.nick} "
                    f"({signer.pin.fingerprint}) on {signer.created_at:%Y-%m-%d %H:%M:%S} UTC, "
                    f"{result.binding.describe()}")
        _change_lines(report, result.changes)
    return report


def _change_lines(report: Report, changes: seedfetch.SeedChanges) -> None:
    for label, nicks in (("Added", changes.added), ("Updated", changes.updated), ("Removed", changes.removed)):
        if nicks:
            report.info(f"{label}: {', '.join(nicks)}")


def _authority_update(ctx: Gkeys, args: argparse.Namespace, report: Report, category: Category) -> None:
    result = authority.update(ctx, category, allow_shrink=args.allow_shrink,
                              progress=args.console.progress(f"{category} certifications", unit="stages", minimum=1))
    report.data["updated"].append(result.to_json())
    _change_lines(report, result.changes)
    for verdict in result.evaluation.dropped():
        who = f" ({verdict.uid})" if verdict.uid else ""
        report.plain(f"      dropped {verdict.fingerprint}{who}: {verdict.verdict.value}")
    for verdict in result.evaluation.kept():
        last = verdict.windows[-1] if verdict.windows else None
        if verdict.verdict is Verdict.RETIRED and last is not None and last.end is not None:
            report.info(f"Retired on {day(last.end)}: {verdict.nick} ({verdict.fingerprint}), {last.closed} "
                        f"by {last.certifier}; kept to judge its signatures from before, refused after")
        elif verdict.verdict is Verdict.KEY_EXPIRED:
            report.info(f"Key expired: {verdict.nick} ({verdict.fingerprint}); kept to judge its signatures from "
                        "before its expiry")
    for nick, fpr, window in result.left:
        report.info(f"Retired on {day(window.end or 0)}: {nick} ({fpr}), {window.closed}; kept to judge its "
                    "signatures from before, refused after")
    for fpr in result.removed_keys:
        report.info(f"Removed key {fpr} (no longer certified)")
    report.good(f"{category}: {result.seeds} seeds from {len(result.evaluation.kept())} keys certified (now or "
                f"once) in {result.location}; {len(result.evaluation.dropped())} keys dropped")


def run_update_seed(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """fetch-seed (or derive seeds from certifications), then install/refresh keys and remove keys no
    longer pinned.

    Without ``-C`` every category is updated, each after those whose keys it needs (:func:`update_order`), with
    a progress line per category; one that fails does not stop the others, and one that fails only because a
    category it needs failed says so (with that category's cause and exit status).
    """
    report = Report(data={"updated": []})
    categories = _categories_to_update(ctx, args)
    if args.category:
        failure = _update_category(ctx, args, report, categories[0])
        if failure:
            report.error(str(failure) + (f"; {OFFLINE_WAY}" if failure.exit_code == EXIT_NETWORK else ""))
            report.exit_code = failure.exit_code
        return report
    failed: dict[Category, GkeysError] = {}
    for number, category in enumerate(categories, 1):
        args.console.step(f"update-seed {category} ({number}/{len(categories)})")
        try:
            failure = _update_category(ctx, args, report, category)
        except MissingKeysError as exc:
            cause = next((failed[c] for c in exc.categories if c in failed), None)
            if cause is None:
                raise
            failure = _failure(f"{category}: not updated: it needs the keys of {', '.join(exc.categories)}, "
                               "which could not be installed (above)", cause)
        except GkeysError as exc:
            failure = _failure(f"{category}: {exc.message}", exc)
        if failure:
            failed[category] = failure
            report.error(str(failure))
            report.data["updated"].append({"category": category, "error": str(failure),
                                           "exit": failure.exit_code, "reason": failure.reason})
    if failed:
        first = next(iter(failed.values()))
        report.exit_code = first.exit_code
        counts = _installed_counts(report.data["updated"])
        detail = "; ".join(f"{cat}: {counts[cat][0]} of {counts[cat][1]} keys installed" if cat in counts
                           else f"{cat}: nothing installed" for cat in failed)
        report.error(f"{len(failed)} of {len(categories)} categories not fully updated ({detail})"
                     + (f": no key source could be reached; {OFFLINE_WAY}" if first.exit_code == EXIT_NETWORK
                        else ""))
    return report


def _installed_counts(updated: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """Per category whose keys were tried: (keys now installed, keys pinned), from the ``--json`` entries."""
    counts = {}
    for entry in updated:
        if isinstance(entry.get("keys"), list) and isinstance(entry.get("seed"), dict):
            statuses = [KeyStatus(key["status"]) for key in entry["keys"]]
            counts[str(entry["seed"].get("category"))] = (sum(s.ok for s in statuses), len(statuses))
    return counts


def _failure(message: str, cause: GkeysError) -> GkeysError:
    """One category's failure: ``message``, with the exit status and reason code of ``cause``."""
    failure = GkeysError(message)
    failure.exit_code, failure.reason = cause.exit_code, cause.reason
    return failure


def _update_category(ctx: Gkeys, args: argparse.Namespace, report: Report, category: Category) -> GkeysError | None:
    """Update one category; the error its keys failed with (None: all installed)."""
    if category in ctx.config.authority.sources:
        _authority_update(ctx, args, report, category)
        return None
    why = _no_seed_url(ctx, category, "update-seed")
    if why:
        report.info(why)
        signer = "packaged seeds"
    else:
        result = seedfetch.fetch_seed(ctx, category)
        _change_lines(report, result.changes)
        signer = (f"seed file signed by {result.signer.pin.category}/{result.signer.pin.nick} "
                  f"({result.binding.describe()})")
    notes: list[str] = []  # what a [keyrings] bundle dropped or why it was refused
    outcomes = refresh.install_keys(ctx, category, progress=args.console.progress(f"{category} keys"),
                                   notes=notes)
    bundle_notes(report, category, notes)
    removed = refresh.prune_unpinned(ctx, category)
    report.data["updated"].append({"seed": result.to_json() if not why else {"category": category,
                                                                             "packaged": True},
                                   "keys": [o.to_json() for o in outcomes], "removed_keys": removed,
                                   "notes": notes})
    said = report.good if all(o.status.ok for o in outcomes) else report.warn
    said(f"{category}: {signer}; {sum(o.status.ok for o in outcomes)}/{len(outcomes)} keys installed")
    outcome_lines(report, outcomes, only_problems=all(o.status.ok for o in outcomes))  # partial: every key, as --json
    for fpr in removed:
        report.info(f"Removed key {fpr} (no longer in the seeds)")
    return summarize_failure(outcomes)


def run_convert_seed(ctx: Gkeys, args: argparse.Namespace) -> Report:
    """Convert an old (2013 pipe / 2014 JSON v1) seed file to the current format."""
    seeds = convert_old_seeds(read_limited(Path(args.file), 16 * 1024 * 1024, "seed file"))
    data = dump_seeds(seeds)
    if args.output:
        atomic_write(Path(args.output), data)
    report = Report(data={"seeds": len(seeds), "output": args.output})
    if args.output:
        report.good(f"converted {len(seeds)} seeds to {args.output}; review them before use")
    else:
        report.text_block(data.decode("ascii"))
    return report


def register(sub: SubParsers) -> None:
    """Register the seed actions."""
    add_action(sub, "list-cats", run_list_cats,
               examples=("gkeys list-cats",
                         "gkeys --json list-cats"),
               summary="list seed categories")

    p = add_action(sub, "list-seed", run_list_seed,
                   examples=("gkeys list-seed -C gentoo",
                             "gkeys list-seed -C gentoo-devs -n larry",
                             "gkeys list-seed -C gentoo-devs -N 'the Cow' --json"),
                   summary="list seeds",
                   description="List seeds, optionally filtered. Exit 1 if nothing matches.")
    add_category(p)
    add_nick(p)
    p.add_argument("-N", "--name", help="part of the person's name")
    p.add_argument("-f", "--fingerprint", metavar="FPR", help="a full fingerprint the seed accepts")

    add_action(sub, "list-seedfiles", run_list_seedfiles,
               examples=("gkeys list-seedfiles",
                         "gkeys --json list-seedfiles"),
               summary="list installed seed files and their URLs")

    p = add_action(sub, "add-seed", run_add_seed,
                   examples=("gkeys add-seed -C gentoo -n portage -N 'Gentoo ebuild repository signing key' "
                             "-K DCD05B71EAB94199527F44ACDB6B8C1F96D8BF6D",
                             "gkeys add-seed -C test -n alice -N Alice -K 0123456789ABCDEF0123456789ABCDEF01234567 "
                             "-u alice@example.org"),
                   needs_lock=True, summary="add a seed by hand",
                   description="Add a seed to a category by hand. Fingerprints must be full (40 or 64 hex).")
    add_category(p, required=True)
    add_nick(p, required=True)
    p.add_argument("-N", "--name", required=True, help="the person's or role's name")
    p.add_argument("--purpose", choices=[purpose.value for purpose in Purpose],
                   help="what the key signs (release-media, repository, git-mirror, overlay-list): added to [purposes] "
                        "in the config file, beside the seeds that have it now")
    p.add_argument("-K", "--keys", required=True, nargs="+", metavar="FPR", help="primary fingerprint(s) to fetch")
    p.add_argument("-f", "--fingerprint", nargs="+", metavar="FPR",
                   help="all accepted fingerprints, subkeys included (default: the -K ones)")
    p.add_argument("-u", "--uid", nargs="+", metavar="UID", help="user ids, e.g. 'Name <nick@gentoo.org>'")
    p.add_argument("-r", "--keydir", help="key directory name (default: the nick)")
    p.set_defaults(adds_seed=True)  # a [purposes] line naming this seed before it exists does not block it

    p = add_action(sub, "remove-seed", run_remove_seed,
                   examples=("gkeys remove-seed -C gentoo-devs -n larry",
                             "gkeys --root /tmp/gkeys-test remove-seed -C test -n alice"),
                   needs_lock=True, summary="remove a seed")
    add_category(p, required=True)
    add_nick(p, required=True)

    p = add_action(sub, "move-seed", run_move_seed,
                   examples=("gkeys move-seed -C gentoo-devs -n larry -d retired",
                             "gkeys move-seed -C test -n alice -d gentoo-devs"),
                   needs_lock=True, summary="move a seed to another category")
    add_category(p, required=True)
    add_nick(p, required=True)
    p.add_argument("-d", "--destination", required=True, metavar="CAT", help="destination category")

    p = add_action(sub, "search-key", run_search_key,
                   examples=("gkeys search-key larry",
                             "gkeys search-key -C gentoo DCD05B71EAB94199527F44ACDB6B8C1F96D8BF6D",
                             "gkeys search-key larry@gentoo.org --json"),
                   summary="search seeds by nick, name, uid or fingerprint")
    p.add_argument("text", help="text to look for (case-insensitive)")
    add_category(p)

    epilog = ("The signature is fetched from URL.sig, then URL.asc, and must be a good signature by the key\n"
              "named in [verify-seeds] for the category. A seed older than the installed one is refused.")
    p = add_action(sub, "fetch-seed", run_fetch_seed,
                   examples=("gkeys fetch-seed -C gentoo",
                             "gkeys fetch-seed -C gentoo-devs"),
                   needs_lock=True, epilog=epilog,
                   summary="download, verify and install signed seed files")
    add_category(p, help_text="category to fetch (default: every category in [seedurls])")

    authority_epilog = (
        "\nCategories in [authority-seeds] (built in: gentoo-devs) are derived from certifications instead:\n"
        "the keyring is downloaded once, and a key is kept when a UID <nick>@[authority] domain carries a\n"
        "valid certification by a pinned certifier that a root ([authority] roots) certifies. An update that\n"
        "empties the seeds or drops more than [authority] max-shrink percent (default 10) is refused.")
    p = add_action(sub, "update-seed", run_update_seed,
                   examples=("gkeys update-seed -C gentoo",
                             "gkeys update-seed -C gentoo-devs",
                             "gkeys update-seed -C gentoo-devs --allow-shrink"),
                   needs_lock=True, epilog=epilog + authority_epilog,
                   summary="fetch-seed, then install/refresh the keys; print Added / Updated / Removed")
    add_category(p, help_text="category to update (default: every category with a seed URL, an "
                              "[authority-seeds] line or packaged seeds)")
    p.add_argument("--allow-shrink", action="store_true",
                   help="apply an authority update even if it drops more than [authority] max-shrink percent")

    p = add_action(sub, "convert-seed", run_convert_seed,
                   examples=("gkeys convert-seed -F gentoo-devs.seeds",
                             "gkeys convert-seed -F old/gentoo.seeds -o gentoo.seeds"),
                   summary="convert a 2013 pipe or 2014 JSON v1 seed file to the current format")
    p.add_argument("-F", "--file", required=True, help="the old seed file")
    p.add_argument("-o", "--output", help="write here (atomically) instead of printing")
