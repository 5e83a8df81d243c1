"""A fake Discord on loopback: the bot's REST API for gate, and interactions sent to gate.

`FakeDiscord` serves `POST /api/v10/channels/{id}/messages` and `PATCH .../messages/{id}` with
Discord's shapes: it checks `Authorization: Bot <token>` and the User-Agent, refuses what
Discord refuses (`tests.support.discord_shapes`: embed and field lengths, 5 action rows, 5
buttons a row, custom_id <= 100 characters, `allowed_mentions`), records every call, and fails
on command (429 with `retry_after`, 5xx, missing access) until healed.

It is also the Discord that sends interactions: it holds its own Ed25519 private key (gate
is configured with the public half), signs `timestamp + body` the way Discord does, delivers
to gate's endpoint, checks the answer's shape for the interaction's type (a modal, an
ephemeral message, UPDATE_MESSAGE), applies an UPDATE_MESSAGE to the message as Discord
would, and times each answer. It takes follow-up messages
(`POST /api/v10/webhooks/{application}/{token}`) only with a token it issued.

What it cannot check: how Discord's clients render markdown (the drivers assert on the JSON),
rate limits it is not told to apply, the 3-second deadline (it measures, it does not fail),
and who can see a channel.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.discord_shapes import EPHEMERAL, message_problems, modal_problems
from tests.support.http import TLS
from tests.support.servers import LoopbackFake

TOKEN = "MTA5ODc2NTQzMjEwOTg3NjU0Mw.Gfake0.bot-token-for-tests"
CHANNEL = "1100000000000000001"
GUILD = "1100000000000000002"
APPLICATION = "1100000000000000003"
INTERACTIONS = "/channels/discord/interactions"
#: the answer types Discord accepts for each interaction type
ANSWERS = {1: {1}, 3: {4, 5, 6, 7, 9}, 5: {4, 5, 6, 7}}


@dataclass
class Call:
    """One REST request the fake received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int


@dataclass
class Failure:
    """A canned failure: `times` calls (None: until healed) of `kind` (create, edit, None)."""

    kind: str | None
    status: int
    code: int
    retry_after: float | None
    times: int | None


@dataclass
class Message:
    """A message as the fake holds it now (after edits and UPDATE_MESSAGE answers)."""

    channel_id: str
    id: str
    body: dict[str, Any]
    updates: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Delivered:
    """One interaction delivered to gate: the HTTP status, the answer, how long it took."""

    payload: dict[str, Any]
    status: int
    answer: dict[str, Any]
    seconds: float
    problems: list[str]

    @property
    def kind(self) -> int | None:
        value = self.answer.get("type")
        return value if isinstance(value, int) else None

    @property
    def private(self) -> str | None:
        """The text of an ephemeral answer (only the clicker sees it), if that is the answer."""
        data = self.answer.get("data") or {}
        if self.kind == 4 and data.get("flags", 0) & EPHEMERAL:
            return str(data.get("content", ""))
        return None


