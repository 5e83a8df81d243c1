"""The Feishu / Lark approval card (JSON 2.0), rendered from a request's view by pure functions.

Untrusted text (tool arguments, summaries, names) is cleaned by `gate.text.untrusted` (capped,
invisible and direction-changing characters removed, secrets masked: the same rules as every
other surface). It then goes into `plain_text` elements with tag-shaped text defused, or into
a code block whose content cannot close the block or open a tag. In the edit form, argument
values appear only as input default values, never as markdown.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from channels import decisions, edits
from gate.base.statuses import utcnow
from gate.decisions.readmodel import RequestView
from gate.text import untrusted
from gate.text.untrusted import MASK as MASK

#: Feishu caps a card request at 30 KB; stay under it with room for the envelope
CARD_BYTES = 28_000
#: characters of the call's rendering a card shows whole (and so may offer to approve)
ARGS_CHARS = 2_500
TEXT_CHARS = 500
VOTES_SHOWN = 20
#: Feishu's input box holds at most 1,000 characters; longer values are edited in gate
MAX_INPUT = 1000
#: the reason box (what the model is told)
MAX_REASON = 500
TEMPLATES = {
    "approved": "green",
    "rejected": "red",
    "expired": "grey",
    "cancelled": "grey",
}

# -- untrusted text -------------------------------------------------------------------------

# `<` before a letter, `/`, `!` or `?` could open a tag: a look-alike bracket defuses it
_TAG_OPEN = untrusted.compile(r"<([A-Za-z/!?])")
#: inside a code block only tag-like markup and the fence itself could escape
_CODE_ESCAPES = str.maketrans({"&": "&#38;", "<": "&#60;", ">": "&#62;", "`": "&#96;"})


def mask_secrets(value: Any) -> Any:
    """A copy of `value` with secrets masked (`gate.text.untrusted.mask_value`)."""
    return untrusted.mask_value(value)


def clean(
    text: str | None, limit: int = TEXT_CHARS, *, plain: bool = True, mask: bool = True
) -> str:
    """Untrusted text made safe to show: no invisible characters, secrets masked, cut to
    `limit`, and (for plain text) no tag-shaped `<`.

    `mask=False` is for what an approver typed (a reason the agent is told, as typed); it is
    masked where it is shown.
    """
    if not text:
        return ""
    text = untrusted.clean(text) if mask else untrusted.strip_invisible(untrusted.cap(text))
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    # plain_text is documented as plain, but whether it ever reads <at ...> is unconfirmed:
    # a lookalike bracket makes tag-shaped text inert either way (after the cut: same length).
    if plain:
        text = _TAG_OPEN.sub(lambda m: "‹" + str(m.group(1)), text)
    return text


def code_block(text: str) -> str:
    """A markdown code block whose content cannot close the block or open a tag."""
    body = text.translate(_CODE_ESCAPES)
    return f"```\n{body}\n```"


def _plain(text: str) -> dict[str, Any]:
    return {"tag": "plain_text", "content": text}


def _div(text: str, element_id: str | None = None) -> dict[str, Any]:
    div: dict[str, Any] = {"tag": "div", "text": _plain(text)}
    if element_id:
        div["element_id"] = element_id
    return div


# -- the card -------------------------------------------------------------------------------


def render_card(
    view: RequestView,
    *,
    args_chars: int = ARGS_CHARS,
    editing: bool = False,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The JSON 2.0 card for a request in its current state (buttons only while pending).

    `editing` shows the "edit & approve" form instead of the decision form (the card an
    approver gets back after pressing "Edit & approve"); `now` is what the countdown counts
    from (default: the current time).
    """
    now = now or utcnow()
    shown = decisions.arguments(view, ARGS_CHARS, link=False)
    votes = VOTES_SHOWN
    card = _build_card(view, shown, args_chars, votes, editing, now)
    while len(json.dumps(card, ensure_ascii=False).encode()) > CARD_BYTES:
        # Whole arguments stay whole (the card offers to approve them): the votes give way.
        if not shown.whole and args_chars > 200:
            args_chars //= 2
        elif votes > 0:
            votes //= 2
        else:
            break
        card = _build_card(view, shown, args_chars, votes, editing, now)
    return card


