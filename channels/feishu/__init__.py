"""Feishu / Lark: approval cards (JSON 2.0) over httpx, verified and decrypted callbacks.

One module per role:

* `settings`: `[channels.feishu]` (`FeishuSettings`, the channel's settings model);
* `card`: the card rendered from a request's view (pure);
* `verify`: signature, timestamp window and decryption, on the raw bytes;
* `clicks`: a verified callback read into a `CardAction`, then translated to gate's `Click`;
* `answers`: the toast and refreshed card a clicker gets back;
* `api`: the open platform over httpx (tenant token cache, messages created and patched);
* `channel`: `FeishuChannel`, the glue the `gate.channels` entry point names.
"""

from channels.feishu.answers import card_content, toast_for
from channels.feishu.api import receive_id_type
from channels.feishu.card import (
    ARGS_CHARS,
    CARD_BYTES,
    MASK,
    TEXT_CHARS,
    clean,
    code_block,
    mask_secrets,
    render_card,
)
from channels.feishu.channel import ACK_BUDGET_SECONDS, FeishuChannel
from channels.feishu.clicks import CardAction, parse_action, to_click
from channels.feishu.settings import FeishuSettings
from channels.feishu.verify import TIMESTAMP_WINDOW_SECONDS, decrypt, signature

__all__ = [
    "ACK_BUDGET_SECONDS",
    "ARGS_CHARS",
    "CARD_BYTES",
    "MASK",
    "TEXT_CHARS",
    "TIMESTAMP_WINDOW_SECONDS",
    "CardAction",
    "FeishuChannel",
    "FeishuSettings",
    "card_content",
    "clean",
    "code_block",
    "decrypt",
    "mask_secrets",
    "parse_action",
    "receive_id_type",
    "render_card",
    "signature",
    "to_click",
    "toast_for",
]
