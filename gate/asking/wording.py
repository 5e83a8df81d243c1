"""Every sentence `gate hook`, the SDK and the MCP servers can say to the model.

Distinct per outcome, so the model can tell "a human said no" from "nobody answered" from
"the gate is down". Kept apart from `gate.asking.askflow`, which decides *what* happened. Standard
library only (`gate hook` imports it on every tool call).
"""

from __future__ import annotations

# Not `typing.TYPE_CHECKING`: importing typing alone costs milliseconds on every tool call.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gate.asking.exchange import Reply

#: Claude Code caps hook output strings at 10,000 characters; answers stay well inside it
REASON_MAX = 4000
TOKEN_FIX = (
    'set GATE_TOKEN (or --token) to an agent token from gate.toml [[tokens]] (role = "agent")'
)


def clip(text: str) -> str:
    """`text` cut to REASON_MAX characters, marked with an ellipsis when cut."""
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "…"


def _sentence(text: str) -> str:
    text = text.strip()
    return text if not text or text[-1] in ".!?" else text + "."


def error_text(reply: Reply) -> str:
    """A failed reply in one line: status, error code and message."""
    err = reply.body.get("error") if isinstance(reply.body, dict) else None
    if isinstance(err, dict):
        return f"HTTP {reply.status} {err.get('code')}: {err.get('message')}"
    if reply.status:
        return f"HTTP {reply.status}" + (f", {reply.problem}" if reply.problem else "")
    return reply.problem or "no answer"


def edits_not_applied(reason: str, edited: dict[str, Any]) -> str:
    """An approval with edits that the agent cannot apply: a deny naming the approved args."""
    import json

    args = json.dumps(edited, ensure_ascii=False, sort_keys=True)
    return (
        f"{_sentence(reason)} This hook cannot make the agent run the call with the approver's "
        f"arguments, so the call as sent was blocked and nothing ran. To go ahead, make the call "
        f"again with exactly these arguments (it is asked about again): {args}"
    )


