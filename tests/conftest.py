"""Shared fixtures: throwaway keys (generated once per session), a loopback HTTP server, a gkeys root.

Everything is real: gpg, HTTP on 127.0.0.1, the CLI entry point called in-process.  Nothing touches
``~``, ``/etc`` or the user's keyrings: every GnuPG home and state directory lives under pytest's
tmp dirs, and HOME/GNUPGHOME point there too.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from engine_expectations import expected_failure
from host_guard import changes, guarded_paths, listing, mark_keys, split_changes
from subprocess_coverage import carry_coverage_into_children

from gkeys_portage.cli.main import main as gkeys_main
from gkeys_portage.core.errors import GpgError
from gkeys_portage.core.types import Category, Nick
from gkeys_portage.demo.world import KeyFactory, LoopbackServer, past
from gkeys_portage.keys.seedbinding import category_notation
from gkeys_portage.keys.seeds import Seed, dump_seeds
from gkeys_portage.openpgp.engine import Capability, probe

if TYPE_CHECKING:
    from gkeys_portage.demo.tree_repo import PortageSandbox

PROJECT = Path(__file__).resolve().parent.parent
SHARED = PROJECT.parent / "shared"
REAL = SHARED / "fixtures" / "real"

carry_coverage_into_children()

#: The GnuPG that makes the session's keys and signatures (the signers' side), whatever engine
#: ``$GKEYS_GPG`` selects for gkeys itself: every engine then checks the same bytes (tests/test_engines.py).
SIGNER_PROGRAM = os.environ.get("GKEYS_TEST_SIGNER_GPG", "gpg")


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test cleanly if ../shared is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared not beside the project)")
    return path


@contextlib.contextmanager
def keys_installed_by_gnupg() -> Iterator[None]:
    """A test's *setup* installs keys with the reference GnuPG when the engine under test cannot install them
    (gpg-sq lacks the safe import options): what docs/engines.md advises, so that engine's verification is still
    tested.  The test's own commands run on the engine under test."""
    engine = os.environ.get("GKEYS_GPG")
    if not engine or probe(engine).has(Capability.SAFE_IMPORT):
        yield
        return
    os.environ["GKEYS_GPG"] = SIGNER_PROGRAM
    try:
        yield
    finally:
        os.environ["GKEYS_GPG"] = engine


