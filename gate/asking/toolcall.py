"""The tool call an agent asks gate about, and the verdict it gets back.

`Call` is the body of `POST /v1/gate`; `Verdict` is what `gate.asking.askflow.decide()` returns (a
kind, and a reason written for the model). `derived_key` and `summarise` fill in what an
agent runtime does not send. Standard library only: `gate hook` imports this on every call.
"""

from __future__ import annotations

import json

# Not `typing.TYPE_CHECKING`: importing typing alone costs milliseconds on every tool call.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: kinds that let the call run
ALLOWING = frozenset({"approved", "allowed", "granted"})
#: the gate could not be reached before anyone was asked: the only kind --fail-open opens.
#: A server that answers (5xx, garbage, an error) is never "no decision".
GATE_DOWN = frozenset({"unreachable"})


class Verdict:
    """The answer to "may this call run?": a kind and a reason written for the model.

    Kinds: approved, rejected, expired, cancelled (a request's end); allowed, denied, no_rule
    (policy); granted (a time-boxed grant let it through); mismatch (the approval is not bound
    to this call), reused (the call id was used for another call), spent (the approved call
    already ran); unreachable (before anyone was asked), lost (during the wait), server_error
    (5xx), garbled (not a gate answer), error (another error reply), unauthorized,
    misconfigured, deadline, abandoned (the caller stopped), bad_input; unjustified (the
    rule needs the agent's justification and none was sent: retry with one).
    """

    __slots__ = ("kind", "reason", "rule", "request")

    def __init__(
        self,
        kind: str,
        reason: str,
        rule: str | None = None,
        request: dict[str, Any] | None = None,
    ) -> None:
        self.kind, self.reason, self.rule, self.request = kind, reason, rule, request

    def __repr__(self) -> str:
        return f"Verdict({self.kind!r}, {self.reason!r}, rule={self.rule!r})"

    @property
    def allowed(self) -> bool:
        """True when the call may run (approved, or allowed by a rule)."""
        return self.kind in ALLOWING

    @property
    def request_id(self) -> str | None:
        """The id of the approval request, when one was made."""
        return str(self.request["id"]) if self.request else None

    @property
    def updated_args(self) -> dict[str, Any] | None:
        """The full argument object to run with when an approver edited it; None: as asked."""
        edited = self.request.get("approved_args") if self.allowed and self.request else None
        return dict(edited) if isinstance(edited, dict) else None


class Call:
    """One tool call to ask gate about (the fields of `POST /v1/gate`).

    `derived_key`: the key was derived from session, tool and args (there was no call id), so
    a finished request under it is an earlier, identical call: ask again under a fresh key.
    """

    def __init__(
        self,
        tool_name: str,
        tool_args: dict[str, Any] | None = None,
        *,
        agent_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
        summary: str | None = None,
        metadata: dict[str, Any] | None = None,
        context: dict[str, Any] | None = None,
        derived_key: bool = False,
        justification: str | None = None,
    ) -> None:
        self.tool_name = tool_name
        self.tool_args = tool_args if tool_args is not None else {}
        self.agent_id = agent_id
        self.user_id = user_id
        self.session_id = session_id
        self.idempotency_key = idempotency_key
        self.summary = summary
        self.metadata = metadata if metadata is not None else {}
        self.context = context if context is not None else {}
        self.derived_key = derived_key
        #: why the agent says the call is needed (a rule may require it)
        self.justification = justification

    def body(self, key: str | None, expires_in: float | None = None) -> dict[str, Any]:
        """The JSON body of `POST /v1/gate` (the server refuses unknown fields).

        `expires_in`: seconds until the caller gives up; the request expires no later.
        """
        body: dict[str, Any] = {
            "tool_name": self.tool_name,
            "tool_args": self.tool_args,
            "metadata": self.metadata,
            "context": self.context,
        }
        optional = {
            "agent_id": self.agent_id,
            "user_id": self.user_id,
            "session_id": self.session_id,
            "idempotency_key": key,
            "summary": self.summary,
            "justification": self.justification,
            "expires_in": expires_in,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        return body


def derived_key(prefix: str, session_id: str | None, tool_name: str, args: Any) -> str:
    """An idempotency key for calls without an id: session + tool + canonical args."""
    canonical = json.dumps(
        [session_id, tool_name, args], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    import hashlib  # only calls without an id need it

    return f"{prefix}:{hashlib.sha256(canonical.encode()).hexdigest()[:40]}"


def summarise(tool_name: str, args: dict[str, Any]) -> str:
    """One line for approvers: the tool and its most telling argument."""
    for name in ("command", "file_path", "url", "query", "pattern", "prompt", "path"):
        value = args.get(name)
        if isinstance(value, str) and value.strip():
            text = f"{tool_name}: {value.strip().splitlines()[0]}"
            break
    else:
        text = f"{tool_name} {json.dumps(args, ensure_ascii=False, default=str)}"
    return text if len(text) <= 200 else text[:199] + "…"


__all__ = [
    "ALLOWING",
    "GATE_DOWN",
    "Call",
    "Verdict",
    "derived_key",
    "summarise",
]
