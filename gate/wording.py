"""Every sentence `gate hook` and the SDK can say to the model (standard library only).

Distinct per outcome, so the model can tell "a human said no" from "nobody answered" from
"the gate is down". Kept apart from `gate.protocol`, which decides *what* happened.
"""

from __future__ import annotations

# Not `typing.TYPE_CHECKING`: importing typing alone costs milliseconds on every tool call.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gate.protocol import Reply


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


class Words:
    """Every sentence the hook can say, distinct per outcome so the model can tell
    "a human said no" from "nobody answered" from "the gate is down"."""

    def __init__(self, tool: str, url: str, limit: float, token_hint: str) -> None:
        self.tool, self.url, self.limit, self.token_hint = tool, url, limit, token_hint

    def approved(self, reason: str, edited: bool = False) -> str:
        text = f"gate: {_sentence(reason or 'Approved by a human')}"
        if edited:
            text += (
                f" The {self.tool} call runs with the arguments as the approver edited them, "
                "not as they were sent."
            )
        return text

    def mismatch(self, request_id: str, got: Any, expected: str) -> str:
        bound = f"{got[:12]}…" if isinstance(got, str) and got else "nothing"
        return (
            f"gate: The approval does not match this {self.tool} call: request {request_id} "
            f"was approved for other arguments or another call id (approval bound to {bound}, "
            f"this call is {expected[:12]}…), so the call was blocked. Nobody approved these "
            "exact arguments: ask for approval again, or tell the user."
        )

    def reused(self, key: str | None) -> str:
        return (
            f"gate: The call id {key!r} was already used for a different call (another tool or "
            f"other arguments), and an approval never carries over to other arguments, so this "
            f"{self.tool} call was blocked. Nobody reviewed it. Make the call again with a fresh "
            "call id, or tell the user."
        )

    def rejected(self, reason: str) -> str:
        return (
            f"gate: {_sentence(reason or 'Rejected')} A person reviewed this {self.tool} call "
            "and said no, so it was not run. Do not retry it unchanged: take the comment into "
            "account, change the approach or ask the user."
        )

    def expired(self, reason: str) -> str:
        return f"gate: {_sentence(reason or 'Nobody answered before the deadline')}"

    def cancelled(self, reason: str) -> str:
        return (
            f"gate: The approval request for this {self.tool} call was withdrawn before anyone "
            f"decided ({reason or 'cancelled'}). The call was not run; no human rejected it."
        )

    def deadline(self, request_id: str) -> str:
        return (
            f"gate: Nobody decided this {self.tool} call within the hook's {self.limit:g} s "
            f"limit, so it was not run and approval request {request_id} was withdrawn. No "
            "human rejected it: ask the user whether to try again."
        )

    def withdrawn(self) -> str:
        return f"the agent's hook stopped waiting after {self.limit:g} s"

    def lost(self, request_id: str, problem: str) -> str:
        return (
            f"gate: Lost contact with the approval server at {self.url} while waiting for a "
            f"decision on request {request_id} ({problem}), and it did not come back within the "
            f"hook's {self.limit:g} s limit, so this {self.tool} call was blocked to be safe. "
            "No human rejected it: tell the user the gate server went down."
        )

    def unreachable(self, problem: str) -> str:
        return (
            f"gate: The approval server at {self.url} could not be reached ({problem}), so this "
            f"{self.tool} call was blocked to be safe. Nobody reviewed it. Tell the user the gate "
            "server is down: start it with `gate serve`, or point GATE_URL (or --url) at it."
        )

    def error(self, reply: Reply) -> str:
        return (
            f"gate: The approval server at {self.url} answered with an error "
            f"({error_text(reply)}), so this {self.tool} call was blocked to be safe. Nobody "
            "reviewed it. Tell the user the gate server is failing."
        )

    def unauthorized(self, reply: Reply) -> str:
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
        return f"gate: {_sentence(reason or 'Allowed by policy')}"

    def denied(self, rule: str | None, reason: str) -> str:
        head = "" if rule is None or rule in reason else f"Blocked by rule {rule!r}: "
        return (
            f"gate: {head}{_sentence(reason or 'Denied by policy')} This is a standing policy, "
            "not a person's decision: do not retry this call; take another approach or ask the "
            "user."
        )

    def no_rule(self) -> str:
        return f"gate: No rule covers this {self.tool} call."


# -- drivers --------------------------------------------------------------------------------
