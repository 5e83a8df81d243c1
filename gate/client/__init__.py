"""Python SDK for gate: `GateClient` (sync and async, httpx), `PreToolUseHook`, `@require_approval`.

The waiting (submit, long-poll in slices, reconnect, withdraw at the deadline) and the words
the model reads are `gate.asking.askflow.decide()`, the same flow `gate hook` runs; the SDK only
drives it over httpx.

    client = GateClient("http://127.0.0.1:8000", token="...")
    verdict = client.check("pay_vendor", {"amount": 60000})      # blocks until decided
    if not verdict.allowed:
        return verdict.reason                                     # tell the model why
    args = verdict.updated_args or {"amount": 60000}              # an approver may edit
    ...run the call with args...
    client.record_outcome(verdict, "ran", "paid, txn 881")        # the audit trail's last line

A yes is only returned when the approval is bound to exactly the call that will run (see
`gate.asking.binding`); otherwise the verdict's kind is "mismatch" and `.allowed` is False.

`gate.client.api` holds the client, `gate.client.guards` the hook and the decorator built on
it, `gate.client.wire` the httpx glue; everything public is importable from here.

May import: gate.asking, gate.rendering, and gate.config for `gate log`'s durations (`terminal`,
in a function: the SDK never loads it).
"""

from gate.asking.toolcall import Verdict
from gate.client.api import GateClient, Outcome
from gate.client.guards import (
    ApprovalDenied,
    HookContext,
    HookResult,
    PreToolUseHook,
    require_approval,
)
from gate.client.wire import GateAPIError, drive_async

__all__ = [
    "ApprovalDenied",
    "GateAPIError",
    "GateClient",
    "HookContext",
    "HookResult",
    "Outcome",
    "PreToolUseHook",
    "Verdict",
    "drive_async",
    "require_approval",
]
