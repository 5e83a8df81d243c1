"""Untrusted text in Discord messages: cleaned, made inert for Discord's markdown, cut to size.

Every string from a request (tool arguments, summaries, ids, reasons) is cleaned by
`gate.text.untrusted` first (capped, invisible and direction-changing characters removed, secrets
masked: the same rules as every other surface). It is then shown only inside inline code or a
code block, where Discord renders neither formatting, mentions (`@everyone`, `<@id>`,
`<#id>`, `<@&id>`), masked links nor auto-linked URLs; backticks inside become a look-alike
so the code cannot be closed early. Text gate writes itself (outcome sentences, answers to a
clicker that may quote a value) is escaped instead, character by character.
"""

from __future__ import annotations

from typing import Any

from gate.text import untrusted
from gate.text.untrusted import clean

# Discord's documented limits (docs/resources/message, docs/components/reference).
MAX_CONTENT = 2000
MAX_EMBED_DESCRIPTION = 4096
MAX_FIELD_VALUE = 1024
#: title, description, field names and values, footer and author across a message's embeds
MAX_EMBED_TOTAL = 6000
MAX_BUTTON_LABEL = 80
MAX_OPTION_TEXT = 100
MAX_OPTIONS = 25
MAX_PLACEHOLDER = 150
MAX_MODAL_TITLE = 45
MAX_INPUT_LABEL = 45
#: a text input's value and max_length
MAX_INPUT = 4000
MAX_CUSTOM_ID = 100
#: what we allow one inline value (tool, agent, user...) before cutting: a card is read at
#: a glance, the web page has the rest
MAX_INLINE = 200
#: the reason box; the reason is what the model is told, so a paragraph is plenty
MAX_REASON = 2000
#: a look-alike (U+02CB) for "`": untrusted text cannot close the code it is shown in
BACKTICK_LOOKALIKE = "ˋ"
#: characters Discord's markdown reads: formatting, code, spoilers, quotes, headings, masked
#: links, mentions and custom emoji (`<...>`), `@everyone` / `@here`, and the escape itself
_MARKDOWN = str.maketrans({c: "\\" + c for c in "\\*_~`|<>@[]()#"})


def escape(text: str) -> str:
    """Gate's own text, made literal in Discord markdown (a backslash before each control
    character; `://` too, so no URL is auto-linked)."""
    return text.translate(_MARKDOWN).replace("://", "\\://")


def cut(text: str, limit: int) -> str:
    """Cut to `limit` characters with an ellipsis, never leaving a dangling backslash."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    trailing = len(head) - len(head.rstrip("\\"))
    if trailing % 2:  # a backslash whose escaped character was cut off would escape "…"
        head = head[:-1]
    return head + "…"


def plain(value: Any, limit: int) -> str:
    """An untrusted value for text Discord shows as typed (labels, titles, options)."""
    return cut(" ".join(clean(value).split()), limit)


def inline(value: Any, limit: int = MAX_INLINE) -> str:
    """An untrusted value as one line of inline code: no formatting, mentions or links."""
    if value is None or value == "":
        return "—"
    text = " ".join(clean(value).split()).replace("`", BACKTICK_LOOKALIKE)
    return f"`{cut(text, limit - 2) or '—'}`"


def code_block(text: str, limit: int, language: str = "") -> tuple[str, bool]:
    """Untrusted text as a fenced code block of at most `limit` characters, and whether it
    was cut to fit. The text must already be cleaned."""
    head, tail = f"```{language}\n", "\n```"
    room = limit - len(head) - len(tail)
    # What is past the room is never shown, so it is not scanned either.
    body = text[: room + 1].replace("`", BACKTICK_LOOKALIKE)
    was_cut = len(text) > room
    return head + (cut(body, room) if was_cut else body) + tail, was_cut


def args_json(args: dict[str, Any]) -> str:
    """The arguments as indented JSON, secrets masked, invisible characters escaped."""
    return untrusted.to_json(args, indent=2)
