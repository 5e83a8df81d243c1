"""The Adaptive Card 1.5 approval card, rendered from a request's view by pure functions.

Two views of one card. The **base card** is what the bot posts and what everybody in the
conversation sees: the question (tool, summary, agent, user, rule, deadline, arguments) or
the outcome, read-only. Its `refresh` names the request's approvers (`userIds`): their Teams
clients fetch their own view with an `adaptiveCard/action` invoke (verb `refresh`), and gate
answers with the **approver view**, the same card plus Approve, Reject (with a reason, or
the rule's presets), Edit & approve, the grant choice and Extend, all `Action.Execute`
(Universal Actions). Who gets which view is gate's answer, not the card's: the refresh is
answered with buttons only for a person gate says may act now.

Untrusted text (tool arguments, summaries, ids, names, reasons) goes only into `TextRun`s,
which Adaptive Cards render without markdown, cleaned by `gate.text.untrusted` (capped, invisible
and direction-changing characters removed, secrets masked) and with tag-shaped `<` defused
(Teams reads `<at>` as a mention). `TextBlock`s, which read markdown, hold only gate's words.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from channels import decisions, edits
from gate.base.statuses import utcnow
from gate.decisions.readmodel import RequestView
from gate.text import untrusted

VERSION = "1.5"
SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
#: Teams refuses a bot message over about 28 KB; stay under it with room for the envelope
CARD_BYTES = 26_000
#: characters of the call's rendering a card shows whole (and so may offer to approve)
ARGS_CHARS = 2_500
TEXT_CHARS = 500
VOTES_SHOWN = 20
#: the most users a card's refresh may name (Teams' limit for user-specific views)
MAX_USER_IDS = 60
#: what one edit box holds; longer values are edited in gate's web page
MAX_INPUT = 1000
#: the reject reason box (what the model is told)
MAX_REASON = 500
TOO_BIG_TO_EDIT = "The arguments are too long to edit in Teams: use Open in gate to edit them."
#: the verbs our Action.Execute buttons carry (`refresh` asks for the person's own view)
VERBS = ("approve", "reject", "approve_edits", "extend", "acknowledge", "refresh")

# `<` before a letter, `/`, `!` or `?` could open a tag such as <at>: a look-alike defuses it
_TAG_OPEN = untrusted.compile(r"<([A-Za-z/!?])")
_LINK_BRACKETS = str.maketrans({"[": "［", "]": "］"})


def clean(text: object, limit: int = TEXT_CHARS, *, mask: bool = True) -> str:
    """Untrusted text made safe for a TextRun: cleaned (secrets masked unless `mask=False`,
    for what an approver typed), cut to `limit`, no tag-shaped `<`."""
    if text is None or text == "":
        return ""
    raw = str(text)
    value = untrusted.clean(raw) if mask else untrusted.strip_invisible(untrusted.cap(raw))
    value = value if len(value) <= limit else value[: limit - 1] + "…"
    return _TAG_OPEN.sub(lambda m: "‹" + str(m.group(1)), value)


def label(text: object, limit: int = 100) -> str:
    """Untrusted text for a label, a choice title or the fallback text: cleaned like a
    TextRun, and square brackets swapped for look-alikes, as some hosts read markdown links
    there."""
    return clean(text, limit).translate(_LINK_BRACKETS)


def run(text: str, **style: Any) -> dict[str, Any]:
    """A TextRun: shown as typed, no markdown."""
    return {"type": "TextRun", "text": text, **style}


def rich(*runs: dict[str, Any], element_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """A RichTextBlock of TextRuns."""
    block: dict[str, Any] = {"type": "RichTextBlock", "inlines": list(runs), **extra}
    if element_id:
        block["id"] = element_id
    return block


def words(text: str, element_id: str | None = None, **style: Any) -> dict[str, Any]:
    """A TextBlock of gate's own words (never untrusted text: TextBlocks read markdown)."""
    block: dict[str, Any] = {"type": "TextBlock", "text": text, "wrap": True, **style}
    if element_id:
        block["id"] = element_id
    return block


# -- the card -------------------------------------------------------------------------------


