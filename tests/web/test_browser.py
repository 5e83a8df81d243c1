"""The web console in a real browser: Playwright driving Debian's headless Chromium.

Skipped unless GATE_TEST_BROWSER=1 or /usr/bin/chromium exists (CI sets the variable and
installs the package). Screenshots land in test-artifacts/ for the README's tour.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from gate.web.console import CSRF_MESSAGE
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.browser import BROWSER_TESTS, ENABLED
from tests.web.conftest import OpenPage
from tests.web.conftest import artifact as _artifact
from tests.web.conftest import shot as _shot

pytestmark = BROWSER_TESTS

if ENABLED:
    from playwright.sync_api import Page, expect


def _pay(gate: Gate, summary: str, amount: int = 60000, **extra: Any) -> str:
    answer = gate.submit(
        tool_name="pay_vendor",
        tool_args={"vendor": "ACME Corp", "amount": amount, "currency": "EUR", "invoice": "4471"},
        summary=summary,
        agent_id="billing-bot",
        user_id="dave",
        **extra,
    )
    request_id: str = answer["request"]["id"]
    return request_id


def test_live_queue_open_reject_and_the_waiter_hears_why(
    web_gate: Gate, open_page: OpenPage
) -> None:
    watched = open_page(web_gate, "alice", form=True)  # the one sign-in through the form
    page = watched.page
    page.evaluate("window.__sameDocument = true")
    web_gate.submit(
        tool_name="deploy_service",
        tool_args={"service": "checkout", "version": "2.14.0", "env": "prod"},
        summary="Deploy checkout 2.14.0 to prod",
        agent_id="release-bot",
        user_id="erin",
    )
    request_id = _pay(web_gate, "Pay ACME Corp invoice 4471 (EUR 60,000)")

    row = page.locator(f'tr[data-id="{request_id}"]')
    expect(row).to_be_visible()
    expect(row).to_contain_text("Pay ACME Corp invoice 4471")
    expect(row).to_contain_text("yours to decide")
    expect(row.locator("[data-expires]")).to_have_text(re.compile(r"^9m \d\ds left$"))
    # Arrived without a reload.
    assert page.evaluate("window.__sameDocument") is True
    _shot(page, "web-queue.png")

    result: dict[str, Any] = {}

    def wait() -> None:
        with web_gate.client(cfg.AGENT) as c:
            r = c.get(f"/v1/requests/{request_id}/wait", params={"timeout": 30})
            result.update(r.json())

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()

    row.get_by_role("link").click()
    expect(page).to_have_url(f"{web_gate.url}/requests/{request_id}")
    expect(page.locator("pre.json").first).to_contain_text('"vendor": "ACME Corp"')
    expect(page.get_by_role("button", name="Approve", exact=True)).to_be_visible()
    # The decide bar is fixed to the screen: in a picture of the whole page it would sit
    # across the middle, so it steps out of this one
    page.evaluate("document.getElementById('decide-bar').style.display = 'none'")
    _shot(page, "web-detail.png", full_page=True)
    page.evaluate("document.getElementById('decide-bar').style.display = ''")

    page.fill("#reject-reason", "ACME is not on the approved vendor list")
    page.get_by_role("button", name="Reject").click()
    expect(page.locator(".flash.ok")).to_have_text("Rejected by alice in the web console.")
    expect(page.locator(".decision q")).to_have_text(
        "Rejected by alice in the web console: ACME is not on the approved vendor list"
    )
    expect(page.get_by_role("button", name="Approve", exact=True)).to_have_count(0)

    waiter.join(20)
    assert result["status"] == "rejected"
    assert result["reason"] == (
        "Rejected by alice in the web console: ACME is not on the approved vendor list"
    )
    assert watched.errors == []


def test_reject_needs_a_reason_in_the_browser_too(web_gate: Gate, open_page: OpenPage) -> None:
    request_id = _pay(web_gate, "Pay without a reason")
    page = open_page(web_gate, "bob").page
    page.goto(f"{web_gate.url}/requests/{request_id}")
    page.get_by_role("button", name="Reject").click()
    # The browser's own `required` check stops the form; nothing was sent.
    assert page.evaluate("document.querySelector('#reject-reason').validity.valueMissing")
    expect(page).to_have_url(f"{web_gate.url}/requests/{request_id}")
    with web_gate.client(cfg.AGENT) as c:
        assert c.get(f"/v1/requests/{request_id}").json()["status"] == "pending"


def test_a_request_decided_elsewhere_leaves_the_queue_live(
    web_gate: Gate, open_page: OpenPage
) -> None:
    watched = open_page(web_gate, "alice")
    page = watched.page
    page.evaluate("window.__sameDocument = true")
    keep = _pay(web_gate, "Stays in the queue")
    leave = _pay(web_gate, "Decided through the API")
    expect(page.locator(f'tr[data-id="{leave}"]')).to_be_visible()
    expect(page.locator(f'tr[data-id="{keep}"]')).to_be_visible()

    assert web_gate.decide(leave, cfg.BOB, "approve", "fine").status_code == 200
    expect(page.locator(f'tr[data-id="{leave}"]')).to_have_count(0)
    expect(page.locator(f'tr[data-id="{keep}"]')).to_be_visible()
    assert page.evaluate("window.__sameDocument") is True
    assert watched.errors == []


def test_a_non_approver_sees_no_buttons(web_gate: Gate, open_page: OpenPage) -> None:
    request_id = _pay(web_gate, "Finance only")
    page = open_page(web_gate, "carol").page
    row = page.locator(f'tr[data-id="{request_id}"]')
    expect(row).to_be_visible()
    expect(row).not_to_contain_text("yours to decide")
    page.goto(f"{web_gate.url}/requests/{request_id}")
    expect(page.locator("#readonly-reason")).to_have_text(
        "Read only: you are not an approver for this rule."
    )
    expect(page.locator("main button")).to_have_count(0)
    expect(page.locator("main form")).to_have_count(0)


def test_script_bearing_arguments_are_text(web_gate: Gate, open_page: OpenPage) -> None:
    watched = open_page(web_gate, "alice")
    page = watched.page
    # Submitted after the page loaded, so it also arrives through the live update path.
    answer = web_gate.submit(
        tool_name="ask_anything",
        tool_args={
            "html": "<img src=x onerror=\"alert('img-args')\">",
            "script": "<script>alert('script-args');window.__pwned=1</script>",
        },
        summary="<script>alert('summary')</script><img src=x onerror=alert('summary-img')>",
        agent_id="<b onmouseover=alert(1)>agent</b>",
    )
    request_id = answer["request"]["id"]
    row = page.locator(f'tr[data-id="{request_id}"]')
    expect(row).to_contain_text("<script>alert('summary')</script>")
    expect(row).to_contain_text("<b onmouseover=alert(1)>agent</b>")
    row.get_by_role("link").click()
    expect(page.locator("pre.json").first).to_contain_text(
        '"html": "<img src=x onerror=\\"alert(\'img-args\')\\">"'
    )
    expect(page.locator(".summary")).to_have_text(
        "<script>alert('summary')</script><img src=x onerror=alert('summary-img')>"
    )
    page.wait_for_timeout(300)  # give any injected handler a chance to fire (it must not)
    assert page.locator("main img").count() == 0
    assert page.locator("main script").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert watched.dialogs == []
    assert watched.errors == []


def test_a_form_without_the_csrf_token_is_refused(web_gate: Gate, open_page: OpenPage) -> None:
    request_id = _pay(web_gate, "CSRF probe")
    page = open_page(web_gate, "alice").page
    page.goto(f"{web_gate.url}/requests/{request_id}")
    page.evaluate("document.querySelectorAll('input[name=csrf_token]').forEach(e => e.remove())")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.get_by_role("heading", name="Form refused")).to_be_visible()
    expect(page.locator(".flash.error")).to_have_text(CSRF_MESSAGE)
    with web_gate.client(cfg.AGENT) as c:
        assert c.get(f"/v1/requests/{request_id}").json()["status"] == "pending"


def test_phone_layout_and_lost_connection(web_gate: Gate, open_page: OpenPage) -> None:
    _pay(web_gate, "Pay ACME Corp invoice 4471 (EUR 60,000)")
    web_gate.submit(
        tool_name="wire_transfer",
        tool_args={"to": "DE89 3704 0044 0532 0130 00", "amount": 125000},
        summary="Wire EUR 125,000 to Hanse Logistik",
        agent_id="treasury-bot",
        user_id="frank",
    )
    page = open_page(web_gate, "bob", viewport=(390, 844)).page
    expect(page.locator("tr[data-id]")).to_have_count(2)
    # No horizontal scrolling on a phone.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    _shot(page, "web-queue-phone.png", full_page=True)

    web_gate.server.stop()
    expect(page.locator("#live")).to_have_attribute("data-state", "lost", timeout=15000)
    expect(page.locator("#live")).to_contain_text("Connection lost, retrying")


def test_history_and_stats_render_within_the_csp(web_gate: Gate, open_page: OpenPage) -> None:
    decided = []
    for i, (token, verdict) in enumerate(
        [(cfg.ALICE, "approve"), (cfg.BOB, "reject"), (cfg.ALICE, "approve"), (cfg.BOB, "approve")]
    ):
        request_id = _pay(web_gate, f"Invoice {i}", amount=60000 + i)
        assert web_gate.decide(request_id, token, verdict, "checked").status_code == 200
        decided.append(request_id)
    deploy = web_gate.submit(tool_name="deploy_api", tool_args={"v": 3}, summary="Deploy api v3")
    assert web_gate.decide(deploy["request"]["id"], cfg.CAROL, "approve").status_code == 200
    _pay(web_gate, "Still waiting")
    watched = open_page(web_gate, "alice")
    page = watched.page
    page.get_by_role("link", name="History").click()
    expect(page.locator("table.history tbody tr")).to_have_count(5)
    page.select_option("#f-status", "rejected")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("table.history tbody tr")).to_have_count(1)
    expect(page.get_by_role("link", name="CSV")).to_have_attribute(
        "href", "/history/export.csv?status=rejected"
    )
    page.get_by_role("link", name="Stats").click()
    expect(page.locator("svg.chart.desk")).to_have_count(12)
    expect(page.locator("table.numbers").nth(1)).to_contain_text("big-payments")
    _shot(page, "web-stats.png", full_page=True)
    assert watched.errors == []


# -- beyond yes/no --------------------------------------------------------------------------


def test_edit_then_approve_reaches_the_waiting_agent(web_gate: Gate, open_page: OpenPage) -> None:
    request_id = _pay(web_gate, "Pay ACME Corp invoice 4471 (EUR 60,000)")
    result: dict[str, Any] = {}

    def wait() -> None:
        with web_gate.client(cfg.AGENT) as c:
            r = c.get(f"/v1/requests/{request_id}/wait", params={"timeout": 30})
            result.update(r.json())

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    watched = open_page(web_gate, "alice")
    page = watched.page
    page.goto(f"{web_gate.url}/requests/{request_id}")
    page.evaluate("window.__sameDocument = true")
    editor = page.locator("#edited-args")
    assert '"amount": 60000' in editor.input_value()

    # Broken JSON: the inline error shows and the form does not go.
    editor.fill('{"vendor": "ACME Corp", "amount": 45000,, "currency": "EUR"}')
    expect(page.locator("#edit-error")).to_contain_text("Not valid JSON")
    expect(editor).to_have_attribute("aria-invalid", "true")
    page.get_by_role("button", name="Approve with edits", exact=True).click()
    expect(page.locator("#edit-error")).to_be_visible()
    assert page.evaluate("window.__sameDocument") is True
    with web_gate.client(cfg.AGENT) as c:
        assert c.get(f"/v1/requests/{request_id}").json()["status"] == "pending"
    editor.fill("[45000]")
    expect(page.locator("#edit-error")).to_have_text(
        "The edited arguments must be a JSON object ({...}), not an array."
    )

    edited = {"vendor": "ACME Corp", "amount": 45000, "currency": "EUR", "invoice": "4471"}
    editor.fill(json.dumps(edited, indent=2))
    expect(page.locator("#edit-error")).to_be_hidden()
    expect(page.locator("#edit-changes")).to_have_text("Changed: amount")
    page.fill("#edit-comment", "pay the agreed 45k only")
    page.get_by_role("button", name="Approve with edits", exact=True).click()
    # The change is shown before anything is sent.
    expect(page.locator("#edit-confirm tr.ln.add")).to_contain_text('"amount": 45000')
    page.locator("#edit-form").scroll_into_view_if_needed()
    page.locator("#edit-form").screenshot(path=str(_artifact("web-edit.png")))
    page.get_by_role("button", name="Send: approve with these edits").click()
    expect(page.locator(".flash.ok")).to_have_text(
        "Approved by alice in the web console. The call runs with your edited arguments."
    )

    waiter.join(20)
    assert result["status"] == "approved"
    assert result["approved_args"] == edited
    assert result["tool_args"]["amount"] == 60000
    assert result["reason"] == (
        "Approved with edits by alice in the web console: pay the agreed 45k only "
        "Changed: amount 60000 -> 45000"
    )
    expect(page.locator("#args-asked")).to_contain_text('"amount": 60000')
    expect(page.locator("#args-approved")).to_contain_text('"amount": 45000')
    diff = page.locator("#edits tbody tr")
    expect(diff).to_have_count(1)
    expect(diff.locator("del")).to_have_text("60000")
    expect(diff.locator("ins")).to_have_text("45000")
    expect(page.locator('tr[data-kind="approved"] ins')).to_have_text("45000")
    expect(page.locator("#chain")).to_contain_text("Chain intact")
    page.locator("#call").scroll_into_view_if_needed()
    page.locator("#call").screenshot(path=str(_artifact("web-edit-diff.png")))
    assert watched.errors == []


def test_session_grant_then_revoke_in_the_page(web_gate: Gate, open_page: OpenPage) -> None:
    def call(cmd: str) -> dict[str, Any]:
        return web_gate.submit(
            tool_name="shell_run",
            tool_args={"cmd": cmd},
            summary=f"Run `{cmd}`",
            agent_id="dev-bot",
            session_id="sess-42",
            user_id="dave",
        )

    first = call("make test")
    assert first["decision"] == "ask"
    first_id = first["request"]["id"]
    watched = open_page(web_gate, "alice")
    page = watched.page
    page.goto(f"{web_gate.url}/requests/{first_id}")
    approve = page.locator("form.approve")
    approve.get_by_label("this tool in this agent session").check()
    approve.get_by_label("for how long").select_option("30m")
    approve.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator(".flash.ok")).to_have_text("Approved by alice in the web console.")
    expect(page.locator("#grants-made")).to_contain_text("shell_run (session sess-42)")

    second = call("make lint")
    assert second["decision"] == "allow"
    assert second["request"]["decided_via"] == "grant"

    page.get_by_role("link", name="Grants").click()
    expect(page).to_have_url(f"{web_gate.url}/grants")
    row = page.locator(f'#active-grants tr[data-grant-id="{second["request"]["grant_id"]}"]')
    expect(row).to_contain_text("shell_run")
    expect(row).to_contain_text("session sess-42")
    expect(row.locator('td[data-label="Uses"]')).to_have_text("1")
    expect(row.locator("[data-expires]")).to_have_text(re.compile(r"^(29m \d\ds|30m 00s) left$"))
    expect(row.get_by_role("link", name=first_id)).to_have_attribute(
        "href", f"/requests/{first_id}"
    )
    _shot(page, "web-grants.png", full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.set_viewport_size({"width": 1280, "height": 860})

    # The call the grant let through links back to the approval that made it.
    page.goto(f"{web_gate.url}/requests/{second['request']['id']}")
    expect(page.locator("#granted")).to_contain_text("Allowed by a grant (session scope")
    page.get_by_role("link", name="the approval it came from").click()
    expect(page).to_have_url(f"{web_gate.url}/requests/{first_id}")

    page.get_by_role("link", name="Grants").click()
    page.get_by_role("button", name="Revoke").click()
    expect(page.locator(".flash.ok")).to_contain_text("Revoked the grant for shell_run (session)")
    expect(page.locator("#active-grants")).to_have_count(0)
    expect(page.locator("#ended-grants")).to_contain_text("revoked")

    third = call("make deploy")
    assert third["decision"] == "ask"
    assert watched.errors == []


def test_preset_reasons_stand_in_for_the_free_text(web_gate: Gate, open_page: OpenPage) -> None:
    answer = web_gate.submit(
        tool_name="refund_customer", tool_args={"customer": "c9", "amount": 90}, user_id="dave"
    )
    request_id = answer["request"]["id"]
    watched = open_page(web_gate, "bob", viewport=(390, 844))
    page = watched.page
    page.goto(f"{web_gate.url}/requests/{request_id}")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.evaluate("window.__sameDocument = true")
    page.get_by_role("button", name="Reject").click()
    expect(page.locator("#reject-error")).to_be_visible()
    assert page.evaluate("window.__sameDocument") is True
    page.get_by_label("wrong customer").check()
    page.get_by_role("button", name="Reject").click()
    expect(page.locator(".decision q")).to_have_text(
        "Rejected by bob in the web console: wrong customer"
    )
    assert watched.errors == []


# -- live queue races, long arguments, POST/redirect/GET -------------------------------------


def _wait_in_page(page: Page, predicate: str, timeout: float = 15) -> None:
    """Poll a JS function in the page until it returns true.

    Playwright's `wait_for_function` evaluates a string predicate with `eval` while it
    polls, which the console's strict CSP (no 'unsafe-eval') refuses whenever the answer is
    not true at once: poll from here with `evaluate`, which passes a function instead.
    """
    deadline = time.monotonic() + timeout
    while not page.evaluate(predicate):
        if time.monotonic() > deadline:
            raise AssertionError(f"{predicate} not true within {timeout} s")
        page.wait_for_timeout(50)


def _listen_in_page(page: Page) -> None:
    """A second event stream in the page, recording `kind:id` of what the queue also hears."""
    page.evaluate(
        """() => {
          window.__seen = [];
          const es = new EventSource('/events');
          es.onopen = () => { window.__open = true; };
          ['created', 'changed', 'final'].forEach(kind => es.addEventListener(kind, e => {
            window.__seen.push(kind + ':' + JSON.parse(e.data).id);
          }));
        }"""
    )
    _wait_in_page(page, "() => window.__open === true")


def _hold_next_refresh(page: Page) -> Callable[[], Any]:
    """Hold the queue's next /queue/rows request unanswered (later ones pass); a getter."""
    held: list[Any] = []

    def handle(route: Any) -> None:
        if held:
            route.continue_()
        else:
            held.append(route)

    page.route("**/queue/rows", handle)

    def get() -> Any:
        for _ in range(200):
            if held:
                return held[0]
            page.wait_for_timeout(25)
        raise AssertionError("the queue did not refresh")

    return get


