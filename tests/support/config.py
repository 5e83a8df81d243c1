"""A standard gate.toml for tests: approvers, tokens of every role, and one rule per behaviour."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from gate.config.settings import Settings

AGENT = "tok-agent-billing"
OTHER_AGENT = "tok-agent-other"
ALICE = "tok-approver-alice"
BOB = "tok-approver-bob"
CAROL = "tok-approver-carol"
MALLORY = "tok-approver-mallory"
ADMIN = "tok-admin"

BASE: dict[str, Any] = {
    "server": {"sweep_interval_seconds": 0.2, "outbox_interval_seconds": 0.2},
    "approvers": [
        {
            "name": "alice",
            "groups": ["finance"],
            "slack": "U0ALICE",
            "feishu": "ou_alice",
            "email": "alice@example.com",
        },
        {"name": "bob", "groups": ["finance"], "slack": "U0BOB", "feishu": "ou_bob"},
        {"name": "carol", "groups": ["ops"], "slack": "U0CAROL", "feishu": "ou_carol"},
        {"name": "mallory", "groups": [], "slack": "U0MALLORY", "feishu": "ou_mallory"},
    ],
    "tokens": [
        {"name": "billing-agent", "role": "agent", "token": AGENT},
        {"name": "other-agent", "role": "agent", "token": OTHER_AGENT},
        {"name": "alice", "role": "approver", "token": ALICE, "approver": "alice"},
        {"name": "bob", "role": "approver", "token": BOB, "approver": "bob"},
        {"name": "carol", "role": "approver", "token": CAROL, "approver": "carol"},
        {"name": "mallory", "role": "approver", "token": MALLORY, "approver": "mallory"},
        {"name": "ops-admin", "role": "admin", "token": ADMIN},
    ],
    "channels": {"log": {}},
    "rules": [
        {
            "name": "deny-prod-writes",
            "tools": ["db_*"],
            "when": "args.env == 'prod'",
            "action": "deny",
            "reason": "No writes to prod from agents",
        },
        {"name": "reads", "tools": ["read_*"], "action": "allow"},
        {
            "name": "big-payments",
            "tools": ["pay_*"],
            "when": "args.amount > 50000",
            "approvers": ["group:finance"],
            "timeout": "10m",
            "reason": "Payments over 50k need a human",
        },
        {
            "name": "wire-quorum",
            "tools": ["wire_*"],
            "approvers": ["group:finance"],
            "approvals_required": 2,
            "timeout": "10m",
        },
        {"name": "ops-only", "tools": ["deploy_*"], "approvers": ["group:ops"], "timeout": "10m"},
        {"name": "short-fuse", "tools": ["ephemeral_*"], "timeout": "1s"},
        {"name": "lenient", "tools": ["lenient_*"], "timeout": "1s", "on_timeout": "approve"},
        {"name": "anyone", "tools": ["ask_*"], "timeout": "10m"},
    ],
}


def settings_data(database_url: str, **server: Any) -> dict[str, Any]:
    """The standard settings as a dict, pointed at `database_url`."""
    data = copy.deepcopy(BASE)
    data["server"].update({"database_url": database_url, **server})
    return data


def make_settings(database_url: str, **server: Any) -> Settings:
    """Standard Settings for an in-process app."""
    return Settings(**settings_data(database_url, **server))


def to_toml(data: dict[str, Any]) -> str:
    """Render settings data as TOML (enough of TOML for these shapes)."""
    lines: list[str] = []

    def scalar(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, dict):  # an inline table (a rule's `stages` entries, `votes`)
            return "{ " + ", ".join(f"{k} = {scalar(x)}" for k, x in v.items()) + " }"
        if isinstance(v, list):
            return "[" + ", ".join(scalar(x) for x in v) + "]"
        return json.dumps(v)

    def table(prefix: str, d: dict[str, Any]) -> None:
        simple = {k: v for k, v in d.items() if not isinstance(v, dict)}
        nested = {k: v for k, v in d.items() if isinstance(v, dict)}
        for k, v in simple.items():
            lines.append(f"{k} = {scalar(v)}")
        for k, v in nested.items():
            lines.append(f"\n[{prefix}{k}]")
            table(f"{prefix}{k}.", v)

    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(f"\n[{key}]")
            table(f"{key}.", value)
        elif isinstance(value, list):
            for item in value:
                lines.append(f"\n[[{key}]]")
                table(f"{key}.", item)
    return "\n".join(lines) + "\n"


def write_config(path: Path, database_url: str, **server: Any) -> Path:
    """Write the standard settings as gate.toml at `path`."""
    path.write_text(to_toml(settings_data(database_url, **server)))
    return path
