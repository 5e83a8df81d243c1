"""Presses on the card, end to end: a signed `adaptiveCard/action` invoke to a real gate, the
view answered to the presser, and the decision recorded. Who may act is gate's answer: the
refresh gives buttons only to the people gate lets act; display names are never read."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from channels.teams.channel import NOT_HERE, RECORDING
from channels.teams.clicks import NEED_A_REASON, NOTHING_EDITABLE, parse_invoke
from gate.decisions.acting import Refusal
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.fake_teams import CONVERSATION, FakeTeams
from tests.teams.conftest import (
    ask,
    notice,
    object_id,
    posted_card,
    press,
    send,
    teams_settings,
    verbs,
)
from tests.teams.test_delivery import standalone

DECIDING = {"approve", "reject", "approve_edits", "extend"}


def state(gate: Gate, request_id: str) -> dict[str, Any]:
    with gate.client(cfg.ADMIN) as c:
        data: dict[str, Any] = c.get(f"/v1/requests/{request_id}").json()
    return data


def answered_card(r: Any) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["statusCode"] == 200
    assert answer["type"] == "application/vnd.microsoft.card.adaptive", answer
    card: dict[str, Any] = answer["value"]
    return card


@pytest.fixture
def teams_gate_db(make_gate: GateFactory, db_url: str, fake_teams: FakeTeams) -> Gate:
    """A Teams gate on each database (SQLite, and PostgreSQL when configured)."""
    return make_gate(settings=teams_settings(db_url, fake_teams))


def test_an_approver_presses_approve(teams_gate_db: Gate, fake_teams: FakeTeams) -> None:
    gate = teams_gate_db
    request_id = ask(gate)
    posted_card(fake_teams, request_id)
    r = press(gate, fake_teams, "alice", "approve", request_id)
    now = state(gate, request_id)
    assert (now["status"], now["decided_by"], now["decided_via"]) == ("approved", "alice", "teams")
    assert "Approved by alice" in notice(r)
    assert verbs(answered_card(r)) == set()  # the presser's view is the outcome
    final = posted_card(fake_teams, request_id, updates=1)  # and everybody's, by PUT
    assert "Approved by alice" in str(final) and "refresh" not in final


def test_refresh_gives_buttons_only_to_those_gate_lets_act(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    request_id = ask(teams_gate, "refund_order", {"amount": 900})
    mine = ask(teams_gate, "refund_order", {"amount": 901}, user_id=object_id("alice"))
    for person, rid, actionable in [
        ("alice", request_id, True),
        ("bob", request_id, True),
        ("mallory", request_id, False),  # an approver, not of this rule's group
        ("stranger", request_id, False),  # nobody gate knows
        ("alice", mine, False),  # she asked for it
    ]:
        card = answered_card(press(teams_gate, fake_teams, person, "refresh", rid))
        offered = verbs(card) & DECIDING
        assert offered == (DECIDING if actionable else set()), (person, offered)
        assert "notice" not in str(card)  # a refresh is a view, not an answer
    gone = press(teams_gate, fake_teams, "alice", "refresh", "01JD0000000000000000000000")
    assert notice(gone) == NOT_HERE  # no request: the words a card from elsewhere gets


def test_a_display_name_is_never_trusted(teams_gate: Gate, fake_teams: FakeTeams) -> None:
    request_id = ask(teams_gate)
    activity = fake_teams.invoke(
        verb="approve", data={"request_id": request_id}, object_id=object_id("stranger"),
        service_url=fake_teams.url + "/",
    )  # fmt: skip
    activity["from"]["name"] = "alice"
    r = send(teams_gate, fake_teams, activity)
    assert Refusal.not_an_approver.sentence() in notice(r)
    assert verbs(answered_card(r)) & DECIDING == set()
    assert state(teams_gate, request_id)["status"] == "pending"


def test_reject_needs_a_reason_or_a_preset(teams_gate: Gate, fake_teams: FakeTeams) -> None:
    request_id = ask(teams_gate, "refund_order", {"amount": 900})
    r = press(teams_gate, fake_teams, "bob", "reject", request_id, reason="  ")
    assert notice(r) == NEED_A_REASON
    assert verbs(answered_card(r)) & DECIDING == DECIDING  # the form stays for another try
    r = press(teams_gate, fake_teams, "bob", "reject", request_id, reasons="r9")
    assert "not one of this rule's reasons" in notice(r)
    assert state(teams_gate, request_id)["status"] == "pending"
    r = press(teams_gate, fake_teams, "bob", "reject", request_id, reasons="r1,r0", reason="and")
    now = state(teams_gate, request_id)
    assert now["status"] == "rejected"
    assert "too expensive" in now["reason"] and "wrong customer" in now["reason"]


def test_edit_and_approve(teams_gate: Gate, fake_teams: FakeTeams) -> None:
    args = {"amount": 900, "currency": "EUR", "customer": "c-1"}
    request_id = ask(teams_gate, "refund_order", args)
    r = press(teams_gate, fake_teams, "alice", "approve_edits", request_id, f0="lots")
    assert "amount: expected a number" in notice(r)
    r = press(teams_gate, fake_teams, "alice", "approve_edits", request_id, f0="500", note="halved")
    now = state(teams_gate, request_id)
    assert now["status"] == "approved" and now["approved_args"] == {**args, "amount": 500}
    strict = ask(teams_gate, "strict_transfer", {"amount": 5})
    r = press(teams_gate, fake_teams, "alice", "approve_edits", strict, f0="9")
    assert notice(r) == NOTHING_EDITABLE
    assert state(teams_gate, strict)["status"] == "pending"


def test_approve_with_a_grant(teams_gate: Gate, fake_teams: FakeTeams) -> None:
    request_id = ask(teams_gate, "shell_run", {"cmd": "ls"}, session_id="s-teams")
    r = press(teams_gate, fake_teams, "alice", "approve", request_id, grant="session:2h")
    assert notice(r).startswith("Not recorded")
    assert verbs(answered_card(r)) & DECIDING  # a slip: the buttons stay
    r = press(teams_gate, fake_teams, "alice", "approve", request_id, grant="forever")
    assert "not a grant choice" in notice(r)
    r = press(teams_gate, fake_teams, "alice", "approve", request_id, grant="session:1800s")
    assert state(teams_gate, request_id)["status"] == "approved"
    later = teams_gate.submit(tool_name="shell_run", tool_args={"cmd": "pwd"}, session_id="s-teams")
    assert later["decision"] == "allow"


def test_a_quorum_vote_is_acknowledged_and_the_buttons_go(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    request_id = ask(teams_gate, "wire_funds", {"amount": 10})
    r = press(teams_gate, fake_teams, "alice", "approve", request_id)
    assert notice(r) == "Your approval is recorded (1 of 2)."
    assert verbs(answered_card(r)) & DECIDING == set()
    r = press(teams_gate, fake_teams, "alice", "approve", request_id)
    assert "already voted" in notice(r)


def test_extend_moves_once_per_delivery_and_per_deadline_shown(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    request_id = ask(teams_gate, "refund_order", {"amount": 900})
    shown = state(teams_gate, request_id)["expires_at"]
    activity = fake_teams.invoke(
        verb="extend", data={"request_id": request_id, "extend_from": shown},
        object_id=object_id("bob"), service_url=fake_teams.url + "/",
    )  # fmt: skip
    first, again = send(teams_gate, fake_teams, activity), send(teams_gate, fake_teams, activity)
    assert "Deadline moved" in notice(first) and notice(again) == notice(first)
    moved = datetime.fromisoformat(state(teams_gate, request_id)["expires_at"])
    assert moved - datetime.fromisoformat(shown) == timedelta(minutes=15)
    # Another delivery of a press on the same card (a new activity id, say on another
    # replica) carries the same deadline shown: the deadline does not move again.
    press(teams_gate, fake_teams, "bob", "extend", request_id, extend_from=shown)
    assert datetime.fromisoformat(state(teams_gate, request_id)["expires_at"]) == moved


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"verb": "delete"}, "not one of gate's"),
        ({"type": "Action.Submit"}, "no Action.Execute"),
        ({"data": {"request_id": "../../etc"}}, "names no request"),
        ({"data": {"request_id": "01JD", "extend_from": "soon"}, "verb": "extend"}, "deadline"),
        (
            {
                "data": {"request_id": "01JD", "extend_from": "2026-11-21T10:00:00"},
                "verb": "extend",
            },
            "deadline",
        ),
    ],
)
def test_malformed_presses_are_a_400(
    teams_gate: Gate, fake_teams: FakeTeams, change: dict[str, Any], why: str
) -> None:
    activity = fake_teams.invoke(
        verb="approve", data={"request_id": "01JD"}, object_id=object_id("alice"),
        service_url=fake_teams.url + "/",
    )  # fmt: skip
    activity["value"]["action"].update(change)
    r = send(teams_gate, fake_teams, activity)
    assert r.status_code == 400 and why in r.json()["error"]["message"], r.text


def test_a_press_without_an_entra_user_is_a_400(teams_gate: Gate, fake_teams: FakeTeams) -> None:
    request_id = ask(teams_gate)
    activity = fake_teams.invoke(
        verb="approve", data={"request_id": request_id}, object_id=object_id("alice"),
        service_url=fake_teams.url + "/",
    )  # fmt: skip
    for sender in ({"id": "29:1x", "name": "alice"}, {"id": "29:1x", "aadObjectId": "alice"}):
        activity["from"] = sender
        r = send(teams_gate, fake_teams, activity)
        assert r.status_code == 400 and "aadObjectId" in r.json()["error"]["message"]
    assert state(teams_gate, request_id)["status"] == "pending"


async def test_a_slow_decision_is_answered_in_time_and_still_lands(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    request_id = ask(teams_gate)
    chan = standalone(teams_gate, ack_budget=0.0)
    activity = fake_teams.invoke(
        verb="approve", data={"request_id": request_id}, object_id=object_id("alice"),
        service_url=fake_teams.url + "/",
    )  # fmt: skip
    try:
        answer = await chan.handle(parse_invoke(activity), CONVERSATION)
        assert answer["value"] == RECORDING
    finally:
        await chan.aclose()  # waits for the decision in flight
    assert state(teams_gate, request_id)["status"] == "approved"


def test_a_request_id_tampered_into_another_conversation_shows_nothing(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    # The data of an Action.Execute comes from the client: someone who edits the request id
    # in a press from their own chat must learn nothing of the request (that it exists, what
    # it asks, whether and by whom it was decided), and no press from there acts on it, an
    # approver's included: the same words for every case.
    request_id = ask(teams_gate, "refund_order", {"amount": 900}, summary="secret refund")
    decided = ask(teams_gate, "refund_order", {"amount": 901}, summary="secret refund")
    elsewhere = "19:someone-else@thread.v2"
    deadline = state(teams_gate, request_id)["expires_at"]

    def from_elsewhere(person: str, verb: str, target: str = request_id) -> Any:
        activity = fake_teams.invoke(
            verb=verb, data={"request_id": target}, object_id=object_id(person),
            service_url=fake_teams.url + "/", conversation=elsewhere,
        )  # fmt: skip
        return send(teams_gate, fake_teams, activity)

    at_home = fake_teams.invoke(
        verb="approve", data={"request_id": decided}, object_id=object_id("alice"),
        service_url=fake_teams.url + "/",
    )  # fmt: skip
    assert send(teams_gate, fake_teams, at_home).status_code == 200
    assert state(teams_gate, decided)["decided_by"] == "alice"
    answers = [
        from_elsewhere(person, verb, target)
        for person in ("stranger", "alice", "bob")
        for verb in ("refresh", "approve", "extend")
        for target in (request_id, decided, "01JZZZZZZZZZZZZZZZZZZZZZZZ")
    ]
    for r in answers:
        assert r.status_code == 200, r.text
        assert r.json() == answers[0].json()  # one answer for all: it tells nothing
    assert answers[0].json()["type"] == "application/vnd.microsoft.activity.message"
    assert "alice" not in answers[0].text and "refund" not in answers[0].text
    now = state(teams_gate, request_id)
    assert now["status"] == "pending" and now["votes"] == []
    assert now["expires_at"] == deadline
