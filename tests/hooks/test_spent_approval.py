"""One approval runs a call once, through the real `gate hook` process and a real gate:
once the post-tool report says the approved call ran, the same call id asks nobody and gets
no yes; a call without an id (a key derived from its content) is asked about afresh."""

from __future__ import annotations

from typing import Any

from tests.hooks.conftest import Live, bash, post_decision, run_hook
from tests.hooks.test_hook_after_call import post_tool
from tests.support import config as cfg

RAN = {"stdout": "paid\n", "stderr": "", "interrupted": False, "isImage": False}


def _approved_and_ran(live: Live, payload: dict[str, Any]) -> str:
    hook = live.hook().send(payload)
    request = live.wait_pending("Bash", payload["session_id"])
    post_decision(live, request["id"], cfg.ALICE, {"verdict": "approve"})
    assert hook.json()[1]["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert live.hook("--event", "post-tool").send(post_tool(payload, RAN)).result()[0] == 0
    return str(request["id"])


def test_a_call_id_whose_approved_call_ran_is_refused(offering: Live) -> None:
    payload = bash("deploy payments --invoice 4471")
    _approved_and_ran(offering, payload)
    code, out, _ = run_hook(offering.url, payload)  # the same call, the same id, again

    assert code == 0
    decision = out["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny"
    assert decision["permissionDecisionReason"].startswith(
        f"gate: The call id {payload['tool_use_id']!r} was approved once and that call already ran"
    )


def test_a_call_without_an_id_is_asked_afresh_once_its_approval_was_spent(
    offering: Live,
) -> None:
    payload = bash("deploy payments --invoice 4472")
    del payload["tool_use_id"]
    first = _approved_and_ran(offering, payload)

    hook = offering.hook().send(payload)
    again = offering.wait_pending("Bash", payload["session_id"])

    assert again["id"] != first  # a person is asked again: the old yes is not handed back
    post_decision(offering, again["id"], cfg.ALICE, {"verdict": "reject", "comment": "not again"})
    assert hook.json()[1]["hookSpecificOutput"]["permissionDecision"] == "deny"
