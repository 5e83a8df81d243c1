"""The call on the console's pages, over plain HTTP: gate's rendering leads the queue row and
the request page, every line of it; the agent's words come after it, labelled; the page's
order (call, agent, user, rule, deadline, then the decision); flags, watched arguments and a
failed condition said beside the call; the pending count in the title (issue 28)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from markupsafe import escape

from gate.policy.offers import Offers
from gate.rendering import CallRendering, Flag, Line, Section, render_call
from gate.web import calls
from gate.web.console import environment
from tests.conftest import Gate
from tests.support import config as cfg
from tests.web.conftest import set_offers, sign_in

TWO_LINES = (
    'echo "tidying up the build folder"\nrm -rf ~/.ssh ~/.aws && git push --force origin main'
)


def _bash(gate: Gate, command: str = TWO_LINES, **extra: Any) -> str:
    answer = gate.submit(
        tool_name="Bash",
        tool_args={"command": command},
        agent_id="claude-code",
        user_id="dave",
        **extra,
    )
    assert answer["decision"] == "ask", answer
    request_id: str = answer["request"]["id"]
    return request_id


def _row(html: str, request_id: str) -> str:
    match = re.search(rf'<tr data-id="{request_id}".*?</tr>', html, re.S)
    assert match, f"no queue row for {request_id}"
    return match.group(0)


def _what(row: str) -> str:
    match = re.search(r'<td data-label="What".*?</td>', row, re.S)
    assert match, "no What cell"
    return match.group(0)


def _lines(tool: str, args: dict[str, Any]) -> list[str]:
    return [line.text for s in render_call(tool, args).sections for line in s.lines]


def test_the_queue_row_is_gates_reading_of_every_line(web_gate: Gate) -> None:
    said = _bash(web_gate, summary="Tidy the build folder")
    silent = _bash(web_gate, command="ls -la\nrm -rf build")
    with sign_in(web_gate, "alice") as c:
        page = c.get("/").text
    row = _what(_row(page, said))
    positions = []
    for text in _lines("Bash", {"command": TWO_LINES}):
        assert str(escape(text)) in row, text
        positions.append(row.index(str(escape(text))))
    # The agent's words come after gate's reading, labelled as the agent's.
    claim = row.index("The agent says:")
    assert claim > max(positions)
    assert row.index("Tidy the build folder") > claim
    # A call sent without a summary still shows what it does, never a dash.
    quiet = _what(_row(page, silent))
    assert "—" not in quiet
    assert "The agent says:" not in quiet
    for text in _lines("Bash", {"command": "ls -la\nrm -rf build"}):
        assert str(escape(text)) in quiet


def test_a_long_call_says_how_many_lines_the_row_leaves_out(web_gate: Gate) -> None:
    args = {f"field_{i:02d}": f"value {i}" for i in range(30)}
    answer = web_gate.submit(tool_name="ask_many", tool_args=args, summary="Many fields")
    request_id = answer["request"]["id"]
    total = sum(len(s.lines) for s in render_call("ask_many", args).sections)
    assert total > calls.ROW_LINES
    with sign_in(web_gate, "alice") as c:
        row = _what(_row(c.get("/").text, request_id))
    hidden = total - calls.ROW_LINES
    assert f"+{hidden} more line{'s' if hidden > 1 else ''} on the request's page" in row
    assert row.count('<li class="ln') == calls.ROW_LINES


def test_the_request_page_leads_with_the_call_then_the_agent_then_the_decision(
    web_gate: Gate,
) -> None:
    request_id = _bash(web_gate, summary="Pay invoice INV-4471")
    headline = render_call("Bash", {"command": TWO_LINES}).headline
    with sign_in(web_gate, "alice") as c:
        page = c.get(f"/requests/{request_id}").text
    title = re.search(r"<title>(.*?)</title>", page, re.S)
    assert title and str(escape(headline)) in title.group(1)
    h1 = re.search(r"<h1.*?</h1>", page, re.S)
    assert h1 and str(escape(headline)) in h1.group(0)
    assert "INV-4471" not in h1.group(0) and "INV-4471" not in title.group(1)
    order = [
        'id="call"',
        "The agent says:",
        "Pay invoice INV-4471",
        "<dt>Agent</dt>",
        "<dt>User</dt>",
        "<dt>Rule</dt>",
        "<dt>Deadline</dt>",
        'id="decision"',
        'id="approve-form"',
        'id="reject-form"',
    ]
    at = [page.index(marker) for marker in order]
    assert at == sorted(at), dict(zip(order, at, strict=True))
    for text in _lines("Bash", {"command": TWO_LINES}):
        assert page.index(str(escape(text))) < page.index("The agent says:")
    # The summary is a quotation in the agent's box, never gate's heading.
    assert '<blockquote class="summary">Pay invoice INV-4471</blockquote>' in page
    # The decide bar: Approve / Reject one tap away, leading to the forms.
    bar = re.search(r'<nav class="decide-bar".*?</nav>', page, re.S)
    assert bar, "no decide bar"
    assert 'href="#approve-form"' in bar.group(0) and 'href="#reject-form"' in bar.group(0)


def test_without_a_summary_the_page_says_so(web_gate: Gate) -> None:
    request_id = _bash(web_gate)
    with sign_in(web_gate, "alice") as c:
        page = c.get(f"/requests/{request_id}").text
    assert "The agent sent no summary." in page
    assert "<blockquote" not in page


def test_a_finished_request_has_no_decide_bar(web_gate: Gate) -> None:
    request_id = _bash(web_gate)
    with sign_in(web_gate, "alice") as c:
        assert 'id="decide-bar"' in c.get(f"/requests/{request_id}").text
        assert web_gate.decide(request_id, cfg.BOB, "approve", "ok").status_code == 200
        page = c.get(f"/requests/{request_id}").text
    assert 'id="decide-bar"' not in page
    assert "Approved by bob" in page


def test_watched_arguments_and_a_failed_condition_are_said_beside_the_call(
    web_gate: Gate,
) -> None:
    request_id = _bash(web_gate, summary="Tidy up")
    set_offers(
        web_gate,
        request_id,
        watched_args=["command"],
        condition_error="no such method 'includes' on a string",
    )
    with sign_in(web_gate, "alice") as c:
        page = c.get(f"/requests/{request_id}").text
        row = _what(_row(c.get("/").text, request_id))
    failed = (
        "<strong>The rule's condition failed</strong> (no such method &#39;includes&#39; on a"
        " string); gate asked to be safe."
    )
    assert failed in page
    assert page.index("condition failed") < page.index("The agent says:")
    assert "The rule's condition reads" in page
    assert "<code>command</code>" in page
    assert "the rule's condition reads this" in page
    assert "The rule's condition failed; gate asked to be safe." in row


def test_the_title_counts_what_is_pending(web_gate: Gate) -> None:
    with sign_in(web_gate, "alice") as c:
        assert "<title>Pending · gate</title>" in c.get("/").text
        _bash(web_gate)
        _bash(web_gate)
        assert "<title>(2) Pending · gate</title>" in c.get("/").text


# -- each kind of section, as HTML (the typed contract of gate.rendering, filled by hand) ----

LONG = "x" * 1500 + " END-OF-LONG-LINE"


def _call_html(call: CallRendering, offers: Offers | None = None, *, reveal: bool = True) -> str:
    env = environment(lambda: datetime.now(UTC))
    module = env.get_template("_call.html").make_module({})
    shown = calls.arrange(call, offers or Offers())
    token = {"id": "01REQ", "csrf_field": "csrf_token", "csrf": "tok"} if reveal else None
    return str(module.whole_call(shown, "h", token))  # type: ignore[attr-defined]


def test_each_section_kind_renders_whole_numbered_and_marked() -> None:
    diff = Section(
        "diff",
        "Edit src/app.py · +2 −1",
        (
            Line("@@ -10,3 +10,4 @@", "hunk"),
            Line("a = 1", "context", number=10, old_number=10),
            Line("b = 2", "del", number=11, old_number=11, flagged=True),
            Line("b = 3", "add", number=11),
            Line("c = 4", "add", number=12),
        ),
        path="/new_string",
        watched=True,
    )
    url = Section(
        "url", "URL", (Line("https://e.example/a?b=c", number=1),), "/url", host="e.example"
    )
    command = Section(
        "command",
        "Command · 2 lines",
        (Line("echo hi", number=1), Line(LONG, number=2)),
        "/command",
    )
    tree = Section(
        "tree",
        "Arguments",
        (Line("token: [masked]", number=1, masked_path="/token"),),
        "",
    )
    flag = Flag("bidi", "line 3 holds a right-to-left override", path="/new_string", line=3)
    call = CallRendering(
        "Edit", None, "Edit src/app.py", (diff, url, command, tree), (flag,), ("/token",)
    )
    html = _call_html(call, Offers(condition_error="boom"))

    rows = re.findall(r'<tr class="(ln [^"]*|hunk)"[^>]*>(.*?)</tr>', html, re.S)

    def texts(body: str) -> list[str]:
        return [
            re.sub(r"<[^>]+>", "", td).strip()
            for td in re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)
        ]

    cells = {cls: texts(body) for cls, body in rows[:5]}
    assert cells["hunk"] == ["@@ -10,3 +10,4 @@"]
    assert cells["ln context"][:4] == ["10", "10", "", "a = 1"]
    deleted = next(c for c in cells if c.startswith("ln del"))
    assert cells[deleted][:4] == ["11", "", "-", "b = 2 ⚠"]  # old number only, marked - and ⚠
    assert "flagged" in deleted
    assert [c for c in cells if c.startswith("ln add")] == ["ln add"]  # two rows, one key
    added = [body for cls, body in rows if cls == "ln add"]
    assert [texts(body)[2] for body in added] == ["+", "+"]
    # The flag's words sit in the row right after the line it names.
    after = html[html.index("b = 2") :]
    assert after.index("flag-note") < after.index("b = 3")
    assert "line 3 holds a right-to-left override" in after
    # Watched section, host apart, every character of a long line, the condition's failure.
    assert "the rule's condition reads this" in html
    assert '<strong class="host-name">e.example</strong>' in html
    assert LONG in html
    assert "The rule's condition failed</strong> (boom); gate asked to be safe." in html
    # A masked value carries its Reveal form (path = the JSON pointer, with the CSRF token).
    reveal = re.search(r'<form method="post" action="/requests/01REQ/reveal".*?</form>', html, re.S)
    assert reveal
    assert 'name="path" value="/token"' in reveal.group(0)
    assert 'name="csrf_token" value="tok"' in reveal.group(0)
    assert "action=" not in _call_html(call, reveal=False).split("reveal")[0]
    assert "/reveal" not in _call_html(call, reveal=False)


def test_the_queue_preview_never_cuts_inside_a_line() -> None:
    lines = tuple(Line(f"line {i} " + "y" * 300, number=i) for i in range(1, 13))
    call = CallRendering(
        "Bash", None, "Bash", (Section("command", "Command · 12 lines", lines, "/command"),), (), ()
    )
    shown = calls.arrange(call, Offers())
    cut = calls.preview(shown)
    assert [sl.line.text for s in cut.sections for sl in s.lines] == [
        line.text for line in lines[: calls.ROW_LINES]
    ]
    assert cut.hidden_lines == 12 - calls.ROW_LINES
