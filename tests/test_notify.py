"""check-key --notify: expiry reminders through a real SMTP server on 127.0.0.1 (issue 16 item 5)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import GkeysEnv

from gkeys_portage.checks.notify import expiring_parts, mail_address, reminder
from gkeys_portage.core.config import load_config
from gkeys_portage.core.types import Nick
from gkeys_portage.demo.world import KeyFactory
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.publish import address_of
from gkeys_portage.keys.seeds import dump_seeds

aiosmtpd_controller = pytest.importorskip("aiosmtpd.controller")


class Mailbox:
    """An aiosmtpd handler that keeps messages and refuses recipients starting with ``refuse``."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, list[str], str]] = []

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,  # noqa: N802
                          rcpt_options: list[str]) -> str:
        if address.startswith("refuse"):
            return "550 5.1.1 no such user here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos),
                              envelope.content.decode("utf-8", "replace")))
        return "250 Message accepted for delivery"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def smtp() -> Iterator[tuple[Mailbox, int]]:
    mailbox = Mailbox()
    port = _free_port()
    controller = aiosmtpd_controller.Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield mailbox, port
    controller.stop()


def _soon(keys: KeyFactory) -> None:
    if "soon" not in keys.keys:
        keys.create("soon", expire="10d")


def _setup(env: GkeysEnv, port: int) -> None:
    _soon(env.keys)
    env.install_devs("alice", "soon")
    env.write_config(f"[notify]\nsmtp = 127.0.0.1:{port}\nfrom = keys@example.org\n")


def test_owner_is_mailed_once_per_expiry(env: GkeysEnv, smtp: tuple[Mailbox, int]) -> None:
    mailbox, port = smtp
    _setup(env, port)
    result = env.run("--json", "check-key", "-C", "gentoo-devs", "--days", "30", "--notify")
    assert result.code == 0, result.text
    assert len(mailbox.messages) == 1
    sender, recipients, content = mailbox.messages[0]
    fpr = env.keys.keys["soon"].fingerprint
    assert sender == "keys@example.org" and recipients == ["soon@gentoo.org"]
    assert fpr in content and f"gpg --quick-set-expire {fpr} 1y" in content
    assert env.keys.keys["soon"].signing_subkey in content
    assert (env.state / "state" / "notified.json").exists()
    notified = json.loads(result.out)["notified"]
    assert [n["key"] for n in notified] == ["gentoo-devs/soon"] and notified[0]["sent"]
    again = env.run("check-key", "-C", "gentoo-devs", "--days", "30", "--notify")
    assert again.code == 0 and "no reminder due" in again.text
    assert len(mailbox.messages) == 1



@pytest.mark.parametrize("record", ["[]\n", '{"PART": "garbage"}\n'])
def test_a_hand_edited_notified_record_does_not_block_reminders(env: GkeysEnv, smtp: tuple[Mailbox, int],
                                                                record: str) -> None:
    """A ``notified.json`` of another shape failed every --notify run ("internal error"); it now counts
    as nothing mailed (a reminder may go again) and is rewritten."""
    mailbox, port = smtp
    _setup(env, port)
    path = env.state / "state" / "notified.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(record.replace("PART", env.keys.keys["soon"].fingerprint))
    result = env.run("check-key", "-C", "gentoo-devs", "--days", "30", "--notify")
    assert result.code == 0 and "internal error" not in result.text, result.text
    assert len(mailbox.messages) == 1
    assert isinstance(json.loads(path.read_text())[env.keys.keys["soon"].fingerprint], dict)


def test_a_refused_recipient_is_reported_and_the_others_get_it(env: GkeysEnv, smtp: tuple[Mailbox, int]) -> None:
    mailbox, port = smtp
    _setup(env, port)
    result = env.run("check-key", "-C", "gentoo-devs", "--days", "30", "--notify",
                     "--to", "team@example.org", "--to", "refuse@example.org")
    assert result.code == 0, result.text
    assert "refused refuse@example.org: 550" in result.text and "reminder sent to team@example.org" in result.text
    assert [m[1] for m in mailbox.messages] == [["team@example.org"]]


