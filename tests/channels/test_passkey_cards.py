"""A rule that needs a passkey (`step_up = { webauthn = true }`, no single sign-on) is
approved only in gate: every card shows the call with the note and a link, never an approve
button (the same read-model property every channel asks, `RequestView.approvable_in_chat`)."""

from __future__ import annotations

import json

from channels import decisions
from channels.slack.card import render_card
from gate.policy.offers import Offers, StepUp
from tests.support.views import make_view


def test_a_passkey_rule_s_card_links_to_gate_instead_of_approving() -> None:
    view = make_view(offers=Offers(step_up=StepUp(None, (), webauthn=True)))
    assert not view.approvable_in_chat
    assert not decisions.approvable(view, 100_000)
    shown = decisions.arguments(view, 4000)
    assert not shown.whole and "passkey" in shown.note("slack")
    card = json.dumps(render_card(view))
    assert '"action_id": "gate_approve"' not in card and "passkey" in card
    plain = make_view()
    assert '"action_id": "gate_approve"' in json.dumps(render_card(plain))  # the contrast
