"""Guarding tool calls with the SDK: `PreToolUseHook` for agent frameworks, `@require_approval`
for plain functions. Both ask through a `GateClient` and run the call only on a yes, with the
approver's edits when there are any."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

from gate.asking.toolcall import GATE_DOWN, Verdict
from gate.client.api import GateClient

F = TypeVar("F", bound=Callable[..., Any])


class ApprovalDenied(Exception):
    """The call was not approved; `reason` is written for the model, `request` is the request."""

    def __init__(
        self, reason: str, request: dict[str, Any] | None = None, *, verdict: Verdict | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.request = request
        self.verdict = verdict

    @property
    def kind(self) -> str | None:
        """Why: rejected, expired, cancelled, denied, deadline, unreachable, ..."""
        return self.verdict.kind if self.verdict else None


# -- a PreToolUse hook for agent frameworks --------------------------------------------------


@dataclass
class HookContext:
    """What a PreToolUse hook sees: the tool call and per-request facts."""

    tool_name: str
    tool_args: dict[str, Any] = field(default_factory=dict)
    agent_id: str | None = None
    user_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class HookResult:
    """What a hook answers: `allow=False` blocks and `error` is shown to the model.

    `modified_args` is the full argument object to run with when an approver edited it.
    """

    allow: bool = True
    error: str | None = None
    modified_args: dict[str, Any] | None = None
    modified_result: Any = None
    side_effects: list[str] = field(default_factory=list)


class PreToolUseHook:
    """A PreToolUse hook that asks gate and waits for the verdict.

    Args:
        client: the GateClient to ask.
        timeout: seconds to wait for a person (default: the client's).
        on_no_rule: what to do when no rule covers the call ("allow" or "deny").
        fail_open: allow calls when gate is unreachable or errors (NOT recommended).
    """

    def __init__(
        self,
        client: GateClient,
        *,
        timeout: float | None = None,
        on_no_rule: Literal["allow", "deny"] = "allow",
        fail_open: bool = False,
    ) -> None:
        self.client = client
        self.timeout = timeout
        self.on_no_rule = on_no_rule
        self.fail_open = fail_open

    def __call__(self, ctx: HookContext) -> HookResult:
        """Ask gate about `ctx` and block until decided."""
        return self._result(self.client.check(ctx.tool_name, ctx.tool_args, **self._kw(ctx)))

    async def call_async(self, ctx: HookContext) -> HookResult:
        """Ask gate about `ctx` without blocking the event loop."""
        verdict = await self.client.check_async(ctx.tool_name, ctx.tool_args, **self._kw(ctx))
        return self._result(verdict)

    def _kw(self, ctx: HookContext) -> dict[str, Any]:
        meta = ctx.metadata
        session = meta.get("session_id") or meta.get("conversation_id")
        call_id = meta.get("tool_call_id") or meta.get("tool_use_id")
        kw: dict[str, Any] = {
            "agent_id": ctx.agent_id,
            "user_id": ctx.user_id,
            "metadata": meta,
            "session_id": str(session) if session else None,
            "timeout": self.timeout,
        }
        if call_id:
            kw["idempotency_key"] = str(call_id)
            kw["context"] = {"tool_call_id": str(call_id)}  # gate's spans carry it
        return kw

    def _result(self, verdict: Verdict) -> HookResult:
        trail = f"gate: {verdict.kind}" + (
            f" (request {verdict.request_id})" if verdict.request else ""
        )
        allow = (
            verdict.allowed
            or (verdict.kind == "no_rule" and self.on_no_rule == "allow")
            or (self.fail_open and verdict.kind in GATE_DOWN)
        )
        if allow:
            return HookResult(
                allow=True,
                modified_args=verdict.updated_args,
                side_effects=[f"{trail}: {verdict.reason}"],
            )
        return HookResult(allow=False, error=verdict.reason, side_effects=[trail])


# -- a decorator for plain functions ---------------------------------------------------------


def require_approval(
    rule: str | None = None,
    *,
    client: GateClient | Callable[[], GateClient] | None = None,
    tool_name: str | None = None,
    summary: str | Callable[..., str] | None = None,
    timeout: float | None = None,
    metadata: dict[str, Any] | None = None,
) -> Callable[[F], F]:
    """Make a sync or async function run only once gate approves the call.

    The call is always asked about (`metadata.requires_confirmation`), so a function marked
    this way needs a person even when no rule names it; a rule that matches still decides
    approvers, timeout, or an outright allow/deny. When the approver edited the arguments, the
    function is called with the edited values.

    Args:
        rule: a label sent as `metadata.rule`, for `when` expressions and approvers to see.
        client: a GateClient, or a function returning one (default: `GateClient()` from env,
            made on first call).
        tool_name: the tool name policy sees (default: the function's name).
        summary: a line for approvers, or a function of the call's arguments returning one.
        timeout: seconds to wait for a person (default: the client's).
        metadata: more facts for policy.

    Raises:
        ApprovalDenied: when the call is not approved (rejected, expired, denied, gate down...).
    """

    def decorate(fn: F) -> F:
        guard = _Guard(fn, rule, client, tool_name, summary, timeout, metadata)
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                tool_args, kw = guard.ask(args, kwargs)
                verdict = await guard.client().check_async(guard.name, tool_args, **kw)
                args, kwargs = guard.settle(verdict, args, kwargs, tool_args)
                return await fn(*args, **kwargs)

            return cast(F, async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tool_args, kw = guard.ask(args, kwargs)
            verdict = guard.client().check(guard.name, tool_args, **kw)
            args, kwargs = guard.settle(verdict, args, kwargs, tool_args)
            return fn(*args, **kwargs)

        return cast(F, wrapper)

    return decorate


class _Guard:
    """One decorated function: what it asks gate, and how a verdict turns into its call."""

    def __init__(
        self,
        fn: Callable[..., Any],
        rule: str | None,
        client: GateClient | Callable[[], GateClient] | None,
        tool_name: str | None,
        summary: str | Callable[..., str] | None,
        timeout: float | None,
        metadata: dict[str, Any] | None,
    ) -> None:
        self.name = tool_name or fn.__name__
        self.signature = inspect.signature(fn)
        self.rule, self.summary, self.timeout, self.metadata = rule, summary, timeout, metadata
        self._client_source = client
        self._client: GateClient | None = None

    def client(self) -> GateClient:
        """The client to ask, made on first use (so importing a module asks nothing)."""
        if self._client is None:
            source = self._client_source
            self._client = source() if callable(source) else source or GateClient()
        return self._client

    def ask(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The tool arguments (JSON, by parameter name) and `check()` keywords for a call."""
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        tool_args = json.loads(json.dumps(dict(bound.arguments), default=repr))
        meta = {"requires_confirmation": True, **(self.metadata or {})}
        if self.rule:
            meta["rule"] = self.rule
        kw: dict[str, Any] = {"metadata": meta, "timeout": self.timeout}
        summary = self.summary
        if summary is not None:
            kw["summary"] = summary(*bound.args, **bound.kwargs) if callable(summary) else summary
        return tool_args, kw

    def settle(
        self,
        verdict: Verdict,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        sent: dict[str, Any],
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments to call with on a yes (edits applied); ApprovalDenied on anything else.

        Unchanged arguments keep their Python objects; edits that do not fit the function's
        parameters are a deny, never a call with half of them.
        """
        if not verdict.allowed:
            raise ApprovalDenied(verdict.reason, verdict.request, verdict=verdict)
        edited = verdict.updated_args
        if edited is None:
            return args, kwargs
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        extra = sorted(set(edited) - set(bound.arguments))
        missing = sorted(set(bound.arguments) - set(edited))
        if extra or missing:
            raise ApprovalDenied(
                f"gate: The approver edited the arguments of this call in a way the function "
                f"cannot take (unknown: {extra}, removed: {missing}), so it was not run.",
                verdict.request,
                verdict=verdict,
            )
        for name, value in edited.items():
            if value != sent.get(name):
                bound.arguments[name] = value
        return bound.args, bound.kwargs


__all__ = ["ApprovalDenied", "HookContext", "HookResult", "PreToolUseHook", "require_approval"]
