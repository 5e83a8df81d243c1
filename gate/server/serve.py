"""`gate serve`'s HTTP server: uvicorn, with limits that keep silent sockets from locking it up.

uvicorn alone closes an idle kept-alive connection (`timeout_keep_alive`), but nothing
bounds a connection that never sends a request, or sends its headers one byte a minute, and
nothing bounds how many sockets it holds: a few hundred silent sockets would pin file
descriptors until agents' connections and the SQLite file (which needs descriptors for
itself, its -wal and its -shm) fail with "Too many open files". uvicorn's own
`limit_concurrency` does not help here: it counts connections only to answer *requests*
with 503, after each socket was already accepted and kept.

So the HTTP protocol gets three guards, whichever parser uvicorn picks (httptools or h11):

* **a read deadline**: a request's headers and body must arrive within
  `request_read_timeout_seconds` of the connection opening, or of its first byte on a
  kept-alive connection; the clock does not restart with each byte (that is how slowloris
  keeps a socket). A late request gets `408` and the socket is closed.
* **a header size cap** (`MAX_HEADER_BYTES`): httptools keeps every header line in memory
  until the request ends.
* **a connection cap** (`gate.server.capacity`: the open-file limit, raised at start, minus what
  the process needs besides sockets): over it, a new socket is answered `503` and closed at
  once, so the descriptors left stay for the database and the logs. Long-polls may hold all
  but a reserve of it, kept for asks, decisions and the console.

A connection closed while its client may still be sending (an answer that beat the body,
`gate.api.framing`; a 408, 431 or 503 from the guards) is closed gracefully (`gate.server.closing`):
the client reads the answer, not a reset.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import socket
import struct
import termios
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from gate.base.errors import error_body
from gate.config.settings import Settings
from gate.server.access import AccessLog
from gate.server.capacity import (
    Capacity,
    connection_cap,
    connection_reserve,
    raise_open_file_limit,
    reserved_fds,
)
from gate.server.closing import linger, lingering

log = logging.getLogger("gate.server")

#: request line and headers of one request; nginx's default is 8 KiB, h11's 16 KiB
MAX_HEADER_BYTES = 64 * 1024


class ConnectionLimits:
    """What the protocol enforces on each connection (read from the server settings)."""

    def __init__(self, *, read_timeout: float, max_connections: int) -> None:
        self.read_timeout = read_timeout
        self.max_connections = max_connections


class _Reading:
    """Where a connection is in reading its current request."""

    __slots__ = ("deadline", "head_bytes", "parsed")

    def __init__(self) -> None:
        #: when the request must be in by (armed while one is being read)
        self.deadline: asyncio.TimerHandle | None = None
        #: bytes of a request whose headers have not all arrived yet
        self.head_bytes = 0
        #: bytes of the request line and headers the parser has handed over (httptools)
        self.parsed = 0


class _GuardedConnection:
    """The three guards, mixed into uvicorn's protocol classes (see the module docstring)."""

    # provided by the uvicorn protocol class this is mixed into
    config: uvicorn.Config
    transport: asyncio.Transport
    connections: set[Any]
    cycle: Any
    loop: asyncio.AbstractEventLoop

    _reading: _Reading

    # The mixin comes first in each protocol's bases, so these wrap uvicorn's own methods
    # (super() is the uvicorn protocol class).
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # One attribute, set here: with uvicorn's own 28 the instance dict still shares
        # its keys with the other connections'; two more made each connection's dict a
        # private 1.5 KB table (httptools).
        self._reading = _Reading()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Accept the socket unless over the cap, and start its read deadline."""
        super().connection_made(transport)  # type: ignore[misc]
        self._guard_open()

    def data_received(self, data: bytes) -> None:
        """Feed the parser, timing and sizing the request being read."""
        awaiting, before = self._before_data()
        super().data_received(data)  # type: ignore[misc]
        self._after_data(awaiting, before, len(data))

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the deadline with the socket; linger if the client is still sending."""
        self._disarm()
        if exc is None and self._unread():
            linger(self.transport, self.loop)
        super().connection_lost(exc)  # type: ignore[misc]

    def _unread(self) -> bool:
        """True when closing now would leave client bytes unread: a body still coming (the
        request was answered before its end), or bytes waiting in the socket."""
        cycle = self.cycle
        if cycle is not None and cycle.more_body:
            return True
        sock = self.transport.get_extra_info("socket")
        if sock is None:
            return False
        try:
            pending = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
        except OSError:
            return False
        return bool(struct.unpack("i", pending)[0])

    @property
    def _limits(self) -> ConnectionLimits:
        config = self.config
        if isinstance(config, GateServerConfig):
            return config.limits
        return ConnectionLimits(read_timeout=10.0, max_connections=4096)

    def _guard_open(self) -> bool:
        """After connection_made: False when over the cap (answered 503 and closing)."""
        if len(self.connections) + lingering() > self._limits.max_connections:
            self._answer(503, "too_many_connections", _FULL_MESSAGE)
            return False
        self._arm()
        return True

    def _awaiting_request(self) -> bool:
        return self.cycle is None or bool(self.cycle.response_complete)

    def _before_data(self) -> tuple[bool, Any]:
        awaiting = self._awaiting_request()
        if awaiting and self._reading.deadline is None:
            self._arm()  # the first byte of the next request on a kept-alive connection
        return awaiting, self.cycle

    def _after_data(self, awaiting: bool, before: Any, size: int) -> None:
        if self.transport.is_closing():
            self._disarm()
            return
        if self.cycle is not before:
            self._reading.head_bytes = 0  # a new request's headers are complete
        elif awaiting:
            self._reading.head_bytes += size
            if self._reading.head_bytes > MAX_HEADER_BYTES:
                self._answer(431, "headers_too_large", _HEADERS_MESSAGE)
                return
        if self.cycle is not None and not self.cycle.more_body and self._reading.head_bytes == 0:
            self._disarm()  # the whole request is in: what remains is the app's to answer

    def _arm(self) -> None:
        self._disarm()
        self._reading.deadline = self.loop.call_later(self._limits.read_timeout, self._late)

    def _disarm(self) -> None:
        if self._reading.deadline is not None:
            self._reading.deadline.cancel()
            self._reading.deadline = None

    def _late(self) -> None:
        self._reading.deadline = None
        if self.transport.is_closing():
            return
        if self._awaiting_request() and self._reading.head_bytes:
            seconds = self._limits.read_timeout
            self._answer(408, "request_timeout", f"the request did not arrive within {seconds:g} s")
        else:
            # Silent since it connected, or the body stalled: the app sees a disconnect.
            self.transport.close()

    def _answer(self, status: int, code: str, message: str) -> None:
        """Write a final error in gate's one error shape, then close the socket."""
        self._disarm()
        body = json.dumps(error_body(code, message)).encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n"
            # a full server says when to come back (clients follow it, gate.asking.exchange)
            + ("retry-after: 1\r\n" if status == 503 else "")
            + "\r\n"
        ).encode()
        self.transport.write(head + body)
        self.transport.close()