def _build_card(
    view: RequestView,
    shown: decisions.Arguments,
    args_chars: int,
    votes: int,
    editing: bool,
    now: datetime,
) -> dict[str, Any]:
    tool = clean(view.tool_name, 100)
    template = TEMPLATES.get(view.status, "blue" if view.approvals else "orange")
    headline = clean(decisions.headline(view, shown), 200, mask=False)
    title = f"{decisions.TITLES.get(view.status, view.status.title())}: {headline}"
    elements = [
        *_condition(view),
        *_arguments(view, shown, args_chars),
        *_claim(view),
        *_facts(view, now),
        *_history(view, votes),
        *_actions(view, tool, editing and shown.whole, approvable=shown.whole),
        {
            "tag": "button",
            "element_id": "open",
            "type": "default",
            "text": _plain("Open in gate"),
            "behaviors": [{"type": "open_url", "default_url": view.url}],
        },
    ]
    return {
        "schema": "2.0",
        "config": {"update_multi": True, "summary": {"content": title}},
        "header": {"title": _plain(title), "template": template},
        "body": {"elements": elements},
    }


def _facts(view: RequestView, now: datetime) -> list[dict[str, Any]]:
    """Who asked under which rule, and until when."""
    elements: list[dict[str, Any]] = []
    deadline = (
        f"{view.expires_at:%Y-%m-%d %H:%M} UTC, {decisions.countdown(view.expires_at, now)} "
        f"(then {view.on_timeout})"
    )
    pending = view.status == "pending"
    facts = [
        f"Agent: {clean(view.agent_id, 100) or '-'}",
        f"User: {clean(view.user_id, 100) or '-'}",
        f"Rule: {clean(decisions.rule_and_stage(view), decisions.STAGE_CHARS) or '-'}",
        f"Deadline: {deadline}" if pending else f"Asked: {view.created_at:%Y-%m-%d %H:%M} UTC",
    ]
    elements.append(_div("\n".join(facts), "facts"))
    return elements


def _condition(view: RequestView) -> list[dict[str, Any]]:
    """What failed in the rule's condition, when it did: gate asked to be safe."""
    asked = decisions.why_asked(view)  # or why every call of its agent is asked
    if not asked:
        return []
    return [_div(f"{asked.heading}\n{clean(asked.words, 300)}", "condition")]


def _arguments(
    view: RequestView, shown: decisions.Arguments, args_chars: int
) -> list[dict[str, Any]]:
    """The call as gate renders it, one inert code block: whole, or cut to `args_chars`
    ending with what is not shown, then why the card offers no approval; then the arguments
    the rule's condition reads."""
    shown = decisions.recut(view, shown, args_chars, ARGS_CHARS)  # a smaller card: cut shorter
    elements = [
        _div("The call", "args_label"),
        {"tag": "markdown", "element_id": "args", "content": code_block(shown.text)},
    ]
    if not shown.whole:
        elements.append(_div(f"{shown.note('Feishu')} Use Open in gate below.", "args_cut"))
    return elements


def _claim(view: RequestView) -> list[dict[str, Any]]:
    """The agent's summary, after the call, labelled as the agent's claim."""
    claim = decisions.claim(view)
    if claim is None:
        return []
    return [_div(f"{decisions.CLAIM_LABEL}:\n{clean(claim)}", "summary")]


def _history(view: RequestView, votes: int = VOTES_SHOWN) -> list[dict[str, Any]]:
    """Where the request stands, the reason it ended (if it did), and the votes so far."""
    outcome = view.outcome_sentence()
    if edits.changes(view):
        outcome = outcome.replace("Approved by", "Approved with edits by", 1)
    elements = [_div(outcome, "outcome")]
    if view.reason and view.status != "pending":
        elements.append(_div(clean(view.reason), "reason"))
    for vote in view.votes[:votes]:
        word = "approved" if vote.verdict == "approve" else "rejected"
        line = f"{clean(vote.approver, 100)} {word} via {vote.via}"
        comment = clean(vote.comment, 200)
        elements.append(_div(f"{line}: {comment}" if comment else line))
    return elements


def _actions(
    view: RequestView, tool: str, editing: bool, *, approvable: bool
) -> list[dict[str, Any]]:
    """While pending: the decision form (or the edit form) and its extra buttons. Approving
    (as asked, for a while, with edits) only on a card that shows the whole call."""
    if view.status != "pending":
        return []
    fields = editable(view) if approvable else []
    if editing and fields:
        return [
            _edit_form(view, fields, tool),
            _row([_callback(view.id, "view", "Back", "default")]),
        ]
    extras = [_callback(view.id, "edit", "Edit & approve…", "default")] if fields else []
    shown = view.expires_at.isoformat()
    extras.append(_callback(view.id, "extend", decisions.EXTEND_LABEL, "default", shown=shown))
    if view.acknowledged_by is None:  # "I'm on it": reminders and escalation stop
        extras.append(_callback(view.id, "acknowledge", decisions.ACKNOWLEDGE_LABEL, "default"))
    return [_decision_form(view, tool, approvable=approvable), _row(extras)]


