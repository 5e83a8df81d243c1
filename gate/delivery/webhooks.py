"""Sending `[[webhooks]]` messages: claimed from their outbox, signed, POSTed, marked.

Each message is signed per the Standard Webhooks specification with its reference library
(`standardwebhooks`): headers `webhook-id` (the row's `msg_id`, the same on every attempt,
so a receiver can drop a repeat), `webhook-timestamp` (this attempt's, in seconds) and
`webhook-signature` (`v1,` and base64 of HMAC-SHA256 over `id.timestamp.body`). A 2xx answer
is delivered; anything else, or no answer within the webhook's timeout, is retried with
a doubling backoff and is dead after its `max_attempts` (the console's Webhooks page shows
it and can send it again). Redirects are not followed: a receiver that moved is a failure
an operator should see, not a place gate's signed messages drift to.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx
from standardwebhooks import Webhook

from gate.base import threads
from gate.base.statuses import utcnow
from gate.base.tls import verifying_context
from gate.config.settings import WebhookSettings
from gate.store import webhooks as outbox
from gate.store.db import Database

log = logging.getLogger("gate.webhooks")

#: how much of a refusing receiver's body the console shows
ERROR_BODY_CHARS = 200


def body_of(payload: dict[str, Any]) -> str:
    """The exact text a message's body is: compact JSON (the signature covers these bytes)."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def signed_headers(hook: WebhookSettings, msg_id: str, at: datetime, body: str) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt."""
    signature = Webhook(hook.signing_secret).sign(msg_id=msg_id, timestamp=at, data=body)
    return {
        "content-type": "application/json",
        "user-agent": "gate-webhooks",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature,
    }


def subscriptions(hooks: list[WebhookSettings]) -> dict[str, frozenset[str]]:
    """Webhook name -> the events it wants (what `Database.webhooks` holds)."""
    return {hook.name: frozenset(hook.events) for hook in hooks}


class WebhookSender:
    """Every replica's pump of webhook messages (safe on all at once: leased claims)."""

    def __init__(
        self,
        db: Database,
        hooks: list[WebhookSettings],
        clock: Callable[[], datetime] = utcnow,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.db = db
        self.hooks = {hook.name: hook for hook in hooks}
        self.clock = clock
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        #: messages this replica delivered (a receiver answered 2xx and the mark held)
        self.delivered = 0

    async def pump(self) -> int:
        """Claim the due messages and send them all at once; returns how many were tried."""
        claims = await threads.run_sync(outbox.claim_due, self.db, self.clock())
        if claims:
            await asyncio.gather(*(self.send(claim) for claim in claims))
        return len(claims)

    async def send(self, claim: outbox.WebhookClaim) -> str:
        """One attempt at one claimed message: "sent", "retry", "dead" or "lost" (the lease
        ran out and another replica has it)."""
        hook = self.hooks.get(claim.webhook)
        if hook is None:  # removed from gate.toml since: nobody to send it to, or retry
            why = f"webhook {claim.webhook!r} is no longer configured"
            return await self._failed(claim, why, max_attempts=1, base=1.0)
        body = body_of(claim.payload)
        headers = signed_headers(hook, claim.msg_id, self.clock(), body)
        try:
            answer = await self._http().post(
                hook.url, content=body.encode(), headers=headers, timeout=hook.timeout_seconds
            )
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return await self._failed(claim, error, hook.max_attempts, hook.retry_base_seconds)
        if answer.is_success:
            marked = await threads.run_sync(outbox.mark_sent, self.db, claim, self.clock())
            if not marked:
                return "lost"
            self.delivered += 1
            return "sent"
        error = f"HTTP {answer.status_code}: {answer.text[:ERROR_BODY_CHARS]}".rstrip(": ")
        return await self._failed(claim, error, hook.max_attempts, hook.retry_base_seconds)

    async def _failed(
        self, claim: outbox.WebhookClaim, error: str, max_attempts: int, base: float
    ) -> str:
        def mark() -> bool:
            now = self.clock()
            return outbox.mark_failed(
                self.db, claim, now, error, max_attempts=max_attempts, base=base
            )

        dead = await threads.run_sync(mark)
        log.log(
            logging.ERROR if dead else logging.WARNING,
            "webhook %s message %s (%s of %s), attempt %d: %s; %s",
            *(claim.webhook, claim.msg_id, claim.event, claim.request_id, claim.attempts),
            error,
            "dead (resend it from the console's Webhooks page)" if dead else "will retry",
        )
        return "dead" if dead else "retry"

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:  # made on the event loop that sends
            self._client = httpx.AsyncClient(
                transport=self._transport, follow_redirects=False, verify=verifying_context()
            )
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client (at shutdown)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
