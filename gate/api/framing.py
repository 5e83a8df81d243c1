"""An answer sent before its request's body was read in full ends the connection.

HTTP/1.1 frames requests back to back on a connection: the next request starts where this
one's body ends. An answer sent before the body was read (a 413 for a body over the limit, a
400 for a NUL in the URL, a 401, 403 or 421 from a check that needs no body, the lean
routes' refusals, a handler's error) leaves the rest of that body on the wire, and whatever
reads the connection next must skip exactly that much. gate does not skip it: reading an
oversized body to its end is the very work the limit refuses, and a server that guesses
wrong about where a body ends answers one client's bytes as another's request (behind a
proxy that reuses upstream connections, request smuggling). So such an answer carries
`Connection: close` and the server closes the connection once it is sent; `gate.server.serve`
closes it gracefully (it stops writing, then reads and drops what the client still sends
for a few seconds), so the client reads the answer rather than a reset, and retries on a
new connection.

One rule for every layer: it wraps the app's `receive` and `send` at the entry
(`gate.api.lean.GateAPI`), so nothing that answers (the lean routes, the envelope, the
guard, FastAPI and its handlers) can forget it. Requests without a body are not wrapped: a
parked long-poll pays nothing for it.
"""

from __future__ import annotations

from starlette.types import Message, Receive, Scope, Send

CLOSE = (b"connection", b"close")


def carries_body(scope: Scope) -> bool:
    """True when the request declares a body: a Content-Length other than 0, or chunks."""
    for name, value in scope["headers"]:
        if name == b"transfer-encoding":
            return True
        if name == b"content-length" and value.strip(b" \t") != b"0":
            return True  # a length, or one that is not a number (refused, and closed)
    return False


def framed(receive: Receive, send: Send) -> tuple[Receive, Send]:
    """`receive` and `send`, closing the connection after an answer that beats the body."""
    return _Framed(receive, send).pair()


class _Framed:
    """Whether the body was read to its end, and the two wrappers that track and act on it."""

    __slots__ = ("_receive", "_send", "_read")

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        #: the last body message (or the client's disconnect) was received
        self._read = False

    def pair(self) -> tuple[Receive, Send]:
        return self.receive, self.send

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            self._read = True
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start" and not self._read:
            headers = list(message.get("headers", ()))
            if not any(n.lower() == b"connection" and b"close" in v.lower() for n, v in headers):
                headers.append(CLOSE)
            message = {**message, "headers": headers}
        await self._send(message)
