"""What the bot says back, and what a typed message means.

A press is answered with answerCallbackQuery: a notice only the presser sees (an alert for a
refusal). Typed text has no private answer in Telegram: the bot replies to the person's
message, in the chat they wrote in. Prompts for a reason or new values are forced replies
whose first line names the request by its code, so a reply is tied to its request without
the database. The words of every decision come from gate (`Result.message()`).
"""

from __future__ import annotations

from typing import Any, Literal

from channels import edits
from channels.telegram.api import TelegramApi
from channels.telegram.card import Card, code, cut, cut_units, editable, escape, pre
from channels.telegram.tokens import Sealer
from channels.telegram.updates import (
    Command,
    Press,
    Typed,
    command,
    edit_lines,
    prompt_line,
    prompt_of,
)
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import ChannelContext, Click
from gate.text import untrusted

#: answerCallbackQuery shows at most 200 characters
NOTICE_CHARS = 200
#: the longest reason kept (what the agent is told)
MAX_COMMENT = 500
NOT_OURS = "This button is not one of gate's, or it was made for another gate."
GONE = "This request no longer exists."
RECORDING = "Recording your decision; the card updates in a moment."
#: a decision that failed after the person was told "Recording...": gate cannot say it counted
#: a late answer to a press is a message in the chat (the press was answered already); its
#: words are gate's, cut to a size well inside Telegram's 4,096
LATE_CHARS = 1000
REPLY_BELOW = "Reply to the message below."
NOTHING_EDITABLE = "Nothing here can be edited in Telegram; edit it in gate."
TYPE_INSTEAD = "Telegram would not take a reply here: type the command shown on the card instead."
#: typing /approve would approve the call unedited: edits are made in gate instead
EDIT_IN_GATE = "Telegram would not take a reply here: edit the call in gate (Open in gate)."
#: the current values shown in an edit prompt, in UTF-16 code units (the message holds
#: 4,096 of them, and an emoji takes two)
PROMPT_VALUES_CHARS = 3000
NEED_A_REASON = "Not recorded: write the reason (the agent is told why)."
#: the most of an edit's error shown (its words name where in the typed value it is)
WHY_CHARS = 300
#: `/link` without a code
LINK_USAGE = "Send /link followed by the code from the Identities page in gate."
BAD_CODE = "Not recorded: that is not a code from a card (26 letters and digits)."
PROMPT_TEXT = {
    "reject": "Reply to this message with your reason for rejecting; the agent is told why.",
    "edit": (
        "Reply to this message with the values to change, one per line, as name = value "
        '(JSON: 500, "text", [1, 2]; plain words are text). Arguments you leave out keep '
        "their values. Your reply approves the call with them."
    ),
}
PLACEHOLDER = {"reject": "Reason to reject", "edit": "name = value"}


class Html(str):
    """Text already in Telegram HTML (untrusted parts inside `<code>`): sent as it is."""

    __slots__ = ()


def card_body(card: Card) -> dict[str, Any]:
    """sendMessage / editMessageText fields for a card: HTML, no link preview, the keyboard."""
    return {
        "text": card.text,
        "parse_mode": "HTML",
        "link_preview_options": {"is_disabled": True},
        "reply_markup": card.reply_markup(),
    }


