"""A real-world shape of signed git history for ``verify-tree`` (issue 18 goal 4).

Shared by ``bench/tree_large.py`` (20,000 commits, 200 keys) and ``tests/test_tree_shape.py`` (a small
copy that runs in seconds).  It reuses ``bench/tree.py``'s builder parts (commit objects made in
Python, signatures from real gpg, one shared empty tree) and adds what real history has:

* developer keys like Gentoo's: a certify-only ed25519 primary and an ed25519 signing subkey;
* ``expired`` keys: they signed early commits and expired since (their expiry lies in the history);
* ``rotated`` keys: the first signing subkey signed until a rotation date, then a new subkey (added
  that day) signed the later commits; the old subkey expired a month after the rotation;
* history in epochs: ``lanes`` branches grow in parallel from the main line, then are merged back by
  ordinary two-parent merges, or (every ``octopus_every``-th epoch, and always the first) by one
  octopus merge;
* every signature is made with gpg's clock set to its epoch (``--faked-system-time``), so the keys'
  dates and the signatures agree as they did when the history was written;
* packfiles at the end (``git repack -ad``), as a clone has.

The verifier's keyring holds the keys as a keyserver serves them today (expired keys and expired old
subkeys included); the seeds pin each primary fingerprint.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tree import git, signed_commit, write_object  # noqa: E402  (bench/tree.py)

from gkeys_portage.core.types import Fingerprint, Nick  # noqa: E402
from gkeys_portage.demo.world import DemoKey, KeyFactory  # noqa: E402
from gkeys_portage.keys.seeds import Seed, dump_seeds  # noqa: E402
from gkeys_portage.openpgp.gnupg import GnuPG  # noqa: E402

DAY = 86400
KINDS = ("normal", "expired", "rotated")


@dataclass
class ShapeKey:
    """One developer key of the shape and its timeline (epoch seconds)."""

    nick: str
    kind: str  # normal | expired | rotated
    fingerprint: str
    subkeys: list[str]  # signing subkeys, oldest first
    expires: float | None = None  # expired keys: when the whole key expired
    rotated: float | None = None  # rotated keys: when the second subkey took over
    old_expires: float | None = None  # rotated keys: when the first subkey expired

    def subkey_at(self, when: float) -> str:
        """The signing subkey this developer used at ``when``."""
        return self.subkeys[1] if self.rotated is not None and when >= self.rotated else self.subkeys[0]

    def can_sign(self, when: float, margin: float = DAY) -> bool:
        """True if the key (and the subkey of the day) was valid at ``when``, with a margin."""
        return self.expires is None or when < self.expires - margin


@dataclass
class Shape:
    """A built shape: paths, keys and counters (persisted as ``shape.json`` in the work directory)."""

    work: Path
    tip: str
    clock: float  # time of the last epoch
    keys: dict[str, ShapeKey]
    commits: int = 0
    merges: int = 0
    octopus: int = 0
    epochs: int = 0
    build_seconds: float = 0.0
    signers: dict[str, str] = field(default_factory=dict)  # commit -> signing subkey (small shapes only)

    @property
    def repo(self) -> Path:
        """The repository (non-bare, branch master)."""
        return self.work / "repo"

    @property
    def config(self) -> Path:
        """The gkeys config whose gkeysdir holds the seeds and the verifier's keyring."""
        return self.work / "gkeys.conf"

    @property
    def keyring(self) -> Path:
        """The verifier's gentoo-devs keyring (GnuPG home)."""
        return self.work / "state" / "keyrings" / "gentoo-devs"

    @property
    def secret(self) -> Path:
        """The GnuPG home holding the developers' secret keys."""
        return self.work / "secret"

    def save(self) -> None:
        """Write ``shape.json`` (what a re-run needs to reuse the build)."""
        data = {"tip": self.tip, "clock": self.clock, "commits": self.commits, "merges": self.merges,
                "octopus": self.octopus, "epochs": self.epochs, "build_seconds": self.build_seconds,
                "keys": [vars(k) for k in self.keys.values()]}
        (self.work / "shape.json").write_text(json.dumps(data, indent=1) + "\n")

    @classmethod
    def load(cls, work: Path) -> Shape | None:
        """The shape built in ``work`` before, or None."""
        path = work / "shape.json"
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        keys = {k["nick"]: ShapeKey(**k) for k in data.pop("keys")}
        return cls(work=work, keys=keys, **data)

    def kinds(self) -> dict[str, int]:
        """How many keys of each kind."""
        return {kind: sum(1 for k in self.keys.values() if k.kind == kind) for kind in KINDS}


