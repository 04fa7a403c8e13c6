"""End-to-end smoke: bootstrap, fetch seeds, install keys, verify good and refuse bad."""

from __future__ import annotations

from conftest import GkeysEnv


def test_devs_install_and_verify(env: GkeysEnv) -> None:
    env.install_devs("alice", "bob")
    good = env.root / "good.txt"
    good.write_text("hello\n")
    (env.root / "good.txt.asc").write_bytes(env.keys.sign("alice", good))
    result = env.run("verify", "-F", str(good), "-C", "gentoo-devs")
    assert result.code == 0, result.text
    assert "gentoo-devs/alice" in result.out
    good.write_text("hellx\n")
    result = env.run("verify", "-F", str(good), "-C", "gentoo-devs")
    assert result.code == 1
    assert "BAD signature" in result.text
