"""OpenTelemetry tracing, end to end: the real app over HTTP on SQLite and PostgreSQL with the
SDK's in-memory exporter, `gate serve` exporting OTLP to a loopback receiver with `gate hook`
sending the agent's traceparent, and tracing off costing nothing (docs/tracing.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gate.app import create_app
from gate.asking import tracecontext
from gate.base import tracing
from gate.base.errors import ConfigError
from gate.client import GateClient
from gate.config.features import TelemetrySettings
from gate.server import telemetry
from gate.server.access import AccessLog
from tests.support import config as cfg
from tests.support.servers import ServerProcess, ThreadServer, wait_until

ROOT = Path(__file__).resolve().parents[2]
AGENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
AGENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{AGENT_TRACE}-{AGENT_SPAN}-01"
PAYMENT = {"tool_name": "pay_vendor", "tool_args": {"amount": 60000}}


@dataclass
class Traced:
    exporter: InMemorySpanExporter
    app: Any
    url: str

    def post(self, path: str, token: str, body: Any, traceparent: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        if traceparent:
            headers["traceparent"] = traceparent
        r = httpx.post(self.url + path, json=body, headers=headers, timeout=30)
        assert r.status_code == 200, r.text
        return r.json()

    def spans(self, count: int) -> list[ReadableSpan]:
        """The finished spans, once there are `count` (a server span ends after its answer)."""
        found: tuple[ReadableSpan, ...] = wait_until(
            lambda: (s := self.exporter.get_finished_spans()) and len(s) >= count and s
        )
        return list(found)


def served(app: Any) -> Any:
    """`app` behind the access log, as `gate serve` runs it (where the SERVER spans start)."""
    access = AccessLog(app)

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        await access(scope, receive, send)

    return asgi


@pytest.fixture
def traced(db_url: str) -> Iterator[Traced]:
    exporter = InMemorySpanExporter()
    app = create_app(cfg.make_settings(db_url), span_exporter=exporter)
    with ThreadServer(served(app)) as server:
        yield Traced(exporter, app, server.url)
    assert tracing.tracer is None  # the lifespan's end stopped it


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    named = [s for s in spans if s.name == name]
    assert len(named) == 1, [s.name for s in spans]
    return named[0]


def linked_to_life(span: ReadableSpan, request_id: str) -> bool:
    trace_id, span_id = tracing.life_ids(request_id)
    return any(
        link.context.trace_id == trace_id and link.context.span_id == span_id for link in span.links
    )


def test_an_ask_decided_in_the_api_is_traced_into_the_agents_trace(traced: Traced) -> None:
    call = {**PAYMENT, "context": {"tool_call_id": "toolu_01A"}}
    asked = traced.post("/v1/gate", cfg.AGENT, call, TRACEPARENT)
    rid = asked["request"]["id"]
    traced.post(f"/v1/requests/{rid}/decision", cfg.ALICE, {"verdict": "approve"})
    traced.post(f"/v1/requests/{rid}/outcome", cfg.AGENT, {"outcome": "ran"}, TRACEPARENT)
    spans = traced.spans(4)
    # the ask and the decision were answered by the lean hot routes, and traced all the same
    assert traced.app.lean_routes.answered["gate"] == traced.app.lean_routes.answered["decision"]
    assert traced.app.lean_routes.answered["gate"] == 1

    ask = one(spans, "POST /v1/gate")
    assert ask.kind is SpanKind.SERVER
    assert ask.parent is not None and ask.parent.span_id == int(AGENT_SPAN, 16)
    assert ask.context.trace_id == int(AGENT_TRACE, 16)  # a child in the agent's own trace
    assert ask.attributes is not None
    assert {k: ask.attributes.get(k) for k in ("gen_ai.tool.name", "gen_ai.tool.call.id")} == {
        "gen_ai.tool.name": "pay_vendor",
        "gen_ai.tool.call.id": "toolu_01A",
    }
    assert ask.attributes["gate.rule"] == "big-payments"
    assert ask.attributes["gate.policy"] == "ask"
    assert ask.attributes["gate.request.id"] == rid
    assert ask.attributes["http.response.status_code"] == 200
    assert linked_to_life(ask, rid)
    statements = [e for e in ask.events if e.name == "db.statement"]
    assert statements and all(e.attributes and e.attributes["db.query.text"] for e in statements)

    decision = one(spans, "POST /v1/requests/{request_id}/decision")
    assert decision.parent is None  # the approver sent no traceparent: a trace of its own
    assert linked_to_life(decision, rid)

    life = one(spans, "gate.request")
    assert (life.context.trace_id, life.context.span_id) == tracing.life_ids(rid)
    assert life.attributes is not None
    assert life.attributes["gate.decision"] == "approved"
    assert life.attributes["gate.approver"] == "alice"
    assert life.attributes["gate.rule"] == "big-payments"
    assert life.attributes["gen_ai.tool.name"] == "pay_vendor"
    assert life.attributes["gen_ai.tool.call.id"] == "toolu_01A"
    assert life.start_time is not None and ask.start_time is not None
    assert life.start_time <= ask.end_time if ask.end_time else False  # from the ask's time
    assert [link.context.span_id for link in life.links] == [decision.context.span_id]

    outcome = one(spans, "POST /v1/requests/{request_id}/outcome")
    assert outcome.parent is not None and outcome.parent.span_id == int(AGENT_SPAN, 16)
    assert outcome.attributes is not None and outcome.attributes["gate.outcome"] == "ran"
    assert linked_to_life(outcome, rid)


def test_an_allowed_call_and_a_bad_traceparent(traced: Traced) -> None:
    traced.post("/v1/gate", cfg.AGENT, {"tool_name": "read_file"}, "00-zz-not-a-traceparent")
    (span,) = traced.spans(1)
    assert span.parent is None  # a malformed traceparent starts a new trace, never a 400
    assert span.attributes is not None
    assert span.attributes["gate.policy"] == "allow"
    assert span.attributes["gate.rule"] == "reads"
    assert not [e for e in span.events if e.name == "db.statement"]  # un-gated: no database


def test_an_expired_request_ends_its_life_span_with_no_approver(traced: Traced) -> None:
    asked = traced.post("/v1/gate", cfg.AGENT, {"tool_name": "ephemeral_x"}, TRACEPARENT)
    rid = asked["request"]["id"]
    life = wait_until(
        lambda: next(
            (s for s in traced.exporter.get_finished_spans() if s.name == "gate.request"), None
        ),
        timeout=15,
    )
    assert life.attributes["gate.decision"] == "expired"
    assert life.attributes["gate.request.id"] == rid
    assert "gate.approver" not in life.attributes
    assert (life.context.trace_id, life.context.span_id) == tracing.life_ids(rid)


def test_the_sdk_sends_its_callers_trace(traced: Traced, monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    agent_tracer = TracerProvider().get_tracer("an-agent")  # the agent's own, not gate's
    with GateClient(traced.url, token=cfg.AGENT) as client:
        with agent_tracer.start_as_current_span("agent turn") as turn:
            client.submit("read_file")  # the current span's traceparent
        monkeypatch.setenv("TRACEPARENT", TRACEPARENT)
        client.submit("read_file")  # no span current: the environment's
    first, second = traced.spans(2)
    assert first.parent is not None and first.parent.span_id == turn.get_span_context().span_id
    assert first.context.trace_id == turn.get_span_context().trace_id
    assert second.parent is not None and second.parent.span_id == int(AGENT_SPAN, 16)


# -- gate serve, OTLP over HTTP, the hook's TRACEPARENT ------------------------------------------


class Receiver:
    """A loopback OTLP/HTTP collector: keeps each span it is sent, decoded."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.resources: list[dict[str, Any]] = []
        self.app = Starlette(routes=[Route("/v1/traces", self.traces, methods=["POST"])])

    async def traces(self, request: Request) -> Response:
        sent = ExportTraceServiceRequest()
        sent.ParseFromString(await request.body())
        for resource_spans in sent.resource_spans:
            self.resources.append(_attributes(resource_spans.resource.attributes))
            for scope_spans in resource_spans.scope_spans:
                self.spans.extend(scope_spans.spans)
        return Response(b"", media_type="application/x-protobuf")


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in pairs}


