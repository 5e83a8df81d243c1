"""A fake Microsoft Teams on loopback: OpenID metadata, signing keys, the Entra token endpoint
and the Bot Connector REST API, plus invokes signed the way the connector signs them.

`FakeTeams` serves what gate calls: the OpenID metadata document and its JWKS (one RSA key
of its own, endorsed for `msteams`), the client-credentials token endpoint, and the
connector's `POST /v3/conversations/{id}/activities`, `PUT .../activities/{id}` and `GET
.../members/{id}`. It checks what it receives the way Teams would: the client secret and
scope on the token request, the bearer token on every connector call, the activity's shape,
and every card against the Adaptive Card 1.5 JSON schema (`tests/teams/fixtures/`), plus
Teams' own rules the schema does not carry (version 1.5, at most 60 refresh userIds, 28 KB).
It records every call and fails on command (429 with Retry-After, 5xx, revoked tokens).

`invoke` and `sign` build an `adaptiveCard/action` activity and its JWT with the fake's own
key and PyJWT, independent of the channel's code, so the two check each other.

What it cannot check: how Teams renders a card (markdown, auto-links, layout), whether a
real client honours `refresh.userIds` (a refresh the driver sends is what a client would
send), the real connector's rate limits, and anything about tenants beyond the id.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import jsonschema
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.keys import rsa_key
from tests.support.servers import LoopbackFake

APP_ID = "6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"
APP_PASSWORD = "app-password-for-tests"
TENANT_ID = "2f4a9f5e-7b1c-4d3e-9a8b-6c5d4e3f2a1b"
CONVERSATION = "19:approvals0123@thread.tacv2"
ISSUER = "https://api.botframework.com"
SCOPE = "https://api.botframework.com/.default"
CARD_TYPE = "application/vnd.microsoft.card.adaptive"
#: a bot message over about 28 KB is refused (413)
MESSAGE_LIMIT = 28 * 1024
SCHEMA_PATH = Path(__file__).parent.parent / "teams" / "fixtures" / "adaptive-card-1.5.json"


@cache
def card_validator() -> jsonschema.Draft6Validator:
    """The Adaptive Card 1.5 schema (draft-06), loaded once."""
    return jsonschema.Draft6Validator(json.loads(SCHEMA_PATH.read_text()))


def check_card(card: Any) -> list[str]:
    """Problems Teams (or the Adaptive Card 1.5 schema) would refuse a card for."""
    problems = [
        f"{'/'.join(map(str, e.absolute_path)) or '(card)'}: {e.message[:200]}"
        for e in card_validator().iter_errors(card)
    ]
    if not isinstance(card, dict):
        return problems or ["not an object"]
    if card.get("type") != "AdaptiveCard" or card.get("version") != "1.5":
        problems.append("Universal Actions need an AdaptiveCard of version 1.5")
    refresh = card.get("refresh")
    if isinstance(refresh, dict) and len(refresh.get("userIds") or []) > 60:
        problems.append("refresh.userIds names more than 60 users")
    ids = [o["id"] for o in _objects(card) if isinstance(o.get("id"), str) and o.get("type")]
    if len(ids) != len(set(ids)):
        problems.append("element ids must be unique")
    return problems


def _objects(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found += _objects(value)
    elif isinstance(node, list):
        for value in node:
            found += _objects(value)
    return found


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    #: the path as sent, before percent-decoding
    raw_path: str = ""
    at: float = field(default_factory=time.monotonic)


@dataclass
class Failure:
    kind: str  # "token" | "post" | "update" | "member"
    status: int
    times: int
    retry_after: str | None = None


@dataclass
class Reply:
    """A bot message posted as a reply to an activity (reply-to-activity)."""

    conversation: str
    reply_to: str
    text: str
    #: the mention entities, as sent
    mentions: list[dict[str, Any]]
    card: dict[str, Any]


@dataclass
class Message:
    """A bot message as the fake holds it now (after any PUT)."""

    activity_id: str
    conversation: str
    cards: list[dict[str, Any]]

    @property
    def card(self) -> dict[str, Any]:
        return self.cards[-1]


class FakeTeams(LoopbackFake):
    """Teams, as far as gate uses it. Thread-safe: tests read while it serves."""

    def __init__(self, *, token_lifetime: int = 3599) -> None:
        self.lock = threading.Lock()
        self.key = rsa_key("teams")
        self.kid = "fake-teams-" + uuid.uuid4().hex[:8]
        #: channels the key is endorsed for (the connector lists msteams, skype, webchat...)
        self.endorsements = ["msteams", "webchat"]
        self.token_lifetime = token_lifetime
        self.requests: list[Recorded] = []
        self.tokens: set[str] = set()
        self.messages: dict[str, Message] = {}
        self.replies: list[Reply] = []
        self.failures: list[Failure] = []
        self.card_problems: list[str] = []
        #: the connector refuses every token, new ones too (the bot's registration is gone)
        self.refuse_all = False
        #: Entra object id -> the member's Teams id in the conversation
        self.members: dict[str, str] = {}
        self._ids = itertools.count(1)
        self.app = Starlette(
            routes=[
                Route("/v1/.well-known/openidconfiguration", self._metadata),
                Route("/v1/.well-known/keys", self._keys),
                Route("/botframework.com/oauth2/v2.0/token", self._token, methods=["POST"]),
                Route("/v3/conversations/{conv}/activities", self._post, methods=["POST"]),
                Route("/v3/conversations/{conv}/activities/{aid}", self._put, methods=["PUT"]),
                Route("/v3/conversations/{conv}/activities/{aid}", self._reply, methods=["POST"]),
                Route("/v3/conversations/{conv}/members/{member}", self._member),
            ]
        )

    # -- lifecycle and commands ------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.base_url

    def settings(self, **extra: Any) -> dict[str, Any]:
        """The `[channels.teams]` table pointing every URL at this fake."""
        return {
            "app_id": APP_ID,
            "app_password": APP_PASSWORD,
            "tenant_id": TENANT_ID,
            "default_target": CONVERSATION,
            "service_url": f"{self.url}/",
            "openid_metadata_url": f"{self.url}/v1/.well-known/openidconfiguration",
            "token_url": f"{self.url}/botframework.com/oauth2/v2.0/token",
            **extra,
        }

    def add_member(self, object_id: str) -> str:
        """Make the person with this Entra object id a member; returns their Teams id."""
        member = "29:1" + uuid.uuid5(uuid.NAMESPACE_OID, object_id).hex
        with self.lock:
            self.members[object_id.lower()] = member
        return member

    def fail(
        self, kind: str, *, status: int, times: int = 1, retry_after: str | None = None
    ) -> None:
        """Make the next `times` calls of `kind` (token, post, update, member) fail."""
        with self.lock:
            self.failures.append(Failure(kind, status, times, retry_after))

    @contextmanager
    def down(self, status: int = 503) -> Any:
        """Every post and update fails with `status` inside the block."""
        for kind in ("post", "update"):
            self.fail(kind, status=status, times=10**6)
        try:
            yield
        finally:
            with self.lock:
                self.failures.clear()

    def revoke_tokens(self) -> None:
        """Every app token issued so far is refused from now on (401)."""
        with self.lock:
            self.tokens.clear()

    def recorded(self, method: str | None = None, path_prefix: str = "") -> list[Recorded]:
        with self.lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method) and r.path.startswith(path_prefix)
            ]

    def posted(self) -> list[Message]:
        with self.lock:
            return list(self.messages.values())

    # -- what the connector sends a bot ----------------------------------------------------

    def jwk(self) -> dict[str, Any]:
        """The public half of the fake's key, as the connector's JWKS lists it."""
        jwk: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {
            **jwk,
            "kid": self.kid,
            "use": "sig",
            "x5t": self.kid,
            "endorsements": self.endorsements,
        }

    def sign(
        self,
        *,
        service_url: str,
        audience: str = APP_ID,
        issuer: str = ISSUER,
        lifetime: int = 3600,
        issued_at: float | None = None,
        key: rsa.RSAPrivateKey | None = None,
        kid: str | None = None,
        **claims: Any,
    ) -> str:
        """A connector JWT (RS256) for a bot, signed with the fake's key unless told otherwise."""
        now = int(time.time() if issued_at is None else issued_at)
        payload = {
            "serviceurl": service_url,
            "nbf": now,
            "exp": now + lifetime,
            "iss": issuer,
            "aud": audience,
            **claims,
        }
        headers = {"kid": kid or self.kid, "x5t": kid or self.kid, "typ": "JWT"}
        return jwt.encode(payload, key or self.key, algorithm="RS256", headers=headers)

    def invoke(
        self,
        *,
        verb: str,
        data: dict[str, Any],
        object_id: str,
        service_url: str,
        trigger: str = "manual",
        tenant: str = TENANT_ID,
        conversation: str = CONVERSATION,
        reply_to: str | None = None,
    ) -> dict[str, Any]:
        """An `adaptiveCard/action` invoke activity, as Teams sends one for a press."""
        member = (
            self.members.get(object_id.lower())
            or "29:1" + uuid.uuid5(uuid.NAMESPACE_OID, object_id).hex
        )
        return {
            "type": "invoke",
            "name": "adaptiveCard/action",
            "id": f"f:{uuid.uuid4().int % 10**19}",
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            "localTimestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000+00:00", time.gmtime()),
            "serviceUrl": service_url,
            "channelId": "msteams",
            "from": {"id": member, "name": "Display Name Is Not Trusted", "aadObjectId": object_id},
            "conversation": {
                "isGroup": True,
                "conversationType": "channel",
                "tenantId": tenant,
                "id": conversation,
            },
            "recipient": {"id": f"28:{APP_ID}", "name": "gate"},
            "replyToId": reply_to or "1700000000000",
            "entities": [
                {"locale": "en-US", "country": "US", "platform": "Web", "type": "clientInfo"}
            ],
            "channelData": {"tenant": {"id": tenant}, "source": {"name": "message"}},
            "value": {
                "action": {"type": "Action.Execute", "id": "", "verb": verb, "data": data},
                "trigger": trigger,
            },
            "locale": "en-US",
        }

    # -- endpoints -------------------------------------------------------------------------

    async def _record(self, request: Request) -> Any:
        raw = await request.body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        with self.lock:
            self.requests.append(
                Recorded(
                    request.method,
                    request.url.path,
                    {k.lower(): v for k, v in request.headers.items()},
                    body,
                    request.scope.get("raw_path", b"").decode(),
                )
            )
        return body

    def _failure(self, kind: str) -> Response | None:
        with self.lock:
            for failure in self.failures:
                if failure.kind == kind and failure.times > 0:
                    failure.times -= 1
                    headers = {"Retry-After": failure.retry_after} if failure.retry_after else {}
                    return _error(failure.status, "ServiceError", "failure on command", headers)
        return None

    def _auth(self, request: Request) -> Response | None:
        header = request.headers.get("authorization", "")
        with self.lock:
            known = header.startswith("Bearer ") and header[7:] in self.tokens
        if not known or self.refuse_all:
            return _error(401, "Unauthorized", "Authorization has been denied for this request.")
        return None

    async def _metadata(self, request: Request) -> JSONResponse:
        await self._record(request)
        return JSONResponse(
            {
                "issuer": ISSUER,
                "authorization_endpoint": "https://invalid.botframework.com",
                "jwks_uri": f"{self.url}/v1/.well-known/keys",
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            }
        )

    async def _keys(self, request: Request) -> JSONResponse:
        await self._record(request)
        return JSONResponse({"keys": [self.jwk()]})

    async def _token(self, request: Request) -> Response:
        raw = await request.body()
        form = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
        with self.lock:
            self.requests.append(Recorded("POST", request.url.path, dict(request.headers), form))
        failed = self._failure("token")
        if failed:
            return failed
        if request.headers.get("content-type", "").split(";")[0] != (
            "application/x-www-form-urlencoded"
        ):
            return _oauth_error(400, "invalid_request", "the body must be form-encoded")
        if form.get("grant_type") != "client_credentials" or form.get("scope") != SCOPE:
            return _oauth_error(400, "invalid_request", "client_credentials with our scope only")
        if form.get("client_id") != APP_ID or form.get("client_secret") != APP_PASSWORD:
            return _oauth_error(401, "invalid_client", "AADSTS7000215: Invalid client secret")
        token = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9." + uuid.uuid4().hex
        with self.lock:
            self.tokens.add(token)
        return JSONResponse(
            {
                "token_type": "Bearer",
                "expires_in": self.token_lifetime,
                "ext_expires_in": self.token_lifetime,
                "access_token": token,
            }
        )

    def _activity_problems(self, body: Any) -> list[str]:
        if not isinstance(body, dict) or body.get("type") != "message":
            return ["the activity must be a message"]
        attachments = body.get("attachments")
        if not isinstance(attachments, list) or len(attachments) != 1:
            return ["one attachment expected"]
        if attachments[0].get("contentType") != CARD_TYPE:
            return [f"contentType must be {CARD_TYPE}"]
        return _mention_problems(body) + check_card(attachments[0].get("content"))

    async def _post(self, request: Request) -> Response:
        body = await self._record(request)
        denied = self._auth(request) or self._failure("post")
        if denied:
            return denied
        if len(json.dumps(body).encode()) > MESSAGE_LIMIT:
            return _error(413, "MessageSizeTooBig", "Message size too large")
        problems = self._activity_problems(body)
        if problems:
            with self.lock:
                self.card_problems += problems
            return _error(400, "BadSyntax", "; ".join(problems)[:2000])
        activity_id = f"1700000{next(self._ids):09d}"
        with self.lock:
            self.messages[activity_id] = Message(
                activity_id, request.path_params["conv"], [body["attachments"][0]["content"]]
            )
        return JSONResponse({"id": activity_id}, status_code=201)

    async def _put(self, request: Request) -> Response:
        body = await self._record(request)
        denied = self._auth(request) or self._failure("update")
        if denied:
            return denied
        activity_id = request.path_params["aid"]
        problems = self._activity_problems(body)
        if isinstance(body, dict) and body.get("id") != activity_id:
            problems.append("the activity's id must be the one in the path")
        with self.lock:
            message = self.messages.get(activity_id)
            if message is None or message.conversation != request.path_params["conv"]:
                return _error(404, "ActivityNotFound", "Unknown activity")
            if problems:
                self.card_problems += problems
                return _error(400, "BadSyntax", "; ".join(problems)[:2000])
            message.cards.append(body["attachments"][0]["content"])
        return JSONResponse({"id": activity_id})

    def replies_to(self, activity_id: str) -> list[Reply]:
        """The bot's replies to one activity (a card), oldest first."""
        with self.lock:
            return [r for r in self.replies if r.reply_to == activity_id]

    async def _reply(self, request: Request) -> Response:
        """Reply to an activity: a message in the same conversation, threaded under it."""
        body = await self._record(request)
        denied = self._auth(request) or self._failure("reply")
        if denied:
            return denied
        activity_id, conversation = request.path_params["aid"], request.path_params["conv"]
        problems = self._activity_problems(body)
        if isinstance(body, dict) and body.get("replyToId") != activity_id:
            problems.append("a reply's replyToId must be the activity in the path")
        with self.lock:
            replied = self.messages.get(activity_id)
            if replied is None or replied.conversation != conversation:
                return _error(404, "ActivityNotFound", "Unknown activity")
            if problems:
                self.card_problems += problems
                return _error(400, "BadSyntax", "; ".join(problems)[:2000])
            mentions = [e for e in body.get("entities", []) if e.get("type") == "mention"]
            card = body["attachments"][0]["content"]
            self.replies.append(
                Reply(conversation, activity_id, body.get("text", ""), mentions, card)
            )
        return JSONResponse({"id": f"1800000{next(self._ids):09d}"}, status_code=201)

    async def _member(self, request: Request) -> Response:
        await self._record(request)
        denied = self._auth(request) or self._failure("member")
        if denied:
            return denied
        wanted = request.path_params["member"].lower()
        with self.lock:
            member = self.members.get(wanted)
        if member is None:
            return _error(404, "MemberNotFoundInConversation", "The member is not in the chat")
        return JSONResponse(
            {"id": member, "objectId": wanted, "tenantId": TENANT_ID, "userRole": "user"}
        )


def _mention_problems(activity: dict[str, Any]) -> list[str]:
    """What Teams needs of a mention: an entity whose `text` (`<at>name</at>`) appears in the
    message's text, naming the member it mentions by id."""
    problems = []
    text = activity.get("text") or ""
    for entity in activity.get("entities") or []:
        if not isinstance(entity, dict) or entity.get("type") != "mention":
            continue
        shown, mentioned = entity.get("text"), entity.get("mentioned")
        if not isinstance(shown, str) or not shown.startswith("<at>") or shown not in text:
            problems.append("a mention's text must be an <at>...</at> found in the text")
        if not isinstance(mentioned, dict) or not mentioned.get("id") or not mentioned.get("name"):
            problems.append("a mention must name the member it mentions (id and name)")
    return problems


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": {"code": code, "message": message}}, status, headers=headers)


def _oauth_error(status: int, error: str, description: str) -> Response:
    return JSONResponse({"error": error, "error_description": description}, status)
