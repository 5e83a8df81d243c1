"""Starting and stopping OpenTelemetry tracing for one server (docs/tracing.md).

Tracing is on only when an OTLP endpoint is configured: `[telemetry] otlp_endpoint` (or
`GATE_TELEMETRY__OTLP_ENDPOINT`), or the standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` /
`OTEL_EXPORTER_OTLP_ENDPOINT`, and `OTEL_SDK_DISABLED` is not "true". The SDK and the
exporter are imported here, when it is on, and never otherwise: `opentelemetry-sdk` and
`opentelemetry-exporter-otlp-proto-http` are the `telemetry` extra, and a server configured
to trace without them stops at start-up saying which extra to install.

The tracer provider is gate's own, not the process-wide one (`trace.set_tracer_provider` can
be called once per process, and an embedding program may have set its own). Spans go out
through a `BatchSpanProcessor` (a background thread; a request never waits on the
collector). SQL statements are told through the store's own hook (`gate.store.direct.listen`),
never through SQLAlchemy event listeners of ours, so the store's driver path stays the one
that runs.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from gate.base import tracing
from gate.base.errors import ConfigError
from gate.config.features import TelemetrySettings
from gate.store import direct

log = logging.getLogger("gate.telemetry")

#: the statement text put on an event is cut here (it holds no values: they are parameters)
_LONGEST_STATEMENT = 2000
_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


@dataclass
class Tracing:
    """Tracing as one server started it: stopped (flushed) when the server stops."""

    provider: Any
    engine: sa.Engine
    listener: direct.Listener

    def stop(self) -> None:
        """Stop tracing: no more spans, the store's hook removed, what is queued sent."""
        direct.remove(self.engine, self.listener)
        tracing.disable()
        self.provider.shutdown()


def wanted(settings: TelemetrySettings) -> bool:
    """True when tracing is configured (an OTLP endpoint, and the SDK not disabled)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(settings.otlp_endpoint or any(os.environ.get(v) for v in _ENDPOINT_VARIABLES))


def start(
    settings: TelemetrySettings, engine: sa.Engine, *, exporter: Any = None
) -> Tracing | None:
    """Start tracing when configured (or, for tests and benches, to `exporter`, sent at once
    span by span); None when it is off."""
    if exporter is None and not wanted(settings):
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError as exc:
        raise ConfigError(
            f"tracing is configured but OpenTelemetry's SDK cannot be imported ({exc}): "
            "install the telemetry extra, pip install 'gate-approvals[telemetry]'"
        ) from None
    resource = Resource.create({"service.name": service_name(settings)})
    sampler = ParentBased(TraceIdRatioBased(sample_ratio(settings)))
    provider = TracerProvider(resource=resource, sampler=sampler, id_generator=_life_ids_class()())
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(settings)))
    tracing.enable(provider.get_tracer("gate"))
    listener = _statement_events(engine.dialect.name)
    direct.listen(engine, listener)
    log.info("tracing on: service %s, sampled %s", service_name(settings), sample_ratio(settings))
    return Tracing(provider, engine, listener)


def service_name(settings: TelemetrySettings) -> str:
    """The `service.name` gate's spans carry."""
    return settings.service_name or os.environ.get("OTEL_SERVICE_NAME") or "gate"


def sample_ratio(settings: TelemetrySettings) -> float:
    """The share of new traces kept (`OTEL_TRACES_SAMPLER_ARG` when not set; 1 by default)."""
    if settings.sample_ratio is not None:
        return settings.sample_ratio
    given = os.environ.get("OTEL_TRACES_SAMPLER_ARG", "")
    try:
        ratio = float(given) if given else 1.0
    except ValueError:
        raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG is not a number: {given[:40]!r}") from None
    if not 0 <= ratio <= 1:
        raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG must be between 0 and 1, not {ratio}")
    return ratio


def _otlp_exporter(settings: TelemetrySettings) -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise ConfigError(
            f"tracing is configured but the OTLP exporter cannot be imported ({exc}): "
            "install the telemetry extra, pip install 'gate-approvals[telemetry]'"
        ) from None
    if settings.otlp_endpoint is None:
        return OTLPSpanExporter()  # it reads the OTEL_EXPORTER_OTLP_* variables itself
    base = settings.otlp_endpoint.rstrip("/")
    return OTLPSpanExporter(endpoint=base if base.endswith("/v1/traces") else base + "/v1/traces")


def _statement_events(system: str) -> direct.Listener:
    """The store hook's listener: an event per statement on the current span (the request's).

    An event, not a span: the hook is told before the statement runs, and a span per
    statement would triple what a traced ask records. Never the parameters (they hold the
    call's arguments, which may be secrets): the SQL text only, which has placeholders.
    """

    def told(_conn: sa.Connection, sql: str, _params: Any) -> None:
        tracing.event(
            "db.statement",
            {"db.system.name": system, "db.query.text": sql[:_LONGEST_STATEMENT]},
        )

    return told


def _life_ids_class() -> type[Any]:
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class LifeIds(RandomIdGenerator):
        """Random ids, except for a request's life span (`gate.base.tracing.forced_ids`)."""

        def generate_span_id(self) -> int:
            forced = tracing.forced_ids.get()
            return forced[1] if forced is not None else super().generate_span_id()

        def generate_trace_id(self) -> int:
            forced = tracing.forced_ids.get()
            return forced[0] if forced is not None else super().generate_trace_id()

    return LifeIds
