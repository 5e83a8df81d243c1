"""Hostile Feishu callbacks over the real app: odd signature headers and tokens, bodies nested
too deeply to parse, the legacy token-signed callback when an Encrypt Key is set, and edits
the database could not store."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.conftest import Gate, GateFactory
from tests.feishu.conftest import ENCRYPT_KEY, VERIFICATION_TOKEN, feishu_settings, send_callback
from tests.feishu.test_callbacks import click, state, submit_and_card
from tests.feishu.test_offers import answer_of
from tests.support import config as cfg
from tests.support.chat_rules import CHAT_RULES
from tests.support.fake_feishu import FakeFeishu, build_callback, sign

EVENTS = "/channels/feishu/events"


def _post(gate: Gate, body: bytes, headers: dict[str, Any]) -> httpx.Response:
    with gate.client() as c:
        return c.post(EVENTS, content=body, headers={"Content-Type": "application/json", **headers})


def _untouched(gate: Gate, request_id: str) -> None:
    after = state(gate, request_id)
    assert after["status"] == "pending" and after["votes"] == [], after


# -- signatures and tokens ----------------------------------------------------------------------


def _signed_headers(body: bytes, **override: Any) -> dict[str, Any]:
    ts, nonce = str(int(time.time())), "n-1"
    headers: dict[str, Any] = {
        "X-Lark-Request-Timestamp": ts,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": sign(ts, nonce, ENCRYPT_KEY, body),
    }
    headers.update(override)
    return headers


@pytest.mark.parametrize(
    "override",
    [
        {"X-Lark-Signature": b"\xe9\xe9\xe9"},  # latin-1 bytes: a non-ASCII str to the server
        {"X-Lark-Request-Timestamp": b"\xb2"},  # "²": isdigit() says yes, int() says no
        {"X-Lark-Request-Timestamp": "9" * 5000},
    ],
    ids=["non-ascii signature", "superscript timestamp", "endless timestamp"],
)
def test_non_ascii_or_absurd_signature_headers_are_401(
    feishu_gate: Gate, fake_feishu: FakeFeishu, override: dict[str, Any]
) -> None:
    request_id, message = submit_and_card(feishu_gate, fake_feishu)
    cb = build_callback(click(fake_feishu, message, "approve", "ou_alice"), encrypt_key=ENCRYPT_KEY)
    r = _post(feishu_gate, cb.body, _signed_headers(cb.body, **override))
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "bad_signature"
    _untouched(feishu_gate, request_id)


def test_a_non_ascii_verification_token_is_401(feishu_gate: Gate, fake_feishu: FakeFeishu) -> None:
    request_id, message = submit_and_card(feishu_gate, fake_feishu)
    payload = click(fake_feishu, message, "approve", "ou_alice")
    for token in ("vt-\u00e9t\u00e9", "\ud800", VERIFICATION_TOKEN + "\u4e2d"):
        payload["header"]["token"] = token
        r = send_callback(feishu_gate, payload)
        assert r.status_code == 401, r.text
        assert r.json()["error"]["code"] == "bad_token"
    _untouched(feishu_gate, request_id)


# -- bodies -------------------------------------------------------------------------------------


def test_a_body_nested_too_deeply_is_400(feishu_gate: Gate, fake_feishu: FakeFeishu) -> None:
    request_id, _ = submit_and_card(feishu_gate, fake_feishu)
    deep = ('{"schema": "2.0", "x": ' + "[" * 50_000 + "]" * 50_000 + "}").encode()
    plain = send_callback(feishu_gate, deep, encrypted=False)
    assert plain.status_code == 400, plain.text
    assert plain.json()["error"] == {"code": "bad_callback", "message": "body is nested too deeply"}
    encrypted = send_callback(feishu_gate, deep)
    assert encrypted.status_code == 400, encrypted.text
    assert encrypted.json()["error"] == {
        "code": "undecryptable",
        "message": "decrypted body is nested too deeply",
    }
    _untouched(feishu_gate, request_id)


# -- the legacy callback ------------------------------------------------------------------------


def test_legacy_token_signed_callback_is_refused_when_an_encrypt_key_is_set(
    feishu_gate: Gate, fake_feishu: FakeFeishu
) -> None:
    request_id, message = submit_and_card(feishu_gate, fake_feishu)
    legacy = {
        "open_id": "ou_alice",
        "open_message_id": message.message_id,
        "token": "c-" + "0" * 40,
        "action": {"tag": "button", "value": {"request_id": request_id, "verdict": "approve"}},
    }
    r = send_callback(
        feishu_gate, legacy, encrypted=False, signing_secret=VERIFICATION_TOKEN, algo="sha1"
    )
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "legacy_callback_refused"
    unsigned = send_callback(feishu_gate, legacy, encrypted=False, signed=False)
    assert unsigned.status_code == 401
    _untouched(feishu_gate, request_id)


# -- edits the database could not store ---------------------------------------------------------


@pytest.fixture
def edit_gate(make_gate: GateFactory, db_url: str, fake_feishu: FakeFeishu) -> Gate:
    return make_gate(settings=feishu_settings(db_url, fake_feishu, extra_rules=CHAT_RULES))


def _edit_toast(gate: Gate, fake: FakeFeishu, args: dict[str, Any], form: dict[str, str]) -> str:
    """Open the edit form of a new request with `args`, submit `form`: the error toast."""
    request_id, message = submit_and_card(gate, fake, "refund_order", **args)
    card = answer_of(gate, click(fake, message, "edit", "ou_alice"))["card"]["data"]
    payload = click(fake, message, "approve_edits", "ou_alice", form=form, card=card)
    toast = answer_of(gate, payload)["toast"]
    assert toast["type"] == "error", toast
    _untouched(gate, request_id)
    content: str = toast["content"]
    return content


def test_edits_that_could_not_be_stored_are_refused(
    edit_gate: Gate, fake_feishu: FakeFeishu
) -> None:
    gate, fake = edit_gate, fake_feishu
    as_number = {"amount": 900}
    assert "amount: is NaN, which JSON cannot carry" in _edit_toast(
        gate, fake, as_number, {"f0": "NaN"}
    )
    as_list = {"amount": 900, "currency": ["EUR"]}
    deep = "[" * 40 + '"EUR"' + "]" * 40
    assert "currency: is nested deeper than 32 levels" in _edit_toast(
        gate, fake, as_list, {"f1": deep}
    )
    as_text = {"amount": 900, "currency": "EUR"}
    assert "currency: contains a NUL character" in _edit_toast(
        gate, fake, as_text, {"f1": "EUR\u0000"}
    )
    unparsable = "[" * 5000 + "]" * 5000
    assert "currency: the JSON is nested too deeply" in _edit_toast(
        gate, fake, as_text, {"f1": unparsable}
    )
    with gate.client(cfg.ADMIN) as c:
        listed = c.get("/v1/requests")
    assert listed.status_code == 200 and len(listed.json()["items"]) == 4


def test_a_replayed_legacy_extend_moves_the_deadline_once(
    make_gate: GateFactory, sqlite_url: str, fake_feishu: FakeFeishu
) -> None:
    # Without an Encrypt Key the legacy callback is accepted; it has no event id, so the same
    # signed delivery (a retry, or a replay inside the 5-minute window) is known by its
    # signature.
    gate = make_gate(settings=feishu_settings(sqlite_url, fake_feishu, encrypt_key=None))
    request_id, message = submit_and_card(gate, fake_feishu)
    before = datetime.fromisoformat(state(gate, request_id)["expires_at"])
    legacy = {
        "open_id": "ou_alice",
        "open_message_id": message.message_id,
        "token": "c-" + "0" * 40,
        "action": {"tag": "button", "value": {"request_id": request_id, "verdict": "extend"}},
    }
    cb = build_callback(
        legacy, encrypt_key=None, encrypted=False, signing_secret=VERIFICATION_TOKEN, algo="sha1"
    )
    answers = [_post(gate, cb.body, cb.headers) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert all(a.json() == answers[0].json() for a in answers)  # a repeat gets the first answer
    after = datetime.fromisoformat(state(gate, request_id)["expires_at"])
    assert (after - before).total_seconds() == 15 * 60
    # A new delivery (its own timestamp and nonce) is a new click.
    again = build_callback(
        legacy, encrypt_key=None, encrypted=False, signing_secret=VERIFICATION_TOKEN, algo="sha1"
    )
    assert _post(gate, again.body, again.headers).status_code == 200
    later = datetime.fromisoformat(state(gate, request_id)["expires_at"])
    assert (later - before).total_seconds() == 30 * 60
