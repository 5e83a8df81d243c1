"""`EmailChannel`: the adapter gate loads for `[channels.email]`.

`post` mails the card to each recipient of its target, every approver with links of their
own; `update` cannot edit a sent mail, so it mails what changed instead: while the request
is pending, a refresh to those who may still act (after a vote, an extension, a reminder or
an escalation), and once it is final, the outcome (when `outcome_emails` covers the rule).
The outbox owns retries: SMTP failures become `DeliveryError`s, temporary (4xx, no
connection, a timeout) or permanent (5xx, refused credentials, no usable recipient).
"""

from __future__ import annotations

import logging
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from email.message import EmailMessage
from functools import cached_property, partial

import aiosmtplib
import anyio
from fastapi import APIRouter

from channels import decisions
from channels.email.confirm import ConfirmPages
from channels.email.links import Links
from channels.email.message import (
    CONFIRM_PATH,
    Kind,
    Recipient,
    compose,
    may_act,
    recipients,
)
from channels.email.settings import MIN_SECRET_CHARS, EmailSettings
from channels.email.text import ARGS_CHARS
from gate.base.errors import ConfigError
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import ChannelContext, DeliveryError

log = logging.getLogger("gate.channels.email")


class EmailChannel:
    """Sends approval cards as mail over SMTP; its confirm page turns link clicks into clicks."""

    name = "email"
    display_name = "email"
    settings_model = EmailSettings

    def __init__(
        self,
        settings: EmailSettings,
        gate: ChannelContext,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        secret = settings.link_secret.get_secret_value() if settings.link_secret else ""
        if len(secret.strip()) < MIN_SECRET_CHARS:
            raise ConfigError(
                f"a link_secret of at least {MIN_SECRET_CHARS} characters is required "
                "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)",
                key="channels.email.link_secret",
            )
        if not settings.sender:
            raise ConfigError("a sender address is required", key="channels.email.sender")
        if (settings.username is None) != (settings.password is None):
            raise ConfigError(
                "give both username and password, or neither", key="channels.email.password"
            )
        if settings.password is not None and settings.security == "none":
            raise ConfigError(
                'a password is sent only over TLS: set security = "starttls" or "tls"',
                key="channels.email.security",
            )
        self.settings = settings
        #: per mail of a delivery that failed part-way, who already has it (see `_send`)
        self._accepted: OrderedDict[tuple[object, ...], frozenset[str]] = OrderedDict()
        # every click says how much of a call the page showed: gate refuses approving the rest
        gate = decisions.Showing(gate, ARGS_CHARS, "email")
        self.gate = gate
        self._clock = clock
        # No request lives longer than max_timeout, so no link of ours needs to either.
        max_age = gate.settings.server.max_timeout.total_seconds()
        self.links = Links(secret, max_age=max_age)
        self._pages = ConfirmPages(self.name, gate, self.links, clock=clock)
        if settings.security == "none" and settings.host not in ("localhost", "127.0.0.1", "::1"):
            log.warning("email: security = none sends links in clear text to %s", settings.host)
        if settings.default_target is None:
            log.info('email: no default_target; only rules listing "email:..." send mail')

    @classmethod
    def from_settings(cls, settings: EmailSettings, gate: ChannelContext) -> EmailChannel:
        """Build from `[channels.email]`."""
        return cls(settings, gate)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    async def post(self, req: RequestView, target: str) -> str:
        """Mail the card to each recipient of `target`; the reference says what was shown
        ("pending:3", "final:3"), so the update after a card that already showed the outcome
        sends nothing twice."""
        people = recipients(self.gate.settings, req, target)
        if not people:
            raise DeliveryError(
                f"no [[approvers]] with an email address for target {target!r}", permanent=True
            )
        if req.is_final:
            if not self.settings.sends_outcome(req.rule):
                return "final:0"
            sent = await self._send(req, people, "outcome")
            return f"final:{sent}"
        sent = await self._send(req, people, "card")
        return f"pending:{sent}"

    async def update(self, req: RequestView, target: str, ref: str) -> None:
        """Mail what changed: a refresh to whoever may still act, or the outcome."""
        people = recipients(self.gate.settings, req, target)
        if req.is_final:
            if ref.startswith("final:") or not self.settings.sends_outcome(req.rule):
                return
            await self._send(req, people, "outcome")
            return
        waiting = [p for p in people if may_act(self.gate.settings, req, p)]
        if waiting:
            await self._send(req, waiting, "reminder")

    def router(self) -> APIRouter:
        """`GET` and `POST /channels/email/confirm`: the page a link opens, and its form."""
        router = APIRouter()
        router.add_api_route(
            CONFIRM_PATH, self._pages.show, methods=["GET"], include_in_schema=False
        )
        router.add_api_route(
            CONFIRM_PATH, self._pages.decide, methods=["POST"], include_in_schema=False
        )
        return router

    async def aclose(self) -> None:
        """Nothing held open: each send opens and closes its own SMTP session."""

    # -- sending ------------------------------------------------------------------------------

    def _messages(
        self, req: RequestView, people: list[Recipient], kind: Kind
    ) -> list[EmailMessage]:
        now = self._now()
        assert self.settings.sender is not None
        messages: list[EmailMessage] = []
        for person in people:
            acts = may_act(self.gate.settings, req, person)
            token = partial(self.links.make, req.id, person.address) if acts else None
            messages.append(
                compose(
                    req,
                    kind=kind,
                    sender=self.settings.sender,
                    recipient=person,
                    base_url=self.gate.settings.server.base_url,
                    make_token=token,
                    now=now,
                )  # fmt: skip
            )
        return messages

    async def _send(self, req: RequestView, people: list[Recipient], kind: Kind) -> int:
        """Send one mail per recipient in one SMTP session; how many were accepted.

        A recipient the server refuses for good (5xx) is logged and skipped, so one bad
        address does not hold back everyone else's card; if every one is refused, the
        delivery fails for good. Anything temporary fails the whole delivery, which the
        outbox retries; the addresses whose mail the server had accepted (its reply to DATA)
        are kept, and the retry of the same mail skips them, so nobody gets a card twice
        because someone after them could not be reached (kept by this process: a retry on
        another replica, after this one died, sends to everyone).
        """
        if not people:
            return 0
        attempt = _attempt_of(req, kind, people)
        done = self._accepted.pop(attempt, frozenset())
        todo = [person for person in people if person.address not in done]
        # Rendering scans untrusted text: off the event loop.
        messages: list[EmailMessage] = await anyio.to_thread.run_sync(
            self._messages, req, todo, kind
        )
        refused: list[str] = []
        accepted: set[str] = set(done)
        client = self._client()
        try:
            await client.connect()
            for person, message in zip(todo, messages, strict=True):
                try:
                    await client.send_message(message)
                except (aiosmtplib.SMTPRecipientsRefused, aiosmtplib.SMTPRecipientRefused) as exc:
                    if _temporary(exc):
                        raise
                    refused.append(person.address)
                    log.warning("request %s: %s refused the address %s: %s", req.id,
                                self.settings.host, person.address, _what(exc))  # fmt: skip
                    continue
                accepted.add(person.address)
        except (aiosmtplib.SMTPException, OSError, ssl.SSLError) as exc:
            self._remember(attempt, accepted)
            raise _delivery_error(self.settings.host, exc) from None
        finally:
            if client.is_connected:
                try:
                    await client.quit()
                except (aiosmtplib.SMTPException, OSError):
                    client.close()
        if not accepted:
            raise DeliveryError(
                f"the SMTP server refused every recipient ({', '.join(refused)[:300]})",
                permanent=True,
            )
        return len(accepted)

    def _remember(self, attempt: tuple[object, ...], accepted: set[str]) -> None:
        """Keep who got the mail of a delivery that failed part-way, for its retry."""
        if accepted:
            self._accepted[attempt] = frozenset(accepted)
            while len(self._accepted) > REMEMBERED_ATTEMPTS:
                self._accepted.popitem(last=False)

    def _client(self) -> aiosmtplib.SMTP:
        s = self.settings
        return aiosmtplib.SMTP(
            hostname=s.host,
            port=s.port,
            username=s.username,
            password=s.password.get_secret_value() if s.password is not None else None,
            use_tls=s.security == "tls",
            # STARTTLS is required when asked for: a server that does not offer it fails
            # the send, rather than carrying the links in clear text.
            start_tls=True if s.security == "starttls" else False,
            validate_certs=s.validate_certs,
            tls_context=self._tls if s.security in ("tls", "starttls") else None,
            timeout=s.timeout,
        )

    @cached_property
    def _tls(self) -> ssl.SSLContext:
        """The TLS context of every send, made once as aiosmtplib makes one per connection
        (which reads the system's CA bundle each time: some 30 ms of CPU per mail)."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        if not self.settings.validate_certs:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


#: deliveries failed part-way whose recipients are kept; older ones are forgotten (a retry
#: then sends to everyone, as before)
REMEMBERED_ATTEMPTS = 1024


def _attempt_of(req: RequestView, kind: Kind, people: list[Recipient]) -> tuple[object, ...]:
    """What makes a mail the same mail on a retry: the request as the mail shows it (a vote
    or an extension since makes it news again) and who it is for."""
    votes = tuple((v.approver, v.verdict) for v in req.votes)
    return (req.id, kind, req.status, votes, req.expires_at, tuple(p.address for p in people))


def _codes(exc: BaseException) -> list[int]:
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        return [r.code for r in exc.recipients]
    code = getattr(exc, "code", None)
    return [code] if isinstance(code, int) else []


def _temporary(exc: BaseException) -> bool:
    """A 4xx reply: the server asks to be tried again later."""
    return any(400 <= c < 500 for c in _codes(exc))


def _what(exc: BaseException) -> str:
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        return "; ".join(f"{r.code} {r.message}" for r in exc.recipients)[:300]
    code = getattr(exc, "code", None)
    message = getattr(exc, "message", None) or str(exc)
    return (f"{code} {message}" if code else f"{type(exc).__name__}: {message}")[:300]


def _delivery_error(host: str, exc: BaseException) -> DeliveryError:
    """Map an SMTP failure onto the outbox's retry rules (the message names no token)."""
    what = f"SMTP {host}: {_what(exc)}"
    if isinstance(exc, aiosmtplib.SMTPAuthenticationError):
        return DeliveryError(what + " (check username and password)", permanent=True)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return DeliveryError(what + " (the server's certificate)", permanent=True)
    codes = _codes(exc)
    if codes:
        return DeliveryError(what, permanent=all(c >= 500 for c in codes))
    if isinstance(exc, OSError | aiosmtplib.SMTPServerDisconnected | aiosmtplib.SMTPTimeoutError):
        return DeliveryError(what)  # no connection, a dropped one, a slow server: try later
    # Anything else is the client and server disagreeing on how to talk (no STARTTLS where
    # `security` asks for it, an extension missing): the same again would fail the same way.
    return DeliveryError(what + " (check `security`)", permanent=True)
