"""Real signers: a real signed history (pypa/sampleproject, GitHub's web-flow keys) judged as git judges it.

GitHub's web-flow RSA signatures declare the modulus size as the MPI bit count (4,096 declared, 4,094 carried):
GnuPG and git verify them, and so must gkeys (the bit count is not signed), with Sequoia's second opinion on a
normalised copy (issue 34, case 6).  Every verdict must equal git's ``%G?``: good for G/U/Y, refused for E/N.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import GkeysEnv, keys_installed_by_gnupg, shared_path

WEB_FLOW = ("5DE3E0509C47EA3CF04A42D34AEE18F83AFDEB23", "968479A1AFF927E37D1A566BB5690EEEBB952194")


def test_every_commit_of_a_real_github_history_gets_the_verdict_git_gives(env: GkeysEnv, tmp_path: Path) -> None:
    github = shared_path("fixtures", "real", "github")
    repo = tmp_path / "sampleproject"
    subprocess.run(["git", "clone", "-q", str(github / "sampleproject.bundle"), str(repo)], check=True)
    git_says = dict(line.split() for line in (github / "sampleproject-git-log-G.txt").read_text().splitlines())
    for number, fingerprint in enumerate(WEB_FLOW):
        result = env.run("add-seed", "-C", "github", "-n", f"web-flow{number}", "-N", "GitHub", "-K", fingerprint)
        assert result.code == 0, result.text
    with keys_installed_by_gnupg():
        for number in range(len(WEB_FLOW)):
            result = env.run("import-key", "-C", "github", "-n", f"web-flow{number}", "-F", str(github / "web-flow.gpg"))
            assert result.code == 0, result.text
    result = env.run("verify-tree", "--json", "--policy", "all", "--no-record", "-C", "github", str(repo))
    report = json.loads(result.out)
    refused = {c["commit"]: c["code"] for c in report["bad"]}
    assert report["checked"] == len(git_says) == 197
    wrong = {h: (g, refused.get(h, "good")) for h, g in git_says.items() if (h not in refused) != (g in "GUY")}
    assert not wrong, f"{len(wrong)} of {len(git_says)} verdicts differ from git's: {sorted(wrong.items())[:5]}"
    # E: git has no key for it (gkeys: unknown signer); N: no signature at all
    assert {refused[h] for h, g in git_says.items() if g == "E"} == {"unknown-signer"}
    assert {refused[h] for h, g in git_says.items() if g == "N"} == {"no-signature"}
