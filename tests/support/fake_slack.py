"""A fake Slack Web API on loopback: the real slack-sdk client talks to it in tests.

It implements chat.postMessage, chat.update, chat.postEphemeral and views.open with Slack's
response shapes, checks the bot token, validates blocks against Block Kit's limits (buttons,
selects, checkboxes, plain-text inputs and their initial values included), can be
told to fail (429 with Retry-After, 5xx, any Slack error code), and records every call.

What it cannot check: how Slack's clients render mrkdwn (we assert on the JSON instead),
rate limits it is not told to apply, trigger_id expiry (3 s in real Slack), and anything
about who may see a channel.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.support.servers import LoopbackFake

TOKEN = "xoxb-0000000000-fake-bot-token"
CHANNEL = "C0APPROVALS"


@dataclass
class Call:
    """One request the fake received."""

    method: str
    body: dict[str, Any]
    headers: dict[str, str]
    status: int
    response: dict[str, Any]


@dataclass
class Failure:
    """A canned failure: `times` calls (None = until cleared) of `method` (None = any)."""

    method: str | None
    status: int = 200
    error: str | None = None
    retry_after: int | None = None
    times: int | None = 1
    html: bool = False


@dataclass
class Message:
    """A message as the fake holds it now (after any chat.update)."""

    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    updates: int = 0
    history: list[list[dict[str, Any]]] = field(default_factory=list)


class BlockKitError(ValueError):
    """A block that real Slack would refuse with invalid_blocks."""


class FakeSlack(LoopbackFake):
    """The fake's state and its ASGI app; `start()` serves it on 127.0.0.1:<free port>."""

    def __init__(self, token: str = TOKEN, channels: tuple[str, ...] = (CHANNEL,)) -> None:
        self.token = token
        self.channels = set(channels)
        self.calls: list[Call] = []
        self.messages: dict[tuple[str, str], Message] = {}
        self.ephemerals: list[dict[str, Any]] = []
        self.views: list[dict[str, Any]] = []
        self.failures: list[Failure] = []
        self._used_triggers: set[str] = set()
        self._ts = itertools.count(100)
        self._lock = threading.Lock()
        self.app = Starlette(routes=[Route("/api/{method}", self._handle, methods=["POST"])])

    # -- control --------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api/"

    def fail(
        self,
        method: str | None = None,
        *,
        status: int = 200,
        error: str | None = None,
        retry_after: int | None = None,
        times: int | None = 1,
        html: bool = False,
    ) -> Failure:
        """Make the next `times` calls of `method` fail (None: every call until `heal`)."""
        failure = Failure(method, status, error, retry_after, times, html)
        with self._lock:
            self.failures.append(failure)
        return failure

    def heal(self) -> None:
        """Stop failing."""
        with self._lock:
            self.failures.clear()

    @contextmanager
    def down(self, status: int = 500) -> Iterator[None]:
        """Slack answers every call with `status` inside the block."""
        self.fail(status=status, error="internal_error" if status >= 500 else None, times=None)
        try:
            yield
        finally:
            self.heal()

    def calls_to(self, method: str, *, ok: bool | None = None) -> list[Call]:
        """Recorded calls of `method` (only successful ones with ok=True)."""
        with self._lock:
            found = [c for c in self.calls if c.method == method]
        if ok is not None:
            found = [c for c in found if bool(c.response.get("ok")) == ok]
        return found

    def posted(self) -> list[Message]:
        """Messages that exist, oldest first."""
        with self._lock:
            return list(self.messages.values())

    # -- the API --------------------------------------------------------------------------

    async def _handle(self, request: Request) -> Response:
        method = request.path_params["method"]
        raw = await request.body()
        body = _parse_body(raw, request.headers.get("content-type", ""))
        headers = {k.lower(): v for k, v in request.headers.items()}
        status, response, extra = self._answer(method, body, headers)
        with self._lock:
            self.calls.append(Call(method, body, headers, status, response))
        if extra.get("html"):
            return PlainTextResponse("<html>upstream error</html>", status, media_type="text/html")
        return JSONResponse(response, status, headers=extra.get("headers"))

    def _answer(
        self, method: str, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[int, dict[str, Any], dict[str, Any]]:
        auth = headers.get("authorization", "")
        if not auth.startswith("Bearer "):
            return 200, _error("not_authed"), {}
        if auth.removeprefix("Bearer ") != self.token:
            return 200, _error("invalid_auth"), {}
        canned = self._take_failure(method)
        if canned is not None:
            extra: dict[str, Any] = {"html": canned.html}
            if canned.status == 429:
                extra["headers"] = {"Retry-After": str(canned.retry_after or 1)}
                return 429, _error("ratelimited"), extra
            return canned.status, _error(canned.error or "internal_error"), extra
        handler = {
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "chat.postEphemeral": self._post_ephemeral,
            "views.open": self._views_open,
        }.get(method)
        if handler is None:
            return 200, _error("unknown_method"), {}
        try:
            with self._lock:
                return 200, handler(body), {}
        except BlockKitError as exc:
            return 200, {**_error("invalid_blocks"), "errors": [str(exc)]}, {}

    def _take_failure(self, method: str) -> Failure | None:
        with self._lock:
            for failure in self.failures:
                if failure.method in (None, method):
                    if failure.times is not None:
                        failure.times -= 1
                        if failure.times <= 0:
                            self.failures.remove(failure)
                    return failure
        return None

    def _channel(self, body: dict[str, Any]) -> str:
        channel = body.get("channel")
        if not isinstance(channel, str) or not channel:
            raise _SlackError("channel_not_found")
        if channel not in self.channels:
            raise _SlackError("channel_not_found")
        return channel

    def _post_message(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            channel = self._channel(body)
        except _SlackError as exc:
            return _error(exc.code)
        error = _message_error(body)
        if error:
            return error
        ts = f"1700000000.{next(self._ts):06d}"
        message = Message(channel, ts, body.get("text", ""), body.get("blocks") or [])
        self.messages[(channel, ts)] = message
        return {
            "ok": True,
            "channel": channel,
            "ts": ts,
            "message": {"type": "message", "ts": ts, "text": message.text, "bot_id": "B0BOT"},
        }

    def _update(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            channel = self._channel(body)
        except _SlackError as exc:
            return _error(exc.code)
        message = self.messages.get((channel, str(body.get("ts"))))
        if message is None:
            return _error("message_not_found")
        error = _message_error(body)
        if error:
            return error
        message.history.append(message.blocks)
        message.text = body.get("text", "")
        message.blocks = body.get("blocks") or []
        message.updates += 1
        return {"ok": True, "channel": channel, "ts": message.ts, "text": message.text}

    def _post_ephemeral(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            self._channel(body)
        except _SlackError as exc:
            return _error(exc.code)
        if not body.get("user"):
            return _error("user_not_found")
        if not body.get("text") and not body.get("blocks"):
            return _error("no_text")
        self.ephemerals.append(body)
        return {"ok": True, "message_ts": f"1700000001.{next(self._ts):06d}"}

    def _views_open(self, body: dict[str, Any]) -> dict[str, Any]:
        trigger = body.get("trigger_id")
        if not trigger:
            return _error("invalid_arguments")
        if trigger in self._used_triggers:  # a trigger_id works once
            return _error("expired_trigger_id")
        view = body.get("view")
        if isinstance(view, str):
            view = json.loads(view)
        if not isinstance(view, dict):
            return _error("invalid_arguments")
        check_modal(view)
        self._used_triggers.add(trigger)
        self.views.append(view)
        return {"ok": True, "view": {"id": f"V{len(self.views):08d}", **view}}


class _SlackError(Exception):
    def __init__(self, code: str) -> None:
        self.code = code


def _error(code: str) -> dict[str, Any]:
    return {"ok": False, "error": code}


def _parse_body(raw: bytes, content_type: str) -> dict[str, Any]:
    if "json" in content_type:
        data = json.loads(raw or b"{}")
        return data if isinstance(data, dict) else {}
    return dict(parse_qsl(raw.decode("utf-8")))


def _message_error(body: dict[str, Any]) -> dict[str, Any] | None:
    text = body.get("text") or ""
    if len(text) > 4000:
        return _error("msg_too_long")
    blocks = body.get("blocks")
    if isinstance(blocks, str):
        blocks = json.loads(blocks)
    if not blocks and not text:
        return _error("no_text")
    if blocks:
        check_blocks(blocks, max_blocks=50)
    return None


# -- Block Kit limits -----------------------------------------------------------------------


def _text(obj: Any, where: str, limit: int, *, plain_only: bool = False) -> None:
    if not isinstance(obj, dict) or obj.get("type") not in ("plain_text", "mrkdwn"):
        raise BlockKitError(f"{where}: must be a text object")
    if plain_only and obj["type"] != "plain_text":
        raise BlockKitError(f"{where}: must be plain_text")
    text = obj.get("text")
    if not isinstance(text, str) or not 1 <= len(text) <= limit:
        raise BlockKitError(f"{where}: text must be 1..{limit} characters")


def _button(el: dict[str, Any], where: str) -> None:
    _text(el.get("text"), f"{where}.text", 75, plain_only=True)
    if len(str(el.get("action_id", ""))) > 255:
        raise BlockKitError(f"{where}.action_id: over 255 characters")
    if len(str(el.get("value", ""))) > 2000:
        raise BlockKitError(f"{where}.value: over 2000 characters")
    if len(str(el.get("url", ""))) > 3000:
        raise BlockKitError(f"{where}.url: over 3000 characters")
    if el.get("style") not in (None, "primary", "danger"):
        raise BlockKitError(f"{where}.style: must be primary or danger")
    _confirm(el.get("confirm"), f"{where}.confirm")


def _confirm(confirm: Any, where: str) -> None:
    if confirm is None:
        return
    _text(confirm.get("title"), f"{where}.title", 100, plain_only=True)
    _text(confirm.get("text"), f"{where}.text", 300)
    _text(confirm.get("confirm"), f"{where}.confirm", 30, plain_only=True)
    _text(confirm.get("deny"), f"{where}.deny", 30, plain_only=True)


def _select(el: dict[str, Any], where: str, *, max_options: int) -> None:
    """static_select / multi_static_select / checkboxes: options within Slack's limits."""
    if not el.get("action_id") or len(str(el["action_id"])) > 255:
        raise BlockKitError(f"{where}.action_id: required, at most 255 characters")
    if "placeholder" in el:
        _text(el["placeholder"], f"{where}.placeholder", 150, plain_only=True)
    options = el.get("options")
    if not isinstance(options, list) or not 1 <= len(options) <= max_options:
        raise BlockKitError(f"{where}.options: 1..{max_options}")
    values = []
    for k, option in enumerate(options):
        plain_only = el.get("type") != "checkboxes"
        _text(option.get("text"), f"{where}.options[{k}].text", 75, plain_only=plain_only)
        value = option.get("value")
        if not isinstance(value, str) or not 1 <= len(value) <= 150:
            raise BlockKitError(f"{where}.options[{k}].value: 1..150 characters")
        values.append(value)
    if len(values) != len(set(values)):
        raise BlockKitError(f"{where}.options: values must be unique")
    _confirm(el.get("confirm"), f"{where}.confirm")


def _input_element(el: dict[str, Any], where: str) -> None:
    kind = el.get("type")
    if kind == "plain_text_input":
        if not el.get("action_id"):
            raise BlockKitError(f"{where}.action_id: required")
        limit = el.get("max_length", 3000)
        if limit > 3000:
            raise BlockKitError(f"{where}.max_length: at most 3000")
        initial = el.get("initial_value")
        if initial is not None and (not isinstance(initial, str) or len(initial) > limit):
            raise BlockKitError(f"{where}.initial_value: a string of at most {limit} characters")
    elif kind == "checkboxes":
        _select(el, where, max_options=10)
    elif kind == "multi_static_select":
        _select(el, where, max_options=100)
    else:
        raise BlockKitError(f"{where}: the fake does not know input element {kind!r}")


def check_blocks(blocks: Any, *, max_blocks: int) -> None:
    """Raise BlockKitError where real Slack would answer invalid_blocks."""
    if not isinstance(blocks, list) or len(blocks) > max_blocks:
        raise BlockKitError(f"blocks: at most {max_blocks}")
    seen: set[str] = set()
    for i, block in enumerate(blocks):
        where = f"blocks[{i}]"
        if not isinstance(block, dict):
            raise BlockKitError(f"{where}: must be an object")
        block_id = block.get("block_id")
        if block_id is not None:
            if len(block_id) > 255 or block_id in seen:
                raise BlockKitError(f"{where}.block_id: too long or repeated")
            seen.add(block_id)
        kind = block.get("type")
        if kind == "header":
            _text(block.get("text"), f"{where}.text", 150, plain_only=True)
        elif kind == "section":
            if "text" not in block and "fields" not in block:
                raise BlockKitError(f"{where}: needs text or fields")
            if "text" in block:
                _text(block["text"], f"{where}.text", 3000)
            fields = block.get("fields", [])
            if len(fields) > 10:
                raise BlockKitError(f"{where}.fields: at most 10")
            for j, f in enumerate(fields):
                _text(f, f"{where}.fields[{j}]", 2000)
        elif kind == "actions":
            elements = block.get("elements") or []
            if not 1 <= len(elements) <= 25:
                raise BlockKitError(f"{where}.elements: 1..25")
            ids = [e.get("action_id") for e in elements if e.get("action_id")]
            if len(ids) != len(set(ids)):
                raise BlockKitError(f"{where}: action_ids must be unique")
            if sum(1 for e in elements if e.get("style") == "primary") > 1:
                raise BlockKitError(f"{where}: at most one primary button")
            for j, el in enumerate(elements):
                if el.get("type") == "button":
                    _button(el, f"{where}.elements[{j}]")
                elif el.get("type") == "static_select":
                    _select(el, f"{where}.elements[{j}]", max_options=100)
                else:
                    raise BlockKitError(f"{where}.elements[{j}]: unknown element {el.get('type')}")
        elif kind == "context":
            elements = block.get("elements") or []
            if not 1 <= len(elements) <= 10:
                raise BlockKitError(f"{where}.elements: 1..10")
            for j, el in enumerate(elements):
                _text(el, f"{where}.elements[{j}]", 3000)
        elif kind == "input":
            _text(block.get("label"), f"{where}.label", 2000, plain_only=True)
            _input_element(block.get("element") or {}, f"{where}.element")
        elif kind != "divider":
            raise BlockKitError(f"{where}: the fake does not know block type {kind!r}")


def check_modal(view: dict[str, Any]) -> None:
    """Raise BlockKitError for a modal real Slack would refuse."""
    if view.get("type") != "modal":
        raise BlockKitError("view.type: must be modal")
    _text(view.get("title"), "view.title", 24, plain_only=True)
    for key in ("submit", "close"):
        if key in view:
            _text(view[key], f"view.{key}", 24, plain_only=True)
    if len(view.get("private_metadata", "")) > 3000:
        raise BlockKitError("view.private_metadata: over 3000 characters")
    if len(view.get("callback_id", "")) > 255:
        raise BlockKitError("view.callback_id: over 255 characters")
    check_blocks(view.get("blocks"), max_blocks=100)
