"""Untrusted text in Block Kit: cleaned, escaped for mrkdwn, cut to Slack's limits.

Card text built from tool arguments is untrusted. Every such string is cleaned by
`gate.text.untrusted` (capped, invisible and direction-changing characters removed, secrets
masked: the same rules as every other surface), then escaped for mrkdwn (`&`, `<`, `>`), cut
to Slack's limits, and shown only inside inline code or a code block.
"""

from __future__ import annotations

from typing import Any

from channels.decisions import Arguments
from gate.text.untrusted import clean

# Slack's Block Kit limits (docs.slack.dev, and slack-sdk's own block classes).
MAX_SECTION_TEXT = 3000
MAX_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_FALLBACK_TEXT = 4000
#: a context block's text element
MAX_CONTEXT_TEXT = 2000
#: what we allow one inline value (tool, agent, user...) before cutting: a card is read at
#: a glance, the web page has the rest
MAX_INLINE = 200
#: characters of a call's arguments a card shows whole (and so may offer to approve): at most
#: six sections once escaped (`&` is five characters in mrkdwn)
ARGS_CHARS = 3000
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


ARGS_HEAD, ARGS_TAIL = "*The call*\n```\n", "\n```"


def cut_note(shown: Arguments, url: str) -> str:
    """What follows a call the card had to cut: the card's words and the link to gate."""
    return f"\n_{escape(shown.note('Slack'))} <{url}|Open in gate>_"


def args_room(shown: Arguments, url: str) -> int:
    """How many characters of escaped text a cut call has in its one section."""
    return MAX_SECTION_TEXT - len(ARGS_HEAD) - len(ARGS_TAIL) - len(cut_note(shown, url))


def code_text(text: str) -> str:
    """Text as it stands in a code block: escaped, backticks a look-alike."""
    return escape(text.replace("`", "ˋ"))


def args_sections(shown: Arguments, url: str) -> list[str]:
    """The call as gate renders it, in code blocks: whole, split over as many sections as
    its escaped text needs (escaping lengthens it), or cut in one, ending with what is not
    shown, then the card's words and the link to the whole call.

    The card shows the whole call up to `ARGS_CHARS` characters of its rendering (what
    gate's check on an approval measures, `gate.rendering.shown_chars`); past that it cuts
    it and offers no approval, and the link is where to review and approve.
    """
    head, tail = ARGS_HEAD, ARGS_TAIL
    # Backticks become a look-alike so "```" inside an argument cannot close the block.
    body = shown.text.replace("`", "ˋ")
    if shown.cut:
        # A cut call fits one section (`args_room`): its last line says what is not shown.
        return [head + escape(body) + tail + cut_note(shown, url)]
    sections: list[str] = []
    room = MAX_SECTION_TEXT - len(head) - len(tail)
    piece: list[str] = []
    used = 0
    for char in body:
        escaped = escape(char)
        if used + len(escaped) > room:
            sections.append("".join(piece))
            piece, used = [], 0
        piece.append(escaped)
        used += len(escaped)
    sections.append("".join(piece))
    blocks = [(head if i == 0 else "```\n") + text + tail for i, text in enumerate(sections)]
    # shown whole, yet not approvable (a mask in it could hide code): the card says why
    return blocks if shown.whole else [*blocks, cut_note(shown, url).lstrip("\n")]


def mrkdwn_object(text: str) -> dict[str, Any]:
    """A mrkdwn text object for text already escaped (or built by gate)."""
    # verbatim: no auto-linking of URLs or channel names in what we send.
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def plain_object(text: str) -> dict[str, Any]:
    """A plain_text object (Slack shows it as typed, no mrkdwn)."""
    return {"type": "plain_text", "text": text, "emoji": False}