def test_events_during_a_refresh_are_not_lost(web_gate: Gate, open_page: OpenPage) -> None:
    """The second of two back-to-back requests appears, and one decided meanwhile leaves."""
    watched = open_page(web_gate, "alice")
    page = watched.page
    page.evaluate("window.__sameDocument = true")
    _listen_in_page(page)

    # 1. The refresh for the first request is loading when the second one's event arrives.
    held = _hold_next_refresh(page)
    first = _pay(web_gate, "First of two")
    _wait_in_page(page, f"() => window.__seen.includes('created:{first}')")
    loading = held()
    rows = loading.fetch()  # the rows as of now: the first request only
    second = _pay(web_gate, "Second, right after")
    _wait_in_page(page, f"() => window.__seen.includes('created:{second}')")
    page.wait_for_timeout(300)  # the queue's own stream hears it too, mid-refresh
    loading.fulfill(response=rows)
    expect(page.locator(f'tr[data-id="{first}"]')).to_be_visible()
    expect(page.locator(f'tr[data-id="{second}"]')).to_be_visible()
    page.unroute("**/queue/rows")

    # 2. A decision lands while a refresh that still lists the request is loading.
    held = _hold_next_refresh(page)
    third = _pay(web_gate, "Third")
    _wait_in_page(page, f"() => window.__seen.includes('created:{third}')")
    loading = held()
    rows = loading.fetch()  # still lists the first request as pending
    assert web_gate.decide(first, cfg.BOB, "approve", "fine").status_code == 200
    _wait_in_page(page, f"() => window.__seen.includes('final:{first}')")
    page.wait_for_timeout(300)
    loading.fulfill(response=rows)
    expect(page.locator(f'tr[data-id="{first}"]')).to_have_count(0)
    expect(page.locator(f'tr[data-id="{second}"]')).to_be_visible()
    expect(page.locator(f'tr[data-id="{third}"]')).to_be_visible()
    assert page.evaluate("window.__sameDocument") is True
    assert watched.errors == []


