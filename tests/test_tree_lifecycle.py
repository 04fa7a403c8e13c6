"""Trust over time (issue 41 items 3-6): a GLEP 79 history through its developers' key lifecycles.

One chain (L1 -> L2-developers -> developers) and one repository are built once for the session, with GnuPG's
``--faked-system-time`` dating keys, certifications and signatures, and every commit dated like its signature:

* alice: active all along (her commits give every older commit a trusted date above it);
* rita: certified, committed, then retired (L2 revoked the certification): her commits from before stay good,
  a commit she (or whoever holds her key) signs afterwards, or backdates into her old window on top of the
  history, is refused as ``signer-retired``;
* paul: primary key replaced by a new one (the old certification revoked, the new key certified): both good;
* lana: a key that lapsed and was never extended: her commits from before stay good;
* carl: compromised (hard-revoked): every commit of his is refused; the way on is ``--accept`` with a reason;
* sam: signing subkey rotated, the old one revoked as superseded: both subkeys' commits good; a copy of the old
  subkey stolen before the rotation signs a commit backdated into its life on top: refused;
* rene: renewed (``--quick-set-expire``) before the key would have expired: commits before and after good.
"""

from __future__ import annotations

import json
import shlex
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import GkeysEnv
from history_helpers import SUPERSEDED, LifeKey
from tree_helpers import head

from gkeys_portage.core.types import Fingerprint
from gkeys_portage.core.windows import Window, window_at
from gkeys_portage.demo.tree_repo import RepoBuilder
from gkeys_portage.demo.world import DemoKey, KeyFactory, past
from gkeys_portage.keys.seeds import dump_seeds, parse_seeds
from gkeys_portage.portage.hooks import repo_postsync_main
from gkeys_portage.verify.git.commits import CommitVerdict
from gkeys_portage.verify.git.evidence import Evidence
from gkeys_portage.verify.git.objects import Commit, git_environment

AUTH = ("l1", "l2-dev")
DEVS = ("alice", "rita", "paul", "paul2", "lana", "carl", "sam", "rene")


class Signers:
    """What a RepoBuilder signs with: the KeyFactory's keys, and keys living a life of their own (LifeKey; ``nick``
    signs with the current signing subkey, ``nick:FPR`` with that subkey)."""

    def __init__(self, factory: KeyFactory, lives: dict[str, LifeKey]) -> None:
        self.factory, self.lives = factory, lives

    def sign_bytes(self, signer: str, data: bytes, workdir: Path, **kwargs: Any) -> bytes:
        nick, _, subkey = signer.partition(":")
        if nick not in self.lives:
            return self.factory.sign_bytes(signer, data, workdir, **kwargs)
        when = kwargs["when"]
        return self.lives[nick].sign(data, (time.time() - when.timestamp()) / 86400, subkey or None)


@dataclass
class Lifecycle:
    """The session's keys, the authority and developer keyrings as served, and the repository's commits."""

    keys: KeyFactory
    repo: Path
    auth: bytes
    devs: bytes
    commits: dict[str, str] = field(default_factory=dict)  # label -> hash
    signers: Signers | None = None  # type: ignore[assignment]
    compromised: list[str] = field(default_factory=list)  # carl's commits (refused: hard revocation)
    retired: int = 0  # when rita was retired (epoch)
    stolen_subkey: str = ""  # sam's old signing subkey (a copy stolen before the rotation)


