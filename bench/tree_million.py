#!/usr/bin/env python3
"""Benchmark: ``verify-tree --policy all`` over a 1,000,000-commit signed history (issue 25).

Issue 25 asks that ``gkeys verify-tree --policy all`` over a million commits stay under 150 MiB peak
RSS, and that its time be reported.  Signing a million commits with gpg (one process each) takes hours,
so this builds the shape with signatures made in Python:

* 50 developer keys made by real gpg as ``bench/tree_shape.py`` makes them (certify-only ed25519
  primary, ed25519 signing subkey), created (``--faked-system-time``) a month before the first commit,
  installed for the verifier as ``tree_shape.install_verifier`` does (seeds pin each primary);
* each key's secret signing subkey exported from gpg (``--export-secret-subkeys``, unprotected) and
  parsed: its secret MPI is the ed25519 seed, loaded into ``cryptography``'s Ed25519PrivateKey;
* every commit signed as git signs it: a detached v4 binary signature (type 0x00, EdDSA, SHA-512,
  hashed subpackets issuer fingerprint and creation time, unhashed issuer key ID), armored, in the
  commit's ``gpgsig`` header (``bench/tree.py``'s commit layout, one shared empty tree);
* history: one root, then blocks of 100 commits on a first-parent line: each block forks a side
  branch of 5 commits (one developer) from the main line and merges it back with a two-parent merge;
  every 100th block forks three side branches and merges them with one 4-parent octopus merge; the
  main line's signers go round-robin in runs (neighbours often share a signer); timestamps increase
  evenly over ~10 years, up to two days ago;
* one packfile written by this script (PACK v2, zlib-compressed objects, SHA-1 trailer) and indexed by
  ``git index-pack``: no ``git hash-object`` per commit.  ``--commit-graph`` writes a commit-graph before
  measuring (default off: a fresh clone has none, and a first full verify runs right after the clone;
  ``git gc`` writes one later).

``--check N`` proves the signer first: the first N commits, as loose objects in a scratch repository,
each checked with ``git verify-commit --raw`` (real gpg, the verifier's keyring): GOODSIG and VALIDSIG
of the intended subkey.

Measured (as ``bench/tree_large.py`` measures, with its child-process snippet): one
``gkeys verify-tree --policy all`` run: wall, CPU, commits/s, peak RSS of gkeys and the largest child's
VmHWM; ``git log --format=%G?`` over the newest ``--sample`` commits, extrapolated; the ratio.

The shape is cached in ``--work DIR`` (``shape.json``, reused when present); build time, per-step times
and the repository size are printed.

Usage: python3 bench/tree_million.py [--commits 1000000] [--keys 50] [--work DIR] [--sample 2000]
                                     [--check N] [--skip-verify] [--commit-graph] [--gpg PATH]
  --gpg: the OpenPGP engine of gkeys ($GKEYS_GPG) and of git log (gpg.program); the keys are made with gpg.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat  # noqa: E402
from tree import git, write_object  # noqa: E402  (bench/tree.py)
from tree_large import forget_record, git_log, gkeys  # noqa: E402
from tree_shape import DAY, Shape, ShapeKey, install_verifier  # noqa: E402

from bench._engine import add_option, describe, git_options, select  # noqa: E402
from gkeys_portage.demo.world import KeyFactory  # noqa: E402
from gkeys_portage.openpgp.packets import crc24, parse_packets  # noqa: E402
from gkeys_portage.verify.git.objects import git_environment  # noqa: E402

YEAR = 365.25 * DAY
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
BLOCK = 100  # commits per block: side branch(es) + main line + one merge
SIDE = 5  # commits per side branch
OCTOPUS_EVERY = 100  # every 100th block (10,000 commits) merges three side branches at once
SECRET_SUBKEY_TAG = 7
EDDSA = 22
SHA512 = 10
PACK_COMMIT, PACK_TREE = 1, 2


# -- keys ------------------------------------------------------------------------------------------

@dataclass
class Signer:
    """One developer's signing subkey, usable from Python."""

    nick: str
    subkey: bytes  # the v4 fingerprint of the signing subkey (20 bytes)
    private: Ed25519PrivateKey

    def __post_init__(self) -> None:
        # the constant parts of every signature: issuer fingerprint subpacket, issuer key ID subpacket
        self.issuer_fpr = bytes([22, 33, 4]) + self.subkey
        self.unhashed = bytes([0, 10, 9, 16]) + self.subkey[-8:]