def test_gate_serve_exports_to_an_otlp_endpoint_joining_the_hooks_trace(
    tmp_path: Path, sqlite_url: str
) -> None:
    receiver = Receiver()
    with ThreadServer(receiver.app) as collector:
        config = cfg.write_config(tmp_path / "gate.toml", sqlite_url, log_json=True)
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
            "OTEL_SERVICE_NAME": "gate-under-test",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }
        server = ServerProcess(config, env=env).start()
        try:
            hook_env = {**os.environ, "GATE_URL": server.url, "GATE_TOKEN": cfg.AGENT}
            hook_env["TRACEPARENT"] = TRACEPARENT
            payload = {
                "hook_event_name": "PreToolUse",
                "session_id": "s-traced",
                "tool_name": "pay_vendor",
                "tool_input": {"amount": 60000},
                "tool_use_id": "toolu_01HOOK",
            }
            hook = subprocess.Popen(
                [sys.executable, "-m", "gate.cli", "hook"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=hook_env,
            )
            assert hook.stdin is not None
            hook.stdin.write(json.dumps(payload))
            hook.stdin.close()
            hook.stdin = None  # so communicate() does not flush the closed pipe
            rid = wait_until(lambda: _pending(server.url), timeout=20)
            r = httpx.post(
                f"{server.url}/v1/requests/{rid}/decision",
                json={"verdict": "approve"},
                headers={"Authorization": f"Bearer {cfg.ALICE}"},
            )
            assert r.status_code == 200, r.text
            out, _ = hook.communicate(timeout=30)
            assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "allow"
            wait_until(lambda: any(s.name == "gate.request" for s in receiver.spans), timeout=20)
        finally:
            server.stop()
        log = server.log()
    ask = next(s for s in receiver.spans if s.name == "POST /v1/gate")
    assert ask.trace_id.hex() == AGENT_TRACE and ask.parent_span_id.hex() == AGENT_SPAN
    assert _attributes(ask.attributes)["gen_ai.tool.call.id"] == "toolu_01HOOK"
    waits = [s for s in receiver.spans if s.name == "GET /v1/requests/{request_id}/wait"]
    assert waits and all(s.trace_id.hex() == AGENT_TRACE for s in waits)
    assert {"service.name": "gate-under-test"}.items() <= receiver.resources[0].items()
    # the request's log line carries the trace it was written in
    asked_line = next(
        json.loads(line) for line in log.splitlines() if f"request {rid} asked" in line
    )
    assert asked_line["trace_id"] == AGENT_TRACE


def _pending(url: str) -> str | None:
    r = httpx.get(
        f"{url}/v1/requests",
        params={"status": "pending", "session_id": "s-traced"},
        headers={"Authorization": f"Bearer {cfg.ADMIN}"},
    )
    items = r.json().get("items") or []
    return str(items[0]["id"]) if items else None


# -- settings ---------------------------------------------------------------------------------


def test_tracing_is_on_only_when_an_endpoint_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [v for v in os.environ if v.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    assert not telemetry.wanted(TelemetrySettings())
    assert telemetry.wanted(TelemetrySettings(otlp_endpoint="http://127.0.0.1:4318"))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:4318/v1/traces")
    assert telemetry.wanted(TelemetrySettings())
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")  # the standard off switch wins
    assert not telemetry.wanted(TelemetrySettings(otlp_endpoint="http://127.0.0.1:4318"))


def test_a_setting_that_cannot_work_is_refused_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValidationError, match="otlp_endpoint must be an http"):
        TelemetrySettings(otlp_endpoint="127.0.0.1:4317")  # a gRPC habit: gate sends OTLP/HTTP
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        TelemetrySettings(sample_ratio=2)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "most")
    with pytest.raises(ConfigError, match="OTEL_TRACES_SAMPLER_ARG is not a number"):
        telemetry.sample_ratio(TelemetrySettings())
    assert telemetry.sample_ratio(TelemetrySettings(sample_ratio=0.25)) == 0.25


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        (TRACEPARENT, TRACEPARENT),
        (TRACEPARENT.upper(), TRACEPARENT),
        ("00-" + "0" * 32 + "-00f067aa0ba902b7-01", None),  # an all-zero trace id is invalid
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", None),
        ("00-xyz-abc-01", None),
        ("", None),
    ],
)
def test_the_hook_sends_only_a_well_formed_traceparent(
    monkeypatch: pytest.MonkeyPatch, given: str, sent: str | None
) -> None:
    monkeypatch.setenv("TRACEPARENT", given)
    assert tracecontext.traceparent() == sent


# -- off ------------------------------------------------------------------------------------

OFF = """
import json, logging, sys
import httpx
from gate.app import create_app
from gate.base import logs, tracing
from gate.server.access import AccessLog
from tests.support import config as cfg
from tests.support.servers import ThreadServer

logs.configure_logging("INFO", json_logs=True)
access = AccessLog(create_app(cfg.make_settings(sys.argv[1])))

async def served(scope, receive, send):
    await access(scope, receive, send)

with ThreadServer(served) as server:
    for body in ({"tool_name": "read_file"}, {"tool_name": "ask_x"}):
        r = httpx.post(server.url + "/v1/gate", json=body,
                       headers={"Authorization": "Bearer " + cfg.AGENT,
                                "traceparent": "%s"})
        assert r.status_code == 200, r.text
    loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk")
                    or m.startswith("opentelemetry.exporter"))
    print(json.dumps({"loaded": loaded, "tracer": repr(tracing.tracer)}))
"""


def test_tracing_off_imports_no_sdk_and_writes_no_trace_ids(sqlite_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(OFF % TRACEPARENT), sqlite_url],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"loaded": [], "tracer": "None"}
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert any(line.get("logger") == "gate.requests" for line in lines)
    assert not [line for line in lines if "trace_id" in line]
