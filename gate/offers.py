"""What a rule offers approvers beyond a bare yes or no, checked before a decision counts.

Preset reject reasons and approving with edits live here; grants are checked by
`gate.grants.validate`. Each refusal is an `InvalidInput` whose code says which offer.
"""

from __future__ import annotations

from typing import Any

from gate.errors import InvalidInput
from gate.machine import argument_diff
from gate.models import Verdict
from gate.views import RequestView


def with_reasons(
    view: RequestView, verdict: Verdict, comment: str | None, reasons: list[str]
) -> str | None:
    """Combine preset reject reasons and free text into what the model is told."""
    if not reasons:
        return comment
    if verdict != Verdict.reject:
        raise InvalidInput("preset reasons go with a reject", code="invalid_input")
    offered = view.options.get("reject_reasons") or []
    unknown = [r for r in reasons if r not in offered]
    if unknown:
        raise InvalidInput(
            f"not one of this rule's reject reasons: {unknown} (offered: {offered})",
            code="unknown_reason",
        )
    text = "; ".join(reasons)
    return f"{text} - {comment}" if comment else text


def check_edits(view: RequestView, verdict: Verdict, edited_args: dict[str, Any]) -> None:
    """Refuse edits that do not go with an approval, or that the rule forbids."""
    if verdict != Verdict.approve:
        raise InvalidInput("edited arguments go with an approval", code="invalid_input")
    if not view.options.get("allow_edits", True):
        raise InvalidInput(
            "this rule does not allow approving with edits "
            "(it forbids them, or it needs more than one approver)",
            code="edits_not_allowed",
        )
    editable = view.options.get("editable")
    if editable is not None:
        # The rule names what may change; every surface (API, web, chat) is held to it.
        changed = sorted(argument_diff(view.tool_args, edited_args))
        forbidden = [key for key in changed if key not in editable]
        if forbidden:
            raise InvalidInput(
                f"this rule lets approvers change only {sorted(editable)}; "
                f"these may not change: {forbidden}",
                code="edit_not_offered",
            )
