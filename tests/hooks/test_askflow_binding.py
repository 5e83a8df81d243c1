"""The ask flow's checks that a yes is for this call: binding, edits, grants, a reused call id."""

from __future__ import annotations

from typing import Any

import pytest

from gate.asking.binding import call_hash
from gate.asking.exchange import Reply
from gate.asking.toolcall import Call
from tests.hooks.test_askflow import Script, ask, request

ARGS = {"command": "deploy prod"}
KEY = "toolu_01"


def approved(**extra: Any) -> dict[str, Any]:
    return request("approved", reason="Approved by alice in Slack", **extra)


def test_a_verdict_for_other_arguments_is_refused() -> None:
    # (c) a tampered verdict: approved, but bound to other arguments than this call's
    tampered = approved(args_hash=call_hash("Bash", {"command": "deploy staging"}, KEY))
    script = Script(ask(request()), Reply(200, tampered))

    verdict = script.run(Call("Bash", ARGS, idempotency_key=KEY))

    expected = call_hash("Bash", ARGS, KEY)
    assert (verdict.kind, verdict.allowed, verdict.updated_args) == ("mismatch", False, None)
    assert verdict.reason == (
        "gate: The approval does not match this Bash call: request r1 was approved for other "
        f"arguments or another call id (approval bound to {tampered['args_hash'][:12]}…, this "
        f"call is {expected[:12]}…), so the call was blocked. Nobody approved these exact "
        "arguments: ask for approval again, or tell the user."
    )


@pytest.mark.parametrize(
    "args_hash",
    [
        call_hash("Bash", ARGS, "toolu_other"),  # another call id
        call_hash("Write", ARGS, KEY),  # another tool
        call_hash("Bash", ARGS),  # no call id
        None,  # no binding at all
    ],
    ids=["call-id", "tool", "no-call-id", "missing"],
)
def test_every_other_binding_is_refused(args_hash: str | None) -> None:
    script = Script(ask(request()), Reply(200, approved(args_hash=args_hash)))

    assert script.run(Call("Bash", ARGS, idempotency_key=KEY)).kind == "mismatch"


def test_edited_arguments_are_checked_against_the_binding() -> None:
    edited = {"command": "deploy staging"}
    good = approved(approved_args=edited, args_hash=call_hash("Bash", edited, KEY))
    # Edited arguments in the verdict, but the hash of the original ones: not what will run.
    bad = approved(approved_args=edited, args_hash=call_hash("Bash", ARGS, KEY))

    ok = Script(ask(request()), Reply(200, good)).run(Call("Bash", ARGS, idempotency_key=KEY))
    refused = Script(ask(request()), Reply(200, bad)).run(Call("Bash", ARGS, idempotency_key=KEY))

    assert (ok.kind, ok.updated_args) == ("approved", edited)
    assert ok.reason == (
        "gate: Approved by alice in Slack. The Bash call runs with the arguments as the approver "
        "edited them, not as they were sent."
    )
    assert (refused.kind, refused.updated_args) == ("mismatch", None)


def test_a_grant_is_checked_like_an_approval() -> None:
    reason = "Allowed by a grant from alice (scope: session, until 2026-01-01 10:00 UTC)"

    def granted(args_hash: str) -> Reply:
        req = approved(args_hash=args_hash, decided_via="grant")
        return Reply(
            200, {"decision": "allow", "rule": "deploys", "reason": reason, "request": req}
        )

    ok = Script(granted(call_hash("Bash", ARGS, KEY))).run(Call("Bash", ARGS, idempotency_key=KEY))
    bad = Script(granted("0" * 64)).run(Call("Bash", ARGS, idempotency_key=KEY))

    assert (ok.kind, ok.allowed, ok.reason) == ("granted", True, f"gate: {reason}.")
    assert (bad.kind, bad.allowed) == ("mismatch", False)


def test_a_reused_call_id_is_its_own_refusal() -> None:
    script = Script(
        Reply(409, {"error": {"code": "idempotency_key_reused", "message": "used before"}})
    )

    verdict = script.run(Call("Bash", ARGS, idempotency_key=KEY))

    assert verdict.kind == "reused"
    assert verdict.reason.startswith(f"gate: The call id {KEY!r} was already used for a different")