#: Tests whose engine refuses by its own policy, with a less precise reason than gkeys' (still refused, never
#: verified: tests/test_engines.py KNOWN_DIFFERENCES): expected failures, strict, so a change is noticed.
ENGINE_POLICY_DIFFERENCES = {
    "gpg-sq": {
        "test_sig_matrix.py::test_expired_signature_is_refused": "Sequoia reports an expired signature as BADSIG",
        "test_sig_redteam.py::test_weak_data_hashes_are_refused_by_default": "Sequoia refuses SHA-1 itself (ERRSIG 5)",
        "test_sig_redteam.py::test_weak_hashes_config_admits_sha1_only_before_its_cutoff":
            "Sequoia refuses SHA-1 itself, whatever [policy] weak-hashes admits",
        "test_verify_rules.py::test_refusals_library_and_cli[future-dated signature]":
            "Sequoia reports a signature dated in the future as BADSIG",
        "test_tree.py::test_bad_commit_below_good_top_is_named[future]":
            "Sequoia reports a signature dated in the future as BADSIG",
        # not a policy: the refusal is printed by child processes, where the report cannot see it
        "test_key_install.py::test_two_runs_at_once_are_serialized":
            "gpg-sq lacks --import-options self-sigs-only,no-import-clean (the runs install keys in child processes)",
    },
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the engine-policy differences of the engine under test (``$GKEYS_GPG``) as strict expected failures."""
    differences = ENGINE_POLICY_DIFFERENCES.get(os.path.basename(os.environ.get("GKEYS_GPG", "")), {})
    for item in items:
        test = item.nodeid.split("/")[-1]
        reason = differences.get(test) or differences.get(test.split("[")[0])
        if reason:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under another engine (``$GKEYS_GPG``, CI's engine runs), a test that failed because gkeys refused a job
    the engine is known to lack (:data:`engine_expectations.KNOWN_LACKS`) is reported as an expected failure
    naming the missing capability: never a silent skip, and any other failure (a refusal for a capability the
    engine is meant to have) stays a failure."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    engine = os.environ.get("GKEYS_GPG")
    if engine and report.failed:
        try:
            reason = expected_failure(probe(engine), str(report.longrepr))
        except GpgError:  # the engine cannot even run: a failure
            reason = None
        if reason:
            report.outcome = "skipped"
            report.wasxfail = f"{os.path.basename(engine)}: {reason}"
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        why = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if not any(allowed in why for allowed in ALLOWED_SKIPS):
            report.outcome = "failed"
            report.longrepr = (f"skipped under CI=true, and not for a reason tests/conftest.py ALLOWED_SKIPS "
                               f"allows (install what the test needs in .ci/run): {why}")


#: The skips CI (``CI=true``) allows, by a piece of their reason, and why; any other skip fails the run there.
ALLOWED_SKIPS = {
    "not running under coverage": "tests/test_ci_coverage.py checks the coverage run; .ci/run's engine and "
                                  "mutation runs measure nothing",
    "cannot mount a tmpfs here": "a container without CAP_SYS_ADMIN; the simulated ENOSPC test covers the path",
    "needs root and unshare -m": "a container that forbids new mount namespaces",
    "no second filesystem (/dev/shm)": "a container without a separate /dev/shm",
    "root removes from a read-only directory": "CI runs as root; tests/test_fdtree.py's mount test covers a "
                                               "leftover root cannot remove",
}


@pytest.fixture(autouse=True, scope="session")
def _host_untouched() -> Iterator[None]:
    """Fail the run when the host's gkeys state or config, Portage's config or what gpg/git/gkeys keep in the real
    home changed during it (:mod:`host_guard`): every test works in its own temporary directories.
    Another program's writes to the real ``~/.gnupg`` (no key of this run in them: :func:`host_guard.split_changes`)
    are a warning, not a failure.  ``GKEYS_TEST_HOST_GUARD=0`` turns the guard off."""
    if os.environ.get("GKEYS_TEST_HOST_GUARD") == "0":
        yield
        return
    home = os.environ.get("HOME")
    watched = guarded_paths(home)
    before = listing(watched)
    yield
    ours, foreign = split_changes(changes(before, listing(watched)), home)
    if foreign:
        warnings.warn(f"another program wrote the real ~/.gnupg during the run (no key of this run in it): "
                      f"{'; '.join(foreign[:20])}", stacklevel=1)
    if ours:
        pytest.fail("the test run changed the host (a test wrote outside its temporary directories; "
                    "GKEYS_TEST_HOST_GUARD=0 turns this check off): " + "; ".join(ours[:20]), pytrace=False)


@pytest.fixture(autouse=True, scope="session")
def _isolated_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Point HOME and GNUPGHOME at a temp dir for the whole session (gpg must never see ~/.gnupg)."""
    home = tmp_path_factory.mktemp("home")
    saved = {k: os.environ.get(k) for k in ("HOME", "GNUPGHOME", "GKEYS_CONFIG")}
    os.environ["HOME"] = str(home)
    os.environ["GNUPGHOME"] = str(home / "not-used-gnupg")
    os.environ.pop("GKEYS_CONFIG", None)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeyFactory]:
    """Session keys.  Valid: gkeys (seed signer), releng, alice, bob, mallory (never pinned), carol
    (revocation available via ``keys.revocation('carol')``).  ``expired``: made 800 days ago with a
    1-year expiry; ``old``: a valid key for signatures dated in the past."""
    factory = KeyFactory(tmp_path_factory.mktemp("secret-keys"), program=SIGNER_PROGRAM)
    for nick in ("gkeys", "releng", "alice", "bob", "mallory", "carol"):
        factory.create(nick)
    factory.create("expired", created=past(800), expire="1y")
    mark_keys(key.fingerprint for key in factory.keys.values())
    yield factory
    mark_keys(key.fingerprint for key in factory.keys.values())  # and those tests added
    factory.close()


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    """A fresh loopback HTTP server (static files, HKP, WKD) for one test."""
    srv = LoopbackServer()
    yield srv
    srv.close()


@dataclass
class CliResult:
    """Exit status and captured output of one in-process ``gkeys`` run."""

    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        """stdout and stderr together."""
        return self.out + self.err


