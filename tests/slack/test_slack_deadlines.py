"""An Extend click carrying a deadline gate never wrote: one that reads as ISO 8601 but lies
outside what a datetime holds in UTC (`9999-12-31T23:59:59-05:00`), or has no time zone, is
refused as a payload gate cannot read (the channels share `channels.inbound.deadline_from_iso`:
Slack, Teams, Feishu, email), and moves nothing."""

from __future__ import annotations

import pytest

from tests.conftest import Gate
from tests.slack.conftest import block_actions, interact
from tests.support import config as cfg


@pytest.mark.parametrize(
    "shown", ["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00", "2030-01-01T00:00:00"]
)
def test_an_extend_with_a_deadline_outside_utc_is_refused(
    slack_gate_sqlite: Gate, shown: str
) -> None:
    gate = slack_gate_sqlite
    answer = gate.submit(tool_name="pay_vendor", tool_args={"amount": 60000}, user_id="dave")
    request_id = answer["request"]["id"]
    before = answer["request"]["expires_at"]
    click = block_actions(request_id, "U0BOB", "gate_extend")
    click["actions"][0]["value"] = f"{request_id}|{shown}"
    r = interact(gate, click)
    assert r.status_code == 400, r.text
    assert "deadline" in r.json()["error"]["message"]
    with gate.client(cfg.ADMIN) as c:
        assert c.get(f"/v1/requests/{request_id}").json()["expires_at"] == before