def render_card(
    view: RequestView,
    *,
    user_ids: Sequence[str] = (),
    actionable: bool = False,
    notice: str | None = None,
    now: datetime | None = None,
    args_chars: int = ARGS_CHARS,
) -> dict[str, Any]:
    """The card for a request in its current state.

    `actionable` renders the approver view (buttons, while pending); `user_ids` are the Teams
    ids whose clients fetch that view automatically; `notice` is a line for the one person
    this view is answered to ("Not recorded: ..."); `now` is what the countdown counts from.
    """
    now = now or utcnow()
    shown = decisions.arguments(view, ARGS_CHARS, link=False)
    sizes = _Sizes(shown, args_chars)
    card = _build(view, user_ids, actionable, notice, now, sizes)
    while _size(card) > CARD_BYTES and not shown.whole and sizes.args > 200:
        sizes = replace(sizes, args=sizes.args // 2)
        card = _build(view, user_ids, actionable, notice, now, sizes)
    if _size(card) > CARD_BYTES and actionable:
        # The edit form holds whole values (up to MAX_INPUT characters per box, ten boxes):
        # hostile arguments can make it alone too big for Teams, which then refuses the
        # approver's view and shows no buttons at all. Editing moves to gate's page instead.
        sizes = replace(sizes, edits=False)
        card = _build(view, user_ids, actionable, notice, now, sizes)
    while _size(card) > CARD_BYTES and sizes.votes > 0:
        # Whole arguments stay whole (the card offers to approve them): the votes give way.
        sizes = replace(sizes, votes=sizes.votes // 2)
        card = _build(view, user_ids, actionable, notice, now, sizes)
    return card


@dataclass(frozen=True)
class _Sizes:
    """What one rendering of a card shows: the arguments (whole, or cut to `args`), how many
    votes, and whether the edit form is in it."""

    shown: decisions.Arguments
    args: int
    votes: int = VOTES_SHOWN
    edits: bool = True


def _size(card: dict[str, Any]) -> int:
    return len(json.dumps(card, ensure_ascii=False).encode())


def _notice(notice: str | None) -> list[dict[str, Any]]:
    """The warning a card opens with (a refusal or a late word), if there is one."""
    if not notice:
        return []
    text = rich(run(clean(notice, mask=False)), element_id="notice_text")
    return [{"type": "Container", "id": "notice", "style": "warning", "items": [text]}]


def _build(
    view: RequestView,
    user_ids: Sequence[str],
    actionable: bool,
    notice: str | None,
    now: datetime,
    sizes: _Sizes,
) -> dict[str, Any]:
    pending = view.status == "pending"
    title = decisions.TITLES.get(view.status, view.status.title())
    body: list[dict[str, Any]] = _notice(notice)
    headline = clean(decisions.headline(view, sizes.shown), 200, mask=False)
    body.append(
        rich(
            run(f"{title}: ", weight="Bolder", size="Medium"),
            run(headline, weight="Bolder", size="Medium"),
            element_id="title",
        )
    )
    body.extend(_condition(view))
    body.extend(_arguments(view, sizes.shown, sizes.args))
    body.extend(_claim(view))
    body.extend(_facts(view, now))
    body.extend(_history(view, sizes.votes))
    actions: list[dict[str, Any]] = []
    whole = sizes.shown.whole
    if pending and actionable:
        body.extend(_grant_input(view) if whole else [])
        actions.extend(_decision_actions(view, sizes.edits, approvable=whole))
        if whole and not sizes.edits and editable(view):
            body.append(words(TOO_BIG_TO_EDIT, "edit_in_gate", isSubtle=True))
    actions.append({"type": "Action.OpenUrl", "title": "Open in gate", "url": view.url})
    card: dict[str, Any] = {
        "type": "AdaptiveCard",
        "$schema": SCHEMA,
        "version": VERSION,
        "fallbackText": f"{title}: {label(decisions.headline(view, sizes.shown), 200)} "
        "(open gate to decide)",
        "body": body,
        "actions": actions,
    }
    if pending:
        card["refresh"] = {
            "action": {
                "type": "Action.Execute",
                "title": "Show my actions",
                "verb": "refresh",
                "data": {"request_id": view.id},
            },
            # An empty list turns automatic refresh off: the "Refresh card" menu remains.
            "userIds": list(user_ids)[:MAX_USER_IDS],
        }
    return card


def _fact(name: str, value: str, element_id: str) -> dict[str, Any]:
    return rich(
        run(f"{name}: ", weight="Bolder"), run(value), element_id=element_id, spacing="None"
    )


def _facts(view: RequestView, now: datetime) -> list[dict[str, Any]]:
    """Which request, who asked under which rule, and until when."""
    if view.status == "pending":
        left = decisions.countdown(view.expires_at, now)
        when = (
            "Deadline",
            f"{view.expires_at:%Y-%m-%d %H:%M} UTC, {left} (then {view.on_timeout})",
        )
    else:
        when = ("Asked", f"{view.created_at:%Y-%m-%d %H:%M} UTC")
    return [
        _fact("Request", clean(view.id, 100), "request"),
        _fact("Agent", clean(view.agent_id, 100) or "-", "agent"),
        _fact("User", clean(view.user_id, 100) or "-", "user"),
        _fact("Rule", clean(decisions.rule_and_stage(view), decisions.STAGE_CHARS) or "-", "rule"),
        _fact(when[0], when[1], "deadline"),
    ]


def _condition(view: RequestView) -> list[dict[str, Any]]:
    """What failed in the rule's condition, when it did: gate asked to be safe."""
    asked = decisions.why_asked(view)  # or why every call of its agent is asked
    if not asked:
        return []
    items = [
        words(asked.heading, "condition_failed", weight="Bolder"),
        rich(run(clean(asked.words, 300, mask=False)), element_id="condition_error"),
    ]
    return [{"type": "Container", "id": "condition", "style": "attention", "items": items}]


def _arguments(
    view: RequestView, shown: decisions.Arguments, args_chars: int
) -> list[dict[str, Any]]:
    """The call as gate renders it, in one monospace run: whole, or cut to `args_chars`
    ending with what is not shown, then why the card offers no approval; then the arguments
    the rule's condition reads."""
    shown = decisions.recut(view, shown, args_chars, ARGS_CHARS)  # a smaller card: cut shorter
    text = shown.text
    blocks = [
        words("The call", "args_label", weight="Bolder", spacing="Medium"),
        rich(run(clean(text, len(text), mask=False), fontType="Monospace"), element_id="args"),
    ]
    if not shown.whole:
        note = f"{shown.note('Teams')} Use Open in gate."
        blocks.append(words(note, "args_cut", isSubtle=True))
    return blocks


def _claim(view: RequestView) -> list[dict[str, Any]]:
    """The agent's summary, after the call and subtle, labelled as the agent's claim."""
    claim = decisions.claim(view)
    if claim is None:
        return []
    return [
        words(f"{decisions.CLAIM_LABEL}:", "claim_label", isSubtle=True, spacing="Medium"),
        rich(run(clean(claim), isSubtle=True), element_id="summary"),
    ]


def _history(view: RequestView, votes: int = VOTES_SHOWN) -> list[dict[str, Any]]:
    """Where the request stands, the reason it ended (if it did), and the votes so far."""
    outcome = view.outcome_sentence()
    if edits.changes(view):
        outcome = outcome.replace("Approved by", "Approved with edits by", 1)
    blocks = [rich(run(clean(outcome), weight="Bolder"), element_id="outcome", spacing="Medium")]
    if view.reason and view.status != "pending":
        blocks.append(rich(run(clean(view.reason)), element_id="reason"))
    for i, vote in enumerate(view.votes[:votes]):
        word = "approved" if vote.verdict == "approve" else "rejected"
        line = f"{clean(vote.approver, 100)} {word} via {clean(vote.via, 40)}"
        comment = clean(vote.comment, 200)
        blocks.append(rich(run(f"{line}: {comment}" if comment else line), element_id=f"vote{i}"))
    return blocks


# -- the approver view ------------------------------------------------------------------------


def editable(view: RequestView) -> list[edits.EditField]:
    """The arguments the edit form offers (secrets and over-long values left out)."""
    return edits.editable_fields(view, max_chars=MAX_INPUT)


def _execute(verb: str, title: str, view: RequestView, **extra: Any) -> dict[str, Any]:
    action: dict[str, Any] = {
        "type": "Action.Execute",
        "verb": verb,
        "title": title,
        "data": {"request_id": view.id, **extra},
    }
    return action


def _choices(pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"title": label(title), "value": value} for title, value in pairs]


def _grant_input(view: RequestView) -> list[dict[str, Any]]:
    grants = decisions.grant_choices(view)
    if not grants:
        return []
    return [
        {
            "type": "Input.ChoiceSet",
            "id": "grant",
            "label": "Approve for a while (optional)",
            "style": "compact",
            "placeholder": "Just this call",
            "choices": _choices([(g.label, f"{g.scope}:{g.duration}") for g in grants]),
        }
    ]


def _decision_actions(view: RequestView, edits: bool, *, approvable: bool) -> list[dict[str, Any]]:
    """Approve and Edit & approve only when the card shows the whole call; Reject and Extend
    always; "I'm on it" until someone is on it."""
    approve = _execute("approve", "Approve", view)
    approve["style"] = "positive"
    actions = [approve, _reject_card(view)] if approvable else [_reject_card(view)]
    fields = editable(view) if edits and approvable else []
    if fields:
        actions.append(_edit_card(view, fields))
    shown = view.expires_at.isoformat()
    # The deadline the card showed: a click delivered twice, to any replica, extends once.
    actions.append(_execute("extend", decisions.EXTEND_LABEL, view, extend_from=shown))
    if view.acknowledged_by is None:  # "I'm on it": reminders and escalation stop
        actions.append(_execute("acknowledge", decisions.ACKNOWLEDGE_LABEL, view))
    return actions


def _reject_card(view: RequestView) -> dict[str, Any]:
    """Reject opens a form: the rule's preset reasons and the reason box, then Reject."""
    reasons = decisions.reject_reasons(view)
    inputs: list[dict[str, Any]] = []
    if reasons:
        inputs.append(
            {
                "type": "Input.ChoiceSet",
                "id": "reasons",
                "label": "Preset reasons",
                "isMultiSelect": True,
                "style": "expanded",
                "choices": _choices([(r, f"r{i}") for i, r in enumerate(reasons)]),
            }
        )
    inputs.append(
        {
            "type": "Input.Text",
            "id": "reason",
            "label": "Why? The agent is told." if not reasons else "Anything to add?",
            "isMultiline": True,
            "maxLength": MAX_REASON,
            # Without presets the reason is required; the client checks it before sending,
            # gate checks it again.
            "isRequired": not reasons,
            "errorMessage": "Say why, so the agent knows what to do instead.",
        }
    )
    reject = _execute("reject", "Reject", view)
    reject["style"] = "destructive"
    return {
        "type": "Action.ShowCard",
        "title": "Reject…",
        "card": {"type": "AdaptiveCard", "body": inputs, "actions": [reject]},
    }


def edit_input_id(index: int) -> str:
    """The input id of the `index`th editable field."""
    return f"f{index}"


def _edit_card(view: RequestView, fields: list[edits.EditField]) -> dict[str, Any]:
    note = (
        'Values are JSON (500, "text", [1, 2]); plain words are taken as text. '
        "Arguments not shown keep their values."
    )
    inputs: list[dict[str, Any]] = [words(note, "edit_note", isSubtle=True)]
    for i, field in enumerate(fields):
        inputs.append(
            {
                "type": "Input.Text",
                "id": edit_input_id(i),
                # Labels render as plain text; the key is cleaned like any other name.
                "label": label(field.key) or "(empty key)",
                "value": field.text,
                "maxLength": MAX_INPUT,
                "isMultiline": len(field.text) > 60 or "\n" in field.text,
            }
        )
    inputs.append(
        {
            "type": "Input.Text",
            "id": "note",
            "label": "Note for the agent (optional)",
            "maxLength": MAX_REASON,
        }
    )
    approve = _execute("approve_edits", "Approve with edits", view)
    approve["style"] = "positive"
    return {
        "type": "Action.ShowCard",
        "title": "Edit & approve…",
        "card": {"type": "AdaptiveCard", "body": inputs, "actions": [approve]},
    }