def make_keys(work: Path, count: int, born: float) -> dict[str, ShapeKey]:
    """``count`` developer keys made by gpg "at" ``born`` (valid 15 years), installed for the verifier."""
    factory = KeyFactory(work / "secret")
    when = datetime.fromtimestamp(born, UTC)
    keys: dict[str, ShapeKey] = {}
    for i in range(count):
        nick = f"dev{i:03d}"
        made = factory.create(nick, created=when, expire="15y")
        keys[nick] = ShapeKey(nick, "normal", str(made.fingerprint), [str(made.signing_subkey)])
    install_verifier(work, factory, keys)
    factory.gpg.close()
    return keys


def _mpi(data: bytes, pos: int) -> tuple[bytes, int]:
    """The MPI at ``pos`` (its value bytes) and the position after it."""
    bits = int.from_bytes(data[pos : pos + 2], "big")
    end = pos + 2 + (bits + 7) // 8
    return data[pos + 2 : end], end


def parse_secret_subkey(body: bytes) -> tuple[bytes, bytes, bytes]:
    """(fingerprint, public point, seed) of an unprotected v4 EdDSA secret-subkey packet body."""
    if body[0] != 4 or body[5] != EDDSA:
        raise ValueError(f"not a v4 EdDSA key (version {body[0]}, algorithm {body[5]})")
    oid_end = 7 + body[6]
    point, pos = _mpi(body, oid_end)
    public = body[:pos]
    if body[pos] != 0:
        raise ValueError(f"the secret subkey is protected (s2k usage {body[pos]})")
    seed, _ = _mpi(body, pos + 1)
    fingerprint = hashlib.sha1(b"\x99" + len(public).to_bytes(2, "big") + public).digest()
    if point[0] != 0x40 or len(point) != 33:
        raise ValueError("not a native ed25519 point (0x40 || 32 bytes)")
    return fingerprint, point[1:], seed.rjust(32, b"\0")  # the MPI dropped the seed's leading zero bytes


def load_signers(work: Path, keys: dict[str, ShapeKey]) -> list[Signer]:
    """Each key's signing subkey, exported from the secret home and loaded into ``cryptography``."""
    factory = KeyFactory(work / "secret")
    signers = []
    for key in keys.values():
        result = factory.gpg.run(["--pinentry-mode", "loopback", "--passphrase", "",
                                  "--export-secret-subkeys", key.subkeys[0] + "!"])
        if result.returncode != 0:
            raise SystemExit(f"exporting {key.nick}'s subkey failed: {result.stderr}")
        found = [parse_secret_subkey(p.body) for p in parse_packets(result.stdout) if p.tag == SECRET_SUBKEY_TAG]
        [(fingerprint, point, seed)] = found
        assert fingerprint.hex().upper() == key.subkeys[0].upper(), (fingerprint.hex(), key.subkeys[0])
        private = Ed25519PrivateKey.from_private_bytes(seed)
        assert private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw) == point, key.nick
        signers.append(Signer(key.nick, fingerprint, private))
    factory.gpg.close()
    return signers


# -- signatures and commits ------------------------------------------------------------------------

def _mpi_bytes(value: bytes) -> bytes:
    """``value`` as an OpenPGP MPI: leading zero bits stripped, bit count first."""
    stripped = value.lstrip(b"\0")
    bits = int.from_bytes(stripped, "big").bit_length()
    return bits.to_bytes(2, "big") + stripped


def sign(signer: Signer, payload: bytes, stamp: int) -> bytes:
    """A detached binary v4 signature of ``payload`` (type 0x00, EdDSA, SHA-512), as gpg makes it."""
    hashed = signer.issuer_fpr + bytes([5, 2]) + stamp.to_bytes(4, "big")
    head = bytes([4, 0, EDDSA, SHA512]) + len(hashed).to_bytes(2, "big") + hashed
    digest = hashlib.sha512(payload + head + b"\x04\xff" + len(head).to_bytes(4, "big")).digest()
    raw = signer.private.sign(digest)
    body = head + signer.unhashed + digest[:2] + _mpi_bytes(raw[:32]) + _mpi_bytes(raw[32:])
    return bytes([0x88, len(body)]) + body  # old-format header, one-octet length, as gpg 2.2 writes it


def armor_lines(packets: bytes) -> list[str]:
    """The ASCII armor of a signature, line by line (no headers, 64 columns, CRC24)."""
    text = base64.b64encode(packets).decode("ascii")
    checksum = base64.b64encode(crc24(packets).to_bytes(3, "big")).decode("ascii")
    return ["-----BEGIN PGP SIGNATURE-----", "", *(text[i : i + 64] for i in range(0, len(text), 64)),
            "=" + checksum, "-----END PGP SIGNATURE-----"]


