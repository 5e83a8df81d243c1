"""A real SMTP server on loopback for the email channel's tests: aiosmtpd on port 0.

It speaks SMTP as a mail provider's submission port does, with aiosmtpd's own protocol code:
AUTH (PLAIN and LOGIN) when given credentials, and STARTTLS with a self-signed certificate
when asked (then required before AUTH and MAIL), or implicit TLS (port 465 style). It
records every message it accepts, and checks each the way a strict provider would before
accepting it: no line over RFC 5322's 998 characters, header lines that are header lines,
exactly one From, To, Subject, Date and Message-ID, the envelope recipients equal to `To`,
and a text/plain and a text/html alternative. A message failing a check is refused with
554 and the reason kept in `problems`.

It fails on command: `down(code)` answers every recipient with `code` (451: try later,
550: never), `refuse(address, code)` one address, `stall()` leaves DATA unanswered (a
sender hung mid-send), `hang_up_next` closes the connection right after accepting the next
message; a stopped fake refuses connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import ssl
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from email.utils import getaddresses
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

#: RFC 5322 2.1.1: a line of a message is at most 998 characters (without CRLF)
MAX_LINE = 998
HEADERS = ("From", "To", "Subject", "Date", "Message-ID")


@dataclass(frozen=True)
class Received:
    """One message the server accepted."""

    sender: str
    recipients: list[str]
    raw: bytes
    message: EmailMessage
    #: the `X-Gate-Request` and `To` headers, read once: the tests look mail up by them in
    #: polling loops, and each header read parses it again (most of a contract test's CPU)
    request_id: str | None = field(init=False)
    to: str = field(init=False)

    def __post_init__(self) -> None:
        request = self.message["X-Gate-Request"]
        object.__setattr__(self, "request_id", None if request is None else str(request))
        object.__setattr__(self, "to", str(self.message["To"]))

    def part(self, subtype: str) -> str:
        """The text of the `text/<subtype>` part, decoded."""
        body = self.message.get_body(preferencelist=(subtype,))
        assert body is not None and body.get_content_type() == f"text/{subtype}", subtype
        content: str = body.get_content()
        return content.replace("\r\n", "\n")  # the wire's line ending, not the text's


class _Handler:
    """aiosmtpd's handler hooks: what the server says to each command that matters."""

    def __init__(self, fake: FakeSMTP) -> None:
        self.fake = fake

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        with self.fake.lock:
            self.fake.attempts += 1
            code = self.fake.down_code or self.fake.refused.get(address)
        if code:
            return f"{code} {'try again later' if code < 500 else 'no such mailbox'}"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        if self.fake.stalling:
            self.fake.stalled.set()
            while self.fake.stalling:  # the client waits for the reply meanwhile
                await asyncio.sleep(0.02)
            if server.transport is None or server.transport.is_closing():
                return "451 gone"  # the client died waiting: nothing was delivered
        raw = envelope.original_content or b""
        problem = _problem(raw, envelope)
        if problem is not None:
            with self.fake.lock:
                self.fake.problems.append(problem)
            return f"554 {problem}"
        parsed = message_from_bytes(raw, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        received = Received(str(envelope.mail_from), list(envelope.rcpt_tos), raw, parsed)
        with self.fake.lock:
            self.fake.messages.append(received)
            hang_up, self.fake.hang_up_next = self.fake.hang_up_next, False
        if hang_up and server.transport is not None:
            # closed once this reply is written (a transport flushes what it holds first)
            asyncio.get_running_loop().call_soon(server.transport.close)
        return "250 queued"


def _problem(raw: bytes, envelope: Envelope) -> str | None:
    """What a strict provider would refuse this message for, or None."""
    if any(len(line) > MAX_LINE for line in raw.split(b"\r\n")):
        return "a line is longer than 998 characters"
    head = raw.split(b"\r\n\r\n", 1)[0]
    for line in head.split(b"\r\n"):
        if line and not line[:1].isspace() and b":" not in line:
            return f"not a header line: {line[:60]!r}"
    parsed = message_from_bytes(raw, policy=policy.default)
    for name in HEADERS:
        if len(parsed.get_all(name) or []) != 1:
            return f"needs exactly one {name} header"
    to = {a.lower() for _, a in getaddresses([str(parsed["To"])])}
    if to != {r.lower() for r in envelope.rcpt_tos}:
        return "the envelope recipients differ from the To header"
    kinds = {p.get_content_type() for p in parsed.walk()}
    if (
        parsed.get_content_type() != "multipart/alternative"
        or not {
            "text/plain",
            "text/html",
        }
        <= kinds
    ):
        return f"expected text and HTML alternatives, got {sorted(kinds)}"
    return None


class _Session(Session):
    """aiosmtpd's session without its deprecated `login_data` (which warns on every AUTH
    that succeeds through an `authenticator`, and warnings are errors in this suite)."""

    @property  # type: ignore[override]
    def login_data(self) -> Any:
        return self._login_data

    @login_data.setter
    def login_data(self, value: Any) -> None:
        self._login_data = value


class _SMTP(SMTP):
    def _create_session(self) -> Session:
        return _Session(self.loop)


class FakeSMTP:
    """aiosmtpd serving on 127.0.0.1:<free port> in a thread of its own."""

    def __init__(
        self,
        *,
        credentials: tuple[str, str] | None = None,
        tls: bool = False,
        implicit_tls: bool = False,
    ) -> None:
        if credentials is not None and not tls:
            # (aiosmtpd cannot tell an implicit-TLS session is secure, and warns when AUTH is
            # allowed on one it thinks is not: implicit TLS here goes without AUTH)
            raise ValueError("a provider takes credentials only over STARTTLS: pass tls=True")
        self.implicit_tls = implicit_tls
        self.credentials = credentials
        self.tls = tls
        self.lock = threading.Lock()
        self.messages: list[Received] = []
        self.problems: list[str] = []
        self.auth_failures = 0
        self.attempts = 0
        self.down_code: int | None = None
        self.refused: dict[str, int] = {}
        #: while set, a message's DATA is read but not answered; `stalled` tells one is held
        self.stalling = False
        self.stalled = threading.Event()
        #: set: the connection is closed right after the next message is accepted
        self.hang_up_next = False
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._server: asyncio.Server | None = None
        self._sessions: list[SMTP] = []
        self._folder = tempfile.TemporaryDirectory(prefix="fake-smtp-")

    def _run(self) -> None:
        """The fake's thread: its loop, then (stopped) whatever is still open closed here."""
        self._loop.run_forever()
        for session in self._sessions:  # a connection accepted while stopping
            if session.transport is not None:
                session.transport.close()
        for task in asyncio.all_tasks(self._loop):
            task.cancel()
        self._loop.run_until_complete(asyncio.sleep(0.05))
        self._loop.close()

    def start(self) -> FakeSMTP:
        self._thread.start()
        wants_tls = self.tls or self.implicit_tls
        context = _self_signed(Path(self._folder.name)) if wants_tls else None

        def protocol() -> SMTP:
            # Implicit TLS (port 465 style): the socket is TLS from the first byte, and
            # aiosmtpd sees an already secure session (no STARTTLS to offer).
            session = self._protocol(None if self.implicit_tls else context)
            self._sessions.append(session)
            return session

        async def serve() -> asyncio.Server:
            tls = context if self.implicit_tls else None
            return await self._loop.create_server(protocol, "127.0.0.1", 0, ssl=tls)

        self._server = asyncio.run_coroutine_threadsafe(serve(), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def _protocol(self, context: ssl.SSLContext | None) -> SMTP:
        return _SMTP(
            _Handler(self),
            hostname="fake-smtp.test",
            tls_context=context,
            require_starttls=context is not None,
            auth_required=self.credentials is not None,
            auth_require_tls=context is not None,
            authenticator=self._authenticate if self.credentials else None,
            # aiosmtpd's default is to decode nothing; keep the bytes the client sent
            decode_data=False,
        )

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for session in self._sessions:  # connections a client left open
                if session.transport is not None:
                    session.transport.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
            await asyncio.sleep(0.05)

        # Everything is closed in the fake's own thread: the calling thread may be running
        # a loop of its own (Playwright's sync API does).
        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._folder.cleanup()

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        ok = (
            isinstance(data, LoginPassword)
            and self.credentials is not None
            and (data.login, data.password)
            == (self.credentials[0].encode(), self.credentials[1].encode())
        )
        if not ok:
            with self.lock:
                self.auth_failures += 1
        if ok:
            return AuthResult(success=True)
        # handled=False: aiosmtpd then sends this reply (by default it sends none, and the
        # client waits for one until its timeout)
        return AuthResult(
            success=False, handled=False, message="535 5.7.8 Authentication credentials invalid"
        )

    @contextlib.contextmanager
    def down(self, code: int = 451) -> Iterator[None]:
        """Inside the block every recipient is answered with `code`."""
        self.down_code = code
        try:
            yield
        finally:
            self.down_code = None

    @contextlib.contextmanager
    def stall(self) -> Iterator[threading.Event]:
        """Inside the block a message's DATA gets no answer (the client hangs mid-send); the
        event is set once one is held. Released, a held message is delivered unless its
        client has gone (killed meanwhile)."""
        self.stalled.clear()
        self.stalling = True
        try:
            yield self.stalled
        finally:
            self.stalling = False

    def refuse(self, address: str, code: int = 550) -> None:
        """Answer `address` with `code` from now on."""
        with self.lock:
            self.refused[address] = code

    def received(self) -> list[Received]:
        with self.lock:
            return list(self.messages)

    def about(self, request_id: str, to: str | None = None) -> list[Received]:
        """The mails about a request (to one address), oldest first."""
        return [
            m for m in self.received() if m.request_id == request_id and (to is None or m.to == to)
        ]


def _self_signed(folder: Path) -> ssl.SSLContext:
    """A server TLS context with a fresh self-signed certificate for 127.0.0.1 and localhost."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-smtp.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context
