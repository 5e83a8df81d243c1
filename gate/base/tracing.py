"""OpenTelemetry tracing at run time: off (every helper returns at once) unless the server
started it (`gate.server.telemetry`).

Off, this module imports nothing of OpenTelemetry and `tracer` is None: the access log, the
request spans and the log formatter each test that one global and do nothing else, so gate
without tracing pays one attribute read per request. On, it holds the SDK tracer the server
built and imports only the OpenTelemetry API (`opentelemetry.trace`, `.context`).

What the helpers make (docs/tracing.md):
* `server_span`: one SERVER span per HTTP request, a child of the caller's W3C
  `traceparent` when it sent one (the agent, its SDK, `gate hook`), made current so what the
  request does (statement events, the request spans) nests under it;
* `life_context`: the span context of a request's life span, the same on every replica and
  after a restart: its trace and span ids are a hash of the request id, so a decision made on
  another replica, hours later, links to it without anything stored (`forced_ids` tells the
  server's id generator to use them while that span is started);
* `annotate` / `link` / `event`: attributes, links and events on the current span.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

#: the SDK tracer while tracing is on (`gate.server.telemetry.start`); None: tracing is off
tracer: Any = None
#: (trace id, span id) the server's id generator gives the span being started, when set
forced_ids: ContextVar[tuple[int, int] | None] = ContextVar("gate_forced_ids", default=None)

#: attributes are cut to this many characters: an agent chooses tool names and ids
_LONGEST = 256


def enable(new_tracer: Any) -> None:
    """Trace with `new_tracer` (an SDK tracer) from now on."""
    global tracer
    tracer = new_tracer


def disable() -> None:
    """Stop tracing: every helper here does nothing again."""
    global tracer
    tracer = None


def server_span(scope: Mapping[str, Any], name: str) -> Any:
    """Start the SERVER span of the HTTP request `scope`, as a child of its `traceparent`
    header if it has a valid one, and make it current for the rest of the request's task."""
    from opentelemetry import context, trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {}
    for key, value in scope["headers"]:
        if key in (b"traceparent", b"tracestate"):
            carrier[key.decode("latin-1")] = value.decode("latin-1")
    parent = TraceContextTextMapPropagator().extract(carrier) if carrier else None
    span = tracer.start_span(
        name,
        context=parent,
        kind=trace.SpanKind.SERVER,
        attributes={
            "http.request.method": scope["method"],
            "url.path": cut(scope["path"]),
            "http.route": name.partition(" ")[2],
        },
    )
    # Each request runs in its own task, with its own context: attached, never detached
    # (as the access log's note); worker threads it hands off to copy it.
    context.attach(trace.set_span_in_context(span, parent))
    return span


def end_server_span(span: Any, status: int | None) -> None:
    """End a `server_span` with the HTTP status it answered (None: no answer was sent)."""
    from opentelemetry.trace import Status, StatusCode

    if status is not None:
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR))
    else:
        span.set_attribute("gate.answered", False)
    span.end()


def life_ids(request_id: str) -> tuple[int, int]:
    """The (trace id, span id) of request `request_id`'s life span: a hash of the id, the same
    wherever and whenever it is computed (never zero, as W3C requires)."""
    digest = hashlib.sha256(b"gate.request:" + request_id.encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1


def life_context(request_id: str) -> Any:
    """The span context of request `request_id`'s life span (for links to it)."""
    from opentelemetry import trace

    trace_id, span_id = life_ids(request_id)
    return trace.SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)
    )


def annotate(attributes: Mapping[str, Any]) -> None:
    """Set `attributes` (None values left out) on the current span, if one is recording."""
    from opentelemetry import trace

    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})


def link(request_id: str) -> None:
    """Link the current span to request `request_id`'s life span."""
    from opentelemetry import trace

    span = trace.get_current_span()
    if span.is_recording():
        span.add_link(life_context(request_id), {"gate.request.id": request_id})


def event(name: str, attributes: Mapping[str, Any]) -> None:
    """Add event `name` to the current span, if one is recording."""
    from opentelemetry import trace

    span = trace.get_current_span()
    if span.is_recording():
        span.add_event(name, dict(attributes))


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) in hex of the current span, for log lines; None when there is none."""
    if tracer is None:
        return None
    from opentelemetry import trace

    found = trace.get_current_span().get_span_context()
    if not found.is_valid:
        return None
    return format(found.trace_id, "032x"), format(found.span_id, "016x")


def cut(text: str) -> str:
    """`text` cut to a bounded attribute (an agent chose it)."""
    return text if len(text) <= _LONGEST else text[:_LONGEST] + "..."
