"""Bind an approval to the exact call it approved (standard library only: the hook uses it).

The hash covers the tool name, the canonical JSON of the arguments and, when the agent has
one, the call's id (Claude Code's tool_use_id). The server stores it with the verdict; the
hook recomputes it over what it is about to let run and refuses on a mismatch, so an
approval can never be replayed for other arguments.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Deterministic JSON: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def call_hash(tool_name: str, args: Any, call_id: str | None = None) -> str:
    """Hex SHA-256 of tool name + canonical arguments (+ call id)."""
    payload = {"tool": tool_name, "args": args}
    if call_id:
        payload["call"] = call_id
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def argument_diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Top-level keys whose values differ: {key: {"from": old, "to": new}}."""
    keys = sorted(set(before) | set(after))
    missing = object()
    diff: dict[str, dict[str, Any]] = {}
    for key in keys:
        old, new = before.get(key, missing), after.get(key, missing)
        if old != new:
            diff[key] = {
                "from": None if old is missing else old,
                "to": None if new is missing else new,
            }
    return diff
