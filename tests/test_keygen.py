"""gkeys-gen: GLEP 63 key generation with real gpg, and what it refuses.

Every generated key is checked by reading it back (colon listing, packets) and by the glep63-2.2
checker — both the library and ``gkeys spec-check --keyring`` in-process.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gkeys_portage.checks import keygen
from gkeys_portage.checks.glep63 import Level, check_key
from gkeys_portage.cli import gen
from gkeys_portage.cli.main import main as gkeys_main
from gkeys_portage.core.errors import BadInputError, GpgError, UsageError
from gkeys_portage.openpgp.colons import PublicKey
from gkeys_portage.openpgp.gnupg import GnuPG

UID = "Larry the Cow <larry@gentoo.org>"


@dataclass
class Generated:
    """One gkeys-gen run: its exit code, JSON output and where things went."""

    code: int
    doc: dict[str, object]
    homedir: Path
    outdir: Path

    @property
    def fingerprint(self) -> str:
        return str(self.doc["fingerprint"])


def run_gen(capsys: pytest.CaptureFixture[str], tmp: Path, *extra: str, name: str = "Larry the Cow",
            email: str = "larry@gentoo.org") -> Generated:
    """Run ``gkeys-gen --json`` non-interactively into ``tmp``."""
    homedir, outdir = tmp / "gnupg", tmp / "out"
    capsys.readouterr()
    code = gen.main(["--json", "--name", name, "--email", email, "--homedir", str(homedir),
                     "--output-dir", str(outdir), *extra])
    out = capsys.readouterr().out
    return Generated(code, json.loads(out), homedir, outdir)


def listed(homedir: Path, fingerprint: str) -> PublicKey:
    """The key as GnuPG lists it (with signatures)."""
    gpg = GnuPG(homedir)
    keys = gpg.list_keys([fingerprint], sigs=True)
    assert len(keys) == 1
    return keys[0]


@pytest.fixture(scope="module")
def ed25519_key(tmp_path_factory: pytest.TempPathFactory) -> Generated:
    """One default key (ed25519, no passphrase), generated once for the module."""
    tmp = tmp_path_factory.mktemp("gen-ed25519")
    homedir, outdir = tmp / "gnupg", tmp / "out"
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = gen.main(["--json", "--name", "Larry the Cow", "--email", "larry@gentoo.org", "--no-passphrase",
                         "--homedir", str(homedir), "--output-dir", str(outdir)])
    return Generated(code, json.loads(buffer.getvalue()), homedir, outdir)


# -- the generated key --------------------------------------------------------------------------------


def test_default_key_is_glep63_shaped(ed25519_key: Generated) -> None:
    result = ed25519_key
    assert result.code == 0, result.doc
    assert result.doc["ok"] is True
    key = listed(result.homedir, result.fingerprint)
    own = {sub.fingerprint: sub.capabilities.lower() for sub in key.subkeys}
    # certify-only primary: its own capability letters are just "c" (upper case letters are the key's total)
    assert [c for c in key.primary.capabilities if c.islower()] == ["c"]
    assert own == {result.doc["signing_subkey"]: "s", result.doc["encryption_subkey"]: "e"}
    assert key.primary.algorithm_name == "ed25519"
    assert sorted(sub.algorithm_name for sub in key.subkeys) == ["cv25519", "ed25519"]
    assert [uid.text for uid in key.uids] == [UID]
    now = time.time()
    for component in key.all_keys():
        assert component.expires is not None
        days = (component.expires - now) / 86400
        assert 364 < days <= 365.1, days  # default: one year, well under 900 days


def test_self_signatures_and_preferences_are_sha2(ed25519_key: Generated) -> None:
    result = ed25519_key
    key = listed(result.homedir, result.fingerprint)
    hashes = [sig.hash_algorithm for uid in key.uids for sig in uid.signatures]
    hashes += [sig.hash_algorithm for sub in key.subkeys for sig in sub.signatures]
    assert hashes and set(hashes) == {10}  # SHA-512 everywhere, no SHA-1 (2)
    packets = GnuPG(result.homedir).run(["--list-packets", str(result.outdir / f"{result.fingerprint}.pub.asc")])
    text = packets.stdout.decode()
    prefs = [line for line in text.splitlines() if "pref-hash-algos" in line]
    assert prefs, text
    algos = prefs[0].split("pref-hash-algos:")[1].strip(" )").split()
    assert algos[:3] == ["10", "9", "8"] and "2" not in algos and "1" not in algos


def test_result_passes_spec_check_library(ed25519_key: Generated) -> None:
    result = ed25519_key
    issues = check_key(listed(result.homedir, result.fingerprint), "glep63-2.2")
    assert [i for i in issues if i.level is Level.ERROR] == []
    assert [i for i in issues if i.level is Level.WARNING] == []
    assert result.doc["issues"] == [i.to_json() for i in issues]


def test_result_passes_spec_check_cli(ed25519_key: Generated, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    result = ed25519_key
    config = tmp_path / "gkeys.conf"
    config.write_text("[base]\n")
    capsys.readouterr()
    code = gkeys_main(["-c", str(config), "--root", str(tmp_path / "root"), "--json", "spec-check",
                       "--keyring", str(result.outdir / f"{result.fingerprint}.pub.asc")])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    text = json.dumps(doc)
    assert result.fingerprint in text
    assert '"level": "error"' not in text


def test_revocation_certificate_revokes_the_key(ed25519_key: Generated, tmp_path: Path) -> None:
    result = ed25519_key
    revocation = Path(str(result.doc["revocation_file"]))
    assert revocation.name == f"{result.fingerprint}.rev.asc"
    assert revocation.stat().st_mode & 0o077 == 0
    gpg = GnuPG(tmp_path / "other")
    gpg.import_keys(Path(str(result.doc["public_key_file"])).read_bytes())
    assert listed(tmp_path / "other", result.fingerprint).primary.validity != "r"
    gpg.import_keys(revocation.read_bytes())
    assert listed(tmp_path / "other", result.fingerprint).primary.validity == "r"


def test_next_steps_are_printed(ed25519_key: Generated, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    result = ed25519_key
    steps = result.doc["next_steps"]
    assert isinstance(steps, list) and len(steps) == 5
    joined = " ".join(steps)
    assert "--export-secret-keys" in joined and "--send-keys" in joined and "gpgfingerprint" in joined
    # the text form (not --json) shows them too, after the compliance line
    outdir = tmp_path / "out"
    code = gen.main(["--name", "Text Mode", "--email", "text@gentoo.org", "--no-passphrase",
                     "--homedir", str(tmp_path / "gnupg"), "--output-dir", str(outdir)])
    out = capsys.readouterr().out
    assert code == 0
    assert "compliant with glep63-2.2" in out and "next steps:" in out and "--send-keys" in out


def test_passphrase_file_protects_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "pass"
    secret.write_text("correct horse battery\nsecond line ignored\n")
    result = run_gen(capsys, tmp_path, "--passphrase-file", str(secret))
    assert result.code == 0, result.doc
    data = tmp_path / "data.txt"
    data.write_text("hello\n")
    gpg = GnuPG(result.homedir)
    gpg.close()  # forget any cached passphrase
    with pytest.raises(GpgError):
        gpg.sign(data, result.doc["signing_subkey"] + "!", passphrase="wrong")  # type: ignore[operator]
    gpg.close()
    signature = gpg.sign(data, result.doc["signing_subkey"] + "!", passphrase="correct horse battery")  # type: ignore[operator]
    gpg.close()
    assert b"BEGIN PGP SIGNATURE" in signature


def test_rsa2048_and_custom_expiry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_gen(capsys, tmp_path, "--no-passphrase", "--algorithm", "rsa2048", "--expire", "900d")
    assert result.code == 0, result.doc
    key = listed(result.homedir, result.fingerprint)
    assert [(k.algorithm_name, k.length) for k in key.all_keys()] == [("rsa", 2048)] * 3
    assert sorted(sub.capabilities.lower() for sub in key.subkeys) == ["e", "s"]
    assert key.primary.expires is not None
    assert 899 < (key.primary.expires - time.time()) / 86400 <= 900.1
    assert [i.code for i in check_key(key, "glep63-2.2") if i.level is Level.ERROR] == []


def test_allow_any_email(ed25519_key: Generated, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_gen(capsys, tmp_path, "--no-passphrase", "--allow-any-email", email="larry@example.org")
    assert result.code == 0, result.doc
    codes = [issue["code"] for issue in result.doc["issues"]]  # type: ignore[union-attr]
    assert "uid:nogentoo" in codes  # reported, but accepted because it was asked for
    # accepted is not compliant: --json says which errors were accepted, the text never claims compliance
    assert result.doc["accepted"] == ["uid:nogentoo"] and result.doc["compliant"] is False
    assert ed25519_key.doc["accepted"] == [] and ed25519_key.doc["compliant"] is True
    code = gen.main(["--name", "Text Mode", "--email", "text@example.org", "--allow-any-email", "--no-passphrase",
                     "--homedir", str(tmp_path / "gnupg2"), "--output-dir", str(tmp_path / "out2")])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert code == 0, text
    assert "compliant with glep63-2.2" not in text
    assert "glep63-2.2: compliant except uid:nogentoo (accepted by --allow-any-email)" in text
    assert "uid:nogentoo (key): " in text and "(accepted by --allow-any-email)" in text


def test_interactive_prompts(tmp_path: Path) -> None:
    answers = iter(["Prompted Dev", "prompted@gentoo.org"])
    secrets = iter(["s3cret", "s3cret"])
    prompter = gen.Prompter(True, ask=lambda _q: next(answers), secret=lambda _q: next(secrets))
    args = gen.build_parser().parse_args(["--homedir", str(tmp_path / "g"), "--output-dir", str(tmp_path / "o")])
    report = gen.run(args, prompter)
    assert report.exit_code == 0
    assert report.data["uid"] == "Prompted Dev <prompted@gentoo.org>"
    assert Path(str(report.data["revocation_file"])).exists()


PROJECT = Path(__file__).resolve().parent.parent


class Terminal:
    """A child process on a real pseudo-terminal (so getpass really reads from /dev/tty)."""

    def __init__(self, argv: list[str]) -> None:
        import pty

        env = dict(os.environ, PYTHONPATH=str(PROJECT), TERM="dumb")
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: become gkeys-gen
            os.execvpe(argv[0], argv, env)
        self.transcript = b""

    def _read(self, deadline: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            return False
        self.transcript += chunk
        return bool(chunk)

    def expect(self, prompt: bytes, answer: bytes, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while prompt not in self.transcript:
            assert time.monotonic() < deadline, f"no {prompt!r} in {self.transcript!r}"
            assert self._read(deadline), f"terminal closed before {prompt!r}: {self.transcript!r}"
        self.transcript = self.transcript.replace(prompt, b"<" + prompt.strip() + b">", 1)
        os.write(self.fd, answer)

    def finish(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._read(deadline):
            pass
        waited, status = os.waitpid(self.pid, os.WNOHANG)
        while waited == 0 and time.monotonic() < deadline:  # the terminal closes just before the exit
            time.sleep(0.05)
            waited, status = os.waitpid(self.pid, os.WNOHANG)
        if waited == 0:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            raise AssertionError(f"gkeys-gen did not finish: {self.transcript!r}")
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)


def test_prompting_on_a_real_terminal(tmp_path: Path) -> None:
    secret = b"zq9-terminal-secret-x7"
    term = Terminal([sys.executable, "-m", "gkeys_portage.cli.gen", "--homedir", str(tmp_path / "g"),
                     "--output-dir", str(tmp_path / "o")])
    term.expect(b"Full name: ", b"Tty Dev\n")
    term.expect(b"E-mail address (@gentoo.org): ", b"tty@gentoo.org\n")
    term.expect(b"Passphrase for the new key: ", secret + b"\n")
    term.expect(b"Repeat the passphrase: ", secret + b"\n")
    code = term.finish()
    assert code == 0, term.transcript
    assert b"created " in term.transcript and b"Tty Dev <tty@gentoo.org>" in term.transcript
    assert b"compliant with glep63-2.2" in term.transcript
    assert secret not in term.transcript  # getpass did not echo it


# -- refused input ------------------------------------------------------------------------------------


def _args(*argv: str) -> argparse.Namespace:
    return gen.build_parser().parse_args(list(argv))


@pytest.mark.parametrize(("argv", "fragment"), [
    ((), "--name, --email, --passphrase-file FILE or --no-passphrase"),
    (("--name", "A", "--email", "a@gentoo.org"), "--passphrase-file FILE or --no-passphrase"),
    (("--email", "a@gentoo.org", "--no-passphrase"), "--name"),
])
def test_no_terminal_refuses_quickly(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     argv: tuple[str, ...], fragment: str) -> None:
    # pytest's stdin is not a terminal: gkeys-gen must refuse, never wait for input
    start = time.monotonic()
    code = gen.main([*argv, "--homedir", str(tmp_path / "g"), "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2
    assert fragment in err and "no terminal" in err
    assert time.monotonic() - start < 5
    assert not (tmp_path / "g").exists() and not (tmp_path / "o").exists()


@pytest.mark.parametrize(("email", "extra", "error", "fragment"), [
    ("larry@example.org", (), BadInputError, "not an @gentoo.org address"),
    ("larry@gentoo.org.evil.example", (), BadInputError, "not an @gentoo.org address"),
    ("larry", (), BadInputError, "invalid e-mail"),
    ("larry@gentoo.org", ("--expire", "3y"), UsageError, "at most 900 days"),
    ("larry@gentoo.org", ("--expire", "901d"), UsageError, "at most 900 days"),
    ("larry@gentoo.org", ("--expire", "0"), UsageError, "never-expiring"),
    ("larry@gentoo.org", ("--expire", "7d"), UsageError, "at least 15 days"),
    ("larry@gentoo.org", ("--expire", "soon"), UsageError, "invalid expiry"),
    ("larry@gentoo.org", ("--expire", (datetime.now(UTC) + timedelta(days=1000)).strftime("%Y-%m-%d")),
     UsageError, "at most 900 days"),
])
def test_bad_choices_are_refused_before_gpg_runs(tmp_path: Path, email: str, extra: tuple[str, ...],
                                                 error: type[Exception], fragment: str) -> None:
    prompter = gen.Prompter(False)
    args = _args("--name", "Larry", "--email", email, "--no-passphrase", "--homedir", str(tmp_path / "g"), *extra)
    with pytest.raises(error, match=fragment):
        gen.run(args, prompter)
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize("name", ["", "Evil <x@gentoo.org>", "line\nbreak"])
def test_bad_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(BadInputError):
        keygen.key_spec(name, "a@gentoo.org")


def test_passphrase_file_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    for path, fragment in ((empty, "empty passphrase"), (tmp_path / "missing", "cannot read passphrase file")):
        code = gen.main(["--name", "A", "--email", "a@gentoo.org", "--passphrase-file", str(path),
                         "--homedir", str(tmp_path / "g")])
        assert code == 2
        assert fragment in capsys.readouterr().err
    assert not (tmp_path / "g").exists()


def test_interactive_passphrase_mismatch_and_empty(tmp_path: Path) -> None:
    args = _args("--name", "A", "--email", "a@gentoo.org", "--homedir", str(tmp_path / "g"))
    for pair, fragment in ((["one", "two"], "differ"), (["", ""], "empty passphrase")):
        replies = iter(pair)
        prompter = gen.Prompter(True, ask=lambda _q: "unused", secret=lambda _q, r=replies: next(r))
        with pytest.raises(BadInputError, match=fragment):
            gen.run(args, prompter)


def test_unknown_algorithm_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        gen.main(["--algorithm", "dsa1024", "--no-passphrase"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_same_uid_twice_in_one_home_is_refused(ed25519_key: Generated, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    result = ed25519_key
    code = gen.main(["--name", "Larry the Cow", "--email", "larry@gentoo.org", "--no-passphrase",
                     "--homedir", str(result.homedir), "--output-dir", str(tmp_path)])
    assert code == 2
    assert "already holds a secret key" in capsys.readouterr().err
    gpg = GnuPG(result.homedir)
    assert len(gpg.list_keys(secret=True)) == 1
    gpg.close()  # the home existed, so gkeys-gen left its agent running


def test_failed_subkey_removes_the_half_made_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a subkey algorithm gpg does not know makes --quick-add-key fail after the primary key exists
    monkeypatch.setitem(keygen.ALGORITHMS, "broken", ("ed25519", "ed25519", "no-such-algo"))
    spec = keygen.key_spec("Half Made", "half@gentoo.org", algorithm="broken")
    with pytest.raises(GpgError, match="was removed again"):
        keygen.generate(spec, tmp_path / "g", tmp_path / "o")
    gpg = GnuPG(tmp_path / "g")
    assert gpg.list_keys(secret=True) == [] and gpg.list_keys() == []
    gpg.close()
    assert not (tmp_path / "o").exists()


def test_files_go_beside_the_key_not_into_the_current_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 15 item 9: without --output-dir the public key and revocation certificate went into the cwd."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    homedir = tmp_path / "gnupg"
    code = gen.main(["--name", "Larry the Cow", "--email", "larry@gentoo.org", "--no-passphrase",
                     "--homedir", str(homedir)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert list(cwd.iterdir()) == []
    written = sorted(p.name for p in homedir.glob("*.asc"))
    assert len(written) == 2 and written[0].endswith(".pub.asc") and written[1].endswith(".rev.asc")
    assert f"public key: {homedir / written[0]}" in out and f"revocation certificate: {homedir / written[1]}" in out
