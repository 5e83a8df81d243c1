"""Closing a connection whose client may still be sending, without a reset.

Closing a socket with unread input makes the kernel answer with a reset (RST), which may
reach the client before it has read gate's answer: a client still sending a body gate
refused (a 413, `gate.api.framing`), or one cut off by a guard (`gate.server.serve`: 408, 431,
503), would then see "connection reset" instead of why. So such a connection is closed the
way nginx's lingering close does it: gate stops writing (the client reads the answer, then
the end of the stream) and reads and drops what still arrives, until the client closes, for
a bounded time and number of bytes.
"""

from __future__ import annotations

import asyncio
import socket

#: a connection closed while its client is still sending is drained this long at most, and
#: this much: enough for the client to read the answer (it closes when it has), bounded so
#: a client that keeps sending holds a descriptor for seconds, not for ever
LINGER_SECONDS = 5.0
LINGER_BYTES = 8 * 1024 * 1024
#: sockets being drained (they hold descriptors, so they count against the connection cap)
_LINGERING: set[socket.socket] = set()


def linger(transport: asyncio.BaseTransport, loop: asyncio.AbstractEventLoop) -> None:
    """Close `transport`'s connection gracefully (the module docstring), from the protocol's
    `connection_lost`: gate keeps its own copy of the socket (uvicorn closes its descriptor
    as usual), shuts down its writing side and drains it for at most `LINGER_SECONDS` and
    `LINGER_BYTES`."""
    raw = transport.get_extra_info("socket")
    if raw is None:
        return
    try:
        sock = socket.socket(fileno=socket.dup(raw.fileno()))
    except OSError:
        return
    try:
        sock.setblocking(False)
        sock.shutdown(socket.SHUT_WR)  # after the answer already queued: FIN, not RST
    except OSError:
        sock.close()
        return
    _LINGERING.add(sock)
    left = [LINGER_BYTES]

    def done() -> None:
        if sock in _LINGERING:
            _LINGERING.discard(sock)
            loop.remove_reader(sock.fileno())
            timer.cancel()
            sock.close()

    def drain() -> None:
        try:
            while left[0] > 0:
                chunk = sock.recv(65536)
                if not chunk:
                    break  # the client closed: it has read the answer
                left[0] -= len(chunk)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        done()

    timer = loop.call_later(LINGER_SECONDS, done)
    loop.add_reader(sock.fileno(), drain)


def lingering() -> int:
    """How many sockets are being drained now."""
    return len(_LINGERING)