class Words:
    """Every sentence the hook can say, distinct per outcome so the model can tell
    "a human said no" from "nobody answered" from "the gate is down"."""

    def __init__(self, tool: str, url: str, limit: float, token_hint: str) -> None:
        self.tool, self.url, self.limit, self.token_hint = tool, url, limit, token_hint

    def approved(self, reason: str, edited: bool = False) -> str:
        """A person approved (with edits: the call runs as they edited it)."""
        text = f"gate: {_sentence(reason or 'Approved by a human')}"
        if edited:
            text += (
                f" The {self.tool} call runs with the arguments as the approver edited them, "
                "not as they were sent."
            )
        return text

    def mismatch(self, request_id: str, got: Any, expected: str) -> str:
        """An approval bound to other arguments or another call id: blocked."""
        bound = f"{got[:12]}…" if isinstance(got, str) and got else "nothing"
        return (
            f"gate: The approval does not match this {self.tool} call: request {request_id} "
            f"was approved for other arguments or another call id (approval bound to {bound}, "
            f"this call is {expected[:12]}…), so the call was blocked. Nobody approved these "
            "exact arguments: ask for approval again, or tell the user."
        )

    def reused(self, key: str | None) -> str:
        """The call id was already used for a different call: blocked."""
        return (
            f"gate: The call id {key!r} was already used for a different call (another tool or "
            f"other arguments), and an approval never carries over to other arguments, so this "
            f"{self.tool} call was blocked. Nobody reviewed it. Make the call again with a fresh "
            "call id, or tell the user."
        )

    def spent(self, key: str | None) -> str:
        """The call id's approval was used up: the approved call already ran."""
        return (
            f"gate: The call id {key!r} was approved once and that call already ran; one "
            f"approval runs a call once, so this {self.tool} call was blocked. Nobody "
            "approved it again. Make the call with a fresh call id to ask for approval, or "
            "tell the user."
        )

    def rejected(self, reason: str) -> str:
        """A person said no: do not retry unchanged."""
        return (
            f"gate: {_sentence(reason or 'Rejected')} A person reviewed this {self.tool} call "
            "and said no, so it was not run. Do not retry it unchanged: take the comment into "
            "account, change the approach or ask the user."
        )

    def expired(self, reason: str) -> str:
        """Nobody answered before the rule's deadline."""
        return f"gate: {_sentence(reason or 'Nobody answered before the deadline')}"

    def cancelled(self, reason: str) -> str:
        """The request was withdrawn before anyone decided."""
        return (
            f"gate: The approval request for this {self.tool} call was withdrawn before anyone "
            f"decided ({reason or 'cancelled'}). The call was not run; no human rejected it."
        )

    def deadline(self, request_id: str) -> str:
        """Nobody decided within the caller's own limit; the request was withdrawn."""
        return (
            f"gate: Nobody decided this {self.tool} call within the hook's {self.limit:g} s "
            f"limit, so it was not run and approval request {request_id} was withdrawn. No "
            "human rejected it: ask the user whether to try again."
        )

    def withdrawn(self) -> str:
        """The reason a request is withdrawn with at the caller's deadline."""
        return f"the agent's hook stopped waiting after {self.limit:g} s"

    def lost(self, request_id: str, problem: str) -> str:
        """The server went away during the wait and did not come back in time."""
        return (
            f"gate: Lost contact with the approval server at {self.url} while waiting for a "
            f"decision on request {request_id} ({problem}), and it did not come back within the "
            f"hook's {self.limit:g} s limit, so this {self.tool} call was blocked to be safe. "
            "No human rejected it: tell the user the gate server went down."
        )

    def unreachable(self, problem: str) -> str:
        """The server could not be reached before anyone was asked."""
        return (
            f"gate: The approval server at {self.url} could not be reached ({problem}), so this "
            f"{self.tool} call was blocked to be safe. Nobody reviewed it. Tell the user the gate "
            "server is down: start it with `gate serve`, or point GATE_URL (or --url) at it."
        )

    def server_error(self, reply: Reply, request_id: str | None = None) -> str:
        """The server failed (5xx): blocked, even with --fail-open."""
        during = (
            f" while the hook waited for a decision on request {request_id}, until its "
            f"{self.limit:g} s limit"
            if request_id
            else ""
        )
        return (
            f"gate: The approval server at {self.url} failed ({error_text(reply)}){during}, so "
            f"this {self.tool} call was blocked to be safe. Nobody approved it. Tell the user "
            "the gate server is failing and needs fixing; a failing gate never lets calls "
            "through, not even with --fail-open."
        )

    def garbled(self, reply: Reply) -> str:
        """Something that is not a gate answer came back (a proxy, a login page)."""
        return (
            f"gate: The server at {self.url} answered with something that is not a gate "
            f"answer ({error_text(reply)}), so this {self.tool} call was blocked to be safe. "
            "Nobody reviewed it. Tell the user to check that GATE_URL (or --url) points at the "
            "gate server itself, not a proxy, login page or another service."
        )

    def abandoned(self, why: str, request_id: str | None, status: str | None) -> str:
        """The caller was stopped before, while or just as the request was decided."""
        if request_id is None:
            return (
                f"gate: The hook was stopped ({why}) before it had asked about this {self.tool} "
                "call, so gate did not let it through. Nobody reviewed it."
            )
        if status is None:
            return (
                f"gate: The hook was stopped ({why}) while this {self.tool} call waited for "
                f"approval, so approval request {request_id} was withdrawn and gate did not let "
                "the call through. No human rejected it."
            )
        return (
            f"gate: The hook was stopped ({why}) just as approval request {request_id} was "
            f"{status}, so gate did not let this {self.tool} call through."
        )

    def stopped(self, why: str) -> str:
        """The reason a request is withdrawn with when its caller is stopped."""
        return f"the agent's hook was stopped ({why}) before anyone decided"

    def error(self, reply: Reply) -> str:
        """Another error reply from the server."""
        return (
            f"gate: The approval server at {self.url} answered with an error "
            f"({error_text(reply)}), so this {self.tool} call was blocked to be safe. Nobody "
            "reviewed it. Tell the user the gate server is failing."
        )

    def unauthorized(self, reply: Reply) -> str:
        """The token was refused (401) or may not ask for approvals (403)."""
        what = (
            "refused the hook's credentials" if reply.status == 401 else "does not let this token"
        )
        fix = 'use a token whose role is "agent"' if reply.status == 403 else self.token_hint
        return (
            f"gate: The approval server at {self.url} {what} ({error_text(reply)}"
            f"{'' if reply.status == 401 else ': ask for approvals'}), so this {self.tool} call "
            f"was blocked. Nobody reviewed it. Tell the user to fix the hook's configuration: "
            f"{fix}."
        )

    def allowed(self, reason: str) -> str:
        """A rule (or a grant) let the call through."""
        return f"gate: {_sentence(reason or 'Allowed by policy')}"

    def unjustified(self, message: str) -> str:
        """The rule needs the agent to say why the call is needed, and it did not."""
        return (
            f"gate: This {self.tool} call was blocked before anyone saw it: "
            f"{_sentence(message.removeprefix('justification: '))} Retry the same call with "
            "a justification: say in the call's `description` why it is needed (what it is "
            "for and who asked for it). If this tool has no description, tell the user the "
            "rule needs a justification this agent cannot send."
        )

    def denied(self, rule: str | None, reason: str) -> str:
        """A rule denies the call outright: a standing policy, not a person."""
        head = "" if rule is None or rule in reason else f"Blocked by rule {rule!r}: "
        return (
            f"gate: {head}{_sentence(reason or 'Denied by policy')} This is a standing policy, "
            "not a person's decision: do not retry this call; take another approach or ask the "
            "user."
        )

    def no_rule(self) -> str:
        """No rule covers the call."""
        return f"gate: No rule covers this {self.tool} call."
