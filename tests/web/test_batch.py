"""Batch decisions over HTTP: several requests approved or rejected from the queue with one
reason, each through the decision pipeline, each refusal shown; the form is guarded like the
others (CSRF token, same origin)."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.conftest import Gate
from tests.support import config as cfg
from tests.web.conftest import csrf_of, flash_error, landed, sign_in


def ask(gate: Gate, tool: str = "pay_vendor", **args: Any) -> str:
    body = args or {"amount": 60000, "vendor": "acme"}
    return str(gate.submit(tool_name=tool, tool_args=body)["request"]["id"])


def status(gate: Gate, request_id: str) -> dict[str, Any]:
    with gate.client(cfg.ADMIN) as c:
        found: dict[str, Any] = c.get(f"/v1/requests/{request_id}").json()
        return found


def batch(c: httpx.Client, ids: list[str], verdict: str, comment: str = "") -> httpx.Response:
    token = csrf_of(c.get("/").text)
    form = {"csrf_token": token, "verdict": verdict, "comment": comment, "ids": ids}
    return c.post("/requests/batch", data=form)


def results(page: str) -> dict[str, tuple[str, str]]:
    """Each request's row on the answer: (recorded or refused, the result's words)."""
    rows = re.findall(
        r'<tr data-id="([^"]+)" class="(recorded|refused)">.*?<td data-label="Result">'
        r"<span [^>]*>[^<]*</span> ([^<]*)</td>",
        page,
        re.S,
    )
    return {rid: (kind, words.replace("&#39;", "'").strip()) for rid, kind, words in rows}


def test_the_queue_offers_a_checkbox_only_for_requests_yours_to_decide(web_gate: Gate) -> None:
    mine = ask(web_gate)
    theirs = ask(web_gate, "deploy_app", service="web")  # ops decide deploys
    with sign_in(web_gate, "alice") as c:
        queue = c.get("/").text
    assert 'form id="batch"' in queue and 'action="/requests/batch"' in queue
    assert f'value="{mine}" form="batch"' in queue
    assert f'value="{theirs}"' not in queue


def test_reject_several_with_one_reason_each_decided_or_refused(web_gate_db: Gate) -> None:
    gate = web_gate_db
    first, second = ask(gate), ask(gate, amount=70000, vendor="bolt")
    theirs = ask(gate, "deploy_app", service="web")  # a crafted id alice may not decide
    done = ask(gate, amount=60001, vendor="x")
    assert gate.decide(done, cfg.BOB, "approve").status_code == 200
    with sign_in(gate, "alice") as c:
        r = batch(c, [first, theirs, second, done, first], "reject", "wrong vendor")
    assert r.status_code == 200, r.text
    got = results(r.text)
    assert list(got) == [first, theirs, second, done]  # in the order selected, once each
    assert got[first][0] == got[second][0] == "recorded"
    assert got[first][1].startswith("Rejected by alice")
    assert got[theirs] == ("refused", got[theirs][1]) and got[theirs][1].startswith(
        "Not recorded: "
    )
    assert got[done][0] == "refused" and got[done][1].startswith("Already approved by bob")
    assert "Rejected 2 of 4 selected" in r.text
    for rid in (first, second):
        view = status(gate, rid)
        assert (view["status"], view["decided_by"], view["decided_via"]) == (
            "rejected",
            "alice",
            "web",
        )
        assert "wrong vendor" in view["reason"]
    assert status(gate, theirs)["status"] == "pending"


def test_a_reject_without_a_reason_decides_none(web_gate: Gate) -> None:
    ids = [ask(web_gate), ask(web_gate, amount=60002, vendor="y")]
    with sign_in(web_gate, "alice") as c:
        r = batch(c, ids, "reject", "  ")
    got = results(r.text)
    assert [kind for kind, _ in got.values()] == ["refused", "refused"]
    assert all("say why you reject it" in words for _, words in got.values())
    assert [status(web_gate, rid)["status"] for rid in ids] == ["pending", "pending"]


def test_approve_only_what_the_queue_showed_whole(web_gate: Gate) -> None:
    short = ask(web_gate)
    script = "\n".join(f"echo step {n}" for n in range(30))  # more lines than a row shows
    long = str(web_gate.submit(tool_name="Bash", tool_args={"command": script})["request"]["id"])
    with sign_in(web_gate, "alice") as c:
        r = batch(c, [short, long], "approve", "fine")
    got = results(r.text)
    assert got[short][0] == "recorded" and got[short][1].startswith("Approved by alice")
    assert got[long][0] == "refused" and "too long to show here whole" in got[long][1]
    assert status(web_gate, short)["status"] == "approved"
    assert status(web_gate, long)["status"] == "pending"


def test_a_form_that_cannot_be_used_says_why_on_the_queue(web_gate: Gate) -> None:
    rid = ask(web_gate)
    with sign_in(web_gate, "alice") as c:
        for ids, verdict, says in (
            ([], "approve", "Select at least one request to decide."),
            ([rid], "maybe", "Choose Approve selected or Reject selected."),
            ([f"0{n}" for n in range(51)], "approve", "Select at most 50 requests at a time."),
            (["x" * 27], "approve", "That is not a request id."),
        ):
            page = landed(c, batch(c, ids, verdict), "/")
            assert flash_error(page.text) == says
        # the form's address leads back to the queue
        assert c.get("/requests/batch").headers["location"] == "/"
    assert status(web_gate, rid)["status"] == "pending"


def test_the_batch_form_is_guarded_like_the_others(web_gate: Gate) -> None:
    rid = ask(web_gate)
    with sign_in(web_gate, "alice") as c:
        token = csrf_of(c.get("/").text)
        form = {"verdict": "approve", "ids": [rid], "csrf_token": token}
        wrong = c.post("/requests/batch", data={**form, "csrf_token": "nope"})
        assert wrong.status_code == 403
        del c.headers["Origin"]
        for headers in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {}):
            r = c.post("/requests/batch", data=form, headers=headers)
            assert r.status_code == 403, headers
            assert r.json()["error"]["code"] == "cross_site_request"
        assert status(web_gate, rid)["status"] == "pending"
    # signed out: to the sign-in page, nothing decided
    with httpx.Client(base_url=web_gate.url) as anon:
        page = anon.get("/login")
        r = anon.post(
            "/requests/batch",
            data={"verdict": "approve", "ids": [rid], "csrf_token": csrf_of(page.text)},
            headers={"Origin": web_gate.url},
        )
        assert r.status_code in (303, 403), r.text
    assert status(web_gate, rid)["status"] == "pending"