@pytest.fixture(scope="session")
def lifecycle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lifecycle]:
    base = tmp_path_factory.mktemp("lifecycle")
    keys = KeyFactory(base / "keys")
    born = past(700)
    for nick in AUTH:
        keys.create(nick, email=f"openpgp-auth+{nick}@gentoo.org", created=born, expire="5y")
    keys.certify("l1", "l2-dev", when=past(695))
    for nick in ("alice", "rita", "paul", "carl"):
        keys.create(nick, created=born, expire="5y")
    keys.create("lana", created=born, expire="1y")  # lapses 335 days ago, never extended
    lives = {"sam": LifeKey(base / "sam", "sam", created=700, expire="5y"),
             "rene": LifeKey(base / "rene", "rene", created=700, expire="1y")}  # renewed at 420, before it lapses
    for nick, own in lives.items():
        keys.gpg.import_keys(own.public())
        keys.keys[nick] = DemoKey(nick.capitalize(), f"{nick}@gentoo.org", Fingerprint(own.fingerprint),
                                  Fingerprint(own.subkey))
    for nick in ("alice", "rita", "paul", "lana", "carl", "sam", "rene"):
        keys.certify("l2-dev", nick, when=past(690))
    repo = RepoBuilder(base / "repo", keys)
    repo.keys = Signers(keys, lives)  # type: ignore[assignment]
    life = Lifecycle(keys, repo.path, b"", b"", signers=repo.keys)  # type: ignore[arg-type]

    def commit(label: str, signer: str, days: float) -> None:
        life.commits[label] = repo.commit(signer, when=past(days), message=label)

    commit("alice-680", "alice", 680)
    commit("rita-670", "rita", 670)
    commit("lana-660", "lana", 660)
    commit("paul-old-650", "paul", 650)
    commit("carl-640", "carl", 640)
    commit("alice-630", "alice", 630)
    commit("sam-old-600", "sam", 600)
    commit("rene-590", "rene", 590)  # before the renewal
    commit("alice-560", "alice", 560)
    life.stolen_subkey = lives["sam"].subkey
    life.signers.lives["sam-stolen"] = lives["sam"].stolen(base / "sam-stolen")  # the old subkey, as it was
    lives["sam"].rotate(500, SUPERSEDED)
    commit("sam-new-450", "sam", 450)
    lives["rene"].renew(420, "3y")
    commit("rita-400", "rita", 400)
    commit("alice-390", "alice", 390)  # dates rita-400 inside her window
    keys.revoke_certification("l2-dev", "rita", when=past(380))  # rita retires
    life.retired = int(past(380).timestamp())
    keys.create("paul2", name="Paul (2025 key)", email="paul@gentoo.org", created=past(372), expire="5y")
    keys.certify("l2-dev", "paul2", when=past(370))
    keys.revoke_certification("l2-dev", "paul", when=past(365))  # the old primary is replaced
    commit("paul-new-360", "paul2", 360)
    commit("alice-350", "alice", 350)
    commit("rene-300", "rene", 300)  # after the renewal
    commit("carl-200", "carl", 200)  # by whoever stole carl's key (gpg signs no more once it is revoked)
    keys.revoke("carl")  # compromised: a hard revocation (no reason), for all time
    commit("alice-10", "alice", 10)
    life.compromised = [life.commits["carl-640"], life.commits["carl-200"]]
    life.auth = keys.public(*AUTH)
    # as a keyserver merges them: every packet of the keys that live in their own homes too
    life.devs = keys.public(*DEVS, armor=False) + b"".join(
        own.gpg("--export-options", "no-export-clean", "--export", own.fingerprint).stdout for own in lives.values())
    yield life
    keys.close()
    for own in life.signers.lives.values():
        own.close()


def _setup(env: GkeysEnv, life: Lifecycle, tree: str = "") -> None:
    """Pin L1 and L2 as category auth, serve the developers' keyring, derive the devs seeds from it."""
    env.server.hkp[life.keys.keys["l2-dev"].fingerprint] = life.keys.public("l2-dev")
    keyfile = env.root / "auth.asc"
    keyfile.write_bytes(life.auth)
    for nick in AUTH:
        fingerprint = life.keys.keys[nick].fingerprint
        assert env.run("add-seed", "-C", "auth", "-n", nick, "-N", nick, "-K", fingerprint).code == 0
        assert env.run("import-key", "-C", "auth", "-n", nick, "-F", str(keyfile)).code == 0
    env.server.publish("output/active-devs.gpg", life.devs)
    env.write_config(f"[authority-seeds]\ndevs = {env.server.url}/output/active-devs.gpg auth/l2-dev\n"
                     "[authority]\nroots = auth/l1\ndomain = gentoo.org\nmax-shrink = 100\n"
                     "[tree]\ncategory = devs\n" + tree)
    result = env.run("update-seed", "-C", "devs")
    assert result.code == 0, result.text
    assert "Retired on " in result.out and "rita" in result.out, result.out  # not removed: kept for the past


