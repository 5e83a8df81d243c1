"""Generated bad (and good) input against the app's own OpenAPI document, over real HTTP.

Schemathesis derives a few thousand cases from `create_app`'s schema and sends them, as an
admin and unauthenticated, to a real uvicorn server. Every answer must be below 500, every
non-2xx answer must be the one JSON error body, and responses must match the schema where
schemathesis can check that (documented status codes, content types and bodies).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import CheckFunction

from gate.app import create_app
from tests.support import config as cfg
from tests.support.http import TLS
from tests.support.servers import ThreadServer

pytestmark = pytest.mark.slow

#: per operation, caller and mode: up to 15 x 2 x 2 x 30 = 1,800 cases; hypothesis stops
#: early on operations with few distinct inputs. The same cases every run (derandomized): a
#: deeper search is `GATE_TEST_SCHEMATHESIS_EXAMPLES=200 pytest tests/api/test_schemathesis.py`.
EXAMPLES = int(os.environ.get("GATE_TEST_SCHEMATHESIS_EXAMPLES", "30"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same cases every run: a failure reproduces
    database=None,
    suppress_health_check=list(HealthCheck),
)
CHECKS: list[CheckFunction] = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_schema_conformance,
]


@pytest.fixture(scope="module")
def live_gate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    """One real server for every case (the database only ever fills with junk requests)."""
    path: Path = tmp_path_factory.mktemp("schemathesis") / "gate.db"
    # A short long-poll cap: generated `timeout` values would otherwise hold a case for minutes.
    settings_ = cfg.make_settings(f"sqlite:///{path}", max_wait_seconds=0.2)
    with ThreadServer(create_app(settings_)) as server:
        yield server


def _fresh_request(server: ThreadServer) -> str:
    """A new pending request, so generated bodies reach the code behind the 404."""
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {cfg.AGENT}"}, verify=TLS
    ) as c:
        r = c.post("/v1/gate", json={"tool_name": "ask_schemathesis", "tool_args": {"n": 1}})
    request_id: str = r.json()["request"]["id"]
    return request_id


def _check(case: Any, server: ThreadServer, token: str | None, *, real_ids: bool) -> int:
    if real_ids and "request_id" in (case.path_parameters or {}):
        case.path_parameters["request_id"] = _fresh_request(server)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = case.call(base_url=server.url, headers=headers)
    case.validate_response(response, checks=CHECKS)
    status = response.status_code
    if 200 <= status < 300:
        return status
    content_type = (response.headers.get("content-type") or [""])[0]  # header -> list of values
    assert content_type.startswith("application/json"), (
        status,
        response.text[:300],
    )
    body = json.loads(response.content)
    assert isinstance(body, dict) and set(body) == {"error"}, body
    error = body["error"]
    assert isinstance(error.get("code"), str) and error["code"], body
    assert isinstance(error.get("message"), str) and error["message"], body
    return status


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("token", [cfg.ADMIN, None], ids=["admin", "unauthenticated"])
def test_generated_cases(live_gate: ThreadServer, token: str | None, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_url(f"{live_gate.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10
    statuses: Counter[int] = Counter()
    for operation in operations:
        strategy = operation.as_strategy(generation_mode=mode)

        @SETTINGS
        @given(case=strategy)
        def run(case: Any) -> None:
            statuses[_check(case, live_gate, token, real_ids=mode is GenerationMode.POSITIVE)] += 1

        try:
            run()
        except Unsatisfiable:  # nothing negative to say about e.g. GET /healthz
            assert mode is GenerationMode.NEGATIVE, operation.label
        except Exception as exc:
            exc.add_note(f"operation: {operation.label} ({mode.value})")
            raise
    # Hypothesis stops early when an operation has few distinct inputs; still, hundreds.
    print(f"{sum(statuses.values())} cases, by status: {dict(sorted(statuses.items()))}")  # noqa: T201
    assert sum(statuses.values()) >= 6 * EXAMPLES
