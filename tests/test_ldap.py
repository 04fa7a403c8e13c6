"""gkeys-ldap against a real slapd on 127.0.0.1 (plain, STARTTLS and LDAPS), plus unit tests of the
seed building rules that need no server.

The slapd fixture writes its own config, a small schema for ``gentooStatus``/``gpgfingerprint``, a
throwaway TLS certificate and a developer directory with good and broken entries into a temp dir;
it skips cleanly when slapd (Debian package ``slapd``) is not installed.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gkeys_portage.cli import ldap as ldap_cli
from gkeys_portage.core.errors import BadInputError
from gkeys_portage.core.types import Fingerprint, Nick
from gkeys_portage.keys import ldapseeds
from gkeys_portage.keys.seeds import Seed, dump_seeds, parse_seeds

SUFFIX = "dc=gentoo,dc=org"
BASE = f"ou=devs,{SUFFIX}"
ADMIN = f"cn=admin,{SUFFIX}"
ADMIN_PASSWORD = "secret"
SYSTEM_SCHEMA = Path("/etc/ldap/schema")

ALICE = "0123456789ABCDEF0123456789ABCDEF01234567"
BOB_V4 = "89ABCDEF0123456789ABCDEF0123456789ABCDEF"
BOB_V5 = "AB" * 32
DAVE = "D" * 40
FRANK = "F0" * 20
NOBODY = "E" * 40

SCHEMA = """\
attributetype ( 1.3.6.1.4.1.99999.1.1 NAME 'gentooStatus'
  EQUALITY caseIgnoreMatch SUBSTR caseIgnoreSubstringsMatch
  SYNTAX 1.3.6.1.4.1.1466.115.121.1.15 SINGLE-VALUE )
attributetype ( 1.3.6.1.4.1.99999.1.2 NAME 'gpgfingerprint'
  EQUALITY caseIgnoreMatch SUBSTR caseIgnoreSubstringsMatch
  SYNTAX 1.3.6.1.4.1.1466.115.121.1.15 )
objectclass ( 1.3.6.1.4.1.99999.2.1 NAME 'gentooDev' SUP top AUXILIARY
  MAY ( gentooStatus $ gpgfingerprint $ mail ) )
