"""An approval chain on the request page, in a real browser: which stage waits and who
decided the earlier ones, no decide buttons for a later stage before its turn, the agent's
justification shown as its claim, and a stage that asks approvers to say why."""

from __future__ import annotations

from tests.conftest import Gate
from tests.support.browser import BROWSER_TESTS, ENABLED
from tests.web.conftest import OpenPage

pytestmark = BROWSER_TESTS

if ENABLED:
    from playwright.sync_api import expect


def test_a_chain_on_the_request_page(web_gate: Gate, open_page: OpenPage) -> None:
    answer = web_gate.submit(
        tool_name="chain_pay",
        tool_args={"vendor": "ACME Corp", "amount": 900},
        justification="<b>invoice 4471</b> is due today",
        user_id="dave",
    )
    request_id = answer["request"]["id"]
    finance = open_page(web_gate, "alice").page
    finance.goto(f"{web_gate.url}/requests/{request_id}")
    stages = finance.locator("#stages")
    expect(stages.locator('[data-stage="0"]')).to_contain_text("waiting for 1 approval from carol")
    expect(stages.locator('[data-stage="1"]')).to_contain_text("later")
    # the agent's words, as text (not markup), labelled as its claim
    expect(finance.locator("#justification")).to_have_text("<b>invoice 4471</b> is due today")
    # finance's turn has not come: no decide buttons, and the page says why
    expect(finance.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    expect(finance.locator("body")).to_contain_text("earlier stage of this request")

    lead = open_page(web_gate, "carol").page
    lead.goto(f"{web_gate.url}/requests/{request_id}")
    lead.get_by_role("button", name="Approve", exact=True).click()
    expect(lead.locator("#stages [data-stage='0']")).to_contain_text("approved by carol")

    finance.goto(f"{web_gate.url}/requests/{request_id}")
    expect(finance.locator("p.outcome")).to_contain_text("Waiting for stage 2 of 2 (finance)")
    expect(finance.locator("p.outcome")).to_contain_text("stage 1 of 2 (lead): approved by carol")
    finance.get_by_role("button", name="Approve", exact=True).click()  # no word of why
    expect(finance.locator(".flash.error")).to_contain_text("Say why you approve")
    finance.fill("#approve-comment", "budgeted in Q4")
    finance.get_by_role("button", name="Approve", exact=True).click()
    expect(finance.locator("p.outcome")).to_contain_text("Approved by alice")
    votes = finance.locator("section[aria-labelledby='votes-h'] tbody tr")
    expect(votes).to_have_count(2)
    expect(votes.nth(0)).to_contain_text("carol")
    expect(votes.nth(1)).to_contain_text("budgeted in Q4")


def test_a_request_without_the_justification_its_rule_needs_cannot_be_approved(
    web_gate: Gate, open_page: OpenPage
) -> None:
    answer = web_gate.submit(tool_name="chain_pay", tool_args={"amount": 1}, user_id="dave")
    lead = open_page(web_gate, "carol").page
    lead.goto(f"{web_gate.url}/requests/{answer['request']['id']}")
    expect(lead.locator("#no-justification")).to_contain_text("lets nobody approve")
    lead.get_by_role("button", name="Approve", exact=True).click()
    expect(lead.locator(".flash.error")).to_contain_text("the agent sent no justification")
