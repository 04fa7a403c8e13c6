"""The engine must be root's: ``[gpg] program`` / ``$GKEYS_GPG`` naming a program someone else can replace is
refused before it runs (issue 34 case 7; gkeys.conf's rule, ``core/config.untrusted_program``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import GkeysEnv

from gkeys_portage.core.errors import ConfigError
from gkeys_portage.openpgp import process as gpg_module
from gkeys_portage.openpgp.gnupg import GnuPG

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to other users")


def _engine(directory: Path) -> Path:
    """A working engine (a wrapper around the gpg on PATH) in ``directory``, 0755."""
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    program = directory / "gpg"
    program.write_text(f"#!/bin/sh\nexec {shutil.which('gpg')} \"$@\"\n")
    program.chmod(0o755)
    return program


@pytest.mark.parametrize("how", ["world-writable directory", "group-writable file", "file of another user",
                                 "directory of another user"])
def test_an_engine_others_can_replace_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    program = _engine(tmp_path / how.replace(" ", "-") / "bin")
    if how == "world-writable directory":
        program.parent.chmod(0o777)
        culprit, why = program.parent, "is writable by every user"
    elif how == "group-writable file":
        os.chown(program, 0, 1000)
        program.chmod(0o775)
        culprit, why = program, "is writable by group 1000"
    elif how == "file of another user":
        os.chown(program, 65534, 0)
        culprit, why = program, "belongs to uid 65534"
    else:
        os.chown(program.parent, 65534, 0)
        culprit, why = program.parent, "belongs to uid 65534"
    monkeypatch.setenv(gpg_module.PROGRAM_VARIABLE, str(program))
    with pytest.raises(ConfigError) as caught:
        GnuPG(tmp_path / "home")
    message = caught.value.message
    assert f"refusing the OpenPGP engine {program}: {culprit} {why}" in message
    assert "chmod go-w" in message and "\n" not in message


def test_gpg_program_in_the_config_is_refused_with_one_line(env: GkeysEnv, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    program = _engine(tmp_path / "shared" / "bin")
    program.parent.chmod(0o777)
    monkeypatch.delenv(gpg_module.PROGRAM_VARIABLE, raising=False)
    env.write_config(f"[gpg]\nprogram = {program}\n")
    result = env.run("list-key", "-C", "gentoo")
    assert result.code != 0
    assert f"refusing the OpenPGP engine {program}: {program.parent} is writable by every user" in result.err
    assert "Traceback" not in result.text and len(result.err.strip().splitlines()) == 1


def test_an_engine_root_owns_in_a_sticky_or_private_path_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    program = _engine(tmp_path / "private" / "bin")  # under pytest's tmp dirs, below the sticky /tmp
    os.chown(program, 0, 0)
    monkeypatch.setenv(gpg_module.PROGRAM_VARIABLE, str(program))
    assert GnuPG(tmp_path / "home").list_keys() == []
