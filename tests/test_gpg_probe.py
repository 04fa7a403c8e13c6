"""python-gnupg probes gpg (``gpg --list-config``) in every constructor; gkeys probes once per binary.

Every verification builds a GnuPG object or two (verify-media builds two at once, one per thread), and the
probe, a gpg start, came before gpg's real work: it was on the critical path of every command.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import gnupg
import pytest

from gkeys_portage.core.errors import GpgError
from gkeys_portage.openpgp import process as gpg_module
from gkeys_portage.openpgp.gnupg import GnuPG


def test_the_version_probe_runs_once_and_each_object_keeps_its_own_home(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    GnuPG(tmp_path / "first")  # the probe has run for this binary
    started: list[list[str]] = []
    real_popen = subprocess.Popen

    def counting_popen(args: list[str], *rest: object, **kwargs: object) -> subprocess.Popen[bytes]:
        started.append([str(a) for a in args])
        return real_popen(args, *rest, **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(subprocess, "Popen", counting_popen)
    monkeypatch.setattr(gnupg, "Popen", counting_popen)  # python-gnupg's own name for it
    one, two = GnuPG(tmp_path / "one"), GnuPG(tmp_path / "two", read_only=True)
    assert started == []  # no gpg started just to build them
    assert one._gpg.gnupghome == str(tmp_path / "one") and two._gpg.gnupghome == str(tmp_path / "two")
    assert "--lock-never" in two._gpg.options and "--lock-never" not in one._gpg.options
    assert one._gpg.env["GNUPGHOME"] == str(tmp_path / "one") and one._gpg.version == two._gpg.version
    assert one.list_keys() == [] and any(str(tmp_path / "one") in arg for arg in started[-1])  # counted


def test_a_gpg_that_cannot_run_is_still_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gpg_module.PROGRAM_VARIABLE, str(tmp_path / "no-such-gpg"))
    with pytest.raises(GpgError, match="cannot run gpg"):
        GnuPG(tmp_path / "home")