"""


def _spaced(fpr: str) -> str:
    """A fingerprint as developers type it into LDAP: groups of four, lower case, double space."""
    groups = [fpr[i:i + 4] for i in range(0, len(fpr), 4)]
    return " ".join(groups[:5]).lower() + "  " + " ".join(groups[5:]).lower()


def _person(uid: str, cn: str, status: str | None, *fprs: str, mail: bool = True) -> str:
    lines = [f"dn: uid={uid},{BASE}", "objectClass: inetOrgPerson", "objectClass: gentooDev",
             f"uid: {uid}", f"cn: {cn}", f"sn: {cn.split()[-1]}"]
    if mail:
        lines.append(f"mail: {uid}@gentoo.org")
    if status:
        lines.append(f"gentooStatus: {status}")
    lines += [f"gpgfingerprint: {fpr}" for fpr in fprs]
    return "\n".join(lines)


DIRECTORY = "\n\n".join([
    f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\no: Gentoo\ndc: gentoo",
    f"dn: {BASE}\nobjectClass: organizationalUnit\nou: devs",
    _person("alice", "Alice Example", "active", _spaced(ALICE)),
    # one v4, one v5 fingerprint and a key id (malformed: dropped, bob kept)
    _person("bob", "Bob Builder", "active", BOB_V4, BOB_V5.lower(), "DEADBEEFCAFEBABE"),
    _person("carol", "Carol Undefined", "active", "undefined"),
    _person("dave", "Dave Retired", "retired", DAVE),
    # no cn: allowed by the structural class account; the nick becomes the name
    f"dn: uid=frank,{BASE}\nobjectClass: account\nobjectClass: gentooDev\nuid: frank\ngentooStatus: active\n"
    f"gpgfingerprint: {FRANK}",
    _person("gina", "Gina Nokey", "active"),
    _person("hank", "Hank Nostatus", None, "1" * 40),
    # every fingerprint malformed: not hex, one digit short, too long, a 0x prefix
    _person("ivan", "Ivan Broken", "active", "Z" * 40, "A" * 39, "B" * 41, "0x" + "C" * 40),
    # no uid at all
    f"dn: cn=Nobody,{BASE}\nobjectClass: organizationalRole\nobjectClass: gentooDev\ncn: Nobody\n"
    f"gentooStatus: active\ngpgfingerprint: {NOBODY}",
]) + "\n"

#: a second subtree with more developers than slapd's default size limit (500): paging must fetch all
MANY = 1200
MANY_BASE = f"ou=many,{SUFFIX}"
DIRECTORY += f"\ndn: {MANY_BASE}\nobjectClass: organizationalUnit\nou: many\n\n" + "\n\n".join(
    f"dn: uid=dev{i:04d},{MANY_BASE}\nobjectClass: inetOrgPerson\nobjectClass: gentooDev\nuid: dev{i:04d}\n"
    f"cn: Developer {i}\nsn: {i}\ngentooStatus: active\ngpgfingerprint: {i:040X}" for i in range(MANY)) + "\n"
DIRECTORY += f"\ndn: uid=reader,{MANY_BASE}\nobjectClass: account\nobjectClass: simpleSecurityObject\nuid: reader\n" \
    f"userPassword: {ADMIN_PASSWORD}\n"

EXPECTED_SEEDS = {
    "alice": Seed(Nick("alice"), "Alice Example", "alice", [Fingerprint(ALICE)], [Fingerprint(ALICE)],
                  ["Alice Example <alice@gentoo.org>"]),
    "bob": Seed(Nick("bob"), "Bob Builder", "bob", [Fingerprint(BOB_V4), Fingerprint(BOB_V5)],
                [Fingerprint(BOB_V4), Fingerprint(BOB_V5)], ["Bob Builder <bob@gentoo.org>"]),
    "frank": Seed(Nick("frank"), "frank", "frank", [Fingerprint(FRANK)], [Fingerprint(FRANK)],
                  ["frank <frank@gentoo.org>"]),
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _find(program: str) -> str | None:
    return shutil.which(program) or shutil.which(program, path="/usr/sbin:/usr/local/sbin:/sbin")


@dataclass
class Slapd:
    """A running slapd: its plain URI, its LDAPS URI and the CA certificate that signed its TLS key."""

    uri: str
    ldaps_uri: str | None
    ca_file: Path | None


def _make_certificate(tmp: Path) -> tuple[Path, Path] | None:
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    cert, key = tmp / "server.pem", tmp / "server.key"
    done = subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                           "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                           "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                          capture_output=True, check=False, timeout=60)
    return (cert, key) if done.returncode == 0 else None


def _write_config(tmp: Path, tls: tuple[Path, Path] | None) -> Path:
    (tmp / "gentoo.schema").write_text(SCHEMA)
    (tmp / "db").mkdir()
    lines = [f"include {SYSTEM_SCHEMA / name}" for name in ("core.schema", "cosine.schema", "inetorgperson.schema")]
    lines += [f"include {tmp / 'gentoo.schema'}", f"pidfile {tmp / 'slapd.pid'}"]
    if Path("/usr/lib/ldap").is_dir():
        lines += ["modulepath /usr/lib/ldap", "moduleload back_mdb"]
    if tls:
        lines += [f"TLSCertificateFile {tls[0]}", f"TLSCertificateKeyFile {tls[1]}"]
    lines += ["database mdb", f'suffix "{SUFFIX}"', f'rootdn "{ADMIN}"', f"rootpw {ADMIN_PASSWORD}",
              f"directory {tmp / 'db'}", "maxsize 10485760",
              # anonymous searches keep slapd's default limit of 500 entries; this reader has none
              f'limits dn.exact="uid=reader,{MANY_BASE}" size=unlimited',
              'access to attrs=userPassword by anonymous auth by * none', "access to * by * read"]
    config = tmp / "slapd.conf"
    config.write_text("\n".join(lines) + "\n")
    return config


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"slapd exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    pytest.fail("slapd did not start listening within 15 s")


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    """A slapd of our own on 127.0.0.1 with the test directory loaded; stopped afterwards."""
    daemon, slapadd = _find("slapd"), _find("slapadd")
    if daemon is None or slapadd is None:
        pytest.skip("slapd is not installed (Debian: apt-get install slapd ldap-utils)")
    if not (SYSTEM_SCHEMA / "inetorgperson.schema").exists():
        pytest.skip(f"the OpenLDAP schema files are not in {SYSTEM_SCHEMA} (Debian: apt-get install slapd)")
    tmp = tmp_path_factory.mktemp("slapd")
    tls = _make_certificate(tmp)
    config = _write_config(tmp, tls)
    (tmp / "data.ldif").write_text(DIRECTORY)
    loaded = subprocess.run([slapadd, "-f", str(config), "-l", str(tmp / "data.ldif")],
                            capture_output=True, text=True, check=False, timeout=60)
    assert loaded.returncode == 0, loaded.stderr
    port = _free_port()
    tls_port = _free_port() if tls else None
    urls = f"ldap://127.0.0.1:{port}/" + (f" ldaps://127.0.0.1:{tls_port}/" if tls_port else "")
    log = tmp / "slapd.log"
    with open(log, "wb") as log_handle:
        process = subprocess.Popen([daemon, "-f", str(config), "-h", urls, "-d", "0"],
                                   stdout=log_handle, stderr=subprocess.STDOUT)
    try:
        _wait_for_port(port, process, log)
        yield Slapd(f"ldap://127.0.0.1:{port}", f"ldaps://127.0.0.1:{tls_port}" if tls_port else None,
                    tls[0] if tls else None)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def doc(self) -> dict[str, object]:
        return json.loads(self.out)  # type: ignore[no-any-return]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> Run:
    """``gkeys-ldap argv...`` in-process."""
    capsys.readouterr()
    code = ldap_cli.main(list(argv))
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


# -- update-seeds -------------------------------------------------------------------------------------


def test_update_seeds_builds_the_expected_file(slapd: Slapd, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gentoo-devs.seeds"
    result = run(capsys, "update-seeds", "-C", "gentoo-devs", "-o", str(out), "--uri", slapd.uri,
                 "--base", BASE, "--json")
    assert result.code == 0, result.out + result.err
    seeds = parse_seeds(out.read_bytes())
    assert {nick: seed.to_json() for nick, seed in seeds.items()} == \
        {nick: seed.to_json() for nick, seed in EXPECTED_SEEDS.items()}
    assert out.read_bytes() == dump_seeds(seeds)  # sorted keys, 4-space indent
    doc = result.doc
    assert doc["changes"] == {"added": ["alice", "bob", "frank"], "updated": [], "removed": []}
    problems = {(p["who"], p["dropped"]): p["message"] for p in doc["problems"]}  # type: ignore[union-attr]
    assert "DEADBEEFCAFEBABE" in problems[("bob", False)]
    assert "no valid gpgfingerprint" in problems[("carol", True)]
    assert "no valid gpgfingerprint" in problems[("gina", True)]
    assert "no valid gpgfingerprint" in problems[("ivan", True)]
    assert "no cn" in problems[("frank", False)]
    assert "no uid" in problems[(f"cn=Nobody,{BASE}", True)]
    ivan = [p["message"] for p in doc["problems"] if p["who"] == "ivan"]  # type: ignore[union-attr,index]
    assert len(ivan) == 5  # four malformed values, then "left out"
    assert "dave" not in json.dumps(doc["changes"]) and "hank" not in json.dumps(doc["changes"])


def test_update_seeds_prints_the_diff_against_the_old_file(slapd: Slapd, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "devs.seeds"
    old = dict(EXPECTED_SEEDS)
    old["alice"] = Seed(Nick("alice"), "Alice Example", "alice", [Fingerprint("A" * 40)], [Fingerprint("A" * 40)],
                        ["Alice Example <alice@gentoo.org>"])
    old["zed"] = Seed(Nick("zed"), "Zed Gone", "zed", [Fingerprint("C" * 40)], [Fingerprint("C" * 40)], [])
    del old["frank"]
    out.write_bytes(dump_seeds({Nick(k): v for k, v in old.items()}))
    result = run(capsys, "update-seeds", "-C", "gentoo-devs", "-o", str(out), "--uri", slapd.uri)
    assert result.code == 0, result.err
    assert " * Added: frank" in result.out
    assert " * Updated: alice" in result.out
    assert " * Removed: zed" in result.out
    assert "ivan: no valid gpgfingerprint" in result.err  # problems are warnings
    assert set(parse_seeds(out.read_bytes())) == {"alice", "bob", "frank"}
    again = run(capsys, "update-seeds", "-C", "gentoo-devs", "-o", str(out), "--uri", slapd.uri)
    assert again.code == 0 and "unchanged" in again.out and "Added" not in again.out


def test_dry_run_writes_nothing(slapd: Slapd, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "devs.seeds"
    result = run(capsys, "update-seeds", "-C", "gentoo-devs", "-o", str(out), "--dry-run", "--uri", slapd.uri)
    assert result.code == 0
    assert "Added: alice, bob, frank" in result.out
    assert not out.exists()


def test_empty_result_is_refused_and_old_file_kept(slapd: Slapd, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "devs.seeds"
    out.write_bytes(dump_seeds({Nick("alice"): EXPECTED_SEEDS["alice"]}))
    before = out.read_bytes()
    result = run(capsys, "update-seeds", "-C", "gentoo-devs", "-o", str(out), "--uri", slapd.uri,
                 "--filter", "(uid=nobody-has-this)")
    assert result.code == 2
    assert "no developer with a valid fingerprint" in result.err
    assert out.read_bytes() == before


def test_existing_file_that_is_not_a_seed_file_is_not_replaced(slapd: Slapd, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "devs.seeds"
    out.write_text("not json\n")
    result = run(capsys, "update-seeds", "-C", "gentoo-devs", "-o", str(out), "--uri", slapd.uri)
    assert result.code == 2
    assert "move it away" in result.err
    assert out.read_text() == "not json\n"


def test_paged_search_reads_everything_or_nothing(slapd: Slapd, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "many.seeds"
    # anonymous: slapd stops at 500 entries; a truncated list must not become a seed file
    truncated = run(capsys, "update-seeds", "-C", "many", "-o", str(out), "--uri", slapd.uri, "--base", MANY_BASE)
    assert truncated.code == 2
    assert "sizeLimitExceeded" in truncated.err
    assert not out.exists()
    # a reader without the limit gets all of them, in pages
    password = tmp_path / "pw"
    password.write_text(ADMIN_PASSWORD + "\n")
    result = run(capsys, "update-seeds", "-C", "many", "-o", str(out), "--uri", slapd.uri, "--base", MANY_BASE,
                 "--bind-dn", f"uid=reader,{MANY_BASE}", "--password-file", str(password))
    assert result.code == 0, result.err
    seeds = parse_seeds(out.read_bytes())
    assert len(seeds) == MANY
    assert seeds[Nick("dev1199")].keys == [f"{1199:040X}"]


# -- search -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "expected"), [
    ((), ["alice", "bob", "carol", "frank", "gina", "ivan", "cn=Nobody," + BASE]),
    (("-n", "alice"), ["alice"]),
    (("-N", "Build"), ["bob"]),
    (("-m", "gina@gentoo.org"), ["gina"]),
    (("--all", "-n", "dave"), ["dave"]),
    (("-n", "dave"), []),  # retired: only with --all
    (("-n", "*"), []),  # a wildcard in a value is escaped, not a match-all
    (("-N", ")(uid=*"), []),  # filter injection stays a literal value
    (("-f", _spaced(ALICE)), ["alice"]),
    (("-f", BOB_V5.lower()), ["bob"]),
    (("--filter", "(mail=bob@gentoo.org)"), ["bob"]),
])
def test_search_filters(slapd: Slapd, capsys: pytest.CaptureFixture[str], options: tuple[str, ...],
                        expected: list[str]) -> None:
    result = run(capsys, "search", "--uri", slapd.uri, "--json", *options)
    assert result.code == 0, result.out + result.err
    developers = result.doc["developers"]
    found = sorted(d["uid"][0] if d["uid"] else d["dn"] for d in developers)  # type: ignore[union-attr,index]
    assert found == sorted(expected)


def test_search_text_output_shows_cleaned_and_malformed_fingerprints(slapd: Slapd,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, "search", "--uri", slapd.uri, "-n", "bob")
    assert result.code == 0
    assert f"bob: Bob Builder <bob@gentoo.org> [active] {BOB_V4}, {BOB_V5}, 'DEADBEEFCAFEBABE' (malformed)" \
        in result.out


# -- connections and failures -------------------------------------------------------------------------


def test_bind_with_password(slapd: Slapd, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "pw"
    secret.write_text(ADMIN_PASSWORD + "\n")
    good = run(capsys, "search", "--uri", slapd.uri, "--bind-dn", ADMIN, "--password-file", str(secret), "-n", "alice")
    assert good.code == 0 and "alice: Alice Example" in good.out
    secret.write_text("wrong\n")
    bad = run(capsys, "search", "--uri", slapd.uri, "--bind-dn", ADMIN, "--password-file", str(secret))
    assert bad.code == 2
    assert "refused the bind" in bad.err


def test_unknown_base_and_bad_filter(slapd: Slapd, capsys: pytest.CaptureFixture[str]) -> None:
    missing = run(capsys, "search", "--uri", slapd.uri, "--base", "ou=nobody,dc=gentoo,dc=org")
    assert missing.code == 2 and "does not exist" in missing.err
    bad = run(capsys, "search", "--uri", slapd.uri, "--filter", "uid=alice")
    assert bad.code == 2 and "parentheses" in bad.err
    broken = run(capsys, "search", "--uri", slapd.uri, "--filter", "(&(uid=alice)")
    assert broken.code == 2 and "invalid LDAP filter" in broken.err


def test_starttls_and_ldaps_verify_the_certificate(slapd: Slapd, capsys: pytest.CaptureFixture[str]) -> None:
    if slapd.ca_file is None or slapd.ldaps_uri is None:
        pytest.skip("openssl could not make a test certificate")
    starttls = run(capsys, "search", "--uri", slapd.uri, "--starttls", "--ca-file", str(slapd.ca_file), "-n", "alice")
    assert starttls.code == 0, starttls.err
    assert "alice: Alice Example" in starttls.out
    ldaps = run(capsys, "search", "--uri", slapd.ldaps_uri, "--ca-file", str(slapd.ca_file), "-n", "bob")
    assert ldaps.code == 0, ldaps.err
    assert "bob: Bob Builder" in ldaps.out
    untrusted = run(capsys, "search", "--uri", slapd.ldaps_uri, "--timeout", "5")
    assert untrusted.code == 3, untrusted.err
    untrusted_starttls = run(capsys, "search", "--uri", slapd.uri, "--starttls", "--timeout", "5")
    assert untrusted_starttls.code == 3, untrusted_starttls.err
    not_tls = run(capsys, "search", "--uri", slapd.uri.replace("ldap://", "ldaps://"), "--timeout", "5")
    assert not_tls.code == 3, not_tls.err  # TLS spoken to a plain LDAP port


def test_connection_refused_is_a_network_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "devs.seeds"
    result = run(capsys, "update-seeds", "-C", "gentoo-devs", "-o", str(out), "--uri",
                 f"ldap://127.0.0.1:{_free_port()}", "--timeout", "5")
    assert result.code == 3
    assert "Connection refused" in result.err or "refused" in result.err.lower()
    assert not out.exists()


class _LoopbackServer:
    """A TCP server on 127.0.0.1 that hands its connections, one at a time, to :meth:`handle` (later ones wait
    in the listen backlog: connected, unanswered)."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(8)
        self.port = int(self.socket.getsockname()[1])
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.socket.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.socket.accept()
            except OSError:
                continue
            with conn, contextlib.suppress(OSError):
                self.handle(conn)

    def handle(self, conn: socket.socket) -> None:
        """Serve one connection (here: hold it open, saying nothing, until the server stops)."""
        self.stop.wait()

    def close(self) -> None:
        self.stop.set()
        self._thread.join(5)
        self.socket.close()


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""
    server = _LoopbackServer()
    yield server.port
    server.close()


