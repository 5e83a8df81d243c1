"""gate.toml's tables for the optional features: `[decision_log]`, `[denials]`, `[stats]`,
`[telemetry]` (a part of `gate.config.settings`, kept apart for its size), and the strict
base every table shares (an unknown key is an error, never ignored)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
)

from gate.config.durations import MAX_DURATION as MAX_DURATION
from gate.config.durations import parse_duration as parse_duration
from gate.config.people import ApproverSettings as ApproverSettings
from gate.config.people import TokenSettings as TokenSettings


class Strict(BaseModel):
    """A table whose unknown keys are errors (a typo must not be ignored)."""

    model_config = ConfigDict(extra="forbid")


def _retention(value: Any) -> timedelta:
    """A duration as `parse_duration` reads it, or 0 (keep none)."""
    if value in (0, "0", 0.0) or (isinstance(value, timedelta) and not value):
        return timedelta(0)
    return parse_duration(value)


class DecisionLogSettings(BaseModel):
    """Recording answers off the hot path: a buffer written in one multi-row insert a window."""

    model_config = ConfigDict(extra="forbid")

    #: record answers at all (off: nothing is buffered or written, replay has nothing to read)
    enabled: bool = True
    #: the window: the buffer is written every this many seconds. A crash (kill -9, power)
    #: loses at most the answers of the last window; a clean stop writes them all. Half a
    #: second keeps what a crash loses small while a busy server writes hundreds of rows per
    #: statement instead of one per call.
    flush_seconds: float = Field(default=0.5, gt=0, le=10)
    #: rows older than this are deleted (by the scheduler's prune job, on any replica)
    retention: timedelta = timedelta(days=30)
    #: how long the call's whole arguments and metadata are kept beside the masked ones, for
    #: `gate policy replay` to evaluate conditions faithfully; 0 keeps none (replay then
    #: evaluates the masked arguments and marks what masking could change as uncertain)
    args_retention: timedelta = timedelta(days=7)
    #: answers held while the database cannot be written; past it the newest are dropped,
    #: counted and logged (an ask is in its request row whatever happens here)
    max_buffered: int = Field(default=100_000, ge=100)
    #: how often the prune job runs (seconds)
    prune_interval_seconds: float = Field(default=300.0, gt=0)

    _parse_durations = field_validator("retention", "args_retention", mode="before")(
        lambda v: _retention(v)
    )


class DenialSettings(Strict):
    """The `[denials]` table: when an agent's rejections make gate ask about its every call.

    After `in_a_row` rejections in a row, or `per_hour` rejections within an hour, every
    further call of that agent is asked until a person resets it (`gate.decisions.denials`). 0 turns
    a threshold off. A rule may set its own (`denials_in_a_row`, `denials_per_hour`).
    """

    #: off by default (0): a trip changes what every agent's calls do, so a team turns it on
    #: knowingly; the docs suggest 3 in a row and 5 an hour
    in_a_row: int = Field(default=0, ge=0)
    per_hour: int = Field(default=0, ge=0)


class StatsSettings(Strict):
    """`[stats]`: approval-fatigue figures (the Stats page, /metrics) and `gate policy suggest`."""

    #: an approval this soon after its card was first shown counts as a glance: too quick to
    #: have read the call (reading a one-line command and pressing a button takes ~2 s)
    glance: timedelta = timedelta(seconds=5)
    #: approvals (by two people or more) a call needs before it is proposed as an allow rule
    suggest_min_approvals: int = Field(default=5, ge=2, le=10_000)
    #: how far back the fatigue metrics on /metrics and the Stats page's suggestions look
    window: timedelta = timedelta(days=30)

    _parse_durations = field_validator("glance", "window", mode="before")(
        lambda v: parse_duration(v)
    )


class TelemetrySettings(Strict):
    """`[telemetry]`: OpenTelemetry tracing (docs/tracing.md). Off unless an OTLP endpoint is
    set here or in the standard `OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT` variables."""

    #: the OTLP/HTTP collector's base URL (`/v1/traces` is added), e.g. http://127.0.0.1:4318
    otlp_endpoint: str | None = None
    #: the `service.name` of gate's spans (default: `OTEL_SERVICE_NAME`, else "gate")
    service_name: str | None = None
    #: the share of traces kept, 0 to 1 (default: `OTEL_TRACES_SAMPLER_ARG`, else 1); an
    #: agent's sampled traceparent is followed whatever this says
    sample_ratio: float | None = Field(default=None, ge=0, le=1)

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("otlp_endpoint must be an http:// or https:// URL (OTLP over HTTP)")
        return value or None
