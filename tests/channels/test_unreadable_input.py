"""Text that is not Unicode, from a correctly signed click, on every channel that takes clicks.

JSON can spell a lone surrogate (`"\\ud800"`); no platform sends one, a modified client can
put one in a reason it types. It is not text any database or platform takes: gate reads it as
U+FFFD (`channels.inbound.load_json`), records the decision, and never answers with a 500.
"""

from __future__ import annotations

import pytest

from tests.channels.drivers import Driver
from tests.channels.test_contract import ask, state
from tests.conftest import Gate

LONE = "\ud800"


def test_a_lone_surrogate_in_a_reason_is_recorded_not_a_500(clicks: Driver, gate: Gate) -> None:
    request_id = ask(gate, "refund_order", {"amount": 901})
    try:
        answer = clicks.click(gate.url, request_id, "bob", "reject", reason=f"no {LONE} way")
    except UnicodeEncodeError:
        # a form post (email) percent-encodes UTF-8, which has no lone surrogates to send
        pytest.skip(f"{clicks.name} clicks cannot carry a lone surrogate")
    assert answer.status < 500
    now = state(gate, request_id)
    assert now["status"] == "rejected", now
    assert "no \ufffd way" in now["reason"]