def _gpg_at(home: Path, when: float) -> GnuPG:
    return GnuPG(home, faked_time=datetime.fromtimestamp(when, UTC))


def make_keys(factory: KeyFactory, count: int, start: float, end: float, *, expired: int,
              rotated: int) -> dict[str, ShapeKey]:
    """``count`` developer keys created a month before ``start``: ``expired`` of them expire between
    ``start`` and ``end``, ``rotated`` of them switch to a new signing subkey in that span."""
    born = start - 30 * DAY
    keys: dict[str, ShapeKey] = {}
    for i in range(count):
        nick = f"dev{i:03d}"
        kind = ("expired" if expired and i % max(2, count // expired) == 1 else
                "rotated" if rotated and i % max(3, count // rotated) == 2 else "normal")
        # a moment between start and end, spread over the keys of this kind
        moment = start + (end - start) * (0.2 + 0.6 * ((i * 7919) % 997) / 997)
        old_gpg = _gpg_at(factory.home, born)
        email = f"{nick}@gentoo.org"
        uid = f"{nick.capitalize()} <{email}>"
        life = "5y" if kind != "expired" else f"{int((moment - born) / DAY)}d"
        primary = old_gpg.generate_key(uid, algorithm="ed25519", usage="cert", expire=life)
        sub_life = f"{int((moment + 30 * DAY - born) / DAY)}d" if kind == "rotated" else life
        first = old_gpg.add_subkey(primary, algorithm="ed25519", usage="sign", expire=sub_life)
        subkeys = [str(first)]
        shape_key = ShapeKey(nick, kind, str(primary), subkeys)
        if kind == "expired":
            shape_key.expires = born + int((moment - born) / DAY) * DAY
        elif kind == "rotated":
            second = _gpg_at(factory.home, moment).add_subkey(primary, algorithm="ed25519", usage="sign",
                                                              expire="5y")
            subkeys.append(str(second))
            shape_key.rotated = moment
            shape_key.old_expires = born + int((moment + 30 * DAY - born) / DAY) * DAY
        factory.keys[nick] = DemoKey(nick.capitalize(), email, primary, first)
        keys[nick] = shape_key
    return keys


def install_verifier(work: Path, factory: KeyFactory, keys: dict[str, ShapeKey]) -> None:
    """Seeds pinning every primary, the public keys as served today, and a config pointing at them."""
    state = work / "state"
    (state / "seeds").mkdir(parents=True, exist_ok=True)
    seeds = {Nick(k.nick): Seed(Nick(k.nick), k.nick.capitalize(), k.nick, [Fingerprint(k.fingerprint)],
                                [Fingerprint(f) for f in (k.fingerprint, *k.subkeys)],
                                [f"{k.nick.capitalize()} <{k.nick}@gentoo.org>"])
             for k in keys.values()}
    (state / "seeds" / "gentoo-devs.seeds").write_bytes(dump_seeds(seeds))
    GnuPG(state / "keyrings" / "gentoo-devs").import_keys(factory.public(*keys))
    (work / "gkeys.conf").write_text(f"[base]\ngkeysdir = {state}\n")


class Grower:
    """Adds epochs of signed history to a shape (the secret keys must be at hand)."""

    def __init__(self, shape: Shape, *, lanes: int = 4, per_lane: int = 25, octopus_every: int = 20,
                 record_signers: bool = False) -> None:
        self.shape = shape
        self.lanes = lanes
        self.per_lane = per_lane
        self.octopus_every = octopus_every
        self.record = record_signers
        self.tree = git(shape.repo, "mktree", stdin=b"").decode().strip()
        self.order = sorted(shape.keys)

    def signer(self, index: int, when: float) -> tuple[str, DemoKey]:
        """Round-robin over the keys able to sign at ``when``; the key names the subkey of the day
        (``FPR!`` makes gpg use exactly that subkey)."""
        nicks = self.order
        for step in range(len(nicks)):
            key = self.shape.keys[nicks[(index + step) % len(nicks)]]
            if key.can_sign(when):
                sub = key.subkey_at(when)
                return key.nick, DemoKey(key.nick.capitalize(), f"{key.nick}@gentoo.org",
                                         Fingerprint(sub + "!"), Fingerprint(sub))
        raise RuntimeError(f"no key can sign at {when}")

    def _commit(self, gpg: GnuPG, index: int, when: float, parents: list[str], message: str,
                scratch: Path) -> str:
        nick, key = self.signer(index, when)
        raw = signed_commit(gpg, key, nick, self.tree, parents, int(when), message, scratch)
        name = write_object(self.shape.repo, raw)
        if self.record:
            self.shape.signers[name] = key.signing_subkey
        return name

    def epoch(self, when: float, *, lanes: int, per_lane: int, octopus: bool) -> None:
        """``lanes`` branches of ``per_lane`` commits from the tip, merged back into the first one."""
        shape, home = self.shape, self.shape.secret
        base = shape.commits

        def lane(number: int) -> str:
            gpg = _gpg_at(home, when)
            parent = [shape.tip] if shape.tip else []
            scratch = shape.work / f"payload-{number}"
            for j in range(per_lane):
                index = base + j * lanes + number
                parent = [self._commit(gpg, index, when + index - base, parent, f"commit {index}", scratch)]
            return parent[0]

        with ThreadPoolExecutor(max_workers=lanes) as pool:
            tips = list(pool.map(lane, range(lanes)))
        shape.commits += lanes * per_lane
        gpg = _gpg_at(home, when + lanes * per_lane)
        scratch = shape.work / "payload-merge"
        stamp = when + lanes * per_lane + 1
        if lanes > 2 and octopus:
            tips = [self._commit(gpg, shape.commits, stamp, tips, "octopus merge", scratch)]
            shape.commits, shape.merges, shape.octopus = shape.commits + 1, shape.merges + 1, shape.octopus + 1
        while len(tips) > 1:
            merged = self._commit(gpg, shape.commits, stamp, tips[:2], "merge", scratch)
            tips = [merged, *tips[2:]]
            shape.commits, shape.merges = shape.commits + 1, shape.merges + 1
        shape.tip = tips[0]
        shape.clock = when
        shape.epochs += 1

    def grow(self, count: int, span: float, progress: Callable[[int], None] | None = None) -> None:
        """Add exactly ``count`` commits, the epochs ``span`` seconds apart."""
        target = self.shape.commits + count
        while self.shape.commits < target:
            left = target - self.shape.commits
            when = self.shape.clock + span
            octopus = self.shape.epochs % self.octopus_every == 1
            size = self.lanes * self.per_lane + (1 if octopus else self.lanes - 1)
            if left >= size:
                self.epoch(when, lanes=self.lanes, per_lane=self.per_lane, octopus=octopus)
            elif left >= 3:
                self.epoch(when, lanes=2, per_lane=(left - 1) // 2, octopus=False)
            else:
                self.epoch(when, lanes=1, per_lane=left, octopus=False)
            if progress:
                progress(self.shape.commits)
        git(self.shape.repo, "update-ref", "refs/heads/master", self.shape.tip)


def build_shape(work: Path, *, commits: int, keys: int, expired: int, rotated: int, lanes: int = 4,
                per_lane: int = 25, octopus_every: int = 20, days: float = 730.0, record_signers: bool = False,
                progress: Callable[[str], None] | None = None) -> tuple[Shape, KeyFactory]:
    """Build a shape in ``work`` (which must not hold one yet); the secret keys stay open for more."""
    say = progress or (lambda _text: None)
    started = time.perf_counter()
    end = time.time() - 2 * DAY
    epochs = max(1, -(-commits // (lanes * per_lane + lanes - 1)))
    span = days * DAY / epochs
    start = end - days * DAY
    factory = KeyFactory(work / "secret")
    say(f"generating {keys} ed25519 keys ({expired} expiring in the history, {rotated} rotating subkeys) ...")
    shape_keys = make_keys(factory, keys, start, end, expired=expired, rotated=rotated)
    install_verifier(work, factory, shape_keys)
    git(work, "init", "-q", "-b", "master", str(work / "repo"))
    shape = Shape(work=work, tip="", clock=start - span, keys=shape_keys)
    say(f"signing {commits} commits in {epochs} epochs of {lanes} lanes ...")
    grower = Grower(shape, lanes=lanes, per_lane=per_lane, octopus_every=octopus_every,
                    record_signers=record_signers)
    grower.epoch(start, lanes=1, per_lane=1, octopus=False)  # one root commit, as a real repository has
    grower.grow(commits - 1, span, lambda done: say(f"  {done} commits") if shape.epochs % 20 == 0 else None)
    git(shape.repo, "repack", "-adq")
    git(shape.repo, "prune-packed")
    shape.build_seconds = time.perf_counter() - started
    shape.save()
    return shape, factory


# -- single commits and key events (the refusal cases of tests/test_tree_shape.py) ---------------------

class _Backdating(GnuPG):
    """gpg that signs even with a key created after its clock: a signature older than its key."""

    def sign(self, data: Path, signer: Fingerprint, **_options: object) -> bytes:  # type: ignore[override]
        result = self.run(["--ignore-valid-from", "--ignore-time-conflict", "--local-user", signer,
                           "--detach-sign", "--armor", "--output", "-", str(data)])
        if result.returncode != 0:
            raise RuntimeError(f"backdated signing failed: {result.stderr}")
        return result.stdout


def add_commit(shape: Shape, parents: list[str], when: float, *, subkey: str | None, nick: str = "nobody",
               home: Path | None = None, message: str = "commit", backdate: bool = False) -> str:
    """One commit on ``parents`` dated ``when``, signed by exactly ``subkey`` with gpg's clock at ``when``
    (keys in ``home``, default the shape's secret home), or unsigned when ``subkey`` is None.
    ``backdate`` lets gpg sign at ``when`` even if ``subkey`` was created later."""
    tree = git(shape.repo, "mktree", stdin=b"").decode().strip()
    scratch = shape.work / "payload-single"
    if subkey is None:
        who = f"{nick} <{nick}@gentoo.org> {int(when)} +0000"
        headers = [f"tree {tree}", *[f"parent {p}" for p in parents], f"author {who}", f"committer {who}"]
        raw = ("\n".join(headers) + "\n\n" + message + "\n").encode()
    else:
        key = DemoKey(nick, f"{nick}@gentoo.org", Fingerprint(subkey + "!"), Fingerprint(subkey))
        stamp = datetime.fromtimestamp(when, UTC)
        gpg = _Backdating(home or shape.secret, faked_time=stamp) if backdate else _gpg_at(home or shape.secret, when)
        raw = signed_commit(gpg, key, nick, tree, parents, int(when), message, scratch)
    return write_object(shape.repo, raw)


def _edit(home: Path, when: float, args: list[str], commands: str = "") -> None:
    result = _gpg_at(home, when).run(["--pinentry-mode", "loopback", "--passphrase-fd" if not commands else
                                      "--command-fd", "0", *args], stdin=commands.encode())
    if result.returncode != 0:
        raise RuntimeError(f"gpg {args[0]} failed: {result.stderr}")


def extend_secret(shape: Shape, nick: str, when: float, *, subkey: str) -> None:
    """Extend ``nick``'s primary and ``subkey`` in the *secret* home only (as of ``when``), so they can sign
    after the expiry that the verifier's keyring still shows."""
    key = shape.keys[nick]
    _edit(shape.secret, when, ["--quick-set-expire", key.fingerprint, "5y"])
    _edit(shape.secret, when, ["--quick-set-expire", key.fingerprint, "5y", subkey])


def revoke_first_subkey(home: Path, fingerprint: str, when: float, reason: int = 2) -> None:
    """Revoke the first subkey of ``fingerprint`` as of ``when``; reason 2 is "key is superseded" (a
    rotation), 1 "compromised", 3 "no longer used"."""
    commands = f"key 1\nrevkey\ny\n{reason}\nrotated\n\ny\nsave\n"
    _edit(home, when, ["--edit-key", fingerprint], commands)


def refresh_verifier(shape: Shape, *nicks: str) -> None:
    """Import the secret home's current public copy of ``nicks`` into the verifier's keyring (a refresh)."""
    factory = KeyFactory(shape.secret)
    data = factory.gpg.export_keys([shape.keys[n].fingerprint for n in nicks], clean=False)
    GnuPG(shape.keyring).import_keys(data)
