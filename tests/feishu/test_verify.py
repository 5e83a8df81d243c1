"""Verifying a callback before anything reads it: crypto test vectors, and the `Verifier` on a
fixed clock (signature, timestamp window, legacy signatures, decryption, hostile bodies)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import SecretStr

from channels.feishu import FeishuSettings, decrypt, signature
from channels.feishu.verify import TIMESTAMP_WINDOW_SECONDS, Verifier
from gate.base.errors import BadRequest, Unauthenticated
from tests.feishu.test_card import fixture
from tests.support.fake_feishu import build_callback, encrypt, sign, url_verification

TOKEN = "vt-verify"
KEY = "ek-verify"
#: the verifier's clock: every callback below is signed at this second unless it says otherwise
NOW = 1_800_000_000


def verifier(*, encrypt_key: str | None = KEY) -> Verifier:
    settings = FeishuSettings(
        app_id="cli_x",
        app_secret=SecretStr("s"),
        verification_token=SecretStr(TOKEN),
        encrypt_key=SecretStr(encrypt_key) if encrypt_key else None,
    )
    return Verifier(settings, clock=lambda: NOW)


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


# -- test vectors -------------------------------------------------------------------------


def test_decrypts_the_docs_test_vector() -> None:
    body = fixture("feishu_encrypted_docs_test_key.json")
    assert decrypt("test key", body["encrypt"]) == b"hello world"


def test_decrypts_the_java_sdk_test_vector() -> None:
    body = fixture("feishu_encrypted_sdk_key_1212121212.json")
    plain = json.loads(decrypt("1212121212", body["encrypt"]))
    assert plain["challenge"] == "1212"
    assert plain["type"] == "url_verification1"
    assert plain["header"]["event_type"] == "contact.user.created_v3"


def test_signature_vectors_from_the_reference() -> None:
    body = b'{"encrypt":"P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk="}'
    expected = "cfd52cb7ea3e602678fd6b46af3f97423e5d5a339b9173c2a25c6dd8d950d6c3"
    assert signature("1700000000", "n-123", "test_encrypt_key", body) == expected
    assert sign("1700000000", "n-123", "test_encrypt_key", body) == expected
    legacy = b'{"open_id":"ou_x","action":{"tag":"button","value":{"k":"v"}}}'
    assert (
        signature("1700000000", "n-123", "test_verification_token", legacy, "sha1")
        == "c373f1fcd627c6fa1ea30bd318b996ed63e3e90d"
    )


def test_fake_encryption_round_trips_through_the_channel() -> None:
    text = json.dumps({"hello": "世界", "n": list(range(50))}).encode()
    assert decrypt("k", encrypt("k", text)) == text


@pytest.mark.parametrize(
    "data",
    [
        "not base64 !!",
        "QUJD",  # three bytes: no IV
        encrypt("another key", b'{"a": 1}'),  # wrong key: padding fails
        encrypt("k", b"x" * 16)[:-4] + "AAA=",  # corrupted tail
    ],
    ids=["not-base64", "no-iv", "wrong-key", "corrupted-tail"],  # encrypt() is random per run
)
def test_undecryptable_input_raises_value_error(data: str) -> None:
    with pytest.raises(ValueError):
        json.loads(decrypt("k", data))


# -- the verifier ---------------------------------------------------------------------------


def test_a_signed_encrypted_callback_opens_to_its_payload() -> None:
    payload = url_verification(TOKEN)
    cb = build_callback(payload, encrypt_key=KEY, timestamp=NOW)
    opened = verifier().open(lower(cb.headers), cb.body)
    assert opened.signed == "v2"
    assert opened.payload == payload


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"timestamp": NOW - TIMESTAMP_WINDOW_SECONDS - 1}, "stale_request"),
        ({"timestamp": NOW + TIMESTAMP_WINDOW_SECONDS + 1}, "stale_request"),
        ({"signing_secret": "someone else's key"}, "bad_signature"),
        # signed with the verification token, the old way: refused once a key is set
        ({"signing_secret": TOKEN, "algo": "sha1"}, "legacy_callback_refused"),
    ],
)
def test_a_bad_or_stale_signature_is_refused_before_the_body_is_read(
    change: dict[str, Any], code: str
) -> None:
    assert TIMESTAMP_WINDOW_SECONDS == 300  # the window the README promises
    # The body is not even JSON: a refusal that names the signature never parsed it.
    cb = build_callback(
        b"{not json", encrypt_key=KEY, encrypted=False, **{"timestamp": NOW, **change}
    )
    with pytest.raises(Unauthenticated) as caught:
        verifier().open(lower(cb.headers), cb.body)
    assert caught.value.code == code


@pytest.mark.parametrize("timestamp", ["", "17e8", "\u00b2", "1" * 13, "-5"])
def test_a_malformed_timestamp_is_a_401_not_an_exception(timestamp: str) -> None:
    cb = build_callback({"a": 1}, encrypt_key=KEY, encrypted=False, timestamp=NOW)
    headers = {**lower(cb.headers), "x-lark-request-timestamp": timestamp}
    with pytest.raises(Unauthenticated) as caught:
        verifier().open(headers, cb.body)
    assert caught.value.code == "bad_signature"


def test_without_a_key_the_legacy_signature_is_accepted_as_legacy() -> None:
    cb = build_callback(
        {"open_id": "ou_x"}, encrypt_key=None, encrypted=False, signing_secret=TOKEN,
        algo="sha1", timestamp=NOW,
    )  # fmt: skip
    assert verifier(encrypt_key=None).open(lower(cb.headers), cb.body).signed == "legacy"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"[" * 100_000, "bad_callback"),  # deeper than Python's parser recurses
        (b'["a list"]', "bad_callback"),
        (json.dumps({"encrypt": "not base64 !!"}).encode(), "undecryptable"),
        (json.dumps({"encrypt": encrypt("another key", b"{}")}).encode(), "undecryptable"),
        (json.dumps({"encrypt": encrypt(KEY, b"[1]")}).encode(), "undecryptable"),
    ],
    ids=["deep", "list", "not-base64", "wrong-key", "not-an-object"],  # encrypt() is random
)
def test_a_signed_body_that_is_not_ours_to_read_is_a_400(body: bytes, code: str) -> None:
    cb = build_callback(body, encrypt_key=KEY, encrypted=False, timestamp=NOW)
    with pytest.raises(BadRequest) as caught:
        verifier().open(lower(cb.headers), cb.body)
    assert caught.value.code == code


def test_callbacks_are_refused_until_a_verification_token_is_set() -> None:
    settings = FeishuSettings(app_id="cli_x", app_secret=SecretStr("s"))
    cb = build_callback({"a": 1}, encrypt_key=KEY, timestamp=NOW)
    with pytest.raises(Unauthenticated) as caught:
        Verifier(settings, clock=lambda: NOW).open(lower(cb.headers), cb.body)
    assert caught.value.code == "not_configured"


@pytest.mark.parametrize("sent", [None, 42, "", "vt-verifx", "vt-verify\u00e9", "\udcff"])
def test_only_our_verification_token_passes(sent: object) -> None:
    with pytest.raises(Unauthenticated):
        verifier().check_token(sent)
    verifier().check_token(TOKEN)
