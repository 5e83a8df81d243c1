"""Reading a verified webhook Update: a button press, a typed command, or a reply to a prompt.

Telegram sends JSON `Update`s. Two kinds matter here:

* `callback_query`: someone pressed a button on a card; `data` is the sealed button
  (`channels.telegram.tokens`), `from.id` the person;
* `message`: `/approve <code> [note]` or `/reject <code> <reason>` typed in a chat, or a reply
  to one of the bot's forced-reply prompts ("Reject request <code>", "Edit request <code>"),
  whose text is the reason or the new values.

Everything else (edited messages, forwarded ones or ones written by an inline bot, other
bots' commands, chat members joining) is ignored.
The person is always `from.id`, the numeric user id, never a username or a display name;
messages from bots (including the stand-in for anonymous group admins) are not people.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from channels.telegram.tokens import CODE_CHARS
from gate.base.errors import BadRequest

#: the first line of a forced-reply prompt, then the request's code
PROMPTS = {"reject": "Reject request", "edit": "Edit request"}
COMMANDS = ("approve", "reject")


@dataclass(frozen=True)
class Press:
    """A button pressed on a card."""

    query_id: str
    user_id: str
    data: str
    #: the card's chat and message (absent when Telegram no longer shows the message)
    chat_id: int | None
    message_id: int | None


@dataclass(frozen=True)
class Typed:
    """A message a person sent in a chat with the bot."""

    chat_id: int
    message_id: int
    user_id: str
    text: str
    #: the text of the bot's own message this one replies to, if it replies to the bot
    replying_to: str | None


def update_id(payload: Any) -> int:
    """The Update's id; 400 when the body is not an Update."""
    found = payload.get("update_id") if isinstance(payload, dict) else None
    if not isinstance(found, int) or isinstance(found, bool):
        raise BadRequest("the body is not a Telegram Update", code="bad_update")
    return found


def read_update(payload: Mapping[str, Any], bot_id: int) -> Press | Typed | None:
    """What a verified Update asks of gate, or None when it asks nothing."""
    query = payload.get("callback_query")
    if isinstance(query, Mapping):
        return _press(query)
    message = payload.get("message")
    if isinstance(message, Mapping):
        return _typed(message, bot_id)
    return None


def _person(sender: Any) -> str | None:
    """The numeric id of a human sender; None for bots and for anything malformed."""
    if not isinstance(sender, Mapping) or sender.get("is_bot") is not False:
        return None
    user_id = sender.get("id")
    if not isinstance(user_id, int) or isinstance(user_id, bool):
        return None
    return str(user_id)


def _chat_message(message: Any) -> tuple[int | None, int | None]:
    if not isinstance(message, Mapping):
        return None, None
    chat = message.get("chat")
    chat_id = chat.get("id") if isinstance(chat, Mapping) else None
    message_id = message.get("message_id")
    return (
        chat_id if isinstance(chat_id, int) else None,
        message_id if isinstance(message_id, int) else None,
    )


def _press(query: Mapping[str, Any]) -> Press | None:
    user_id, query_id, data = _person(query.get("from")), query.get("id"), query.get("data")
    if user_id is None or not isinstance(query_id, str) or not isinstance(data, str):
        return None  # a game button, or nobody to answer
    chat_id, message_id = _chat_message(query.get("message"))
    return Press(query_id, user_id, data, chat_id, message_id)


#: what marks a message as words its sender did not write: `forward_origin` (Bot API 7.0),
#: the fields it replaced, a channel post copied into its discussion group, and a message
#: sent through an inline bot (`via_bot`: the bot wrote the text the person picked by title)
NOT_THE_SENDERS = (
    "forward_origin",
    "forward_from",
    "forward_from_chat",
    "forward_sender_name",
    "forward_date",
    "is_automatic_forward",
    "via_bot",
)


def _typed(message: Mapping[str, Any], bot_id: int) -> Typed | None:
    # `from` of a forwarded message is whoever forwarded it, not who wrote it: an approver
    # forwarding "/approve <code>" to ask what it is must not approve in their name.
    if any(message.get(mark) for mark in NOT_THE_SENDERS):
        return None
    user_id, text = _person(message.get("from")), message.get("text")
    chat_id, message_id = _chat_message(message)
    if user_id is None or not isinstance(text, str) or chat_id is None or message_id is None:
        return None
    replied = message.get("reply_to_message")
    replying_to = None
    if isinstance(replied, Mapping):
        author = replied.get("from")
        own = isinstance(author, Mapping) and author.get("id") == bot_id
        replied_text = replied.get("text")
        if own and isinstance(replied_text, str):
            replying_to = replied_text
    return Typed(chat_id, message_id, user_id, text, replying_to)


# -- what a message says ------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """`/approve <code> [note]` or `/reject <code> <reason>`."""

    verb: Literal["approve", "reject"]
    code: str
    rest: str


def command(text: str, bot_username: str | None) -> Command | str | None:
    """The command in a message; a usage hint when it is ours but malformed; None when it is
    no command of ours (another bot's, or plain chat)."""
    if not text.startswith("/"):
        return None
    parts = text.split(None, 2)  # any whitespace, newlines too
    verb, _, addressee = parts[0][1:].partition("@")
    if verb not in COMMANDS:
        return None
    if addressee and bot_username and addressee.lower() != bot_username.lower():
        return None  # /approve@another_bot: meant for someone else
    code = parts[1] if len(parts) > 1 else ""
    rest = parts[2].strip() if len(parts) > 2 else ""
    if not code:
        need = " and your reason." if verb == "reject" else "."
        return f"Type /{verb} followed by the code shown on the card{need}"
    return Command("approve" if verb == "approve" else "reject", code, rest)


def link_code(text: str, bot_username: str | None) -> str | None:
    """The code of `/link <code>` (the console's one-time code that binds the sender's
    Telegram id; empty when none was given); None for any other text."""
    if not text.startswith("/"):
        return None
    parts = text.split(None, 1)
    verb, _, addressee = parts[0][1:].partition("@")
    if verb != "link":
        return None
    if addressee and bot_username and addressee.lower() != bot_username.lower():
        return None  # /link@another_bot: meant for someone else
    return parts[1].strip()[:40] if len(parts) > 1 else ""


def prompt_line(kind: Literal["reject", "edit"], request_code: str) -> str:
    """The first line of a forced-reply prompt, which a reply is read back by."""
    return f"{PROMPTS[kind]} {request_code}"


def prompt_of(text: str) -> tuple[Literal["reject", "edit"], str] | None:
    """(kind, code) when `text` is one of our prompts; None for any other bot message."""
    first = text.split("\n", 1)[0].strip()
    for kind in ("reject", "edit"):
        prefix = PROMPTS[kind] + " "
        if first.startswith(prefix) and len(first) == len(prefix) + CODE_CHARS:
            return ("reject" if kind == "reject" else "edit"), first[len(prefix) :]
    return None


def edit_lines(text: str) -> tuple[dict[str, str], list[str]]:
    """`name = value` lines, as texts by name, and the lines that are not of that shape."""
    texts: dict[str, str] = {}
    problems: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            problems.append(line)
            continue
        texts[name.strip()] = value.strip()
    return texts, problems
