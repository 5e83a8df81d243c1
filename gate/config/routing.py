"""Where cards go, apart from who decides: `[[routes]]` and `[[oncall]]` (a part of
`gate.config.settings`'s settings, kept apart for its size; import them from
`gate.config.settings`). `gate.policy.routes` checks and compiles them.

    [[oncall]]
    name = "payments"
    people = ["alice", "bob"]         # each on call for one `shift`, in turn
    shift = "7d"
    start = 2026-11-23T09:00:00Z      # when the first person's first shift began

    [[routes]]
    name = "big payments to finance"
    rules = ["payments"]              # requests of these rules (none: every rule)
    when = "args.amount > 10000"      # CEL over the call, like a rule's `when`
    channels = ["slack:C0FINANCE"]
    users = ["carol"]                 # a direct card, by the person's channel ids
    oncall = ["payments"]             # whoever is on call when the request is made
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gate.config.durations import parse_duration


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RouteSettings(_Strict):
    """One `[[routes]]` entry: where the cards of the requests it matches go."""

    name: str
    #: the rules whose requests it routes (None: every rule's)
    rules: list[str] | None = None
    #: CEL over the call (the variables of a rule's `when`); none: every request of `rules`
    when: str | None = None
    #: `name:target` pairs, as a rule's `channels`
    channels: list[str] = Field(default_factory=list)
    #: approver names or `group:x`: each gets the card on every configured channel where
    #: `[[approvers]]` gives their id
    users: list[str] = Field(default_factory=list)
    #: `[[oncall]]` names: whoever is on call when the request is made gets the card
    oncall: list[str] = Field(default_factory=list)
    #: stop at this route when it matches (false: later routes add their targets too)
    stop: bool = True
    #: the rule's own `channels` (or every channel's default) get the card as well
    keep_rule_channels: bool = False


class OnCallSettings(_Strict):
    """One `[[oncall]]` entry: people on call in turn, one `shift` each from `start`."""

    name: str
    people: list[str] = Field(min_length=1)
    shift: timedelta = timedelta(days=7)
    start: datetime

    _parse_shift = field_validator("shift", mode="before")(parse_duration)

    @field_validator("start")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("give the time zone, e.g. 2026-11-23T09:00:00Z")
        return value

    def on_call(self, now: datetime) -> str:
        """Who is on call at `now` (before `start`: the first person)."""
        turns = max(0, int((now - self.start) / self.shift))
        return self.people[turns % len(self.people)]