_REASONS = {
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}
_HEADERS_MESSAGE = f"the request line and headers are over {MAX_HEADER_BYTES} bytes"


class _HeadersTooLarge(Exception):
    """Raised inside the parser's callback to stop it (see GuardedHttpToolsProtocol)."""


_FULL_MESSAGE = "gate holds as many connections as it may; retry in a moment"


class GuardedH11Protocol(_GuardedConnection, H11Protocol):
    """uvicorn's h11 protocol with gate's read deadline, header cap and connection cap.

    h11 bounds only headers still incomplete; a request whose headers arrive whole is sized
    as h11 hands it over, and over the cap it is a protocol error answered 431.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        parse = self.conn.next_event

        def next_event() -> Any:
            event = parse()
            if isinstance(event, h11.Request):
                size = len(event.target) + sum(len(n) + len(v) + 4 for n, v in event.headers)
                if size > MAX_HEADER_BYTES:
                    self._reading.parsed = size
                    raise h11.RemoteProtocolError(_HEADERS_MESSAGE, error_status_hint=431)
            return event

        self.conn.next_event = next_event  # type: ignore[method-assign]

    def send_400_response(self, msg: str) -> None:
        if self._reading.parsed > MAX_HEADER_BYTES:
            self._answer(431, "headers_too_large", _HEADERS_MESSAGE)
        else:
            super().send_400_response(msg)


def protocol_class() -> type[asyncio.Protocol]:
    """httptools when installed (uvicorn's own choice), else h11; both guarded."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools is optional in uvicorn (the [standard] extra brings it)
        return GuardedH11Protocol

    class GuardedHttpToolsProtocol(_GuardedConnection, HttpToolsProtocol):
        """uvicorn's httptools protocol with gate's three guards.

        Headers that arrive in one piece with the rest are counted as the parser hands them
        over (`_after_data` sees only headers split across reads): over the cap, the parser
        is stopped, and what uvicorn would answer as a 400 is answered 431.
        """

        def on_message_begin(self) -> None:
            self._reading.parsed = 0
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._count_head(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count_head(len(name) + len(value) + 4)
            super().on_header(name, value)

        def _count_head(self, size: int) -> None:
            self._reading.parsed += size
            if self._reading.parsed > MAX_HEADER_BYTES:
                raise _HeadersTooLarge  # the parser stops; uvicorn answers (send_400_response)

        def send_400_response(self, msg: str) -> None:
            if self._reading.parsed > MAX_HEADER_BYTES:
                self._answer(431, "headers_too_large", _HEADERS_MESSAGE)
            else:
                super().send_400_response(msg)

    return GuardedHttpToolsProtocol


class GateServerConfig(uvicorn.Config):
    """uvicorn's Config carrying the per-connection limits the guarded protocol reads."""

    def __init__(
        self, app: Any, *, limits: ConnectionLimits, settings: Settings | None = None, **kwargs: Any
    ) -> None:
        super().__init__(app, **kwargs)
        self.limits = limits
        #: what the start-up lines say (the console's address, the next step)
        self.settings = settings


def server_config(app: Any, settings: Settings, *, parser: str = "auto") -> GateServerConfig:
    """The uvicorn configuration `gate serve` runs with, its limits logged once.

    Raises the open-file limit first (`gate.server.capacity`), and sizes the app's `Capacity` (what
    long-polls may hold) to the connection cap it then allows.
    """
    server = settings.server
    nofile = raise_open_file_limit()
    cap = connection_cap(settings, nofile)
    reserve = connection_reserve(settings, cap)
    capacity: Capacity | None = getattr(getattr(app, "lean_routes", None), "capacity", None)
    if capacity is not None:
        capacity.connections, capacity.reserve = cap, reserve
    limits = ConnectionLimits(read_timeout=server.request_read_timeout_seconds, max_connections=cap)
    log.info(
        "connections: at most %d at once (%s; open-file limit %s minus %d kept for the "
        "database and logs), of which long-polls may hold %d and %d are kept for asks, "
        "decisions and the console; a request must arrive within %g s; idle keep-alive "
        "connections close after %g s",
        cap,
        f"max_connections {server.max_connections}" if server.max_connections else "default",
        nofile if nofile is not None else "unlimited",
        reserved_fds(settings),
        cap - reserve,
        reserve,
        server.request_read_timeout_seconds,
        server.keep_alive_timeout_seconds,
    )
    if nofile is not None and server.max_connections and cap < server.max_connections:
        log.warning(
            "the open-file limit (%d) caps connections at %d, below max_connections %d: "
            "raise it (ulimit -n, or LimitNOFILE= under systemd) for more waiting agents",
            nofile,
            cap,
            server.max_connections,
        )
    protocol = GuardedH11Protocol if parser == "h11" else protocol_class()
    return GateServerConfig(
        AccessLog(app),
        limits=limits,
        settings=settings,
        interface="asgi3",  # AccessLog's call is a plain function returning the app's coroutine
        http=protocol,
        host=server.host,
        port=server.port,
        log_config=None,
        access_log=False,
        timeout_keep_alive=server.keep_alive_timeout_seconds,
        timeout_graceful_shutdown=5,
        backlog=LISTEN_BACKLOG,
        # uvicorn believes X-Forwarded-For from 127.0.0.1 unless told otherwise
        proxy_headers=bool(server.trusted_proxies),
        forwarded_allow_ips=server.trusted_proxies or None,
    )


#: Thousands of hooks may (re)connect their long-polls at once, e.g. after a restart;
#: uvicorn's default 2048 resets them. The kernel caps it at net.core.somaxconn.
LISTEN_BACKLOG = 16384


def listen(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket for `host:port`, the way uvicorn binds its own.

    `gate serve` takes its port before anything touches the database, so a second one on a
    busy port fails without migrating or sweeping the first one's database; listening at
    once lets clients that connect during start-up wait in the backlog, not be refused.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class GateServer(uvicorn.Server):
    """uvicorn's server on a socket gate bound itself, announcing its address once started.

    uvicorn logs "Uvicorn running on ..." only for sockets it binds; gate keeps that line
    (people and scripts wait for it) and prints it when the app is ready, as uvicorn does.
    """

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if sockets and not self.should_exit:
            host, port = sockets[0].getsockname()[:2]
            address = f"http://{f'[{host}]' if ':' in host else host}:{port}"
            logging.getLogger("uvicorn.error").info(
                "Uvicorn running on %s (Press CTRL+C to quit)", address
            )
            settings = getattr(self.config, "settings", None)
            if settings is not None:
                for line in welcome(settings, address):
                    log.info("%s", line)


def welcome(settings: Settings, address: str) -> list[str]:
    """What `gate serve` says once it listens: where the console is, and what to do next."""
    server = settings.server
    console = (server.public_url or address).rstrip("/") + "/"
    lines = [f"console: {console} (approve and reject there)"]
    if not settings.rules:
        lines.append(
            "next: add [[rules]] to gate.toml saying which tool calls need an approval "
            "(until then every call is allowed), then restart"
        )
    elif not settings.tokens:
        # the hook and `gate requests` default to gate's default address
        here = "" if console == "http://127.0.0.1:8000/" else f" --url {console.rstrip('/')}"
        lines.append(
            f"next: in your project, `gate init claude-code{here}` sends Claude Code's tool "
            f"calls here; `gate requests list{here}` shows what waits for you"
        )
    else:
        lines.append(
            f"next: give each agent its token as GATE_TOKEN with GATE_URL={console.rstrip('/')}"
            " (`gate tokens new NAME` makes one); approvers sign in at the console"
        )
    return lines