class GkeysEnv:
    """A gkeys root + config bound to a loopback server, and a way to run the CLI in it."""

    def __init__(self, root: Path, server: LoopbackServer, keys: KeyFactory,
                 capsys: pytest.CaptureFixture[str]) -> None:
        self.root = root
        self.state = root / "state"
        self.server = server
        self.keys = keys
        self.capsys = capsys
        self.config = root / "gkeys.conf"
        self.extra_config = ""
        self.write_config()

    def write_config(self, extra: str = "", keyservers: str | None = None) -> None:
        """(Re)write the config; ``extra`` is appended (more sections or options)."""
        advanced, direct = self.server.wkd_templates()
        self.config.write_text(
            f"[base]\ngkeysdir = {self.state}\n"
            f"[seedurls]\ngentoo = {self.server.url}/seeds/gentoo.seeds\n"
            f"gentoo-devs = {self.server.url}/seeds/gentoo-devs.seeds\n"
            "[verify-seeds]\ngentoo = seed-signers gkeys\ngentoo-devs = seed-signers gkeys\n"
            f"[sources]\nkeyservers = {keyservers if keyservers is not None else self.server.url}\n"
            f"wkd = yes\nwkd-advanced-url = {advanced}\nwkd-direct-url = {direct}\n"
            "timeout = 2\nretries = 1\nbackoff = 0.05\n" + extra
        )

    @property
    def gkeys(self) -> str:
        """``gkeys -c CONFIG``: how a next step printed by :meth:`run` begins (it acts on this config too)."""
        return f"gkeys -c {shlex.quote(str(self.config))}"

    def run(self, *argv: str) -> CliResult:
        """Run ``gkeys -c CONFIG argv...`` in-process and capture its output."""
        self.capsys.readouterr()
        code = gkeys_main(["-c", str(self.config), *argv])
        captured = self.capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    def run_printed(self, command: str) -> CliResult:
        """Run a ``gkeys ...`` command gkeys printed (a next step, a fix) exactly as printed: no ``-c`` added."""
        words = shlex.split(command)
        assert words[0] == "gkeys", command
        self.capsys.readouterr()
        code = gkeys_main(words[1:])
        captured = self.capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    def seed(self, nick: str) -> Seed:
        """A seed for one of the session keys."""
        key = self.keys.keys[nick]
        return Seed(Nick(nick), key.name, nick, [key.fingerprint], [key.fingerprint, key.signing_subkey],
                    [key.uid])

    def seed_bytes(self, *nicks: str) -> bytes:
        """A seed file for the named keys."""
        return dump_seeds({Nick(n): self.seed(n) for n in nicks})

    def publish_seeds(self, category: str, nicks: tuple[str, ...], signer: str = "gkeys",
                      data: bytes | None = None, **sign_kwargs: object) -> bytes:
        """Serve a seed file signed by ``signer`` at /seeds/<category>.seeds (+ .sig), bound to
        ``category`` (a ``seed-category@gentoo.org`` notation) unless ``notations`` says otherwise."""
        sign_kwargs.setdefault("notations", category_notation(Category(category)))
        data = data if data is not None else self.seed_bytes(*nicks)
        self.server.publish(f"seeds/{category}.seeds", data)
        self.server.publish(f"seeds/{category}.seeds.sig",
                            self.keys.sign_bytes(signer, data, self.root, armor=False, **sign_kwargs))
        return data

    def pin_key(self, category: str, nick: str, key: str, *, name: str | None = None) -> None:
        """Pin the factory key ``key`` as seed ``nick`` of ``category`` and import it by hand (add-seed,
        import-key from a file); both must succeed."""
        fingerprint = self.keys.keys[key].fingerprint
        result = self.run("add-seed", "-C", category, "-n", nick, "-N", name or nick, "-K", fingerprint)
        assert result.code == 0, result.text
        keyfile = self.root / f"{nick}.asc"
        keyfile.write_bytes(self.keys.public(key))
        with keys_installed_by_gnupg():
            result = self.run("import-key", "-C", category, "-n", nick, "-F", str(keyfile))
        assert result.code == 0, result.text

    def bootstrap(self) -> None:
        """Pin and import the seed-signing key by hand (category seed-signers)."""
        self.pin_key("seed-signers", "gkeys", "gkeys", name="Seeds")

    def install_devs(self, *nicks: str) -> None:
        """Bootstrap, publish a gentoo-devs seed for ``nicks`` and their keys, and install both."""
        self.bootstrap()
        self.publish_seeds("gentoo-devs", nicks)
        for nick in nicks:
            self.server.hkp[self.keys.keys[nick].fingerprint] = self.keys.public(nick)
        with keys_installed_by_gnupg():
            result = self.run("update-seed", "-C", "gentoo-devs")
        assert result.code == 0, result.text

    def snapshot(self) -> dict[str, bytes]:
        """Every file under the state dir (except the lock), for "nothing changed" assertions."""
        files = {}
        for path in sorted(self.state.rglob("*")):
            # the trust journal records refusals too: "nothing changed" means the trust, not the record of it
            if (path.is_file() and path.name != "lock" and "S.gpg-agent" not in path.name
                    and path.parent.name != "journal"):
                files[str(path.relative_to(self.state))] = path.read_bytes()
        return files


@pytest.fixture
def env(tmp_path: Path, server: LoopbackServer, keys: KeyFactory,
        capsys: pytest.CaptureFixture[str]) -> GkeysEnv:
    """A fresh gkeys root with a config pointing at the test's loopback server."""
    return GkeysEnv(tmp_path, server, keys, capsys)


@pytest.fixture
def portage_root(env: GkeysEnv, tmp_path: Path) -> Iterator[PortageSandbox]:
    """A throwaway PORTAGE_CONFIGROOT/EPREFIX for real ``emerge --sync`` runs with the installed sync module
    (skipped when it is not installed); the test fails if /etc/gitconfig changed meanwhile."""
    from gkeys_portage.demo.tree_repo import PortageSandbox, sync_module_missing

    missing = sync_module_missing()
    if missing:
        pytest.skip(missing)
    system = Path("/etc/gitconfig")
    before = system.read_bytes() if system.exists() else None
    yield PortageSandbox(tmp_path / "portage", env.config)
    assert (system.read_bytes() if system.exists() else None) == before, "/etc/gitconfig was modified"


def have(tool: str) -> bool:
    """True if an external tool is on PATH."""
    return shutil.which(tool) is not None
