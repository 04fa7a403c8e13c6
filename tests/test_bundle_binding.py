"""A configured bundle signer makes the signature required, bound to the category, and never older than the
bundle used last (issue 23 item 11; keys/bundle.py)."""

from __future__ import annotations

import time

from conftest import GkeysEnv
from test_bundle_consume import BUNDLE, _installed, _setup, _sign


def test_a_deleted_signature_is_a_refusal_when_a_signer_is_configured(env: GkeysEnv) -> None:
    bundle = env.keys.public("alice", "bob", armor=False)
    _setup(env, bundle)  # signed by the [verify-seeds] signer
    del env.server.files["/" + BUNDLE + ".sig"]
    before = env.snapshot()
    result = env.run("install-key", "-C", "gentoo-devs")
    assert result.code == 1 and "has no signature" in result.err and "seed-signers/gkeys" in result.err, result.text
    assert "gkeys build-keyring -C gentoo-devs --sign" in result.err
    assert env.snapshot() == before and _installed(env) == set()


def test_a_bundle_signed_for_another_category_or_for_none_is_refused(env: GkeysEnv) -> None:
    bundle = env.keys.public("alice", "bob", armor=False)
    _setup(env, bundle, signature=b"")
    for signature, words in ((_sign(env, "gkeys", bundle, category="gentoo"), "for category gentoo"),
                             (env.keys.sign_bytes("gkeys", bundle, env.root, armor=False), "category binding")):
        env.server.publish(BUNDLE + ".sig", signature)
        result = env.run("install-key", "-C", "gentoo-devs")
        assert result.code == 1 and words in result.err and "nothing installed" in result.err, result.text
        assert _installed(env) == set()
    # An old-style (unbound) signature where [policy] unbound-seeds allows it for this category.
    # (only where its signer signs no other category: '[verify-seeds] gentoo' goes)
    env.config.write_text(env.config.read_text().replace("gentoo = seed-signers gkeys\n", "")
                          + "[policy]\nunbound-seeds = gentoo-devs\n")
    assert env.run("install-key", "-C", "gentoo-devs").code == 0
    assert _installed(env) == {"alice", "bob"}


def test_a_bundle_older_than_the_one_used_last_is_refused(env: GkeysEnv) -> None:
    """An old genuine bundle (signed before the one installed) would keep a revocation out."""
    bundle = env.keys.public("alice", "bob", armor=False)
    old_signature = _sign(env, "gkeys", bundle)
    time.sleep(1.1)  # signature times have one-second resolution
    _setup(env, bundle)  # signed now: newer
    assert env.run("install-key", "-C", "gentoo-devs").code == 0
    env.server.publish(BUNDLE + ".sig", old_signature)  # the older bundle replayed
    result = env.run("refresh-key", "-C", "gentoo-devs", "--force")
    assert result.code == 0 and "before the bundle used last" in result.text, result.text
    assert "refresh failed" in result.text  # a refused bundle is a failed refresh: warns, records none
    assert env.run("install-key", "-C", "gentoo-devs").code == 1
