"""Settings: one gate.toml, with GATE_* environment variables overriding scalars.

This is the only module that defines settings. Nothing here runs at import time: the CLI
(or a test) calls `load_settings(path)` and passes the result to `create_app`.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from gate.base.errors import ConfigError
from gate.config.chains import (
    MAX_STAGES,
    Justification,
    SelfApprovalSettings,
    StageSettings,
    VoteSettings,
)
from gate.config.connections import ConnectionSettings, check_database_url
from gate.config.durations import MAX_DURATION as MAX_DURATION
from gate.config.durations import parse_duration as parse_duration
from gate.config.errors import explain
from gate.config.features import (
    DecisionLogSettings,
    DenialSettings,
    StatsSettings,
    Strict,
    TelemetrySettings,
)
from gate.config.oidc import OidcSettings, StepUpSettings

# re-exported: the rest of gate imports every settings model from here
from gate.config.people import ApproverSettings as ApproverSettings
from gate.config.people import TokenSettings as TokenSettings
from gate.config.routing import OnCallSettings as OnCallSettings
from gate.config.routing import RouteSettings as RouteSettings
from gate.config.webhooks import WebhookSettings as WebhookSettings

DEFAULT_CONFIG_NAME = "gate.toml"


class ServerSettings(ConnectionSettings):
    """The `[server]` table (its connection keys are `ConnectionSettings`)."""

    database_url: str = "sqlite:///./gate.db"
    #: base of links in cards; defaults to http://<host>:<port>
    public_url: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)  # 0: the OS picks a free one (tests do)
    default_timeout: timedelta = timedelta(minutes=15)
    max_timeout: timedelta = timedelta(days=7)
    #: the longest window a `when` may count over (`history.count(..., "24h")`): each call
    #: under such a rule reads that much of the agent's past, so it is bounded
    history_max_window: timedelta = timedelta(hours=24)
    #: approvers for requests forced by `metadata.requires_confirmation` with no rule matched
    default_approvers: list[str] = Field(default_factory=list)
    #: channels (`name:target`) for those requests; empty means every configured channel
    default_channels: list[str] | None = None
    max_body_bytes: int = 256 * 1024
    #: deepest nesting of any JSON value a request stores (tool_args, metadata, context, edited
    #: args): real tool inputs are a few levels deep; every surface walks it recursively
    json_max_depth: int = Field(default=32, ge=1, le=200)
    #: most values (objects, arrays, scalars) in one stored JSON value: a page of 50
    #: requests stays quick to serialise and CEL rules stay quick to evaluate
    json_max_nodes: int = Field(default=10_000, ge=1)
    migrate_on_start: bool = True
    sweep_interval_seconds: float = 1.0
    outbox_interval_seconds: float = 1.0
    outbox_max_attempts: int = 12
    #: how often reminders and escalations are checked (they are minutes-scale promises)
    followup_interval_seconds: float = 5.0
    #: PostgreSQL connections per replica, opened as needed and kept; two cores rarely keep
    #: more than a handful busy, and a call that finds none free waits for one
    db_pool_size: int = Field(default=8, ge=1)
    #: extra PostgreSQL connections a burst may open, each closed when returned: a new server
    #: process each time, so none by default (asks at concurrency 32, 2 cores: 49-54% of
    #: /healthz's rate with 16, 55-71% with 0)
    db_pool_overflow: int = Field(default=0, ge=0)
    log_json: bool = False
    log_level: str = "INFO"
    #: allow calls without a token when bound to loopback and no [[tokens]] exist
    allow_anonymous_on_loopback: bool = True
    #: signs web session cookies; generated per process when unset (sessions then end on restart)
    session_secret: SecretStr | None = None
    trusted_proxies: list[str] = Field(default_factory=list)  # X-Forwarded-* count from these only
    #: trusted reverse-proxy header carrying the signed-in approver's name (off when unset)
    trusted_user_header: str | None = None
    #: what that proxy also sends as `X-Gate-Proxy-Secret`; the header counts only with it
    trusted_proxy_secret: SecretStr | None = None
    #: how long a web sign-in lasts (seconds); 12 h covers a working day
    session_max_age_seconds: int = Field(default=12 * 3600, ge=60)

    @model_validator(mode="after")
    def _proxy_proves_itself(self) -> ServerSettings:
        secret = self.trusted_proxy_secret.get_secret_value() if self.trusted_proxy_secret else ""
        if self.trusted_user_header and len(secret) < 16:
            raise ValueError(
                "trusted_user_header needs trusted_proxy_secret (16 characters or more), sent by "
                "the proxy as X-Gate-Proxy-Secret: without it any process that can reach gate "
                "could send the header and act as any approver"
            )
        return self

    _parse_durations = field_validator(
        "default_timeout", "max_timeout", "history_max_window", mode="before"
    )(lambda v: parse_duration(v))
    _check_database_url = field_validator("database_url")(lambda v: check_database_url(v))

    @property
    def base_url(self) -> str:
        """Where people reach the web page (links in cards)."""
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    @property
    def is_loopback(self) -> bool:
        """True when the server listens only on a loopback address."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