def editable(view: RequestView) -> list[edits.EditField]:
    """The arguments the edit form offers (secrets and over-long values left out)."""
    return edits.editable_fields(view, max_chars=MAX_INPUT)


def _callback(
    request_id: str,
    verdict: str,
    label: str,
    style: str,
    *,
    submit: bool = False,
    shown: str | None = None,
) -> dict[str, Any]:
    value = {"request_id": request_id, "verdict": verdict}
    if shown is not None:  # the deadline the card showed: a click delivered twice extends once
        value["shown"] = shown
    button: dict[str, Any] = {
        "tag": "button",
        "element_id": verdict,
        "name": verdict,
        "type": style,
        "text": _plain(label),
        "behaviors": [{"type": "callback", "value": value}],
    }
    if submit:
        button["form_action_type"] = "submit"
    return button


def _row(buttons: list[dict[str, Any]]) -> dict[str, Any]:
    columns = [{"tag": "column", "width": "auto", "elements": [b]} for b in buttons]
    return {"tag": "column_set", "flex_mode": "flow", "columns": columns}


def _options(pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"text": _plain(clean(text, 100)), "value": value} for text, value in pairs]


def _decision_form(view: RequestView, tool: str, *, approvable: bool) -> dict[str, Any]:
    approve = _callback(view.id, "approve", "Approve", "primary_filled", submit=True)
    approve["confirm"] = {
        "title": _plain("Approve this call?"),
        "text": _plain(f"{tool} runs as soon as the approval is recorded."),
    }
    buttons = [approve] if approvable else []
    reject = _callback(view.id, "reject", "Reject", "danger", submit=True)
    inputs: list[dict[str, Any]] = []
    reasons = decisions.reject_reasons(view)
    if reasons:
        inputs.append(
            {
                "tag": "multi_select_static",
                "element_id": "reasons",
                "name": "reasons",
                "placeholder": _plain("Preset reasons (to reject)"),
                "options": _options([(r, f"r{i}") for i, r in enumerate(reasons)]),
            }
        )
    hint = " unless a preset is picked" if reasons else ""
    inputs.append(
        {
            "tag": "input",
            "element_id": "reason",
            "name": "reason",
            "max_length": MAX_REASON,
            "placeholder": _plain(f"Reason (required to reject{hint}; the agent is told)"),
        }
    )
    grants = decisions.grant_choices(view) if approvable else []
    if grants:
        inputs.append(
            {
                "tag": "select_static",
                "element_id": "grant",
                "name": "grant",
                "placeholder": _plain("Approve for a while… (optional)"),
                "options": _options([(g.label, f"{g.scope}:{g.duration}") for g in grants]),
            }
        )
    return {
        "tag": "form",
        "element_id": "decision",
        "name": "decision",
        "elements": [*inputs, _row([*buttons, reject])],
    }


def edit_input_name(index: int) -> str:
    """The form name of the `index`th editable field's input."""
    return f"f{index}"


def _edit_form(view: RequestView, fields: list[edits.EditField], tool: str) -> dict[str, Any]:
    note = (
        'Values are JSON (500, "text", [1, 2]); plain words are taken as text. '
        "Arguments not shown keep their values."
    )
    inputs: list[dict[str, Any]] = [_div(note, "edit_note")]
    for i, field in enumerate(fields):
        inputs.append(
            {
                "tag": "input",
                "element_id": edit_input_name(i),
                "name": edit_input_name(i),
                "label": _plain(clean(field.key, 100) or "(empty key)"),
                "default_value": field.text,
                "max_length": MAX_INPUT,
            }
        )
    inputs.append(
        {
            "tag": "input",
            "element_id": "reason",
            "name": "reason",
            "max_length": MAX_REASON,
            "placeholder": _plain("Note for the agent (optional)"),
        }
    )
    approve = _callback(
        view.id, "approve_edits", "Approve with edits", "primary_filled", submit=True
    )
    approve["confirm"] = {
        "title": _plain("Approve with these values?"),
        "text": _plain(f"{tool} runs with the edited arguments."),
    }
    return {
        "tag": "form",
        "element_id": "edit",
        "name": "edit",
        "elements": [*inputs, _row([approve])],
    }
