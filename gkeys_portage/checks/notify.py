"""Expiry reminders: mail the owners of keys that expire within N days (``check-key --notify``).

One message per key, to the addresses of the seed's user ids (or ``--to``), saying which parts
(primary key, subkeys) expire when, and the commands that renew and republish.  ``[notify] smtp =
host:port`` and ``from``; STARTTLS is used whenever the server offers it.  A state record remembers
every (key part, expiry) mailed about, so a key is never mailed twice for the same expiry; renewing
the key (a new expiry) makes it due again.  A recipient the server refuses is reported; the others
still get the message, and the message counts as sent.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import formatdate, getaddresses, make_msgid

from gkeys_portage import __version__
from gkeys_portage.checks.glep63.sources import Subject
from gkeys_portage.core.config import Config
from gkeys_portage.core.errors import ConfigError, NetworkError, UsageError
from gkeys_portage.core.state import Layout, atomic_write_json, read_json_object
from gkeys_portage.core.types import Nick, parse_category
from gkeys_portage.keys.context import Gkeys
from gkeys_portage.keys.publish import address_of
from gkeys_portage.openpgp.colons import PublicKey

RECORD = "notified"
DEFAULT_SMTP = "localhost:25"


@dataclass(frozen=True)
class NotifyConfig:
    """``[notify]``: where to send reminders from and through."""

    host: str
    port: int
    sender: str


#: Characters that make an address more than one, or a quoted or commented thing, to a mail parser.
_NOT_IN_ADDRESS = frozenset(',;"()[]\\:')


def mail_address(text: str) -> str | None:
    """The single mail address ``text`` (a user id, or a bare address) holds, or None.

    :func:`~gkeys_portage.keys.publish.address_of` takes a whole ``<addr>`` without spaces; as a recipient it
    must also be exactly one address: no comma, semicolon, quote, comment or route characters, and
    :func:`email.utils.getaddresses` must read it as that one address and nothing else (``e@x,victim@y``
    is two, and would put both in ``To:``).
    """
    found = address_of(text)
    if found is None or _NOT_IN_ADDRESS & set(found) or found.count("@") != 1:
        return None
    return found if getaddresses([found]) == [("", found)] else None


def notify_config(config: Config) -> NotifyConfig:
    """Parse ``[notify]`` (unknown keys are refused by :func:`~gkeys_portage.core.configschema.check_known_keys`)."""
    section = dict(config.parser.items("notify")) if config.parser.has_section("notify") else {}
    host, sep, port = section.get("smtp", DEFAULT_SMTP).strip().rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ConfigError(f"[notify] smtp = {section.get('smtp')!r}: expected host:port")
    sender = section.get("from", "").strip()
    if sender and mail_address(sender) is None:
        raise ConfigError(f"[notify] from = {sender!r}: not an e-mail address")
    return NotifyConfig(host.strip("[]"), int(port), sender)


@dataclass
class Reminder:
    """One message about one key."""

    label: str  # category/nick
    fingerprint: str
    parts: list[tuple[str, int]]  # (fingerprint of the primary key or subkey, expiry epoch)
    recipients: list[str]
    message: EmailMessage
    refused: dict[str, str] = field(default_factory=dict)  # recipient -> the server's answer
    sent: bool = False

    def to_json(self) -> dict[str, object]:
        """Machine-readable form for ``--json``."""
        return {"key": self.label, "fingerprint": self.fingerprint, "recipients": self.recipients,
                "expires": [{"fingerprint": f, "expires": e} for f, e in self.parts],
                "sent": self.sent, "refused": self.refused}


def _date(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M UTC")


def expiring_parts(key: PublicKey, now: float, days: int) -> list[tuple[str, int]]:
    """The unrevoked primary key and subkeys that expire after ``now`` and within ``days`` days."""
    limit = now + days * 86400
    return [(part.fingerprint, part.expires) for part in key.all_keys()
            if part.expires is not None and not part.revoked and now < part.expires <= limit]


def reminder(label: str, key: PublicKey, parts: list[tuple[str, int]], recipients: list[str],
             sender: str) -> Reminder:
    """The message for one key: what expires, when, and how to renew and republish it."""
    fpr = key.fingerprint
    lines = [f"Your OpenPGP key {fpr} ({label}) is about to expire:", ""]
    for part, expires in parts:
        lines.append(f"  {'primary key' if part == fpr else 'subkey'} {part}  expires {_date(expires)}")
    lines += ["", "Renew it (extend the expiry) and publish the update:", "",
              f"  gpg --quick-set-expire {fpr} 1y",
              f"  gpg --quick-set-expire {fpr} 1y '*'",
              f"  gpg --send-keys {fpr}", "",
              "Users refresh it with 'gkeys refresh-key'.  You are told once per expiry date.", "",
              f"-- gkeys-portage {__version__}"]
    message = EmailMessage()
    message["From"] = sender or "gkeys@localhost"
    message["To"] = ", ".join(recipients)
    message["Subject"] = f"[gkeys] OpenPGP key {fpr[-16:]} expires {_date(min(e for _p, e in parts))[:10]}"
    message["Date"] = formatdate(usegmt=True)
    message["Message-ID"] = make_msgid("gkeys")
    message.set_content("\n".join(lines) + "\n")
    return Reminder(label, fpr, parts, recipients, message)


def reminders_for(ctx: Gkeys, subjects: Sequence[Subject], days: int, now: float, sender: str,
                  to: Sequence[str] = ()) -> list[Reminder]:
    """A reminder for each installed key with a part expiring within ``days``; recipients are ``to``, else
    the addresses of the seed's user ids (else of the key's own user ids, for keys from a file)."""
    for address in to:
        if mail_address(address) != address:
            raise UsageError(f"--to {address!r}: not one e-mail address (give --to once per address)")
    found: list[Reminder] = []
    for subject in subjects:
        if subject.key is None or not (parts := expiring_parts(subject.key, now, days)):
            continue
        recipients = list(to)
        if not recipients:
            seed = ctx.seeds.load(parse_category(subject.category)).get(Nick(subject.nick)) if subject.nick else None
            texts = seed.uid if seed is not None else [u.text for u in subject.key.uids]
            recipients = list(dict.fromkeys(a for a in map(mail_address, texts) if a))
        if recipients:
            found.append(reminder(subject.label, subject.key, parts, recipients, sender))
    return found


def _mailed(layout: Layout) -> dict[str, dict[str, int]]:
    """The record: key part -> {expiry: when mailed}; entries of another shape (edited by hand) count as
    nothing mailed and are replaced when the record is next written."""
    record = read_json_object(layout.record(RECORD))
    return {part: entry for part, entry in record.items() if isinstance(entry, dict)}


def due(layout: Layout, reminders: Sequence[Reminder]) -> list[Reminder]:
    """The reminders with a (part, expiry) not mailed about before."""
    done = _mailed(layout)
    return [r for r in reminders if any(str(expires) not in done.get(part, {}) for part, expires in r.parts)]


def _remember(layout: Layout, sent: Sequence[Reminder]) -> None:
    path = layout.record(RECORD)
    done = _mailed(layout)
    for item in sent:
        for part, expires in item.parts:
            done.setdefault(part, {})[str(expires)] = int(time.time())
    atomic_write_json(path, done)


def send(config: NotifyConfig, layout: Layout, reminders: Sequence[Reminder], *, timeout: float = 30.0) -> None:
    """Send each reminder (STARTTLS when offered) and record the sent ones (caller holds the state lock).

    A recipient the server refuses is noted on the reminder; a server that cannot be reached, or
    that fails mid-way, raises :class:`NetworkError` after recording what was already sent.
    """
    if not config.sender:
        raise ConfigError("[notify] from is not set: the address reminders are sent from")
    import smtplib  # here, not with the module: ~9 ms of every gkeys start-up (with ssl)
    import ssl

    sent: list[Reminder] = []
    try:
        with smtplib.SMTP(config.host, config.port, timeout=timeout) as smtp:
            smtp.ehlo()
            if smtp.has_extn("starttls"):
                smtp.starttls(context=ssl.create_default_context())
                smtp.ehlo()
            for item in reminders:
                try:
                    refused = smtp.send_message(item.message, from_addr=config.sender, to_addrs=item.recipients)
                except smtplib.SMTPRecipientsRefused as exc:
                    refused = exc.recipients
                item.refused = {rcpt: f"{code} {answer.decode('utf-8', 'replace')}"
                                for rcpt, (code, answer) in refused.items()}
                item.sent = len(item.refused) < len(item.recipients)
                if item.sent:
                    sent.append(item)
    except (TimeoutError, OSError, smtplib.SMTPException) as exc:
        raise NetworkError(f"mail server {config.host}:{config.port}: {exc}".splitlines()[0]) from exc
    finally:
        if sent:
            _remember(layout, sent)
