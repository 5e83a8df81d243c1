"""A request's spans (docs/tracing.md): what each use case tells tracing, when it is on.

* The policy's answer and the ask go on the HTTP request's own SERVER span (the agent's
  `POST /v1/gate`, a child of the agent's `traceparent`): `gen_ai.tool.name`,
  `gen_ai.tool.call.id`, `gate.rule`, `gate.policy` and, for an ask, `gate.request.id` and a
  link to the request's life span.
* The life span, `gate.request`: from the ask to the request's final status, written when it
  ends (approved, rejected, expired, withdrawn) by whichever replica ended it, with the ask's
  time as its start (the request id is a ULID: it holds that time). A span cannot stay open
  across replicas or a restart, so its ids are a hash of the request id
  (`gate.base.tracing.life_ids`): every span about the request, on any replica, links to it
  without anything stored. It links back to the span that ended it (the decider's request).
* The outcome the agent reports goes on that request's SERVER span, linked the same way.

Every function here is called only while tracing is on (`tracing.tracer is not None`), so
gate without tracing runs none of this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ulid import ULID

from gate.base import tracing
from gate.decisions.outcomes import Changed
from gate.decisions.readmodel import RequestView
from gate.inputs.bodies import GateCall
from gate.policy.rules import Decision


def call_id(context: Mapping[str, Any]) -> str | None:
    """The agent's id of the tool call (Claude Code's `tool_use_id`), as the hook and the
    SDK put it in the call's context."""
    found = context.get("tool_call_id")
    return tracing.cut(found) if isinstance(found, str) and found else None


def judged(call: GateCall, decision: Decision) -> None:
    """The policy's answer for `call`, on the current span."""
    tracing.annotate(
        {
            "gen_ai.tool.name": tracing.cut(call.tool_name),
            "gen_ai.tool.call.id": call_id(call.context),
            "gate.rule": decision.rule.name if decision.rule else None,
            "gate.policy": decision.action or "allow",
        }
    )


def asked(view: RequestView, *, granted: bool) -> None:
    """A request was made (`granted`: born approved by a standing grant), on the current span
    with a link to its life span; a granted one's life ends here."""
    tracing.annotate({"gate.request.id": view.id, "gate.status": view.status})
    tracing.link(view.id)
    if granted:
        _life(view.id, view.status, view, by=view.decided_by, via=view.decided_via)


def decided(outcomes: list[Changed], shown: Mapping[str, RequestView]) -> None:
    """Requests ended in a committed change: each one's life span, ended now."""
    for outcome in outcomes:
        view = shown.get(outcome.request_id)
        _life(
            outcome.request_id,
            outcome.status.value,
            view,
            by=outcome.by,
            via=outcome.via,
            tool=outcome.tool_name,
            rule=outcome.rule,
        )
        tracing.link(outcome.request_id)


def reported(view: RequestView) -> None:
    """The agent reported what the approved call did, on the current span."""
    tracing.annotate(
        {
            "gate.request.id": view.id,
            "gate.outcome": view.outcome,
            "gen_ai.tool.name": tracing.cut(view.tool_name),
            "gen_ai.tool.call.id": call_id(view.context),
        }
    )
    tracing.link(view.id)


def _life(
    request_id: str,
    status: str,
    view: RequestView | None,
    *,
    by: str | None,
    via: str | None,
    tool: str | None = None,
    rule: str | None = None,
) -> None:
    """Write request `request_id`'s life span, from its ask until now."""
    from opentelemetry import context, trace

    attributes = {
        "gate.request.id": request_id,
        "gate.decision": status,
        "gate.approver": by,
        "gate.via": via,
        "gen_ai.tool.name": tracing.cut(tool or (view.tool_name if view else "")) or None,
        "gate.rule": rule or (view.rule if view else None),
        "gen_ai.tool.call.id": call_id(view.context) if view is not None else None,
        "gate.agent.id": view.agent_id if view is not None else None,
    }
    here = trace.get_current_span().get_span_context()
    token = tracing.forced_ids.set(tracing.life_ids(request_id))
    try:
        span = tracing.tracer.start_span(
            "gate.request",
            context=context.Context(),  # a root: its ids are its own (the module docstring)
            kind=trace.SpanKind.INTERNAL,
            attributes={k: v for k, v in attributes.items() if v is not None},
            links=[trace.Link(here)] if here.is_valid else None,
            start_time=_asked_at_ns(request_id),
        )
    finally:
        tracing.forced_ids.reset(token)
    span.end()


def _asked_at_ns(request_id: str) -> int | None:
    """When the request was asked, from its ULID (None if the id is not one)."""
    try:
        return int(ULID.from_str(request_id).timestamp * 1_000_000_000)
    except ValueError:
        return None
