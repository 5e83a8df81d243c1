"""The `[decision_log]` table: how gate records every answer of `POST /v1/gate`.

A part of `gate.config`'s settings (`Settings.decision_log`), kept here so `gate.config` stays
within its size. `gate.decision_log` reads them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


def _retention(value: Any) -> timedelta:
    """A duration as `gate.config.parse_duration` reads it, or 0 (keep none)."""
    from gate.config import parse_duration

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