def test_silent_server_times_out(silent_server: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "devs.seeds"
    start = time.monotonic()
    result = run(capsys, "update-seeds", "-C", "gentoo-devs", "-o", str(out),
                 "--uri", f"ldap://127.0.0.1:{silent_server}", "--timeout", "1", "--json")
    assert result.code == 3, result.out + result.err
    assert result.doc["ok"] is False and "timed out" in str(result.doc["error"])
    assert time.monotonic() - start < 20
    assert not out.exists()


class _DrippingServer(_LoopbackServer):
    """An LDAP server on 127.0.0.1 that answers the bind at once, then sends its search answer one byte
    every 0.2 s for ever (each read is quick, so no per-read timeout trips)."""

    dripped = 0

    @staticmethod
    def _message_id(request: bytes) -> int:
        """The messageID of a BER-encoded LDAPMessage (SEQUENCE, then INTEGER)."""
        pos = 2 if request[1] < 0x80 else 2 + (request[1] & 0x7F)
        length = request[pos + 1]
        return int.from_bytes(request[pos + 2 : pos + 2 + length], "big")

    def handle(self, conn: socket.socket) -> None:
        bind = self._message_id(conn.recv(4096))
        # BindResponse: success, empty matchedDN and diagnosticMessage
        conn.sendall(bytes([0x30, 0x0C, 0x02, 0x01, bind, 0x61, 0x07, 0x0A, 0x01, 0x00, 0x04, 0x00, 0x04, 0x00]))
        search = self._message_id(conn.recv(4096))
        # a searchResEntry announced as 1 MiB long, sent a byte at a time
        conn.sendall(bytes([0x30, 0x83, 0x10, 0x00, 0x08, 0x02, 0x01, search, 0x64, 0x83, 0x10, 0x00, 0x00]))
        while not self.stop.wait(0.2):
            conn.sendall(b"\x04")
            self.dripped += 1


def test_a_dripping_server_is_cut_at_the_deadline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The per-read timeout alone let a server that sends a byte every 0.2 s hold the search for ever."""
    server = _DrippingServer()
    out = tmp_path / "devs.seeds"
    try:
        start = time.monotonic()
        result = run(capsys, "update-seeds", "-C", "gentoo-devs", "-o", str(out), "--json",
                     "--uri", f"ldap://127.0.0.1:{server.port}", "--timeout", "2", "--deadline", "3")
        elapsed = time.monotonic() - start
    finally:
        server.close()
    assert result.code == 3, result.out + result.err
    assert "did not end within 3 s" in str(result.doc["error"]) and "--deadline" in str(result.doc["error"])
    assert server.dripped >= 5  # the server was dripping, not silent: the per-read timeout never tripped
    assert elapsed < 15
    assert not out.exists()


class _Recorder(_LoopbackServer):
    """A TCP server on 127.0.0.1 that records what every connection sends and never answers."""

    connections = 0
    received = b""

    def handle(self, conn: socket.socket) -> None:
        self.connections += 1
        conn.settimeout(0.5)
        while chunk := conn.recv(4096):
            self.received += chunk


_MANAGE_DSA_IT = ("2.16.840.1.113730.3.4.2", True, None)


def _add_referrals(slapd: Slapd, name: str, target_port: int) -> tuple[str, str]:
    """Add ``ou=NAME`` with one developer and a referral entry (to 127.0.0.1:target_port) below it, as the
    directory's admin with ManageDsaIT; return the subtree's DN and the referral entry's DN."""
    import ldap3

    subtree, referral = f"ou={name},{SUFFIX}", f"ou=elsewhere,ou={name},{SUFFIX}"
    connection = ldap3.Connection(ldap3.Server(slapd.uri), ADMIN, ADMIN_PASSWORD, auto_bind=True,
                                  raise_exceptions=True)
    try:
        connection.add(subtree, ["organizationalUnit"], {"ou": name})
        connection.add(f"uid=rita,{subtree}", ["inetOrgPerson", "gentooDev"],
                       {"uid": "rita", "cn": "Rita Referred", "sn": "Referred", "gentooStatus": "active",
                        "gpgfingerprint": ALICE})
        connection.add(referral, ["referral", "extensibleObject"],
                       {"ou": "elsewhere", "ref": f"ldap://127.0.0.1:{target_port}/ou=elsewhere,{SUFFIX}"},
                       controls=[_MANAGE_DSA_IT])
    finally:
        connection.unbind()
    return subtree, referral


def test_referrals_are_refused_and_never_followed(slapd: Slapd, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    recorder = _Recorder()
    try:
        subtree, referral = _add_referrals(slapd, "referred", recorder.port)
        password = tmp_path / "pw"
        password.write_text(ADMIN_PASSWORD + "\n")
        out = tmp_path / "devs.seeds"
        bind = ("--bind-dn", ADMIN, "--password-file", str(password), "--timeout", "3")
        # the subtree holds rita and a continuation reference: a seed file of rita alone would be partial
        partial = run(capsys, "update-seeds", "-C", "gentoo-devs", "-o", str(out), "--uri", slapd.uri,
                      "--base", subtree, *bind)
        assert partial.code == 2, partial.out + partial.err
        assert "referred (part of) the search" in partial.err and f"127.0.0.1:{recorder.port}" in partial.err
        assert not out.exists()
        # the base itself is a referral (result code 10): refused, the referred host is never contacted
        referred = run(capsys, "update-seeds", "-C", "gentoo-devs", "-o", str(out), "--uri", slapd.uri,
                       "--base", referral, *bind)
        assert referred.code == 2, referred.out + referred.err
        assert "referrals are not followed" in referred.err
        assert not out.exists()
        search = run(capsys, "search", "--uri", slapd.uri, "--base", referral, *bind)
        assert search.code == 2 and "referred" in search.err
    finally:
        recorder.close()
    assert recorder.connections == 0 and ADMIN_PASSWORD.encode() not in recorder.received


def test_starttls_that_did_not_start_is_refused(slapd: Slapd, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import ldap3

    # ldap3 returns False from start_tls() (without raising) in some states: nothing may be sent then
    monkeypatch.setattr(ldap3.Connection, "start_tls", lambda self, *args, **kwargs: False)
    password = tmp_path / "pw"
    password.write_text(ADMIN_PASSWORD + "\n")
    out = tmp_path / "devs.seeds"
    result = run(capsys, "update-seeds", "-C", "gentoo-devs", "-o", str(out), "--uri", slapd.uri, "--starttls",
                 "--bind-dn", ADMIN, "--password-file", str(password), "--timeout", "5")
    assert result.code == 3, result.out + result.err
    assert "STARTTLS was not established" in result.err
    assert not out.exists()


@pytest.mark.parametrize("content", ["", "\n", "\nsecret\n"])
def test_empty_password_is_refused(slapd: Slapd, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   content: str) -> None:
    password = tmp_path / "pw"
    password.write_text(content)
    result = run(capsys, "search", "--uri", slapd.uri, "--bind-dn", ADMIN, "--password-file", str(password))
    assert result.code == 2, result.out + result.err
    assert "empty password" in result.err
    with pytest.raises(BadInputError, match="empty bind password"):
        ldapseeds.search(ldapseeds.LdapSettings(uri=slapd.uri, bind_dn=ADMIN, password=""), "(uid=alice)")


@pytest.mark.parametrize(("argv", "fragment"), [
    (("--uri", "http://127.0.0.1:1"), "invalid LDAP URI"),
    (("--uri", "ldaps://127.0.0.1:1", "--starttls"), "already encrypted"),
    (("--uri", "ldap://ldap.example.org", "--bind-dn", "cn=x", "--password-file", "PW"), "in the clear"),
    (("--uri", "ldap://127.0.0.1:1", "--password-file", "PW"), "needs --bind-dn"),
    (("--uri", "ldap://127.0.0.1:1", "--ca-file", "/nonexistent/ca.pem"), "does not exist"),
    (("--uri", "ldap://127.0.0.1:1", "--deadline", "0"), "--deadline 0: give a positive"),
    (("--uri", "ldap://127.0.0.1:1", "--timeout", "nan"), "--timeout nan: give a positive"),
])
def test_unsafe_or_impossible_settings_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   argv: tuple[str, ...], fragment: str) -> None:
    password = tmp_path / "pw"
    password.write_text("x\n")
    result = run(capsys, "search", *[str(password) if a == "PW" else a for a in argv])
    assert result.code == 2
    assert fragment in result.err


def test_bad_category_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, "update-seeds", "-C", "../etc", "--uri", "ldap://127.0.0.1:1")
    assert result.code == 2 and "invalid category" in result.err


# -- seed building rules (no server) ------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "clean"), [
    (_spaced(ALICE), ALICE),
    (ALICE.lower(), ALICE),
    ("\t" + BOB_V5 + " \n", BOB_V5),
    ("DEADBEEFCAFEBABE", None),
    ("0x" + ALICE, None),
    ("G" * 40, None),
    ("A" * 50, None),
    ("", None),
])
def test_clean_fingerprint(raw: str, clean: str | None) -> None:
    assert ldapseeds.clean_fingerprint(raw) == clean


