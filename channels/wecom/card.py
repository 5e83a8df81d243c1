"""WeCom template cards rendered from a request's view, by pure functions.

A pending request is a `button_interaction` card (Approve, Reject…, Edit…, Extend, a link to
gate; a dropdown of grants when the rule offers them); a finished one is a `text_notice`
card without buttons. WeCom reads no markup in template card text fields, so untrusted text
only needs `gate.text.untrusted` (secrets masked, invisible and direction characters removed) and
the documented lengths, which are kept here as hard caps (the fake refuses anything longer).
Every link on a card is gate's own page for the request; `enable_id_trans` is never set, so
`$userName=…$` in untrusted text stays text.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

from channels import decisions, edits
from gate.base.statuses import utcnow
from gate.decisions.readmodel import RequestView
from gate.text import untrusted

# The lengths WeCom documents for template card fields (in characters; "建议不超过").
SOURCE_CHARS = 13
TITLE_CHARS = 36
DESC_CHARS = 44
SUBTITLE_CHARS = 160
KEYNAME_CHARS = 5
VALUE_CHARS = 30
BUTTON_CHARS = 10
OPTION_CHARS = 16
CHECKBOX_CHARS = 17
MAX_BUTTONS = 6
#: the subtitle's words before the call
CALL_LABEL = "Call: "
#: characters of the call's rendering a card shows whole, in the subtitle after
#: `CALL_LABEL`, and so may offer to approve
ARGS_CHARS = SUBTITLE_CHARS - len(CALL_LABEL)
#: what a card says in its description when the rule's condition failed
CONDITION_SHORT = "Condition failed: asked to be safe"
#: ... and the most it says of its agent's trip (gate.decisions.denials): WeCom takes 44 characters,
#: enough for "Agent tripped: 12 rejections within an hour"
TRIPPED_CHARS = 44
#: what a card that shows the whole call, a mask in it that could hide code, says
MASKED_SHORT = "A mask could hide code: read and approve in gate."
#: a step-up rule's card (`decisions.Arguments.step_up`), in the subtitle's little room
STEP_UP_SHORT = "Needs a fresh sign-on: approve in gate."
MAX_OPTIONS = 10
MAX_CHECKBOX = 20
#: the grant dropdown's key, and its "no grant" option
GRANT_QUESTION = "grant"
JUST_THIS_CALL = "call"
#: the reasons form's question key
REASONS_QUESTION = "reasons"
#: task ids: "gate-<request>-<target digest>" for a request's card, "why-<request>-<nonce>"
#: for a reasons form sent to one approver (WeCom: unique per app, <= 128 of [A-Za-z0-9_-@])
CARD_TASK = "gate"
FORM_TASK = "why"
#: WeCom's title is short: the pending one leaves room for the tool's name
TITLES = {**decisions.TITLES, "pending": "Approve?"}
SCOPE_SHORT = {"call": "call", "session": "session", "agent": "agent"}
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def cut(text: str, limit: int) -> str:
    """`text` in at most `limit` characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clean(text: str | None, limit: int, *, one_line: bool = True) -> str:
    """Untrusted text made fit for a card field: `untrusted.clean`, one line, cut to `limit`."""
    if not text:
        return ""
    shown = untrusted.clean(text)
    if one_line:
        shown = " ".join(shown.split())
    return cut(shown, limit)