def signed_commit(signer: Signer, parents: list[str], stamp: int, message: str) -> bytes:
    """A raw signed commit object, laid out as ``bench/tree.py``'s ``signed_commit`` lays it out."""
    who = f"{signer.nick} <{signer.nick}@gentoo.org> {stamp} +0000"
    headers = [f"tree {EMPTY_TREE}", *[f"parent {p}" for p in parents], f"author {who}", f"committer {who}"]
    payload = ("\n".join(headers) + "\n\n" + message + "\n").encode()
    signature = armor_lines(sign(signer, payload, stamp))
    return ("\n".join([*headers, "gpgsig " + "\n ".join(signature)]) + "\n\n" + message + "\n").encode()


def object_name(raw: bytes) -> str:
    """The git hash of a commit object."""
    return hashlib.sha1(b"commit %d\0" % len(raw) + raw).hexdigest()


# -- the history shape -----------------------------------------------------------------------------

class History:
    """Generates the shape's commits in topological order (parents first), with their hashes."""

    def __init__(self, signers: list[Signer], commits: int, start: float, end: float) -> None:
        self.signers = signers
        self.total = commits
        self.start = start
        self.step = (end - start) / max(1, commits)
        self.random = random.Random(25)
        self.index = 0
        self.merges = 0
        self.octopus = 0
        self.run_left = 0
        self.current = 0

    def _next_signer(self) -> Signer:
        """Round-robin-ish in runs of 1-8 commits; sometimes a jump."""
        if self.run_left == 0:
            jump = 1 if self.random.random() < 0.7 else self.random.randrange(len(self.signers))
            self.current += jump
            self.run_left = self.random.randint(1, 8)
        self.run_left -= 1
        return self.signers[self.current % len(self.signers)]

    def _commit(self, signer: Signer, parents: list[str], message: str) -> tuple[str, bytes]:
        raw = signed_commit(signer, parents, int(self.start + self.index * self.step), message)
        self.index += 1
        return object_name(raw), raw

    def _line(self, signer: Signer | None, parent: str, count: int, what: str) -> Iterator[tuple[str, bytes]]:
        """``count`` commits on ``parent``, by ``signer`` (None: the main line's signers)."""
        for _ in range(count):
            name, raw = self._commit(signer or self._next_signer(), [parent], f"{what} {self.index}")
            parent = name
            yield name, raw

    def commits(self) -> Iterator[tuple[str, bytes]]:
        """Every commit: (hash, raw object); exactly ``total`` of them."""
        tip, raw = self._commit(self.signers[0], [], "root commit")
        yield tip, raw
        block = 0
        while self.total - self.index >= BLOCK:
            block += 1
            sides = 3 if block % OCTOPUS_EVERY == 0 else 1
            side_tips = []
            for _ in range(sides):
                developer = self.signers[self.random.randrange(len(self.signers))]
                for name, raw in self._line(developer, tip, SIDE, "side"):
                    yield name, raw
                side_tips.append(name)
            for name, raw in self._line(None, tip, BLOCK - 1 - sides * SIDE, "commit"):
                yield name, raw
            tip, raw = self._commit(self._next_signer(), [name, *side_tips], "octopus merge" if sides > 1 else "merge")
            self.merges += 1
            self.octopus += sides > 1
            yield tip, raw
        yield from self._line(None, tip, self.total - self.index, "commit")


# -- the packfile ----------------------------------------------------------------------------------

class PackWriter:
    """Streams objects into one packfile (version 2, no deltas) with its SHA-1 trailer."""

    def __init__(self, out: BinaryIO, count: int) -> None:
        self.out = out
        self.sha = hashlib.sha1()
        self._write(b"PACK" + struct.pack(">II", 2, count))

    def _write(self, data: bytes) -> None:
        self.sha.update(data)
        self.out.write(data)

    def add(self, kind: int, raw: bytes) -> None:
        """One object: type and size header (varint), then the zlib-compressed body."""
        size = len(raw)
        header = bytearray([(kind << 4) | (size & 0x0F)])
        size >>= 4
        while size:
            header[-1] |= 0x80
            header.append(size & 0x7F)
            size >>= 7
        self._write(bytes(header) + zlib.compress(raw))

    def finish(self) -> str:
        """Write the trailer; return the pack's checksum (its name)."""
        digest = self.sha.digest()
        self.out.write(digest)
        return digest.hex()


