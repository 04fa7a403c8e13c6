"""send-key: HKP upload (POST /pks/add) of pinned keys to a keyserver on 127.0.0.1 (issue 16 item 3)."""

from __future__ import annotations

import json
import urllib.parse

from conftest import GkeysEnv

from gkeys_portage.demo.world import RequestInfo, Response
from gkeys_portage.openpgp.gnupg import GnuPG


def _keytext(info: RequestInfo) -> str:
    return urllib.parse.parse_qs(info.body.decode("ascii"))["keytext"][0]


def test_each_pinned_key_is_uploaded_armored_and_alone(env: GkeysEnv) -> None:
    env.install_devs("alice", "bob")
    result = env.run("--json", "send-key", "-C", "gentoo-devs")
    assert result.code == 0, result.text
    assert {k["status"] for k in json.loads(result.out)["keys"]} == {"accepted"}
    assert len(env.server.uploads) == 2
    gpg = GnuPG(env.root / "show")
    try:
        seen = [gpg.show_primaries(upload) for upload in env.server.uploads]
    finally:
        gpg.close()
    assert sorted(seen, key=sorted) == sorted(({env.keys.keys["alice"].fingerprint},
                                               {env.keys.keys["bob"].fingerprint}), key=sorted)


def test_one_nick_and_an_explicit_keyserver(env: GkeysEnv) -> None:
    env.install_devs("alice", "bob")
    hkp = env.server.url.replace("http://", "hkp://")
    assert env.run("send-key", "-C", "gentoo-devs", "-n", "bob", "--keyserver", hkp).code == 0
    assert len(env.server.uploads) == 1


def _answer_with(env: GkeysEnv, status: int, body: bytes) -> None:
    env.server.routes["/pks/add"] = lambda info: Response(status, body)


def test_a_200_page_saying_no_is_a_refusal(env: GkeysEnv) -> None:
    env.install_devs("alice")
    _answer_with(env, 200, b"<html><body><h1>Error handling request</h1><p>Key rejected</p></body></html>")
    result = env.run("send-key", "-C", "gentoo-devs")
    assert result.code == 1 and "error page" in result.text and "Error handling request" in result.text


def test_hockeypuck_json_must_list_the_key(env: GkeysEnv) -> None:
    env.install_devs("alice", "bob")
    alice = env.keys.keys["alice"].fingerprint

    def hockeypuck(info: RequestInfo) -> Response:
        listed = [alice] if alice in env.keys.gpg.show_primaries(_keytext(info).encode()) else []
        return Response(200, json.dumps({"inserted": listed, "updated": [], "ignored": []}).encode())

    env.server.routes["/pks/add"] = hockeypuck
    result = env.run("--json", "send-key", "-C", "gentoo-devs")
    assert result.code == 1, result.text
    status = {k["nick"]: (k["status"], k["answer"]) for k in json.loads(result.out)["keys"]}
    assert status["alice"] == ("accepted", "inserted")
    assert status["bob"][0] == "refused" and "does not list the key" in status["bob"][1]


def test_http_refusal_is_exit_1_and_no_server_is_exit_3(env: GkeysEnv) -> None:
    env.install_devs("alice")
    _answer_with(env, 403, b"uploads disabled")
    result = env.run("send-key", "-C", "gentoo-devs")
    assert result.code == 1 and "HTTP 403: uploads disabled" in result.text
    result = env.run("send-key", "-C", "gentoo-devs", "--keyserver", "http://127.0.0.1:9")
    assert result.code == 3 and "unreachable" in result.text and "Traceback" not in result.text


def test_keys_that_are_not_installed_are_not_sent(env: GkeysEnv) -> None:
    env.install_devs("alice", "bob")
    env.run("remove-key", "-C", "gentoo-devs", "-n", "bob")
    result = env.run("send-key", "-C", "gentoo-devs")
    assert result.code != 0 and "install-key -C gentoo-devs" in result.text
    assert env.server.uploads == []
