"""Untrusted text in Block Kit: cleaned, escaped for mrkdwn, cut to Slack's limits.

Card text built from tool arguments is untrusted. Every such string is cleaned by
`gate.untrusted` (capped, invisible and direction-changing characters removed, secrets
masked: the same rules as every other surface), then escaped for mrkdwn (`&`, `<`, `>`), cut
to Slack's limits, and shown only inside inline code or a code block.
"""

from __future__ import annotations

from typing import Any

from gate import untrusted
from gate.untrusted import clean

# Slack's Block Kit limits (docs.slack.dev, and slack-sdk's own block classes).
MAX_SECTION_TEXT = 3000
MAX_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_FALLBACK_TEXT = 4000
#: what we allow one inline value (tool, agent, user...) before cutting: a card is read at
#: a glance, the web page has the rest
MAX_INLINE = 200
#: the modal's reason box; the reason is what the model is told, so a paragraph is plenty
MAX_REASON = 2000
#: plain_text_input's initial_value and max_length limit
MAX_INPUT = 3000
#: option text (75) and value (150) limits; checkboxes hold at most 10 options
MAX_OPTION_TEXT = 75
MAX_CHECKBOXES = 10


def escape(text: str) -> str:
    """Escape Slack's three control characters (`&` first), which neutralises `<...>` syntax."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def cut(escaped: str, limit: int) -> str:
    """Cut already-escaped text to `limit` characters without splitting an `&...;` entity."""
    if len(escaped) <= limit:
        return escaped
    head = escaped[: limit - 1]
    amp = head.rfind("&")
    if amp != -1 and ";" not in head[amp:]:
        head = head[:amp]
    return head + "…"


def inline(value: Any, limit: int = MAX_INLINE) -> str:
    """An untrusted value as one line of inline code: no formatting, mentions or links."""
    if value is None or value == "":
        return "—"
    text = " ".join(clean(value).split())
    # A backtick would end the inline code and let mrkdwn formatting back in.
    text = escape(text.replace("`", "ˋ"))
    return f"`{cut(text, limit - 2)}`"


def plain(value: Any, limit: int) -> str:
    """An untrusted value for a plain_text object: cleaned, escaped, cut."""
    return cut(escape(" ".join(clean(value).split())), limit)


def args_block_text(args: dict[str, Any], url: str) -> str:
    """The arguments as a code block that fits one section, with a link when cut."""
    head, tail = "*Arguments*\n```\n", "\n```"
    more = f"\n_Cut to fit Slack: <{url}|view all in gate>_"
    # Escaping only lengthens text: what is past the section's length is never shown, so it
    # is not escaped either.
    body = untrusted.to_json(args, indent=2)[:MAX_SECTION_TEXT]
    # Backticks become a look-alike so "```" inside an argument cannot close the block.
    body = escape(body.replace("`", "ˋ"))
    if len(head) + len(body) + len(tail) <= MAX_SECTION_TEXT:
        return head + body + tail
    return head + cut(body, MAX_SECTION_TEXT - len(head) - len(tail) - len(more)) + tail + more


def mrkdwn_object(text: str) -> dict[str, Any]:
    """A mrkdwn text object for text already escaped (or built by gate)."""
    # verbatim: no auto-linking of URLs or channel names in what we send.
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def plain_object(text: str) -> dict[str, Any]:
    """A plain_text object (Slack shows it as typed, no mrkdwn)."""
    return {"type": "plain_text", "text": text, "emoji": False}