class ChannelsSettings(BaseModel):
    """`[channels.NAME]` tables, one per channel, kept as read.

    Each channel validates its own table with its own settings model when it is loaded
    (`gate.delivery.channel.validate_settings`), so a new channel needs no change here. Tables hold
    secrets (tokens, signing secrets): they never appear in a repr or a log line.
    """

    model_config = ConfigDict(extra="allow")

    def configured(self) -> dict[str, dict[str, Any]]:
        """Channel name -> its table, for every channel present in the file or environment."""
        return {
            name: dict(table) if isinstance(table, dict) else {}
            for name, table in (self.model_extra or {}).items()
            if table is not None
        }

    def __repr_args__(self) -> Any:
        # names only: the values are secrets until a channel's model wraps them in SecretStr
        return [(name, "...") for name in self.configured()]


class RuleSettings(Strict):
    """One `[[rules]]` entry; `gate.policy.rules` compiles it."""

    name: str
    tools: list[str] = Field(default_factory=lambda: ["*"])
    when: str | None = None
    action: Literal["allow", "deny", "ask"] = "ask"
    approvers: list[str] = Field(default_factory=list)
    approvals_required: int = Field(default=1, ge=1, le=20)
    timeout: timedelta | None = None
    on_timeout: Literal["reject", "approve"] = "reject"
    channels: list[str] | None = None
    reason: str | None = None
    #: approvers may change the arguments before approving (single-approver rules only)
    allow_edits: bool = True
    #: top-level argument keys chat forms offer for editing (None: all of them)
    editable: list[str] | None = None
    #: grants an approver may attach to an approval ("call", "pattern", "session", "agent");
    #: none by default
    grant_scopes: list[Literal["call", "pattern", "session", "agent"]] = Field(default_factory=list)
    max_grant: timedelta = timedelta(hours=1)
    #: the arguments a "pattern" grant always pins to their approved values (an approver may pin
    #: more, never fewer); required when `grant_scopes` offers "pattern"
    grant_pin: list[str] = Field(default_factory=list)
    #: the most calls one grant may let through (an approver may choose fewer; 1: single-use);
    #: unset: a grant lasts its time, however many calls it covers
    max_grant_uses: int | None = Field(default=None, ge=1, le=10000)
    #: one-click reasons offered beside free text when rejecting
    reject_reasons: list[str] = Field(default_factory=list)
    remind_after: timedelta | None = None
    escalate_after: timedelta | None = None
    #: extra `channel:target`s that get the card on escalation
    escalate_to: list[str] = Field(default_factory=list)
    #: extra approvers (names or group:x) who may decide after escalation
    escalate_approvers: list[str] = Field(default_factory=list)
    #: record this rule's answers in the decision log; `false` only on `allow` rules (a very
    #: chatty read-only rule): an ask or a deny is what the log and replay are for
    log: bool = True
    #: "shadow": tried beside the live rules and only recorded, never answering (gate.policy.shadow)
    mode: Literal["enforce", "shadow"] = "enforce"
    #: when a shadow rule's trial ends (required for shadow rules, at most 30 days away)
    until: datetime | date | None = None
    #: this rule's own trip thresholds for a rejection of a call it asked (gate.decisions.denials);
    #: unset: the `[denials]` table's
    denials_in_a_row: int | None = Field(default=None, ge=0)
    denials_per_hour: int | None = Field(default=None, ge=0)
    #: steps decided in order (`gate.config.chains`); none: one step, the keys above
    stages: list[StageSettings] = Field(default_factory=list, max_length=MAX_STAGES)
    #: thresholds and which votes count, for a rule without stages (`approve` is
    #: `approvals_required`)
    votes: VoteSettings | None = None
    #: approvers must write why they approve (a reject always needs a reason)
    approvers_justify: bool = False
    justification: Justification = "optional"
    self_approval: SelfApprovalSettings | None = None
    #: an approval counts only from a fresh single sign-on (`[oidc]` required)
    step_up: StepUpSettings | None = None
    #: refuse chat clicks by a person whose chat identity gate knows only by their email
    #: address (not a configured id, an identity provider's claim or a console link)
    refuse_email_bound: bool = False

    _parse_timeout = field_validator(
        "timeout", "remind_after", "escalate_after", "max_grant", mode="before"
    )(lambda v: None if v is None else parse_duration(v))

    @model_validator(mode="after")
    def _log_off_only_when_allowing(self) -> RuleSettings:
        if not self.log and self.action != "allow":
            raise ValueError(
                f"log = false is for allow rules only (a chatty read-only rule); rule "
                f"{self.name!r} is action = {self.action!r}, whose answers the decision log "
                "and `gate policy replay` need"
            )
        return self

    @property
    def approvals_needed(self) -> int:
        """The approvals that decide a rule without stages (`votes.approve`, else
        `approvals_required`; both given must agree, `gate.policy.chains` checks)."""
        return self.votes.approve if self.votes is not None else self.approvals_required

    @field_validator("step_up", mode="before")
    @classmethod
    def _step_up_age(cls, value: Any) -> Any:
        """`step_up.max_age` written like every duration ("5m")."""
        if isinstance(value, dict) and isinstance(value.get("max_age"), str | int | float):
            return {**value, "max_age": parse_duration(value["max_age"])}
        return value


