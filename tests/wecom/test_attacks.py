"""Attacks on the WeCom channel through its real surface: callbacks encrypted and signed by
the fake's own code, POSTed (or GOT) to a real gate over HTTP.

Each test is one class of hole that was open; it stays as the regression test of its fix.
"""

from __future__ import annotations

import re

from tests.conftest import Gate
from tests.support import config as cfg
from tests.support import fake_wecom
from tests.support.fake_wecom import FakeWeCom
from tests.wecom.conftest import AES_KEY, TOKEN, ask, deliver, posted, user

URL = "/channels/wecom/callback"


def status(gate: Gate, request_id: str) -> str:
    with gate.client(cfg.ADMIN) as c:
        return str(c.get(f"/v1/requests/{request_id}").json()["status"])


def test_url_verification_is_no_decryption_oracle_for_captured_callbacks(
    wecom_gate: Gate, fake: FakeWeCom
) -> None:
    # WeCom encrypts callbacks because they may travel over plain HTTP. The URL check (GET)
    # signs its echostr exactly like a callback's <Encrypt>, so anyone who saw a callback go by
    # could send its query and its <Encrypt> back as a GET inside the 5-minute window, and
    # gate answered with the plaintext: who pressed what, a typed reason, edited values.
    request_id = ask(wecom_gate)
    secret = f"reject {request_id} the customer's IBAN is DE89370400440532013000"
    seen = fake_wecom.build_callback(
        fake_wecom.text_xml(user=user("alice"), content=secret),
        token=TOKEN,
        encoding_aes_key=AES_KEY,
    )
    encrypted = re.search(rb"<Encrypt><!\[CDATA\[([^\]]+)\]\]>", seen.body)
    assert encrypted is not None
    with wecom_gate.client() as c:
        r = c.get(URL, params={**seen.query, "echostr": encrypted.group(1).decode()})
    assert r.status_code == 400, r.text
    assert "IBAN" not in r.text and "alice" not in r.text and "FromUserName" not in r.text
    # The real URL check still answers (its echostr is a random number).
    query = fake_wecom.url_verification(token=TOKEN, encoding_aes_key=AES_KEY, echo="4429601")
    with wecom_gate.client() as c:
        assert c.get(URL, params=query).text == "4429601"
    assert status(wecom_gate, request_id) == "pending"


def test_a_callback_that_names_no_app_does_not_act(wecom_gate: Gate, fake: FakeWeCom) -> None:
    # Every message and card event WeCom sends an app names the app (AgentID). A callback
    # for another app sharing our Token and EncodingAESKey was refused when it named that
    # app, but one naming none was acted on: the check only ran when the field was there.
    request_id = ask(wecom_gate)
    task = posted(fake, request_id).task_id
    anonymous = fake_wecom.card_event_xml(
        user=user("alice"), task_id=task, event_key="approve", response_code="rc-anon"
    ).replace(f"<AgentID>{fake_wecom.AGENT_ID}</AgentID>".encode(), b"")
    assert b"AgentID" not in anonymous
    assert deliver(wecom_gate, anonymous).status_code == 200  # acknowledged, nothing done
    typed = fake_wecom.text_xml(user=user("alice"), content=f"reject {request_id} no").replace(
        f"<AgentID>{fake_wecom.AGENT_ID}</AgentID>".encode(), b""
    )
    assert deliver(wecom_gate, typed).status_code == 200
    assert status(wecom_gate, request_id) == "pending"
    # The same press naming our app decides.
    named = fake_wecom.card_event_xml(
        user=user("alice"), task_id=task, event_key="approve", response_code="rc-named"
    )
    assert deliver(wecom_gate, named).status_code == 200
    assert status(wecom_gate, request_id) == "approved"


def test_an_extend_key_gate_never_wrote_is_ignored_not_a_500(
    wecom_gate: Gate, fake: FakeWeCom
) -> None:
    # An Extend key carries the deadline the card showed, in microseconds; a signed key of
    # twenty nines is a deadline past the year 9999, which `datetime` cannot hold.
    request_id = ask(wecom_gate)
    task = posted(fake, request_id).task_id
    for key in ("extend-" + "9" * 20, "extend-" + "9" * 18, "extend-", "extend--1"):
        plain = fake_wecom.card_event_xml(
            user=user("alice"), task_id=task, event_key=key, response_code=f"rc-{len(key)}"
        )
        r = deliver(wecom_gate, plain)
        assert r.status_code == 200, (key, r.text)
    assert status(wecom_gate, request_id) == "pending"