def task_id(request_id: str, target: str) -> str:
    """The task id of `request_id`'s card for `target` (one per target: WeCom wants them unique)."""
    digest = hashlib.sha256(target.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{CARD_TASK}-{request_id}-{digest}"


def request_of(task: str) -> tuple[str, str] | None:
    """(kind, request id) from a task id gate made; None for anyone else's."""
    kind, _, rest = task.partition("-")
    request_id, _, suffix = rest.partition("-")
    if kind not in (CARD_TASK, FORM_TASK) or not request_id or not suffix:
        return None
    return kind, request_id


def extend_key(view: RequestView) -> str:
    """The Extend button's key: carries the deadline the card shows, to the microsecond (gate
    moves a deadline only from the one a click saw: a repeated click extends once)."""
    return f"extend-{(view.expires_at - EPOCH) // MICROSECOND}"


def shown_deadline(micros: str) -> datetime | None:
    """The deadline an Extend key carries; None when it is not one gate wrote."""
    if not (micros.isascii() and micros.isdigit() and len(micros) <= 20):
        return None
    try:
        return EPOCH + int(micros) * MICROSECOND
    except OverflowError:  # past what a datetime holds (year 9999): not a deadline we wrote
        return None


#: `textcard` limits (bytes, except the button's 4 characters)
NOTICE_TITLE_BYTES = 128
NOTICE_BYTES = 512
_TAG_OPEN = untrusted.compile(r"<")


def _bytes(text: str, limit: int) -> str:
    raw = text.encode()
    return text if len(raw) <= limit else raw[: limit - 3].decode("utf-8", "ignore") + "…"


def chat_notice(view: RequestView, *, now: datetime | None = None) -> dict[str, str]:
    """A group chat's `textcard`: the request (or its outcome) and a link to decide in gate.

    A text card's description reads `<div class=…>` tags: every `<` becomes a look-alike.
    """
    now = now or utcnow()
    rows = [
        row for row in _facts(view, now) if row["keyname"] not in ("Page", decisions.CLAIM_SHORT)
    ]
    facts = {row["keyname"]: row.get("value", "") for row in rows}
    # What matters most first: the description is cut at 512 bytes.
    claim = decisions.claim(view)
    said = f"{decisions.CLAIM_LABEL}: {clean(claim, 100)}" if claim else ""
    asked = decisions.why_asked(view)
    failed = asked.heading if asked else ""
    lines = [failed, _subtitle(view), *(f"{k}: {v}" for k, v in facts.items()), said]
    description = _TAG_OPEN.sub(lambda m: "‹", "\n".join(line for line in lines if line))
    title = f"{TITLES.get(view.status, view.status.title())} {clean(decisions.headline(view), 100)}"
    return {
        "title": _bytes(_TAG_OPEN.sub(lambda m: "‹", title), NOTICE_TITLE_BYTES),
        "description": _bytes(description, NOTICE_BYTES),
        "url": view.url,
        "btntxt": "Open",  # at most 4 characters
    }


def render_card(view: RequestView, task: str, *, now: datetime | None = None) -> dict[str, Any]:
    """The template card for a request in its current state (buttons only while pending)."""
    now = now or utcnow()
    headline = clean(decisions.headline(view), TITLE_CHARS)
    title = {
        "title": cut(f"{TITLES.get(view.status, view.status.title())} {headline}", TITLE_CHARS)
    }
    asked = decisions.why_asked(view)
    if asked:
        # a trip's words are "agent 'x' tripped: <why>; asked until ...": the why fits
        why = asked.words.partition("tripped: ")[2].partition(";")[0]
        tripped = clean(f"Agent tripped: {why}", TRIPPED_CHARS)
        title["desc"] = CONDITION_SHORT if asked.title == "Condition failed" else tripped
    elif view.acknowledgement:  # an approver said they are on it (gate.decisions.acknowledging)
        title["desc"] = clean(view.acknowledgement, TRIPPED_CHARS)
    card: dict[str, Any] = {
        "card_type": "button_interaction" if view.status == "pending" else "text_notice",
        "source": {"desc": "gate", "desc_color": 0},
        "main_title": title,
        "sub_title_text": _subtitle(view),
        "horizontal_content_list": _facts(view, now),
        "card_action": {"type": 1, "url": view.url},
    }
    if view.status != "pending":
        return card
    card["task_id"] = task
    approvable = decisions.approvable(view, ARGS_CHARS)
    grants = decisions.grant_choices(view) if approvable else []
    if grants:
        options = [{"id": JUST_THIS_CALL, "text": "This call only"}]
        options += [{"id": f"{g.scope}:{g.duration}", "text": grant_text(g)} for g in grants]
        card["button_selection"] = {
            "question_key": GRANT_QUESTION,
            "title": "Approve",
            "option_list": options[:MAX_OPTIONS],
            "selected_id": JUST_THIS_CALL,
        }
    card["button_list"] = _buttons(view, approvable=approvable)
    return card


def grant_text(choice: decisions.GrantChoice) -> str:
    """A grant option in 16 characters: "+session 30 min"."""
    seconds = int(choice.duration.rstrip("s")) if choice.duration[:-1].isdigit() else 0
    if seconds and seconds % 3600 == 0:
        length = f"{seconds // 3600} h"
    elif seconds and seconds % 60 == 0:
        length = f"{seconds // 60} min"
    else:
        length = choice.duration
    return cut(f"+{SCOPE_SHORT.get(choice.scope, choice.scope)} {length}", OPTION_CHARS)


def _subtitle(view: RequestView) -> str:
    """Where the request stands (and why it ended), then its arguments, masked and cut."""
    outcome = view.outcome_sentence()
    if edits.changes(view):
        outcome = outcome.replace("Approved by", "Approved with edits by", 1)
    if view.status != "pending":
        reason = clean(view.reason, SUBTITLE_CHARS)
        if reason.startswith(outcome):  # a decision's reason already says who decided
            return reason
        return cut(f"{outcome}. {reason}" if reason else f"{outcome}.", SUBTITLE_CHARS)
    shown = decisions.arguments(view, ARGS_CHARS, link=False)
    if not shown.whole:
        # The card itself is the link to the whole call; the words say what is not shown.
        note = _short_note(shown)
        room = SUBTITLE_CHARS - len(CALL_LABEL) - len(note) - 1
        if len(shown.text) > room:
            shown = decisions.arguments(view, room, link=False)
            note = _short_note(shown)
        return cut(f"{CALL_LABEL}{shown.text} {note}", SUBTITLE_CHARS)
    # The whole call first (it is what is approved): only the outcome after it may be cut.
    return cut(f"{CALL_LABEL}{shown.text}\n{outcome}.", SUBTITLE_CHARS)


def _short_note(shown: decisions.Arguments) -> str:
    """Why the card offers no approval, short enough for its subtitle."""
    if shown.cut:
        return shown.note("WeCom")
    return STEP_UP_SHORT if shown.step_up else MASKED_SHORT


def _facts(view: RequestView, now: datetime) -> list[dict[str, Any]]:
    """Request id, agent, user, rule and deadline, as WeCom's key/value rows (at most 6)."""
    if view.status == "pending":
        left = decisions.countdown(view.expires_at, now).removeprefix("expires ")
        when = ("Due", f"{left} ({view.expires_at:%H:%M} UTC)")
    else:
        when = ("Asked", f"{view.created_at:%Y-%m-%d %H:%M} UTC")
    rows = [
        ("ID", view.id),
        ("Agent", clean(view.agent_id, VALUE_CHARS) or "-"),
        ("User", clean(view.user_id, VALUE_CHARS) or "-"),
        ("Rule", clean(decisions.rule_and_stage(view), VALUE_CHARS) or "-"),
        when,
    ]
    facts: list[dict[str, Any]] = [{"keyname": k, "value": cut(v, VALUE_CHARS)} for k, v in rows]
    claim = decisions.claim(view)
    if claim is not None:
        # The agent's words, after the call, named as a claim in WeCom's five characters (the
        # card itself and its "Open gate" button link to the page, so its row gives way).
        short = decisions.CLAIM_SHORT
        facts.append({"keyname": short, "value": clean(claim, VALUE_CHARS)})
    else:
        facts.append({"type": 1, "keyname": "Page", "value": "Open in gate", "url": view.url})
    return facts


def _buttons(view: RequestView, *, approvable: bool) -> list[dict[str, Any]]:
    """Approve and Edit only when the card shows the whole call; Reject and Extend always;
    "I'm on it" until someone is on it."""
    approve = {"type": 0, "text": "Approve", "style": 1, "key": "approve"}
    buttons: list[dict[str, Any]] = [approve] if approvable else []
    buttons.append({"type": 0, "text": "Reject…", "style": 3, "key": "reject"})
    if approvable and editable(view):
        buttons.append({"type": 0, "text": "Edit…", "style": 2, "key": "edit"})
    buttons.append({"type": 0, "text": "Extend 15m", "style": 2, "key": extend_key(view)})
    if view.acknowledged_by is None:  # "I'm on it": reminders and escalation stop
        ack = decisions.ACKNOWLEDGE_LABEL
        buttons.append({"type": 0, "text": ack, "style": 2, "key": "acknowledge"})
    buttons.append({"type": 1, "text": "Open gate", "style": 2, "url": view.url})
    return buttons[:MAX_BUTTONS]


def editable(view: RequestView) -> list[edits.EditField]:
    """The arguments an approver may edit by typing `edit <id>` (whole values, as JSON)."""
    return edits.editable_fields(view, max_chars=500)


def reasons_form(view: RequestView, task: str) -> dict[str, Any]:
    """A card for one approver: the rule's preset reject reasons as checkboxes, and Reject."""
    options = [
        {"id": f"r{i}", "text": clean(reason, CHECKBOX_CHARS), "is_checked": False}
        for i, reason in enumerate(decisions.reject_reasons(view)[:MAX_CHECKBOX])
    ]
    return {
        "card_type": "vote_interaction",
        "source": {"desc": "gate", "desc_color": 0},
        "main_title": {
            "title": cut(f"Reject {clean(view.tool_name, TITLE_CHARS)}?", TITLE_CHARS),
            "desc": cut(f"Pick reasons for {view.id}", DESC_CHARS),
        },
        "task_id": task,
        "checkbox": {"question_key": REASONS_QUESTION, "mode": 1, "option_list": options},
        "submit_button": {"text": "Reject", "key": "reject"},
    }
