"""Hostile input over real HTTP, on SQLite and PostgreSQL: what is stored can always be shown.

Each class of bad value is refused before anything is written (422 naming the field path
and the rule, or 400 when the body cannot even be parsed), is refused in every field that
stores it, and leaves `GET /v1/requests` working for everybody.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from gate.config.settings import Settings
from gate.inputs.bodies import JsonLimits, json_problem
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg

ASK = {"tool_name": "ask_anything", "tool_args": {"x": 1}}
GRANTABLE = {
    "name": "grantable",
    "tools": ["shell_*"],
    "approvers": ["group:finance"],
    "timeout": "10m",
    "grant_scopes": ["session"],
    "max_grant": "1h",
}


def _nest(levels: int, leaf: Any = 1) -> Any:
    """`levels` arrays around `leaf`."""
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def _rows(gate: Gate) -> dict[str, int]:
    """Requests, votes and audit events in the database (what a refusal must not add to)."""
    with gate.state.db.read() as s:
        return {
            table: int(s.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())
            for table in ("confirmation_request", "vote", "audit_event")
        }


def _refused(r: httpx.Response, status: int, code: str, *fragments: str) -> dict[str, Any]:
    """The one error body, with the expected status, code and words in its message."""
    assert r.status_code == status, r.text
    body = json.loads(r.content)  # valid JSON whatever the client sent
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert error["code"] == code, error
    for fragment in fragments:
        assert fragment in error["message"], (fragment, error["message"])
    return error


def _still_shows_everything(gate: Gate, before: dict[str, int]) -> None:
    """Nothing was written, and the request list (every request, as JSON) still answers."""
    assert _rows(gate) == before
    with gate.client(cfg.ADMIN) as c:
        listed = c.get("/v1/requests", params={"limit": 500})
    assert listed.status_code == 200, listed.text
    assert len(listed.json()["items"]) == before["confirmation_request"]


def _post(gate: Gate, token: str, path: str, body: Any) -> httpx.Response:
    """POST `body` as JSON the way a hostile client can: lone surrogates as \\u escapes, and
    NaN as Python writes it (httpx's own encoder refuses both)."""
    with gate.client(token) as c:
        return c.post(path, content=json.dumps(body), headers={"content-type": "application/json"})


def _pending(gate: Gate, tool: str = "pay_vendor", **extra: Any) -> str:
    """A pending request that alice (finance) may decide."""
    answer = gate.submit(tool_name=tool, tool_args={"amount": 60000}, user_id="dave", **extra)
    assert answer["decision"] == "ask", answer
    request_id: str = answer["request"]["id"]
    return request_id


Send = Callable[[Any], httpx.Response]
#: pydantic's words for a string field holding a lone surrogate
UNICODE = "unable to parse raw data as a unicode string"


def _senders(gate: Gate, request_id: str) -> dict[str, Send]:
    """Every JSON value the API stores, each fed with the bad value under test."""

    decision = f"/v1/requests/{request_id}/decision"
    return {
        "tool_args": lambda v: _post(gate, cfg.AGENT, "/v1/gate", {**ASK, "tool_args": {"v": v}}),
        "metadata": lambda v: _post(gate, cfg.AGENT, "/v1/gate", {**ASK, "metadata": {"v": v}}),
        "context": lambda v: _post(gate, cfg.AGENT, "/v1/gate", {**ASK, "context": {"v": v}}),
        "edited_args": lambda v: _post(
            gate, cfg.ALICE, decision, {"verdict": "approve", "edited_args": {"amount": v}}
        ),
    }


def _each_json_field_refuses(gate: Gate, value: Any, *fragments: str) -> None:
    request_id = _pending(gate)
    before = _rows(gate)
    for field, send in _senders(gate, request_id).items():
        error = _refused(send(value), 422, "invalid_input", *fragments)
        assert error["problems"][0]["field"].startswith(field), (field, error)
        _still_shows_everything(gate, before)
    with gate.client(cfg.ADMIN) as c:
        assert c.get(f"/v1/requests/{request_id}").json()["status"] == "pending"


# -- values the database cannot store, or stores and then cannot show -------------------------


def test_nesting_deeper_than_the_limit_is_422_naming_path_and_limit(gate: Gate) -> None:
    # 300 levels used to be stored, and then every GET /v1/requests failed with a 500.
    _each_json_field_refuses(gate, _nest(300), "nested deeper than 32 levels", "json_max_depth")


def test_more_values_than_the_limit_is_422(gate: Gate) -> None:
    _each_json_field_refuses(gate, [0] * 10_001, "more than 10000 values", "json_max_nodes")


def test_lone_surrogates_are_422(gate: Gate) -> None:
    # json.dumps writes a lone surrogate as the escape \ud800, which Python's parser accepts.
    _each_json_field_refuses(gate, "abc\ud800", "lone surrogate (\\ud800)")
    _each_json_field_refuses(gate, {"key\udfff": 1}, "key", "lone surrogate (\\udfff)")


def test_nul_characters_are_422(gate: Gate) -> None:
    _each_json_field_refuses(gate, "a\x00b", "NUL character")
    _each_json_field_refuses(gate, {"a\x00": 1}, "key", "NUL character")


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_and_infinity_are_422(gate: Gate, literal: str) -> None:
    # Python's parser reads these non-JSON literals (1e999 as inf); PostgreSQL's jsonb refuses
    # them and SQLite would store what no strict parser reads back.
    request_id = _pending(gate)
    before = _rows(gate)
    bodies = {
        "/v1/gate": ('{"tool_name": "ask_x", "tool_args": {"v": %s}}', cfg.AGENT),
        f"/v1/requests/{request_id}/decision": (
            '{"verdict": "approve", "edited_args": {"amount": %s}}',
            cfg.ALICE,
        ),
    }
    for path, (template, token) in bodies.items():
        with gate.client(token) as c:
            r = c.post(
                path, content=template % literal, headers={"content-type": "application/json"}
            )
        _refused(r, 422, "invalid_input", "which JSON cannot carry")
        _still_shows_everything(gate, before)


def test_integers_beyond_64_bits_are_422(gate: Gate) -> None:
    _each_json_field_refuses(gate, 2**63, "outside the 64-bit range")
    _each_json_field_refuses(gate, -(2**63) - 1, "outside the 64-bit range")


def test_text_fields_refuse_nul_and_lone_surrogates(gate: Gate) -> None:
    # A string field refuses a lone surrogate in pydantic's own parsing; NUL is ours to refuse.
    request_id = _pending(gate)
    decision = f"/v1/requests/{request_id}/decision"
    before = _rows(gate)
    attempts = [
        (cfg.AGENT, "/v1/gate", {**ASK, "tool_name": "ask\x00x"}, "tool_name", "NUL"),
        (cfg.AGENT, "/v1/gate", {**ASK, "agent_id": "a\ud800"}, "agent_id", UNICODE),
        (cfg.AGENT, "/v1/gate", {**ASK, "session_id": "s\x00"}, "session_id", "NUL"),
        (cfg.AGENT, "/v1/gate", {**ASK, "idempotency_key": "k\udc00"}, "idempotency_key", UNICODE),
        (cfg.AGENT, "/v1/gate", {**ASK, "summary": "pay \x00 now"}, "summary", "NUL"),
        (cfg.AGENT, f"/v1/requests/{request_id}/cancel", {"reason": "x\x00"}, "reason", "NUL"),
        (cfg.ALICE, decision, {"verdict": "reject", "comment": "no\ud800"}, "comment", UNICODE),
        (cfg.ALICE, decision, {"verdict": "reject", "reasons": ["a\x00"]}, "reasons[0]", "NUL"),
        (cfg.ALICE, f"/v1/requests/{request_id}/extend", {"by": "1m\x00"}, "by", "NUL"),
    ]
    for token, path, body, field, words in attempts:
        error = _refused(_post(gate, token, path, body), 422, "invalid_input", words)
        assert error["problems"][0]["field"] == field, error
    _still_shows_everything(gate, before)


def test_outcome_summary_with_nul_is_422_and_records_nothing(gate: Gate) -> None:
    request_id = _pending(gate)
    assert gate.decide(request_id, cfg.ALICE).status_code == 200
    before = _rows(gate)
    body = {"outcome": "ran", "summary": "\x00"}
    r = _post(gate, cfg.AGENT, f"/v1/requests/{request_id}/outcome", body)
    _refused(r, 422, "invalid_input", "summary", "NUL")
    with gate.client(cfg.AGENT) as c:
        assert c.get(f"/v1/requests/{request_id}").json()["outcome"] is None
    _still_shows_everything(gate, before)


def test_unknown_keys_are_refused_and_quoted_back_safely(gate: Gate) -> None:
    # Unknown keys are echoed in the error: odd ones must not break the reply itself.
    before = _rows(gate)
    r = _post(gate, cfg.AGENT, "/v1/gate", {**ASK, "\x00evil": 1})
    error = _refused(r, 422, "invalid_input", "Extra inputs are not permitted")
    assert error["problems"][0]["field"] == "\x00evil"
    r = _post(gate, cfg.AGENT, "/v1/gate", {**ASK, "\ud800evil": 1})
    _refused(r, 422, "invalid_input", UNICODE)
    _still_shows_everything(gate, before)


# -- bodies the parser itself cannot read -----------------------------------------------------


def test_json_too_deep_to_parse_is_400(gate: Gate) -> None:
    before = _rows(gate)
    deep = '{"tool_name": "ask_x", "tool_args": {"v": ' + "[" * 50_000 + "]" * 50_000 + "}}"
    huge_int = '{"tool_name": "ask_x", "tool_args": {"v": ' + "9" * 5000 + "}}"
    with gate.client(cfg.AGENT) as c:
        for body, words in ((deep, "nested too deeply"), (huge_int, "number too long")):
            r = c.post("/v1/gate", content=body, headers={"content-type": "application/json"})
            _refused(r, 400, "malformed_json", "not valid JSON", words)
    _still_shows_everything(gate, before)


def test_nul_in_the_url_is_400(gate: Gate) -> None:
    # PostgreSQL refuses NUL in text: an id or a filter holding one failed inside the database.
    _pending(gate)
    before = _rows(gate)
    with gate.client(cfg.ADMIN) as c:
        for url in ("/v1/requests/01J%00X", "/v1/requests?tool_name=pay%00", "/v1/grants?x=%00"):
            _refused(c.get(url), 400, "bad_request", "NUL")
    _still_shows_everything(gate, before)


# -- what is allowed still works --------------------------------------------------------------


def test_values_at_the_limits_are_stored_and_shown_exactly(gate: Gate) -> None:
    args = {
        "deep": _nest(31, "leaf"),  # tool_args is level 1: 32 levels in all
        "big": 2**63 - 1,
        "small": -(2**63),
        "float": 1.5e308,
        "emoji": "\U0001f600 \u4f60\u597d",  # a surrogate *pair* in JSON is one valid character
        "many": list(range(9_900)),
    }
    answer = gate.submit(tool_name="ask_edge", tool_args=args)
    assert answer["decision"] == "ask"
    with gate.client(cfg.ADMIN) as c:
        listed = c.get("/v1/requests").json()["items"]
    assert [item["tool_args"] for item in listed] == [args]


def test_the_limits_come_from_settings(make_gate: GateFactory, db_url: str) -> None:
    small = make_gate(database_url=db_url, json_max_depth=3, json_max_nodes=50)
    before = _rows(small)
    with small.client(cfg.AGENT) as c:
        deep = c.post("/v1/gate", json={**ASK, "tool_args": {"v": [[[1]]]}})
        _refused(deep, 422, "invalid_input", "tool_args.v[0][0]", "deeper than 3 levels")
        wide = c.post("/v1/gate", json={**ASK, "metadata": {"v": list(range(50))}})
        _refused(wide, 422, "invalid_input", "metadata", "more than 50 values")
        fits = c.post("/v1/gate", json={**ASK, "tool_args": {"v": [1]}})
    assert fits.status_code == 200 and fits.json()["decision"] == "ask"
    assert _rows(small)["confirmation_request"] == before["confirmation_request"] + 1


# -- durations --------------------------------------------------------------------------------


def test_overflowing_durations_in_extend_and_grants_are_422(
    make_gate: GateFactory, db_url: str
) -> None:
    data = cfg.settings_data(db_url)
    data["rules"] = [GRANTABLE, *data["rules"]]
    gate = make_gate(settings=Settings(**data))
    request_id = _pending(gate, tool="shell_run", session_id="s1")
    with gate.client(cfg.ADMIN) as c:
        deadline = c.get(f"/v1/requests/{request_id}").json()["expires_at"]
    before = _rows(gate)
    with gate.client(cfg.ALICE) as c:
        for by in ("99999999999d", "3651d", "9" * 19 + "s"):
            r = c.post(f"/v1/requests/{request_id}/extend", json={"by": by})
            _refused(r, 422, "invalid_input", "at most 3650d")
        grant = {"scope": "session", "duration": "99999999999d"}
        r = c.post(
            f"/v1/requests/{request_id}/decision", json={"verdict": "approve", "grant": grant}
        )
        error = _refused(r, 422, "invalid_input", "at most 3650d")
        assert "grant duration" in error["message"].lower()
    with gate.client(cfg.ADMIN) as c:
        after = c.get(f"/v1/requests/{request_id}").json()
    assert (after["status"], after["expires_at"]) == ("pending", deadline)
    _still_shows_everything(gate, before)


# -- the validator itself -----------------------------------------------------------------------


def _reference_problem(value: Any, limits: JsonLimits, depth: int = 1) -> bool:
    """A plain recursive statement of the rules, to hold the fast iterative check to."""
    if isinstance(value, dict | list) and depth > limits.max_depth:
        return True
    if isinstance(value, dict):
        return any("\x00" in k or any(0xD800 <= ord(c) <= 0xDFFF for c in k) for k in value) or any(
            _reference_problem(v, limits, depth + 1) for v in value.values()
        )
    if isinstance(value, list):
        return any(_reference_problem(v, limits, depth + 1) for v in value)
    if isinstance(value, str):
        return "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int):
        return not -(2**63) <= value <= 2**63 - 1
    return not math.isfinite(value)


def _count(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(_count(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_count(v) for v in value)
    return 1


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**65), max_value=2**65)
    | st.floats()
    | st.text(alphabet=st.sampled_from("a\u00e9\x00\ud800\udfff\U0001f600"), max_size=5),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(max_size=3) | st.sampled_from(["\x00", "\ud800"]), children, max_size=4
        )
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None, database=None, derandomize=True)
@given(value=_JSON, depth=st.integers(1, 6), nodes=st.integers(1, 40))
def test_the_fast_check_and_the_precise_walk_agree_with_the_rules(
    value: Any, depth: int, nodes: int
) -> None:
    limits = JsonLimits(max_depth=depth, max_nodes=nodes)
    expected = _reference_problem(value, limits) or _count(value) > nodes
    found = json_problem(value, limits)
    assert (found is not None) == expected, (value, found)
