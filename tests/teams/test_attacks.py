"""Attacks on the Teams channel through its real surface: signed invokes to a real gate over
HTTP, tokens made by the fake's own code.

Each test is one class of hole that was open; it stays as the regression test of its fix.
"""

from __future__ import annotations

import json
from typing import Any

from channels.teams.card import CARD_BYTES
from tests.conftest import Gate
from tests.support.fake_teams import FakeTeams, check_card
from tests.teams.conftest import ask, posted_card, press, verbs, walk


def answered_card(r: Any) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["type"] == "application/vnd.microsoft.card.adaptive", answer
    card: dict[str, Any] = answer["value"]
    return card


def test_hostile_arguments_cannot_make_the_approver_view_too_big_for_teams(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    # Ten arguments of 990 three-byte characters each: every one fits an edit box (1000
    # characters), so the Edit form carried all of them, about 30 KB of its own on top of the
    # card. Teams refuses a card that size, so the approvers' refresh failed and nobody saw a
    # button: an agent could shut Teams out of deciding its calls.
    args = {f"note{i}": "漢" * 990 for i in range(10)}
    request_id = ask(teams_gate, args=args)
    assert verbs(posted_card(fake_teams, request_id)) == {"refresh"}
    card = answered_card(press(teams_gate, fake_teams, "alice", "refresh", request_id))
    assert len(json.dumps(card, ensure_ascii=False).encode()) <= CARD_BYTES
    assert check_card(card) == []
    # Arguments this long are cut, so the card offers no approval: they are reviewed and
    # approved (or edited) in gate's page, and the card says so.
    assert {"reject", "extend"} <= verbs(card) and not {"approve", "approve_edits"} & verbs(card)
    assert any(el.get("id") == "args_cut" for el in walk(card))
    # Edits still fit when the arguments do.
    small = ask(teams_gate, args={"note": "short"})
    assert "approve_edits" in verbs(
        answered_card(press(teams_gate, fake_teams, "alice", "refresh", small))
    )