#: a real shape of Claude Code Bash call: a long git range and paths with no spaces to break at
LONG_COMMAND = (
    "git log --no-merges --format='%H %an %s' "
    "3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f..9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d"
    "-- src/payments/reconciliation/ledger_export_and_import_helpers_for_the_quarterly_close.py"
)


def _width_without_wrapping(page: Page, table: str) -> int:
    """The page's width with `table`'s cells set back to break only at spaces."""
    width: int = page.evaluate(
        """(table) => {
          const cells = [...document.querySelectorAll(
            table + ' td, ' + table + ' .clip, ' + table + ' li')];
          cells.forEach(c => { c.style.overflowWrap = 'normal'; c.style.wordBreak = 'normal'; });
          const width = document.documentElement.scrollWidth;
          cells.forEach(c => { c.style.overflowWrap = ''; c.style.wordBreak = ''; });
          return width;
        }""",
        table,
    )
    return width


def test_a_long_bash_command_keeps_queue_and_history_on_screen(
    web_gate: Gate, open_page: OpenPage
) -> None:
    from gate.asking.toolcall import summarise

    summary = summarise("Bash", {"command": LONG_COMMAND})
    ids = []
    for session in ("sess-a", "sess-b"):
        answer = web_gate.submit(
            tool_name="Bash",
            tool_args={"command": LONG_COMMAND, "description": "Show the quarter's commits"},
            summary=summary,
            agent_id="claude-code-36a0a5dd-dd52-41fe-a100-8de35f102f52",
            session_id=session,
            user_id="dave",
            metadata={"requires_confirmation": True},
        )
        ids.append(answer["request"]["id"])
    assert web_gate.decide(ids[1], cfg.BOB, "approve", "ok").status_code == 200
    watched = open_page(web_gate, "alice")  # 1280 px wide
    page = watched.page
    fits = "document.documentElement.scrollWidth <= window.innerWidth"

    row = page.locator(f'tr[data-id="{ids[0]}"]')
    expect(row).to_be_visible()
    assert page.evaluate(fits), page.evaluate("document.documentElement.scrollWidth")
    deadline = row.locator('td[data-label="Deadline"]').bounding_box()
    assert deadline is not None and deadline["x"] + deadline["width"] <= 1280
    what = row.locator('td[data-label="What"]')
    whole = what.locator("ol.row-lines li").filter(has_text=LONG_COMMAND)  # no clamp, no cut
    expect(whole).to_have_count(1)
    assert page.evaluate("(el) => el.scrollHeight <= el.clientHeight + 1", whole.element_handle())
    expect(what.locator(".agent-says")).to_contain_text(summary)
    # Control: without the rule that lets cells break anywhere, this row is wider than 1280.
    assert _width_without_wrapping(page, "table.queue") > 1280
    _shot(page, "web-queue-long.png")

    page.get_by_role("link", name="History").click()
    expect(page.locator("table.history tbody tr")).to_have_count(1)
    assert page.evaluate(fits), page.evaluate("document.documentElement.scrollWidth")
    decided = page.locator('table.history td[data-label="Decided"]').bounding_box()
    assert decided is not None and decided["x"] + decided["width"] <= 1280
    assert _width_without_wrapping(page, "table.history") > 1280
    _shot(page, "web-history-long.png")
    assert watched.errors == []


def test_after_deciding_the_address_is_the_request_page(
    web_gate: Gate, open_page: OpenPage
) -> None:
    request_id = _pay(web_gate, "Decide, then reload")
    watched = open_page(web_gate, "alice")
    page = watched.page
    page.goto(f"{web_gate.url}/requests/{request_id}")
    page.fill("#approve-comment", "checked")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page).to_have_url(f"{web_gate.url}/requests/{request_id}")
    expect(page.locator(".flash.ok")).to_have_text("Approved by alice in the web console.")

    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    page.reload()
    expect(page.locator("h1 .status")).to_have_text("approved")
    expect(page.locator(".flash.ok")).to_have_count(0)  # the notice was shown once
    assert posts == []
    with web_gate.client(cfg.ADMIN) as c:
        events = c.get(f"/v1/requests/{request_id}/audit").json()
    assert [e["kind"] for e in events].count("approved") == 1

    # The form's address, copied or bookmarked, leads to the page rather than a 405.
    page.goto(f"{web_gate.url}/requests/{request_id}/decide")
    expect(page).to_have_url(f"{web_gate.url}/requests/{request_id}")
    expect(page.locator("h1 .status")).to_have_text("approved")
    assert watched.errors == []