class Answers:
    """Sends the bot's answers: notices to presses, prompts, replies to typed messages."""

    def __init__(self, api: TelegramApi, sealer: Sealer) -> None:
        self.api = api
        self.sealer = sealer

    async def press(self, press: Press, text: str, *, alert: bool = False) -> None:
        """answerCallbackQuery: a notice (or an alert) only the presser sees."""
        body: dict[str, Any] = {
            "callback_query_id": press.query_id,
            "text": cut(text, NOTICE_CHARS),
        }
        if alert:
            body["show_alert"] = True
        await self.api.call("answerCallbackQuery", body)

    async def prompt(
        self,
        chat_id: int,
        card_message_id: int | None,
        kind: Literal["reject", "edit"],
        view: RequestView,
    ) -> None:
        """A forced reply asking for a reason or new values, under the card."""
        lines = [prompt_line(kind, self.sealer.code(view.id)), escape(PROMPT_TEXT[kind])]
        if kind == "edit":
            shown = "\n".join(f"{f.key} = {f.text}" for f in editable(view))
            lines += ["Now:", pre(cut_units(untrusted.clean(shown), PROMPT_VALUES_CHARS))]
        body: dict[str, Any] = {
            "chat_id": chat_id,
            "text": "\n".join(lines),
            "parse_mode": "HTML",
            "reply_markup": {
                "force_reply": True,
                "input_field_placeholder": PLACEHOLDER[kind],
            },
        }
        if card_message_id is not None:
            body["reply_parameters"] = {
                "message_id": card_message_id,
                "allow_sending_without_reply": True,
            }
        await self.api.send_message(body)

    async def late(self, press: Press, chat_id: int, name: str | None, text: str) -> None:
        """What became of a press answered before gate decided, when it did not count: a
        message in the card's chat, replying to the card, opening with an inline mention of
        the presser (so Telegram notifies them) by their approver name or, for someone gate
        does not know, their numeric id. The words are gate's, escaped."""
        user_id = int(press.user_id)  # digits: `updates` reads only numeric ids
        who = escape(name) if name else f"Telegram user {user_id}"
        mention = f'<a href="tg://user?id={user_id}">{who}</a>'
        body: dict[str, Any] = {
            "chat_id": chat_id,
            "text": f"{mention}: {escape(cut(text, LATE_CHARS))}",
            "parse_mode": "HTML",
            "link_preview_options": {"is_disabled": True},
        }
        if press.message_id is not None:
            body["reply_parameters"] = {
                "message_id": press.message_id,
                "allow_sending_without_reply": True,
            }
        await self.api.send_message(body)

    async def reply(self, typed: Typed, text: str) -> None:
        """A reply to the person's message, in the chat they wrote in (`text` is escaped
        unless it is `Html`)."""
        await self.api.send_message(
            {
                "chat_id": typed.chat_id,
                "text": text if isinstance(text, Html) else escape(text),
                "parse_mode": "HTML",
                "link_preview_options": {"is_disabled": True},
                "reply_parameters": {
                    "message_id": typed.message_id,
                    "allow_sending_without_reply": True,
                },
            }
        )


def comment(text: str) -> str:
    """What a person typed as a reason: invisible characters out, cut; masked where shown."""
    return cut(untrusted.strip_invisible(untrusted.cap(text)).strip(), MAX_COMMENT)


async def click_from_message(
    channel: str,
    typed: Typed,
    gate: ChannelContext,
    sealer: Sealer,
    bot_username: str | None,
) -> Click | str | None:
    """The Click a typed command or a prompt's reply means; a text to reply when it cannot be
    read; None when the message is nothing for gate."""
    if typed.replying_to is not None:
        prompt = prompt_of(typed.replying_to)
        if prompt is not None:
            return await _reply_click(channel, typed, gate, sealer, *prompt)
    found = command(typed.text, bot_username)
    if not isinstance(found, Command):
        return found
    try:
        request_id = sealer.request_of(found.code)
    except ValueError:
        return BAD_CODE
    note = comment(found.rest) or None
    if found.verb == "reject" and note is None:
        return NEED_A_REASON
    return Click(channel, typed.user_id, request_id, found.verb, note)


async def _reply_click(
    channel: str,
    typed: Typed,
    gate: ChannelContext,
    sealer: Sealer,
    kind: Literal["reject", "edit"],
    request_code: str,
) -> Click | str:
    try:
        request_id = sealer.request_of(request_code)
    except ValueError:  # shaped like a prompt, but the bot wrote no such code
        return BAD_CODE
    if kind == "reject":
        note = comment(typed.text)
        if not note:
            return NEED_A_REASON
        return Click(channel, typed.user_id, request_id, "reject", note)
    view = await gate.view(request_id)
    bare = Click(channel, typed.user_id, request_id, "approve")
    if view is None or view.is_final:
        return bare  # gate says "no longer exists" / "already approved by X"
    return edits_click(bare, typed.text, view)


def edits_click(bare: Click, text: str, view: RequestView) -> Click | str:
    """An approval with the values a reply gives, by argument name; or why it cannot be."""
    fields = editable(view)
    if not fields:
        return NOTHING_EDITABLE
    texts, problems = edit_lines(text)
    known = {f.key for f in fields}
    errors = [f"{code(line, 40)}: write name = value" for line in problems]
    errors += [f"{code(name, 40)} cannot be edited here" for name in texts if name not in known]
    if not texts and not problems:
        errors.append("the reply names no argument")
    edited: dict[str, object] = {}
    if not errors:
        edited, bad = edits.apply_edits(view, fields, texts)
        # `why` can name a path inside the typed value (`["https://..."] is a key that...`):
        # in plain text Telegram would make it a link or a mention in the bot's own reply.
        errors = [f"{code(key, 40)}: {code(why, WHY_CHARS)}" for key, why in bad.items()]
    if errors:
        return Html("Not recorded: " + "; ".join(errors))
    changed = {key: edited[key] for key in texts}
    return Click(bare.channel, bare.user_id, bare.request_id, "approve", edits=changed)