def test_dry_run_prints_and_sends_nothing(env: GkeysEnv, smtp: tuple[Mailbox, int]) -> None:
    mailbox, port = smtp
    _setup(env, port)
    result = env.run("check-key", "-C", "gentoo-devs", "--days", "30", "--notify", "--dry-run")
    assert result.code == 0 and "To: soon@gentoo.org" in result.text and "quick-set-expire" in result.text
    assert mailbox.messages == []
    assert not (env.state / "state" / "notified.json").exists()


def test_unreachable_mail_server_is_exit_3_and_nothing_recorded(env: GkeysEnv) -> None:
    _setup(env, _free_port())
    result = env.run("check-key", "-C", "gentoo-devs", "--days", "30", "--notify")
    assert result.code == 3 and "mail server 127.0.0.1" in result.text and "Traceback" not in result.text
    assert not (env.state / "state" / "notified.json").exists()


def test_a_comma_in_a_seed_user_id_adds_no_recipient(env: GkeysEnv, smtp: tuple[Mailbox, int]) -> None:
    """Issue 23 item 14: the seed user id ``Eve <e@x,victim@y>`` (one "address" without spaces) put two
    addresses in ``To:`` and mailed victim@.  Only a single address counts; --to is checked the same way."""
    mailbox, port = smtp
    _soon(env.keys)
    env.bootstrap()
    seed = env.seed("soon")
    seed.uid = ["Eve <e@example.org,victim@example.net>", "Soon <soon@gentoo.org>"]
    env.publish_seeds("gentoo-devs", (), data=dump_seeds({Nick("soon"): seed}))
    env.server.hkp[env.keys.keys["soon"].fingerprint] = env.keys.public("soon")
    assert env.run("update-seed", "-C", "gentoo-devs").code == 0
    env.write_config(f"[notify]\nsmtp = 127.0.0.1:{port}\nfrom = keys@example.org\n")
    assert mail_address("Eve <e@example.org,victim@example.net>") is None
    assert mail_address("Soon <soon@gentoo.org>") == "soon@gentoo.org"
    result = env.run("check-key", "-C", "gentoo-devs", "--days", "30", "--notify")
    assert result.code == 0, result.text
    assert [(m[1], "victim" in m[2]) for m in mailbox.messages] == [(["soon@gentoo.org"], False)]
    bad = env.run("check-key", "-C", "gentoo-devs", "--days", "30", "--notify", "--dry-run",
                  "--to", "a@example.org,victim@example.net")
    assert bad.code == 2 and "not one e-mail address" in bad.err and "Traceback" not in bad.text, bad.text


def test_notify_config_is_checked(env: GkeysEnv) -> None:
    env.install_devs("alice")
    env.write_config("[notify]\nsmtp = 127.0.0.1:25\nform = keys@example.org\n")
    result = env.run("check-key", "-C", "gentoo-devs", "--notify")
    assert result.code == 2 and "[notify] unknown key 'form' (did you mean 'from'?)" in result.text



def test_a_user_id_cannot_add_recipients_or_headers(env: GkeysEnv) -> None:
    """Seed user ids are data from others: only a whole address (no spaces, no line breaks) is used."""
    hostile = ["Eve <eve@example.org>\r\nBcc: all@example.org", "Eve <eve@example.org>, other@example.org",
               "Eve\n<eve@example.org>\nX-Injected: 1", "no address at all"]
    assert [address_of(text) for text in hostile] == [None, None, None, None]
    assert address_of("Eve Example <eve@example.org>") == "eve@example.org"
    _soon(env.keys)
    env.install_devs("soon")
    ctx = Gkeys(load_config(env.config))
    key = ctx.keyring("gentoo-devs").installed()[env.keys.keys["soon"].fingerprint]
    parts = expiring_parts(key, time.time(), 30)
    assert [fpr for fpr, _ in parts] == [key.fingerprint, env.keys.keys["soon"].signing_subkey]
    message = reminder("gentoo-devs/soon", key, parts, ["soon@gentoo.org"], "keys@example.org").message
    assert message["To"] == "soon@gentoo.org" and "Bcc" not in message