class Settings(BaseSettings):
    """Everything gate reads: the file, then GATE_* variables on top."""

    model_config = SettingsConfigDict(
        env_prefix="GATE_",
        env_nested_delimiter="__",
        extra="forbid",
        nested_model_default_partial_update=True,
    )

    server: ServerSettings = Field(default_factory=ServerSettings)
    approvers: list[ApproverSettings] = Field(default_factory=list)
    tokens: list[TokenSettings] = Field(default_factory=list)
    channels: ChannelsSettings = Field(default_factory=ChannelsSettings)
    rules: list[RuleSettings] = Field(default_factory=list)
    #: where cards go, apart from who decides (`gate.policy.routes`)
    routes: list[RouteSettings] = Field(default_factory=list)
    oncall: list[OnCallSettings] = Field(default_factory=list)
    decision_log: DecisionLogSettings = Field(default_factory=DecisionLogSettings)
    denials: DenialSettings = Field(default_factory=DenialSettings)
    stats: StatsSettings = Field(default_factory=StatsSettings)
    #: console sign-in through an OpenID Connect provider (off when absent)
    oidc: OidcSettings | None = None
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    #: receivers told of requests' events, each message signed (`gate.delivery.webhooks`)
    webhooks: list[WebhookSettings] = Field(default_factory=list)
    #: where the settings came from, for messages (not read from the file)
    source: str | None = Field(default=None, exclude=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment wins over the file's values, which arrive as init kwargs.
        return (env_settings, init_settings)

    @model_validator(mode="after")
    def _cross_checks(self) -> Settings:
        names = [a.name for a in self.approvers]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"approver names must be unique; repeated: {sorted(dupes)}")
        emails = [a.email.casefold() for a in self.approvers if a.email]
        if len(set(emails)) < len(emails):  # one sign-in must not map to two people
            raise ValueError("approver emails must be unique (in any letter case)")
        groups = {g for a in self.approvers for g in a.groups}
        if self.oidc is not None:  # groups the identity provider confers count too
            groups |= {g for mapped in self.oidc.group_map.values() for g in mapped}
        for token in self.tokens:
            if token.approver and token.approver not in names:
                raise ValueError(
                    f"token {token.name!r} names approver {token.approver!r}, "
                    "which is not in [[approvers]]"
                )
        hooks = [w.name for w in self.webhooks]
        if len(set(hooks)) != len(hooks):
            raise ValueError("webhook names must be unique")
        rule_names = [r.name for r in self.rules]
        if len(set(rule_names)) != len(rule_names):
            raise ValueError("rule names must be unique")
        for rule in self.rules:
            if rule.step_up is not None and rule.step_up.needs_sign_on and self.oidc is None:
                raise ValueError(
                    f"rule {rule.name!r}: step_up needs single sign-on, and [oidc] is not "
                    "configured: no approval of this rule could ever count"
                )
            if rule.step_up is not None and rule.step_up.webauthn and not self.server.public_url:
                raise ValueError(
                    f"rule {rule.name!r}: step_up.webauthn needs [server].public_url (the "
                    "address people open gate at: passkeys are bound to its host name)"
                )
            for entry in [*rule.approvers, *rule.escalate_approvers]:
                if entry.startswith("group:"):
                    if entry[6:] not in groups:
                        raise ValueError(
                            f"rule {rule.name!r}: approver group {entry[6:]!r} has no members"
                        )
                elif entry not in names:
                    raise ValueError(
                        f"rule {rule.name!r}: approver {entry!r} is not in [[approvers]]"
                    )
        return self

    def approver(self, name: str) -> ApproverSettings | None:
        """The approver called `name`, if any."""
        return next((a for a in self.approvers if a.name == name), None)

    def token(self, name: str) -> TokenSettings | None:
        """The `[[tokens]]` entry called `name`, if any."""
        return next((t for t in self.tokens if t.name == name), None)

    def approver_by_email(self, address: str) -> ApproverSettings | None:
        """The approver with this email, in any letter case."""
        return next((a for a in self.approvers if a.has_email(address)), None)

    def approver_by_identity(self, channel: str, user_id: str) -> ApproverSettings | None:
        """The approver whose id on `channel` is `user_id`."""
        return next((a for a in self.approvers if a.identity(channel) == user_id), None)


