"""Verify the overlay list and describe the result: shared by ``gkeys verify-overlays`` and the
``postsync.d/gkeys-overlays`` hook, so the command and the hook cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gkeys_portage.core.errors import GkeysError
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.ui.output import Report
from gkeys_portage.verify.overlays.urls import Severity
from gkeys_portage.verify.overlays.verifier import (
    OverlaySettings,
    OverlayVerification,
    install_list,
    load_list,
    verify_overlay_list,
)


@dataclass(frozen=True)
class OverlayRequest:
    """What to verify and where to write it.

    ``location``/``signature`` default to ``[overlays] url``/``signature-url``; ``output`` wins over
    ``install`` (``[overlays] output``).  ``list_warnings`` prints every warning; otherwise (the hook,
    on every sync) warnings are counted and ``verbose`` lists them.  Errors are always listed.
    """

    location: str | None = None
    signature: str | None = None
    category: str | None = None
    nick: str | None = None
    output: Path | None = None
    install: bool = False
    verbose: bool = False
    list_warnings: bool = True


def _count_line(name: str, count: int, what: str) -> str:
    return f"{name}: {count} {what}; -v lists them"


def _describe(verification: OverlayVerification, request: OverlayRequest) -> Report:
    """The human lines and JSON document of a verification."""
    name, overlays = verification.source.name, verification.overlays
    label = name.rstrip("/").rsplit("/", 1)[-1]  # findings name the file, not the whole URL
    report = Report(data=verification.to_json())
    signer = verification.signature.signer
    report.good(f"{name}: good signature by {signer.pin.category}/{signer.pin.nick} ({signer.pin.fingerprint}) "
                f"made {signer.created_at:%Y-%m-%d %H:%M:%S} UTC")
    for note in verification.signature.ignored:
        report.warn(f"ignored: {note}")
    sources = ", ".join(f"{kind} {count}" for kind, count in overlays.source_counts().items()) or "none"
    official = sum(1 for repo in overlays.repos if repo.status == "official")
    report.info(f"{name}: {len(overlays.repos)} repositories ({official} official); sources: {sources}")
    for finding in overlays.of(Severity.ERROR):
        report.error(f"{label} {finding}")
    warnings = overlays.of(Severity.WARNING)
    if request.list_warnings or request.verbose:
        for finding in warnings:
            report.warn(f"{label} {finding}")
    elif warnings:
        count = len(warnings)
        report.warn(_count_line(name, count, f"source URL warning{'s' if count != 1 else ''} "
                                             "(e.g. ssh URLs git cannot clone)"))
    notices = overlays.of(Severity.NOTICE)
    if request.verbose:
        for finding in notices:
            report.info(f"{label} {finding}")
    elif notices:
        count = len(notices)
        report.info(_count_line(name, count, f"{'source uses' if count == 1 else 'sources use'} an "
                                             "unauthenticated transport (git://, http://, rsync://, ...)"))
    return report


def overlay_report(ctx: Gkeys, request: OverlayRequest) -> Report:
    """Verify the list, report its findings, and write it (``output``/``install``) if it passed.

    Raises the verifier's :class:`GkeysError` (naming the output left unchanged, if any) when the
    list cannot be loaded or its signature does not verify.
    """
    settings = OverlaySettings.from_config(ctx.config)
    output = request.output or (settings.output if request.install else None)
    location = request.location or settings.url
    signature = request.signature or (None if request.location else settings.signature_url)
    try:
        signed = load_list(ctx, location, signature, settings.limits)
        verification = verify_overlay_list(ctx, signed, request.category or settings.category, nick=request.nick,
                                           limits=settings.limits)
    except GkeysError as exc:
        if output is None:
            raise
        raise exc.reworded(f"{exc.message}; {output} left unchanged") from exc
    report = _describe(verification, request)
    report.data["output"] = None
    if not verification.ok:
        errors = len(verification.overlays.errors)
        report.error(f"{location}: refused, {errors} error{'s' if errors != 1 else ''}"
                     + (f"; {output} left unchanged" if output else ""))
        report.exit_code = 1
        return report
    if output is not None:
        changed = install_list(ctx, verification, output)
        report.data["output"] = str(output)
        report.data["changed"] = changed
        report.good(f"wrote the verified list to {output}" if changed else f"{output} is already this list")
    return report
