"""Link tokens and form tokens, and the text rules for mail: pure functions, no server."""

from __future__ import annotations

import hashlib
import time

import pytest
from itsdangerous import TimestampSigner, URLSafeTimedSerializer

from channels.email.links import LINK_SALT, BadLink, Links
from channels.email.text import inert, one_line

SECRET = "unit-test-link-secret-0123456789abcdef"


def _made_at(at: float, payload: object, secret: str = SECRET) -> str:
    class Then(TimestampSigner):
        def get_timestamp(self) -> int:
            return int(at)

    serializer = URLSafeTimedSerializer(
        secret, salt=LINK_SALT, signer=Then, signer_kwargs={"digest_method": hashlib.sha256}
    )
    return str(serializer.dumps(payload))


def test_a_link_names_its_approver_and_request() -> None:
    links = Links(SECRET, max_age=3600)
    token = links.make("01REQ", "alice@example.com")
    found = links.check(token)
    assert (found.request_id, found.address) == ("01REQ", "alice@example.com")
    assert links.make("01REQ", "alice@example.com") != token  # a nonce per mail


@pytest.mark.parametrize(
    "token",
    [
        None,
        "",
        "garbage",
        "é" * 10,
        "A" * 5000,
        _made_at(time.time(), {"r": "01REQ", "u": "alice@example.com"}, "another-secret-000000"),
        _made_at(time.time() - 7200, {"r": "01REQ", "u": "alice@example.com"}),  # too old
        _made_at(time.time(), ["01REQ", "alice@example.com"]),  # signed, not our shape
        _made_at(time.time(), {"r": "", "u": "alice@example.com"}),
        _made_at(time.time(), {"r": "01REQ", "u": 7}),
    ],
    # ids of our own: tokens made at collection differ per process, and pytest-xdist needs
    # every worker to collect the same test names
    ids=["none", "empty", "garbage", "non-ascii", "long", "other-secret", "too-old",
         "not-our-shape", "no-request", "address-not-text"],
)  # fmt: skip
def test_anything_else_is_a_bad_link(token: str | None) -> None:
    with pytest.raises(BadLink) as caught:
        Links(SECRET, max_age=3600).check(token)
    if token:
        assert token not in str(caught.value)  # errors never carry a token


def test_a_form_token_belongs_to_one_link() -> None:
    links = Links(SECRET, max_age=3600)
    alice, bob = links.make("01REQ", "alice@example.com"), links.make("01REQ", "bob@example.com")
    form = links.form_token(alice)
    assert links.form_ok(alice, form)
    assert not links.form_ok(bob, form)
    assert not links.form_ok(alice, links.form_token(bob))
    assert not Links("another-secret-0123456789abcdef0123", max_age=3600).form_ok(alice, form)
    for bad in (None, "", "x", "é", "A" * 5000):
        assert not links.form_ok(alice, bad)


def test_untrusted_text_is_inert_in_mail() -> None:
    shown = inert("see https://evil.example/x and WWW.evil.example or javascript://x\u202e")
    assert shown == "see https[:]//evil[.]example/x and WWW[.]evil[.]example or javascript[:]//x"
    assert inert("x" * 500, 10) == "x" * 10 + "…"
    assert "hunter2" not in inert("password=hunter2")


def test_a_header_is_one_line() -> None:
    assert one_line("a\r\nBcc: x\u2028y\tz\x00") == "a Bcc: x y z"
    assert len(one_line("y" * 500)) == 120