def resolve_config_path(path: str | Path | None) -> Path | None:
    """The file to read: an explicit path, else $GATE_CONFIG, else ./gate.toml when present."""
    if path:
        return Path(path)
    env = os.environ.get("GATE_CONFIG")
    if env:
        return Path(env)
    default = Path(DEFAULT_CONFIG_NAME)
    return default if default.exists() else None


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Read gate.toml (if any) and the environment; raise ConfigError naming file, key, reason."""
    config_path = resolve_config_path(path)
    data: dict[str, Any] = {}
    source = str(config_path) if config_path else "defaults"
    text = ""
    if config_path is not None:
        try:
            text = config_path.read_text(encoding="utf-8")
            data = tomllib.loads(text)
        except FileNotFoundError:
            raise ConfigError("file not found", source=source) from None
        except OSError as exc:  # a directory, no permission...
            raise ConfigError(f"cannot be read: {exc.strerror or exc}", source=source) from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"not UTF-8 text (byte {exc.start})", source=source) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"not valid TOML: {exc}", source=source) from None
    data.update(overrides)
    try:
        settings = Settings(**data)
    except ValidationError as exc:
        raise explain(exc, model=Settings, data=data, text=text, source=source) from None
    except SettingsError as exc:  # e.g. GATE_SERVER set to something that is not JSON
        raise ConfigError(f"a GATE_* environment variable: {exc}", source=source) from None
    settings.source = source
    return settings
