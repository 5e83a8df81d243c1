"""Rules that offer what chat cards can do beyond yes/no (shared by the Slack and Feishu tests)."""

from __future__ import annotations

from typing import Any

CHAT_RULES: list[dict[str, Any]] = [
    {
        "name": "refunds",
        "tools": ["refund_*"],
        "approvers": ["group:finance"],
        "timeout": "10m",
        "reject_reasons": ["wrong customer", "too expensive"],
        "editable": ["amount", "currency", "api_key", "password"],
    },
    {"name": "strict", "tools": ["strict_*"], "approvers": ["group:finance"], "allow_edits": False},
    {
        "name": "grantable",
        "tools": ["shell_*"],
        "approvers": ["group:finance"],
        "timeout": "10m",
        "grant_scopes": ["session", "agent"],
        "max_grant": "1h",
    },
]
