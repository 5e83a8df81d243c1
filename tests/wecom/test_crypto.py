"""WeCom's callback crypto, checked against Tencent's reference vectors, and the fake's
independent implementation checked against the channel's (both ways)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from channels.wecom import crypto
from channels.wecom.settings import WeComSettings, aes_key
from channels.wecom.verify import Verifier, read_message
from gate.base.errors import BadRequest, Unauthenticated
from tests.support import fake_wecom

FIXTURES = Path(__file__).parent / "fixtures"
VECTORS: dict[str, Any] = json.loads((FIXTURES / "reference_vectors.json").read_text())


def reference_verifier(at: str) -> Verifier:
    settings = WeComSettings(
        corp_id=VECTORS["corp_id"],
        agent_id=1000002,
        secret="unused",
        token=VECTORS["token"],
        encoding_aes_key=VECTORS["encoding_aes_key"],
    )
    return Verifier(settings, clock=lambda: float(at))


def test_the_channel_verifies_the_reference_url_verification() -> None:
    v = VECTORS["verify_url"]
    sig = crypto.signature(VECTORS["token"], v["timestamp"], v["nonce"], v["echostr"])
    assert sig == v["msg_signature"]
    echoed = reference_verifier(v["timestamp"]).echo(v)
    assert echoed == v["plain"].encode()


def test_the_channel_decrypts_the_reference_message() -> None:
    m = VECTORS["decrypt_msg"]
    query = {k: m[k] for k in ("msg_signature", "timestamp", "nonce")}
    message = reference_verifier(m["timestamp"]).open(query, m["post_data"].encode())
    assert (message.from_user, message.msg_type, message.content) == ("ChenJiaShun", "text", "你好")
    assert message.msg_id == "1456453720" and message.to_user == VECTORS["corp_id"]


def test_the_fake_matches_the_reference_vectors() -> None:
    v, m = VECTORS["verify_url"], VECTORS["decrypt_msg"]
    key = VECTORS["encoding_aes_key"]
    assert (
        fake_wecom.sign(VECTORS["token"], v["timestamp"], v["nonce"], v["echostr"])
        == v["msg_signature"]
    )
    assert fake_wecom.decrypt(key, v["echostr"]) == (v["plain"].encode(), b"ww1436e0e65a779aee")
    encrypted = m["post_data"].split("<![CDATA[")[2].split("]]>")[0]
    assert fake_wecom.decrypt(key, encrypted)[0] == m["plain"].encode()


@pytest.mark.parametrize("size", [0, 1, 11, 12, 13, 31, 32, 33, 1000])
def test_what_the_fake_encrypts_the_channel_decrypts(size: int) -> None:
    key = VECTORS["encoding_aes_key"]
    message = bytes(range(256)) * 4
    encrypted = fake_wecom.encrypt(key, message[:size], "wwcorp")
    assert crypto.decrypt(aes_key(key), encrypted, "wwcorp") == message[:size]


def test_a_message_for_another_company_is_refused() -> None:
    key = VECTORS["encoding_aes_key"]
    encrypted = fake_wecom.encrypt(key, b"<xml/>", "ww-someone-else")
    with pytest.raises(ValueError, match="receive id"):
        crypto.decrypt(aes_key(key), encrypted, "wwcorp")


@pytest.mark.parametrize(
    "encrypted",
    ["", "not base64!", "QUJD", "A" * 44, "A" * 43 + "="],
    ids=["empty", "not-base64", "short", "one-block", "bad-padding"],
)
def test_broken_ciphertext_is_a_value_error(encrypted: str) -> None:
    with pytest.raises(ValueError):
        crypto.decrypt(aes_key(VECTORS["encoding_aes_key"]), encrypted, "wwcorp")


def test_an_encoding_aes_key_that_is_not_one_stops_start_up() -> None:
    with pytest.raises(ValueError, match="43-character"):
        WeComSettings(encoding_aes_key="too-short")
    assert aes_key("!" * 43) == b""


# -- reading the decrypted XML ----------------------------------------------------------------


def test_the_docs_card_event_is_read() -> None:
    message = read_message((FIXTURES / "template_card_event.xml").read_bytes())
    assert (message.event, message.event_key, message.task_id) == (
        "template_card_event",
        "key111",
        "taskid111",
    )
    assert (message.card_type, message.response_code) == ("text_notice", "ResponseCode")
    assert message.selected == {
        "QuestionKey1": ("OptionId1", "OptionId2"),
        "QuestionKey2": ("OptionId3", "OptionId4"),
    }


LAUGHS = (
    b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>'
    b"<xml><FromUserName>&lol2;</FromUserName><MsgType>text</MsgType></xml>"
)
EXTERNAL = (
    b'<!DOCTYPE xml [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
    b"<xml><FromUserName>&x;</FromUserName><MsgType>text</MsgType></xml>"
)


@pytest.mark.parametrize(
    "raw",
    [LAUGHS, EXTERNAL, b"<xml><!-- c --><FromUserName>a</FromUserName></xml>", b"not xml", b"<a/>"],
    ids=["entity-expansion", "external-entity", "comment", "not-xml", "not-wecom"],
)
def test_hostile_xml_is_a_400_before_any_entity_is_read(raw: bytes) -> None:
    with pytest.raises(BadRequest):
        read_message(raw)


def test_cdata_is_allowed_and_read_as_text() -> None:
    raw = (
        b"<xml><FromUserName><![CDATA[u1]]></FromUserName><MsgType><![CDATA[text]]></MsgType>"
        b"<Content><![CDATA[<!DOCTYPE is just text here? no: refused]]></Content></xml>"
    )
    # A "<!" inside CDATA is refused too: the scan is simple on purpose (linear, no parser).
    with pytest.raises(BadRequest):
        read_message(raw)
    ok = raw.replace(b"<!DOCTYPE", b"DOCTYPE")
    assert read_message(ok).content.startswith("DOCTYPE")


def test_the_verifier_refuses_before_decrypting() -> None:
    v = VECTORS["verify_url"]
    verifier = reference_verifier(v["timestamp"])
    for query in (
        {**v, "msg_signature": "0" * 40},
        {**v, "timestamp": "²"},
        {k: val for k, val in v.items() if k != "msg_signature"},
        {**v, "echostr": ""},
    ):
        with pytest.raises(Unauthenticated):
            verifier.echo(query)
    stale = reference_verifier(str(int(v["timestamp"]) + 301))
    with pytest.raises(Unauthenticated, match="window"):
        stale.echo(v)
