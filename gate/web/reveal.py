"""Revealing a masked value on the request page: `POST /requests/{id}/reveal`.

Cards and pages mask secrets; an approver who must see one to decide asks for it here, with
the console's session cookie and CSRF token and the value's JSON pointer (form field `path`,
as `gate.text.untrusted.masks` and `gate.rendering.Line.masked_path` write it). The answer is JSON
for the page's script:

* 200 `{"path", "value", "text"}`: the raw JSON value, and `text`, the same as JSON text a
  page may show (invisible and look-alike characters as `\\uXXXX` escapes, as everywhere in
  gate; it parses back to `value`; nothing masked). Never cached.
* 403 without the session's CSRF token (`csrf_failed`), signed out (`not_signed_in`), or to
  someone who may not decide the request (`not_an_approver`, `self_approval`: the decide
  pipeline's own check, `gate.decisions.acting.refusal_for`).
* 404 for an unknown request (`request_not_found`) or a path that is not a masked value of
  its call (`not_masked`); 422 without a `path` (`invalid_input`).
* 409 once the request is decided, expired or past its deadline (`not_pending`): a reveal
  serves a decision, and a decided call's secrets (often live credentials) stay masked; the
  audit trail says who saw what while it was open, and the API shows its arguments raw to
  the approvers and admins who review it.
* 429 past the per-approver rate limit (`rate_limited`, with `Retry-After`).

Every reveal is an audit event (`revealed`: who, when and the path, never the value) written
under the request's lock, and what an approver revealed is what their approval on the page
counts for (`gate.decisions.acting.approval_refusal`). Errors use the one error body.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import Response

from gate.base.errors import error_body
from gate.config.settings import ApproverSettings
from gate.decisions import audit
from gate.decisions.acting import Actor, refusal_for
from gate.identity.auth import csrf_matches
from gate.text import untrusted
from gate.web.console import CSRF_MESSAGE, Console
from gate.web.forms import field_of
from gate.web.session import CSRF_FIELD
from gate.web.signin import TokenBuckets

#: a burst of thirty reveals per approver (a few calls with several masked values each), then
#: one every ten seconds: reading secrets in bulk through a stolen session stays slow. In
#: process, like the sign-in limits: with N replicas an approver gets N times the rate.
REVEAL_BURST = 30
REVEAL_REFILL_SECONDS = 10.0
#: a JSON pointer longer than this names no masked value a person could have seen
MAX_PATH = 4096
#: what the answer may never be kept as: it holds a secret
NO_STORE = {"Cache-Control": "no-store"}


@dataclass(frozen=True)
class Revealed:
    """A masked value, revealed and recorded."""

    path: str
    value: Any


@dataclass(frozen=True)
class Refused:
    """Why nothing was revealed: the status, the error code and the sentence."""

    status: int
    code: str
    message: str
    headers: dict[str, str] | None = None


def refused(status: int, code: str, message: str, **headers: str) -> Refused:
    """A refusal, with extra response headers (`Retry_After="5"`)."""
    return Refused(status, code, message, {k.replace("_", "-"): v for k, v in headers.items()})


class RevealRoute:
    """The reveal route, sharing the console's plumbing (session, sign-in, service)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.service = console.service
        self.limits = TokenBuckets(REVEAL_BURST, REVEAL_REFILL_SECONDS, time.monotonic)

    async def post(self, request: Request, request_id: str) -> Response:
        """POST /requests/{id}/reveal: the JSON answer described in the module docstring."""
        session, me = await self.console.who_async(request)
        form = await request.form()
        answer: Revealed | Refused
        path = field_of(form, "path")
        if not csrf_matches(session.csrf, field_of(form, CSRF_FIELD)):
            answer = refused(403, "csrf_failed", CSRF_MESSAGE)
        elif me is None:
            answer = refused(403, "not_signed_in", "Sign in to gate to reveal a masked value.")
        elif not path or len(path) > MAX_PATH:
            answer = refused(422, "invalid_input", "Say which masked value: the form's path.")
        else:
            # On the event loop: the buckets are not shared with any thread.
            wait = self.limits.wait(me.name)
            if wait > 0:
                seconds = str(math.ceil(wait))
                answer = refused(
                    429,
                    "rate_limited",
                    f"Too many reveals: try again in {seconds} s.",
                    Retry_After=seconds,
                )
            else:
                self.limits.take(me.name)
                who, at = me, path
                answer = await anyio.to_thread.run_sync(lambda: self.reveal(who, request_id, at))
        if isinstance(answer, Refused):
            body = error_body(answer.code, answer.message)
            return _json(body, answer.status, answer.headers)
        return _json({"path": answer.path, "value": answer.value, "text": inert(answer.value)})

    def reveal(self, me: ApproverSettings, request_id: str, path: str) -> Revealed | Refused:
        """The masked value at `path` of the request's call, recorded as revealed to `me`; or
        why not. Who may see it is who may decide the request (`refusal_for`)."""
        view = self.service.view(request_id)
        if view is None:
            return refused(404, "request_not_found", f"No request with id {request_id!r}.")
        refusal = refusal_for(self.service.settings, view, Actor.of_approver(me, "web"))
        if refusal is not None:
            why = refusal.sentence()
            return refused(403, refusal.value, f"Not revealed: {why}.")
        now = self.service.clock()
        if view.is_final or view.expires_at <= now:
            return _not_pending()
        try:
            value = untrusted.reveal(view.tool_args, path)
        except LookupError:
            return refused(404, "not_masked", "No masked value of this call is at that path.")
        with self.service.changing() as change:
            recorded = audit.record_reveal(
                change.session, request_id, actor=me.name, via="web", path=path, now=now
            )
        return Revealed(path, value) if recorded else _not_pending()

    def router(self) -> APIRouter:
        """The reveal route (a page's helper: not in the OpenAPI schema)."""
        r = APIRouter(include_in_schema=False)

        @r.post("/requests/{request_id}/reveal")
        async def reveal(request_id: str, request: Request) -> Response:
            return await self.post(request, request_id)

        return r


def _not_pending() -> Refused:
    return refused(
        409,
        "not_pending",
        "This request is no longer pending: masked values are revealed only to decide it.",
    )


def inert(value: Any) -> str:
    """A revealed value as JSON text a page may show: invisible and look-alike characters
    written as `\\uXXXX` escapes (it parses back to the value), nothing masked."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return untrusted.escape_lookalikes(untrusted.escape_invisible(text))


def _json(
    body: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    # ASCII JSON: a lone surrogate in an old row is an escape, never an encoding error
    text = json.dumps(body, ensure_ascii=True, default=str)
    sent = {**NO_STORE, **(headers or {})}
    return Response(text, status, headers=sent, media_type="application/json")