def _clone(life: Lifecycle, where: Path) -> RepoBuilder:
    """A copy of the session's repository to add commits to (a RepoBuilder on it)."""
    shutil.copytree(life.repo, where, symlinks=True)
    repo = RepoBuilder.__new__(RepoBuilder)
    repo.__dict__.update(path=where, keys=life.signers, env=git_environment(), signature_header="gpgsig",
                         files={}, counter=100)
    return repo


def _verify(env: GkeysEnv, repo: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = env.run("--json", "verify-tree", str(repo), *args)
    return result.code, json.loads(result.out)


def _records(env: GkeysEnv) -> dict[str, str]:
    path = env.state / "state" / "tree-revisions.json"
    return {k: v["revision"] for k, v in json.loads(path.read_text()).items()} if path.exists() else {}


@pytest.mark.slow
def test_first_run_accepts_exactly_the_legitimate_commits_and_records_it(env: GkeysEnv, lifecycle: Lifecycle,
                                                                         tmp_path: Path) -> None:
    """``--policy all`` on a first clone: only the compromised key's commits are refused, the part that passed is
    recorded, and the printed next step (run as printed) accepts them by name, journaled."""
    _setup(env, lifecycle)
    repo = _clone(lifecycle, tmp_path / "repo")
    code, data = _verify(env, repo.path, "--policy", "all")
    assert code == 1, data
    assert {b["commit"] for b in data["bad"]} == set(lifecycle.compromised), data["bad"]
    assert data["checked"] == len(lifecycle.commits)
    below = lifecycle.commits["paul-old-650"]  # the newest commit with only good history (carl-640 above it)
    assert data["first_good_ancestor"] == below
    assert _records(env) == {str(repo.path.resolve()): below}  # a refused --policy all is no longer lost
    assert data["recorded"] == below and "--accept" in data["accept_step"]  # --json carries the text's facts
    assert data["next_step"].startswith("git -C ")  # the text's "next: see the first refused commit"
    text = env.run("verify-tree", str(repo.path))
    assert text.code == 1
    step = next(line for line in text.out.splitlines() + text.err.splitlines() if "--accept" in line)
    command = step[step.index(f"{env.gkeys} verify-tree"):step.index("--reason") + len("--reason 'WHY'")]
    command = command.replace("'WHY'", shlex.quote("carl's key was compromised; commits checked by hand"))
    accepted = env.run_printed(command)
    assert accepted.code == 0, accepted.text
    assert _records(env) == {str(repo.path.resolve()): lifecycle.commits["alice-10"]}
    journal = "".join(p.read_text() for p in env.state.rglob("journal*.jsonl"))
    assert journal.count('"tree-accepted-by-hand"') == 2 and "compromised" in journal


@pytest.mark.slow
def test_a_stolen_retired_key_cannot_add_a_commit_on_top(env: GkeysEnv, lifecycle: Lifecycle,
                                                         tmp_path: Path) -> None:
    """Whoever holds rita's retired key signs a commit on top of the verified history: dated today it is after her
    retirement; backdated into her old window nothing above it shows it existed then.  Both are refused as
    signer-retired, never unknown-signer, and her commits from before stay good.  A commit backdated below another
    one accepted by hand is refused too (no evidence), and so is a file she signs dated in her old window (outside a
    tree nothing shows its age)."""
    _setup(env, lifecycle)
    repo = _clone(lifecycle, tmp_path / "repo")
    for commit in lifecycle.compromised:
        assert env.run("verify-tree", str(repo.path), "--accept", commit, "--reason", "checked").code in (0, 1)
    code, data = _verify(env, repo.path, "--policy", "all")
    assert code == 0, data
    top = repo.head()
    stolen = f"sam-stolen:{lifecycle.stolen_subkey}"
    for signer, days, words in (("rita", 0.01, "after the key was retired on"),
                                ("rita", 385, "nothing shows it was made before then"),
                                (stolen, 550, "key revoked (superseded or retired)")):
        forged = repo.commit(signer, when=past(days), message=f"{signer} {days}")
        code, data = _verify(env, repo.path)
        assert code == 1, data
        assert [b["code"] for b in data["bad"]] == ["signer-retired"], data["bad"]
        assert data["bad"][0]["commit"] == forged and words in data["bad"][0]["reason"], data["bad"][0]["reason"]
        assert signer != "rita" or "l2-dev" in data["bad"][0]["reason"]  # the certifier that retired the key
        repo.force(top)
    # a backdated commit accepted by hand is no evidence for another one below it
    below = repo.commit("rita", when=past(386), message="rita 386")
    above = repo.commit("rita", when=past(385), message="rita 385")
    assert env.run("verify-tree", str(repo.path), "--accept", above, "--reason", "checked by hand").code == 1
    code, data = _verify(env, repo.path)
    assert code == 1 and [b["commit"] for b in data["bad"]] == [below], data["bad"]
    # outside a tree nothing can show a signature's age: a file signed with rita's key dated in her old window
    release = tmp_path / "release.tar"
    release.write_bytes(b"a release\n")
    signature = tmp_path / "release.tar.asc"
    signature.write_bytes(lifecycle.keys.sign_bytes("rita", release.read_bytes(), tmp_path, when=past(385)))
    refused = env.run("verify", "-F", str(release), "-s", str(signature), "-C", "devs")
    assert refused.code == 1 and "nothing shows it was made before then" in refused.text, refused.text
    assert refused.text.rstrip().endswith("update-seed -C devs"), refused.text  # the way on, -c carried
    as_json = env.run("verify", "-F", str(release), "-s", str(signature), "-C", "devs", "--json")
    assert json.loads(as_json.out)["next_step"].endswith("update-seed -C devs"), as_json.out


@pytest.mark.slow
def test_daily_syncs_through_retirement_and_replacement_never_freeze(env: GkeysEnv, lifecycle: Lifecycle,
                                                                     tmp_path: Path) -> None:
    """A daily-sync sequence: each run checks only what is new above the record; retirement and a replaced
    primary refuse nothing, the compromised key's commit is refused once and accepted by name, after which the
    syncs go on."""
    _setup(env, lifecycle)
    repo = _clone(lifecycle, tmp_path / "repo")
    stages = ["alice-630", "alice-390", "paul-new-360", "alice-350", "carl-200", "alice-10"]
    repo.git("update-ref", "refs/heads/master", lifecycle.commits["alice-680"])
    repo.git("reset", "-q", "--hard", lifecycle.commits["alice-680"])
    assert _verify(env, repo.path, "--policy", "top")[0] == 0
    for label in stages:
        repo.force(lifecycle.commits[label])
        code, data = _verify(env, repo.path)
        if label == "alice-630":  # carl-640 is in this day's range: compromised, refused (and accepted by name)
            assert code == 1 and [b["commit"] for b in data["bad"]] == [lifecycle.commits["carl-640"]], data
            assert env.run("verify-tree", str(repo.path), "--accept", lifecycle.commits["carl-640"],
                           "--reason", "carl's key was compromised later; checked by hand").code == 0
        elif label == "carl-200":
            assert code == 1 and data["bad"][0]["code"] in ("unknown-signer", "revoked-key"), data
            assert env.run("verify-tree", str(repo.path), "--accept", lifecycle.commits[label],
                           "--reason", "checked by hand").code == 0
            code, data = _verify(env, repo.path, "--rev", lifecycle.commits[label])
            assert code == 0 and not data["accepted_by_hand"], data  # recorded: nothing above it to check again
        else:
            assert code == 0, (label, data)
    assert _records(env) == {str(repo.path.resolve()): lifecycle.commits["alice-10"]}


@pytest.mark.slow
def test_a_retired_key_gone_from_the_keyring_download_still_judges_its_past(env: GkeysEnv, lifecycle: Lifecycle,
                                                                           tmp_path: Path) -> None:
    """Gentoo's active-devs.gpg drops a retired developer's key: update-seed keeps it, retired (its window closed
    at that update), so the history still verifies as before, and a commit it signs later is signer-retired."""
    _setup(env, lifecycle)
    env.server.publish("output/active-devs.gpg", lifecycle.keys.public(*(n for n in DEVS if n != "paul2"),
                                                                        armor=False))
    result = env.run("update-seed", "-C", "devs")
    new_key = lifecycle.keys.keys["paul2"].fingerprint  # paul's new key leaves the keyring: he retired
    assert result.code == 0 and f"paul ({new_key}), no longer in the authority keyring" in result.out, result.text
    repo = _clone(lifecycle, tmp_path / "repo")
    code, data = _verify(env, repo.path, "--policy", "all")
    assert {b["commit"] for b in data["bad"]} == set(lifecycle.compromised), data["bad"]
    forged = repo.commit("paul2", when=past(0.001), message="after he left")
    code, data = _verify(env, repo.path, "--range", f"{lifecycle.commits['alice-10']}..{forged}")
    assert code == 1 and data["bad"][0]["code"] == "signer-retired", data


def test_list_seed_status_and_history_show_the_windows(env: GkeysEnv, lifecycle: Lifecycle) -> None:
    """A retired key is no removed key: list-seed, status and the journal's history name its window."""
    _setup(env, lifecycle)
    rita = lifecycle.keys.keys["rita"].fingerprint
    listed = env.run("list-seed", "-C", "devs", "-n", "rita")
    assert listed.code == 0 and f"window: {rita}" in listed.out and "(certification revoked), by auth/l2-dev" \
        in listed.out, listed.out
    seeds = json.loads(env.run("--json", "list-seed", "-C", "devs", "-n", "paul").out)["seeds"]
    assert len(seeds[0]["windows"]) == 2  # the replaced primary keeps its old window beside the new key's
    status = env.run("--json", "status", "--no-doctor")
    devs = next(c for c in json.loads(status.out)["categories"] if c["name"] == "devs")
    assert set(devs["retired"]) == {f"rita {rita}", f"paul {lifecycle.keys.keys['paul'].fingerprint}"}, devs
    assert f"retired: rita {rita}" in env.run("status", "--no-doctor").out
    history = env.run("history", "-C", "devs").out
    assert f"key rita {rita} of devs retired" in history, history


def test_seed_windows_round_trip_and_old_seeds_load_unchanged() -> None:
    fpr = "A" * 40
    plain = json.dumps({"x": {"fingerprint": [fpr], "keydir": "x", "keys": [fpr], "name": "X", "nick": "x",
                              "uid": []}})
    seeds = parse_seeds(plain)
    assert dump_seeds(seeds) == json.dumps(json.loads(plain), indent=4, sort_keys=True).encode() + b"\n"
    with_window = json.loads(plain)
    with_window["x"]["windows"] = {fpr: [{"from": "2024-01-01T00:00:00Z", "until": "2025-01-01T00:00:00Z",
                                          "by": "gentoo-auth/l2-dev", "closed": "certification revoked"}]}
    parsed = parse_seeds(json.dumps(with_window))
    assert json.loads(dump_seeds(parsed)) == with_window
    pin = parsed["x"].pins("devs")[0]  # type: ignore[index]
    assert pin.windows and window_at(pin.windows, 1710000000) and window_at(pin.windows, 1740000000) is None
    for bad in ({"from": "yesterday"}, {"from": "2024-01-01T00:00:00"}, {"until": "2023-01-01T00:00:00Z",
                                                                          "from": "2024-01-01T00:00:00Z"},
                {"from": None, "color": "red"}):
        broken = json.loads(plain)
        broken["x"]["windows"] = {fpr: [bad]}
        with pytest.raises(Exception, match="windows"):
            parse_seeds(json.dumps(broken))
    for windows, words in (({"B" * 40: with_window["x"]["windows"][fpr]}, "is not one of the seed's keys"),
                           ({fpr: []}, "an empty list of windows authorizes nothing")):
        broken = json.loads(plain)
        broken["x"]["windows"] = windows
        with pytest.raises(Exception, match=words):
            parse_seeds(json.dumps(broken))


def _good(commit: str, signed: int, closed: int = 0) -> CommitVerdict:
    window = Window(0, closed or None, "auth/l2", "certification revoked") if closed else None
    return CommitVerdict(commit, "a", "s", signer="devs/x", fingerprint="F" * 40, signed=signed, verified=True,
                         closed_since=closed, window=window)


def test_evidence_is_a_trusted_descendant_dated_before_the_window_closed() -> None:
    """Only a descendant counts (a side branch's commit does not), only one by a key authorized at its date,
    and only dated before the window closed; the recorded revision itself counts as verified before."""
    # D (trusted, 150) -> C (closed at 200, signed 100): proven
    evidence = Evidence()
    top, below = _good("d", 150), _good("c", 100, closed=200)
    evidence.judge(Commit("d", b"", parents=["c"]), top)
    evidence.judge(Commit("c", b"", parents=[]), below)
    assert below.good
    # D dated after the closing: no evidence
    evidence = Evidence()
    late, below = _good("d", 250), _good("c", 100, closed=200)
    evidence.judge(Commit("d", b"", parents=["c"]), late)
    evidence.judge(Commit("c", b"", parents=[]), below)
    assert not below.good and below.code == "signer-retired"
    # a merge M whose parents are a trusted old line (S, 150) and C: S is no descendant of C
    evidence = Evidence()
    merge, side, below = _good("m", 300, closed=200), _good("s", 150), _good("c", 100, closed=200)
    evidence.judge(Commit("m", b"", parents=["s", "c"]), merge)
    evidence.judge(Commit("s", b"", parents=["o"]), side)
    evidence.judge(Commit("c", b"", parents=["o"]), below)
    assert not merge.good and not below.good
    # D itself backdated into the closed window (nothing above it): refused, so no evidence for C below it
    evidence = Evidence()
    forged, below = _good("d", 150, closed=200), _good("c", 100, closed=200)
    evidence.judge(Commit("d", b"", parents=["c"]), forged)
    evidence.judge(Commit("c", b"", parents=[]), below)
    assert not forged.good and not below.good
    # the recorded revision, checked again for its age, was verified here before
    evidence = Evidence(recorded="c")
    below = _good("c", 100, closed=200)
    evidence.judge(Commit("c", b"", parents=[]), below)
    assert below.good


@pytest.mark.slow
def test_emerge_sync_first_clone_of_the_whole_history(env: GkeysEnv, lifecycle: Lifecycle, tmp_path: Path,
                                                      portage_root: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sync module's first clone with ``sync-gkeys-policy = all`` under a real ``emerge --sync``: every
    lifecycle class passes but the compromised key's two commits, which the refusal names with the step that
    accepts them; run as printed (no repository there yet: full hashes), the next sync installs the tree."""
    _setup(env, lifecycle)
    location = portage_root.add_repo("life", f"file://{lifecycle.repo}", "gkeys", sync_gkeys_policy="all")
    refused = portage_root.sync("life")
    assert refused.returncode != 0 and not location.joinpath(".git").exists(), refused.stdout
    step = next(line for line in refused.stdout.splitlines() if "--accept" in line)
    assert all(commit in step for commit in lifecycle.compromised) and str(location) in step, step
    command = step[step.index("gkeys "):step.index("--reason") + len("--reason 'WHY'")]
    monkeypatch.setenv("GKEYS_CONFIG", str(env.config))  # the environment emerge ran in (printed steps inherit it)
    accepted = env.run_printed(command.replace("'WHY'", "'compromised; checked by hand'"))
    assert accepted.code == 0, accepted.text
    synced = portage_root.sync("life")
    assert synced.returncode == 0, synced.stdout
    assert head(location) == lifecycle.commits["alice-10"]


def test_the_hooks_judge_the_lifecycle_and_honour_an_accepted_commit(env: GkeysEnv, lifecycle: Lifecycle,
                                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The postsync hook on a plain git clone of the lifecycle ([tree] policy = all): the compromised key's commits
    are refused and named in the --accept step; once accepted (journaled), the hook passes the same history."""
    _setup(env, lifecycle, "policy = all\n")
    monkeypatch.setenv("GKEYS_CONFIG", str(env.config))
    location = _clone(lifecycle, tmp_path / "life").path
    assert repo_postsync_main(["life", "file:///up", str(location)]) == 1
    captured = capsys.readouterr()
    step = next(line for line in (captured.out + captured.err).splitlines() if "--accept" in line)
    assert all(commit in step for commit in lifecycle.compromised), step
    aside = location.with_name(f".{location.name}.gkeys-unverified")  # a refused first clone is set aside
    command = step[step.index("gkeys "):step.index("--reason") + len("--reason 'WHY'")]
    assert env.run_printed(command.replace("'WHY'", "'compromised; checked by hand'")).code == 0
    aside.rename(location)  # as if the next sync cloned again
    assert repo_postsync_main(["life", "file:///up", str(location)]) == 0, capsys.readouterr().err
    assert _records(env) == {str(location.resolve()): lifecycle.commits["alice-10"]}
