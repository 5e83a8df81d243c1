"""Every error gate reports, and the one JSON body they all share.

Exception tree::

    GateError                      -> {"error": {"code", "message", ...}} with .status
    ├── BadRequest (400)           malformed JSON (or too deep to parse), NUL in the URL
    ├── InvalidInput (422)         a body that parses but breaks the schema, or holds a
    │                              value the database could not store and show again
    ├── Unauthenticated (401)      no token, unknown token, bad signature, stale timestamp
    ├── Forbidden (403)            known caller, wrong role or not an approver here
    ├── NotFound (404)             unknown request id or route
    ├── MethodNotAllowed (405)
    ├── AlreadyDecided (409)       a decision on a finished request (says by whom, when)
    ├── Conflict (409)             any other state clash (e.g. the same approver voting twice)
    │   ├── KeyReused              an idempotency key sent again with a different call
    │   └── ApprovalSpent          an idempotency key sent again after its approved call ran
    ├── PayloadTooLarge (413)
    └── Unavailable (503)          the database is unreachable (readiness)
        └── TooManyWaiters (503)   a long-poll over what waiting may hold (Retry-After)
    ConfigError                    a bad gate.toml / policy / database URL: never an HTTP
                                   error, stops start-up (`gate: configuration error`, exit 2)

Unknown exceptions become a generic 500 whose body names only a request id; the traceback
goes to the log.
"""

from __future__ import annotations

from typing import Any


class GateError(Exception):
    """Base of every error that reaches a client as the canonical JSON body."""

    status: int = 400
    code: str = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.extra = extra

    def body(self) -> dict[str, Any]:
        """The canonical error body."""
        return error_body(self.code, self.message, **self.extra)


class BadRequest(GateError):
    status, code = 400, "bad_request"


class InvalidInput(GateError):
    status, code = 422, "invalid_input"


class Unauthenticated(GateError):
    status, code = 401, "unauthenticated"


class Forbidden(GateError):
    status, code = 403, "forbidden"


class NotFound(GateError):
    status, code = 404, "not_found"


class MethodNotAllowed(GateError):
    status, code = 405, "method_not_allowed"


class AlreadyDecided(GateError):
    status, code = 409, "already_decided"


class Conflict(GateError):
    status, code = 409, "conflict"


class KeyReused(Conflict):
    code = "idempotency_key_reused"


class ApprovalSpent(Conflict):
    code = "approval_spent"


class PayloadTooLarge(GateError):
    status, code = 413, "payload_too_large"


class Unavailable(GateError):
    status, code = 503, "unavailable"


class TooManyWaiters(Unavailable):
    """A long-poll refused because waiting holds every connection it may (`gate.server.capacity`).

    Carries `retry_after` (seconds) in its body and, as `Retry-After`, in the answer's
    headers; `gate hook` and the SDK wait that long and poll again.
    """

    code = "too_many_waiters"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, retry_after=retry_after)
        self.retry_after = retry_after


class ConfigError(Exception):
    """A configuration or policy problem, reported with the file, the key and the reason.

    Written as compilers write theirs: `gate.toml:12: rule "big-payments": reason` (the line
    when known), or `gate.toml: server.port: reason`.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        key: str | None = None,
        line: int | None = None,
    ):
        place = f"{source}:{line}" if source and line else source
        where = ": ".join(p for p in (place, key) if p)
        super().__init__(f"{where}: {message}" if where else message)
        self.source, self.key, self.reason, self.line = source, key, message, line


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """Build `{"error": {"code", "message", ...}}`: the only error shape gate sends."""
    return {"error": {"code": code, "message": message, **extra}}