class FakeDiscord(LoopbackFake):
    """The fake's state and its ASGI app; `start()` serves it on 127.0.0.1:<free port>."""

    def __init__(self, token: str = TOKEN, channels: tuple[str, ...] = (CHANNEL,)) -> None:
        self.token = token
        self.channels = set(channels)
        #: channels the bot is in but may not write to (403, code 50013)
        self.read_only: set[str] = set()
        self.private_key = Ed25519PrivateKey.generate()
        self.calls: list[Call] = []
        self.messages: dict[str, Message] = {}
        self.failures: list[Failure] = []
        self.deliveries: list[Delivered] = []
        #: interaction tokens issued, and the follow-up messages sent with them
        self.tokens: set[str] = set()
        self.follow_ups: list[tuple[str, dict[str, Any]]] = []
        #: every shape problem seen, in gate's REST calls and its interaction answers
        self.problems: list[str] = []
        self.lock = threading.Lock()
        self._ids = itertools.count(1200000000000000000)
        self.app = Starlette(
            routes=[
                Route("/api/v10/channels/{channel}/messages", self._create, methods=["POST"]),
                Route(
                    "/api/v10/channels/{channel}/messages/{message}", self._edit, methods=["PATCH"]
                ),
                Route("/api/v10/webhooks/{application}/{token}", self._follow_up, methods=["POST"]),
            ]
        )

    # -- control --------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api/v10"

    @property
    def public_key(self) -> str:
        """The application's public key, as the Developer Portal shows it (64 hex digits)."""
        return self.private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()

    def snowflake(self) -> str:
        with self.lock:
            return str(next(self._ids))

    def fail(
        self,
        kind: str | None = None,
        *,
        status: int = 500,
        code: int = 0,
        retry_after: float | None = None,
        times: int | None = 1,
    ) -> None:
        """Make the next `times` calls of `kind` (create, edit; None: any) fail like this."""
        with self.lock:
            self.failures.append(Failure(kind, status, code, retry_after, times))

    def heal(self) -> None:
        with self.lock:
            self.failures.clear()

    @contextmanager
    def down(self, status: int = 500) -> Iterator[None]:
        """Every REST call fails with `status` inside the block."""
        self.fail(status=status, times=None)
        try:
            yield
        finally:
            self.heal()

    def posted(self) -> list[Message]:
        with self.lock:
            return list(self.messages.values())

    def calls_to(self, method: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method == method]

    # -- the REST API ---------------------------------------------------------------------

    def _refusal(self, request: Request, kind: str, channel: str) -> JSONResponse | None:
        if request.headers.get("authorization") != f"Bot {self.token}":
            return _error(401, 0, "401: Unauthorized")
        if not request.headers.get("user-agent", "").startswith("DiscordBot ("):
            return _error(400, 0, "a bot must send a DiscordBot User-Agent")
        with self.lock:
            for failure in self.failures:
                if failure.kind in (None, kind) and failure.times != 0:
                    if failure.times is not None:
                        failure.times -= 1
                    return _failure(failure)
        if channel not in self.channels:
            return _error(404, 10003, "Unknown Channel")
        if channel in self.read_only:
            return _error(403, 50013, "Missing Permissions")
        return None

    async def _read(self, request: Request) -> tuple[Any, list[str]]:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return None, ["the body is not JSON"]
        return body, message_problems(body)

    def _record(self, request: Request, body: Any, status: int) -> None:
        headers = {k.lower(): v for k, v in request.headers.items()}
        with self.lock:
            self.calls.append(Call(request.method, request.url.path, headers, body, status))

    async def _create(self, request: Request) -> Response:
        channel = request.path_params["channel"]
        body, problems = await self._read(request)
        answer = self._refusal(request, "create", channel) or self._invalid(problems)
        if answer is None:
            message = Message(channel, self.snowflake(), body)
            with self.lock:
                self.messages[message.id] = message
            answer = JSONResponse({"id": message.id, "channel_id": channel, **body})
        self._record(request, body, answer.status_code)
        return answer

    async def _edit(self, request: Request) -> Response:
        channel, message_id = request.path_params["channel"], request.path_params["message"]
        body, problems = await self._read(request)
        answer = self._refusal(request, "edit", channel) or self._invalid(problems)
        if answer is None:
            with self.lock:
                message = self.messages.get(message_id)
                if message is not None and message.channel_id == channel:
                    message.history.append(message.body)
                    message.body, message.updates = body, message.updates + 1
            if message is None:
                answer = _error(404, 10008, "Unknown Message")
            else:
                answer = JSONResponse({"id": message_id, "channel_id": channel, **body})
        self._record(request, body, answer.status_code)
        return answer

    async def _follow_up(self, request: Request) -> Response:
        """A follow-up message to an interaction: addressed by its token, no bot auth needed."""
        token = request.path_params["token"]
        body, problems = await self._read(request)
        problems = message_problems(body, response=True) if body is not None else problems
        if request.path_params["application"] != APPLICATION or token not in self.tokens:
            answer: Response = _error(401, 50027, "Invalid Webhook Token")
        else:
            answer = self._invalid(problems) or JSONResponse({"id": self.snowflake(), **body})
            if answer.status_code == 200:
                with self.lock:
                    self.follow_ups.append((token, body))
        self._record(request, body, answer.status_code)
        return answer

    def _invalid(self, problems: list[str]) -> JSONResponse | None:
        if not problems:
            return None
        with self.lock:
            self.problems.extend(problems)
        body = {"message": "Invalid Form Body", "code": 50035, "errors": problems}
        return JSONResponse(body, status_code=400)

    # -- interactions, as Discord sends them -----------------------------------------------

    def sign(
        self, body: bytes, *, timestamp: int | None = None, key: Ed25519PrivateKey | None = None
    ) -> dict[str, str]:
        """Discord's headers: hex(Ed25519(timestamp + body)) and the timestamp."""
        ts = str(int(time.time()) if timestamp is None else timestamp)
        signature = (key or self.private_key).sign(ts.encode() + body).hex()
        return {
            "Content-Type": "application/json",
            "X-Signature-Ed25519": signature,
            "X-Signature-Timestamp": ts,
        }

    def post_raw(
        self, gate_url: str, body: bytes, headers: Mapping[str, str | bytes]
    ) -> httpx.Response:
        with httpx.Client(base_url=gate_url, timeout=10, verify=TLS) as client:
            return client.post(INTERACTIONS, content=body, headers=headers)

    def deliver(
        self, gate_url: str, payload: dict[str, Any], *, body: bytes | None = None
    ) -> Delivered:
        """Sign and send an interaction; check the answer and apply it as Discord would."""
        raw = body if body is not None else json.dumps(payload).encode()
        headers = self.sign(raw)
        started = time.perf_counter()
        r = self.post_raw(gate_url, raw, headers)
        seconds = time.perf_counter() - started
        answer = (
            r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        )
        problems = self._answer_problems(payload, r, answer) if r.status_code == 200 else []
        delivered = Delivered(payload, r.status_code, answer, seconds, problems)
        with self.lock:
            self.problems.extend(problems)
            self.deliveries.append(delivered)
        if delivered.kind == 7 and not problems:
            self._apply(payload, answer["data"])
        return delivered

    def _answer_problems(
        self, payload: dict[str, Any], r: httpx.Response, answer: dict[str, Any]
    ) -> list[str]:
        kind, allowed = answer.get("type"), ANSWERS.get(payload.get("type", 0), set())
        if kind not in allowed:
            return [f"answer type {kind!r} is not valid for interaction type {payload.get('type')}"]
        if kind in (6, 7) and "message" not in payload:
            return [f"answer type {kind} needs a message to update"]
        if kind == 9:
            return modal_problems(answer.get("data"))
        if kind in (4, 7):
            return message_problems(answer.get("data"), response=True)
        return []

    def _apply(self, payload: dict[str, Any], body: dict[str, Any]) -> None:
        with self.lock:
            message = self.messages.get(str(payload["message"]["id"]))
            if message is not None:
                message.history.append(message.body)
                message.body, message.updates = body, message.updates + 1

    def interaction(
        self, kind: int, data: dict[str, Any], user_id: str, message: Message | None
    ) -> dict[str, Any]:
        """An interaction body in the shape of Discord's documented examples (guild click)."""
        token = "aW50ZXJhY3Rpb246" + self.snowflake()
        with self.lock:
            self.tokens.add(token)
        payload: dict[str, Any] = {
            "version": 1,
            "type": kind,
            "id": self.snowflake(),
            "application_id": APPLICATION,
            "token": token,
            "guild_id": GUILD,
            "channel_id": message.channel_id if message else CHANNEL,
            "member": {
                "user": {"id": user_id, "username": f"user{user_id[-4:]}", "global_name": None},
                "nick": "not-trusted-nick",
                "roles": [],
                "permissions": "2248473465835073",
                "joined_at": "2025-01-01T00:00:00.000000+00:00",
            },
            "app_permissions": "2248473465835073",
            "locale": "en-US",
            "guild_locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {"0": GUILD},
            "context": 0,
            "data": data,
        }
        if message is not None:
            payload["message"] = {
                "id": message.id,
                "channel_id": message.channel_id,
                **message.body,
            }
        return payload

    def component(
        self, message: Message | None, custom_id: str, user_id: str, values: list[str] | None = None
    ) -> dict[str, Any]:
        """A click on a button (or a pick in a string select, with `values`)."""
        data: dict[str, Any] = {"custom_id": custom_id, "component_type": 2}
        if values is not None:
            data = {"custom_id": custom_id, "component_type": 3, "values": values}
        return self.interaction(3, data, user_id, message)

    def modal_submit(
        self, message: Message | None, modal: dict[str, Any], texts: dict[str, str], user_id: str
    ) -> dict[str, Any]:
        """Submitting `modal` with `texts` by input custom_id (others at their prefilled value)."""
        rows = []
        for row in modal["components"]:
            text_input = row["components"][0]
            value = texts.get(text_input["custom_id"], text_input.get("value", ""))
            rows.append(
                {
                    "type": 1,
                    "components": [
                        {"type": 4, "custom_id": text_input["custom_id"], "value": value}
                    ],
                }
            )
        data = {"custom_id": modal["custom_id"], "components": rows}
        return self.interaction(5, data, user_id, message)


def _error(status: int, code: int, message: str) -> JSONResponse:
    return JSONResponse({"message": message, "code": code}, status_code=status)


def _failure(failure: Failure) -> JSONResponse:
    if failure.status == 429:
        seconds = failure.retry_after if failure.retry_after is not None else 0.5
        body = {"message": "You are being rate limited.", "retry_after": seconds, "global": False}
        headers = {"Retry-After": str(int(seconds) + 1), "X-RateLimit-Scope": "user"}
        return JSONResponse(body, status_code=429, headers=headers)
    return _error(failure.status, failure.code, "failure on command")