def write_history(repo: Path, history: History, say: Callable[[str], None]) -> str:
    """Every commit of ``history`` (and the empty tree) into one indexed packfile; return the tip."""
    pack_dir = repo / ".git" / "objects" / "pack"
    temp = pack_dir / "tmp-million.pack"
    tip = ""
    with open(temp, "wb", buffering=1 << 20) as out:
        pack = PackWriter(out, history.total + 1)
        pack.add(PACK_TREE, b"")
        for count, (name, raw) in enumerate(history.commits(), 1):
            pack.add(PACK_COMMIT, raw)
            tip = name
            if count % 100_000 == 0:
                say(f"  {count} commits signed and packed")
        assert history.index == history.total, (history.index, history.total)
        name = pack.finish()
    final = pack_dir / f"pack-{name}.pack"
    temp.rename(final)
    final.chmod(0o444)  # as git leaves its packs
    return tip


# -- building and caching --------------------------------------------------------------------------

def build(work: Path, commits: int, keys: int, say: Callable[[str], None]) -> Shape:
    """Keys, verifier, signers and the repository in ``work``; the saved shape (with step times)."""
    steps: dict[str, float] = {}
    started = clock = time.perf_counter()

    def step(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        steps[name] = now - clock
        clock = now
        say(f"  {name}: {steps[name]:.1f} s")

    end = time.time() - 2 * DAY
    start = end - 10 * YEAR
    shape_keys, seconds = ensure_keys(work, keys)
    steps[f"{keys} keys made by gpg and installed for the verifier"] = seconds
    signers = load_signers(work, shape_keys)
    step("secret subkeys exported and loaded")
    repo = work / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    git(work, "init", "-q", "-b", "main", str(repo))
    history = History(signers, commits, start, end)
    say(f"signing and packing {commits} commits ...")
    tip = write_history(repo, history, say)
    step("commits signed, written into one packfile")
    pack = next((repo / ".git" / "objects" / "pack").glob("pack-*.pack"))
    git(repo, "index-pack", str(pack))
    step("git index-pack")
    git(repo, "update-ref", "refs/heads/main", tip)
    git(repo, "symbolic-ref", "HEAD", "refs/heads/main")
    shape = Shape(work=work, tip=tip, clock=end, keys=shape_keys, commits=commits, merges=history.merges,
                  octopus=history.octopus, epochs=0, build_seconds=time.perf_counter() - started + seconds)
    shape.save()
    (work / "million.json").write_text(json.dumps({"steps": steps}, indent=1) + "\n")
    return shape


def ensure_keys(work: Path, count: int) -> tuple[dict[str, ShapeKey], float]:
    """The keys made in ``work`` before (``keys.json``, kept across rebuilds of the repository), or
    ``count`` new ones, born a month before the history's first commit; and the seconds making them took."""
    path = work / "keys.json"
    if path.exists():
        data = json.loads(path.read_text())
        return {k["nick"]: ShapeKey(**k) for k in data["keys"]}, data["seconds"]
    print(f"generating {count} ed25519 keys with gpg ...", flush=True)
    started = time.perf_counter()
    keys = make_keys(work, count, time.time() - 2 * DAY - 10 * YEAR - 30 * DAY)
    seconds = time.perf_counter() - started
    path.write_text(json.dumps({"seconds": seconds, "keys": [vars(k) for k in keys.values()]}, indent=1) + "\n")
    return keys, seconds


def repo_size(repo: Path) -> int:
    """Bytes under the repository's ``.git``."""
    return sum(p.stat().st_size for p in (repo / ".git").rglob("*") if p.is_file())


# -- the self-test ---------------------------------------------------------------------------------

def check(work: Path, keys: dict[str, ShapeKey], count: int, program: str) -> None:
    """The first ``count`` commits as loose objects in a scratch repository, each checked by
    ``git verify-commit --raw`` with real gpg and the verifier's keyring: GOODSIG and VALIDSIG of the
    subkey that signed it."""
    signers = load_signers(work, keys)
    by_fpr = {s.subkey.hex().upper(): s.nick for s in signers}
    end = time.time() - 2 * DAY
    history = History(signers, max(count, 2 * BLOCK), end - 10 * YEAR, end)
    with tempfile.TemporaryDirectory(prefix="check-", dir=work) as scratch:
        repo = Path(scratch) / "repo"
        git(Path(scratch), "init", "-q", str(repo))
        assert git(repo, "mktree", stdin=b"").decode().strip() == EMPTY_TREE
        env = {**git_environment(), "GNUPGHOME": str(work / "state" / "keyrings" / "gentoo-devs")}
        names = []
        for name, raw in history.commits():
            assert write_object(repo, raw) == name
            names.append(name)
            if len(names) == count:
                break
        for name in names:
            run = subprocess.run(["git", "-C", str(repo), *git_options(program), "verify-commit", "--raw", name],
                                 capture_output=True, env=env, check=False)
            status = run.stderr.decode()
            valid = [line.split()[2] for line in status.splitlines() if line.startswith("[GNUPG:] VALIDSIG ")]
            author = git(repo, "show", "-s", "--format=%an", name).decode().strip()
            if run.returncode or "[GNUPG:] GOODSIG " not in status or len(valid) != 1 or by_fpr.get(valid[0]) != author:
                raise SystemExit(f"commit {name} does not verify:\n{status}")
    print(f"check: {count} commits verified by git verify-commit (GOODSIG, VALIDSIG of the signer's subkey)")


# -- measuring -------------------------------------------------------------------------------------

def prepare_graph(repo: Path, wanted: bool) -> None:
    """Write the commit-graph (``wanted``) or remove it, before measuring."""
    info = repo / ".git" / "objects" / "info"
    if wanted:
        git(repo, "commit-graph", "write", "--reachable")
    else:
        (info / "commit-graph").unlink(missing_ok=True)
        shutil.rmtree(info / "commit-graphs", ignore_errors=True)


def measure(shape: Shape, sample: int, program: str) -> None:
    """One ``verify-tree --policy all`` run and ``git log`` on a sample; print the numbers."""
    total = shape.commits
    print(f"gkeys verify-tree --policy all over {total} commits ...", flush=True)
    forget_record(shape)
    result, _ = gkeys(shape, "-q", "verify-tree", str(shape.repo), "--policy", "all")
    assert result["status"] == 0, result
    wall, cpu = result["wall"], result["cpu"]
    print(f"gkeys verify-tree --policy all: {wall:.1f} s wall, {cpu:.1f} s CPU, {total / wall:.0f} commits/s; "
          f"peak RSS {result['rss_mib']:.0f} MiB (gkeys), {result['child_rss_mib']:.0f} MiB (largest child: "
          f"{result['child']}, polled)", flush=True)
    sample = min(sample, total)
    print(f"git log --format=%G? over the newest {sample} ...", flush=True)
    log_wall, log_cpu, _ = git_log(shape, shape.tip, sample, program)
    scale = total / sample
    print(f"git log --format=%G?: {log_wall:.1f} s for {sample} commits, extrapolated to {total}: "
          f"{log_wall * scale:.0f} s; ratio {log_wall * scale / wall:.1f}x wall, {log_cpu * scale / cpu:.1f}x CPU")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--sample", type=int, default=2000, help="commits timed with git log (extrapolated)")
    parser.add_argument("--work", type=Path, help="build (or reuse) the shape here; kept")
    parser.add_argument("--check", type=int, metavar="N", default=0,
                        help="first verify N commits of the shape with git verify-commit (real gpg)")
    parser.add_argument("--skip-verify", action="store_true", help="only build (or reuse) the shape")
    parser.add_argument("--commit-graph", action=argparse.BooleanOptionalAction, default=False,
                        help="write a commit-graph before measuring (default: none, as a fresh clone)")
    add_option(parser)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="gkeys-bench-million-"))
    work.mkdir(parents=True, exist_ok=True)
    keys, _ = ensure_keys(work, args.keys)
    if args.check:
        check(work, keys, args.check, select(args.gpg))
    shape = Shape.load(work)
    if shape is not None and shape.commits != args.commits:
        raise SystemExit(f"{work} holds {shape.commits} commits, not {args.commits}: use another --work")
    if shape is None:
        shape = build(work, args.commits, len(keys), lambda text: print(text, flush=True))
    steps = json.loads((work / "million.json").read_text())["steps"]
    print(f"shape: {shape.commits} commits ({shape.merges} merges, {shape.octopus} octopus), {len(keys)} keys; "
          f"built in {shape.build_seconds:.0f} s ({', '.join(f'{k} {v:.1f} s' for k, v in steps.items())}); "
          f"repository {repo_size(shape.repo) / 2**20:.0f} MiB", flush=True)
    if args.skip_verify:
        return 0
    program = select(args.gpg)
    print(describe(program), flush=True)
    prepare_graph(shape.repo, args.commit_graph)
    print(f"commit-graph: {'written' if args.commit_graph else 'none'}", flush=True)
    measure(shape, args.sample, program)
    return 0


if __name__ == "__main__":
    sys.exit(main())
