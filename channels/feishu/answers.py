"""What a Feishu clicker gets back: a toast, and the card as the request now stands.

The words come from gate (`Result.message()`, its refusal); this module only picks the
toast's kind and renders the card. Rendering scans untrusted text, so it runs in a worker
thread: a huge argument must not hold up the event loop inside Feishu's 3-second budget.
"""

from __future__ import annotations

import json
from typing import Any

import anyio

from channels.feishu.card import clean, render_card
from gate.decisions.acting import Result
from gate.decisions.readmodel import RequestView

#: a late answer is gate's words, cut to a size well inside a card's 30 KB
LATE_CHARS = 1000
#: a toast as a callback answer carries it: {"type": "success" | "info" | "error", "content"}
Toast = dict[str, str]


def toast(kind: str, content: str) -> Toast:
    """A toast of `kind` (success, info, error) saying `content`."""
    return {"type": kind, "content": content}


def toast_for(result: Result) -> Toast:
    """The toast the clicker sees for what their click did."""
    if result.changed:
        kind = "success"
    elif result.refusal is not None or result.view is None:  # refused, or no such request
        kind = "error"
    else:
        kind = "info"
    return toast(kind, result.message())


async def answer(
    note: Toast, view: RequestView | None, *, legacy: bool, editing: bool = False
) -> dict[str, Any]:
    """The callback's answer: the toast, and the refreshed card (the legacy shape has none).

    `editing` returns the card with its edit form open.
    """
    body: dict[str, Any] = {"toast": note}
    if view is not None and not legacy:
        card = await anyio.to_thread.run_sync(lambda: render_card(view, editing=editing))
        body["card"] = {"type": "raw", "data": card}
    return body


def card_content(req: RequestView) -> str:
    """The card as a message's JSON content. Channels call it in a worker thread: rendering
    scans untrusted text, and a huge argument must not hold up the event loop."""
    return json.dumps(render_card(req), ensure_ascii=False)


def late_content(text: str) -> str:
    """What became of a click answered "Recording..." when it did not count, as a message's
    JSON content: a small JSON 2.0 card with gate's words in `plain_text`, cleaned like the
    approval card's text. Not a text message: Feishu reads `<at user_id="all">` in those."""
    card = {
        "schema": "2.0",
        "config": {"summary": {"content": "Your decision was not recorded"}},
        "header": {
            "title": {"tag": "plain_text", "content": "Your decision on a gate request"},
            "template": "red",
        },
        "body": {
            "elements": [
                {
                    "tag": "div",
                    "element_id": "late",
                    "text": {"tag": "plain_text", "content": clean(text, LATE_CHARS, mask=False)},
                }
            ]
        },
    }
    return json.dumps(card, ensure_ascii=False)