def test_build_seeds_rules() -> None:
    developers = [
        ldapseeds.Developer("uid=a", uid=["a"], cn=["A"], status=["Active"], fingerprints=[ALICE, ALICE.lower()]),
        ldapseeds.Developer("uid=a2", uid=["a"], cn=["A again"], status=["active"], fingerprints=[BOB_V4]),
        ldapseeds.Developer("uid=b", uid=["b/../x"], cn=["B"], status=["active"], fingerprints=[BOB_V4]),
        ldapseeds.Developer("uid=c", uid=["c"], cn=["C"], status=["retired"], fingerprints=[DAVE]),
        ldapseeds.Developer("uid=d", uid=["d"], cn=["D"], status=[], fingerprints=[DAVE]),
    ]
    built = ldapseeds.build_seeds(developers)
    assert list(built.seeds) == ["a"]
    assert built.seeds[Nick("a")].keys == [ALICE]  # duplicates folded
    assert built.inactive == 2
    messages = [(p.who, p.message) for p in built.problems]
    assert ("a", "duplicate uid (uid=a2): left out") in messages
    assert any(who == "b/../x" and "not a usable nick" in msg for who, msg in messages)
    assert set(ldapseeds.build_seeds(developers, include_inactive=True).seeds) == {"a", "c", "d"}


def test_search_filter_escaping() -> None:
    assert ldapseeds.search_filter() == "(gentooStatus=active)"
    assert ldapseeds.search_filter(include_inactive=True) == "(uid=*)"
    assert ldapseeds.search_filter(nick="a*b", name="x)(y") == \
        r"(&(gentooStatus=active)(uid=a\2ab)(cn=*x\29\28y*))"


def test_missing_ldap3_names_the_way_to_install_it_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 42: where Portage installed gkeys-portage, pip cannot install into the system Python (PEP 668): the
    hint is USE=ldap and emerge; elsewhere the [ldap] extra."""
    monkeypatch.setenv("EPREFIX", str(tmp_path))
    assert ldapseeds.ldap3_install_hint() == "pip install 'gkeys-portage[ldap]'"
    (tmp_path / "var/db/pkg/app-crypt/gkeys-portage-0.1.0").mkdir(parents=True)
    hint = ldapseeds.ldap3_install_hint()
    assert "USE=ldap" in hint and "emerge --oneshot app-crypt/gkeys-portage" in hint and "pip" not in hint
    assert f"{tmp_path}/etc/portage/package.use/gkeys-portage" in hint
