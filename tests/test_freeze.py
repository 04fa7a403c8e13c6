"""Freeze attacks: a mirror that keeps serving an old but validly signed state is caught by max ages."""

from __future__ import annotations

from pathlib import Path

from conftest import GkeysEnv
from media_helpers import AUTOBUILDS, STAGE3, STAMP, install_release_key, make_media
from tree_helpers import build, install_devs

from gkeys_portage.demo.media_steps import latest_text
from gkeys_portage.demo.world import past


def test_latest_file_older_than_media_max_age_is_refused(env: GkeysEnv, tmp_path: Path) -> None:
    install_release_key(env, "releng")
    seeds = env.state / "seeds" / "gentoo.seeds"
    seeds.write_bytes(env.seed_bytes("releng", "expired"))  # "expired" can sign "700 days ago"
    keyfile = tmp_path / "expired.asc"
    keyfile.write_bytes(env.keys.public("expired"))
    assert env.run("import-key", "-C", "gentoo", "-n", "expired", "-F", str(keyfile)).code == 0
    media = make_media(env.keys, tmp_path / "src")
    media.publish(env.server)
    text = latest_text(f"{STAMP}/{STAGE3} {len(media.data)}").encode()
    env.server.publish(f"{AUTOBUILDS}/latest-stage3-amd64-openrc.txt",
                       env.keys.sign_bytes("expired", text, tmp_path, clearsign=True, when=past(700)))
    argv = ("fetch-media", "--latest", "stage3-amd64-openrc", "--mirror", env.server.url, "-d", str(tmp_path / "d"))
    # gentoo has seeds with a purpose (issue 23 item 2): "expired" must be named a release-media seed to sign
    env.config.write_text(env.config.read_text() + "[media]\nmax-age = 30\n"
                          "[purposes]\nrelease-media = gentoo/releng gentoo/expired\n")
    refused = env.run(*argv)
    assert refused.code == 1 and "max-age" in refused.text and not (tmp_path / "d").exists()
    env.config.write_text(env.config.read_text().replace("max-age = 30", "max-age = 0"))
    assert env.run(*argv).code == 0  # off by default: the same old file is accepted


def test_top_commit_older_than_tree_max_age_is_refused(env: GkeysEnv, tmp_path: Path) -> None:
    install_devs(env, ("expired",))
    repo = build(tmp_path / "repo", env.keys, [])
    repo.commit("expired", when=past(700))
    env.config.write_text(env.config.read_text() + "[tree]\nmax-age = 30\npolicy = all\n")
    refused = env.run("verify-tree", str(repo.path))
    assert refused.code == 1 and "max-age" in refused.text
    env.config.write_text(env.config.read_text().replace("max-age = 30", "max-age = 1000"))
    assert env.run("verify-tree", str(repo.path)).code == 0
