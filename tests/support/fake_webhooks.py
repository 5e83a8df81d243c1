"""A webhook receiver on loopback that checks each message as a real one would.

`FakeReceiver` serves `POST /hook`. It verifies every message with the Standard Webhooks
library (`standardwebhooks.Webhook.verify`: the three headers, the timestamp's tolerance and
the HMAC over `id.timestamp.body`) before it reads it, answers 401 to one that does not
verify, and records what it took, with the raw body and headers, so a test can replay or
tamper with one. It fails on command: `fail_with(500, times=n)` answers the next n verified
messages with that status (None: every one), and `delay` holds each answer a while (two
replicas then overlap).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from time import monotonic
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.servers import LoopbackFake

#: a Standard Webhooks secret for tests (base64 of 32 bytes)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw1W2Uk8OFcN8="


@dataclass(frozen=True)
class Received:
    """One message as it arrived."""

    msg_id: str
    body: bytes
    headers: dict[str, str]
    payload: dict[str, Any]
    #: monotonic seconds when it arrived
    at: float
    #: the status the receiver answered
    answered: int


@dataclass
class FakeReceiver(LoopbackFake):
    """The receiver; `url` is where gate posts."""

    secret: str = SECRET
    delay: float = 0.0
    #: every attempt that verified, taken or failed on command, in order
    attempts: list[Received] = field(default_factory=list)
    #: messages that did not verify (the library's reason)
    rejected: list[str] = field(default_factory=list)
    _failing: tuple[int, int | None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.app = Starlette(routes=[Route("/hook", self._hook, methods=["POST"])])

    @property
    def url(self) -> str:
        """The hook's URL."""
        return f"{self.base_url}/hook"

    def fail_with(self, status: int, times: int | None = None) -> None:
        """Answer the next `times` verified messages (None: all) with `status`."""
        with self._lock:
            self._failing = (status, times)

    def heal(self) -> None:
        """Take every message again."""
        with self._lock:
            self._failing = None

    @property
    def taken(self) -> list[Received]:
        """The attempts answered 2xx."""
        with self._lock:
            return [r for r in self.attempts if r.answered < 300]

    async def _hook(self, request: Request) -> Response:
        body = await request.body()  # verified as raw bytes before anything parses them
        headers = dict(request.headers)
        try:
            payload = Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError as exc:
            with self._lock:
                self.rejected.append(str(exc))
            return JSONResponse({"error": str(exc)}, status_code=401)
        if self.delay:
            await asyncio.sleep(self.delay)  # a slow receiver: the sender waits on it
        with self._lock:
            answered = 200
            if self._failing is not None:
                status, times = self._failing
                answered = status
                if times is not None:
                    self._failing = (status, times - 1) if times > 1 else None
            self.attempts.append(
                Received(headers["webhook-id"], body, headers, payload, monotonic(), answered)
            )
        if answered >= 300:
            return JSONResponse({"error": "receiver told to fail"}, status_code=answered)
        return Response(status_code=204)
