"""The floors a parked long-poll is judged against: uvicorn as `gate serve` runs it, with an
app that does nothing but park; and, below any HTTP framework, one asyncio process writing
ready-made answers straight to its sockets.

`serve` runs an ASGI app under `gate.server.serve.server_config` (httptools, gate's connection
guards): `GET /park` parks on one future and one timer until `POST /release` (or 110 s),
then answers a JSON body the size of a request's view with as many headers as gate's answer;
`GET /count` says how many are parked. What a parked connection costs here, and how long
answering 1,000 of them at once takes here, is what any app under this server pays.

`serve_raw` answers the same three paths with an `asyncio.Protocol` and no HTTP parsing
beyond the request line: a release writes the same bytes to every parked socket in one loop
and closes it. Nothing in Python answers 1,000 connections faster; with the client reading
them on the same two cores, it is the floor of the fan-out itself.

    .venv/bin/python -m bench._floor MAX_CONNECTIONS [raw]   (the benchmarks start it)
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.support import config as cfg

_READY = "floor listening on "
#: about the size of a request's JSON view, and the headers gate's answer carries
BODY = b'{"floor": "' + b"x" * 900 + b'"}'
HEADERS = [
    (b"content-length", b"%d" % len(BODY)),
    (b"content-type", b"application/json"),
    (b"x-request-id", b"01M88XWK0AFJQYWK5111AQ69VE"),
    (b"content-security-policy", b"default-src 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]


def serve(max_connections: int) -> None:
    """Run the floor server in this process, printing its port once it listens."""
    from gate.config.settings import Settings
    from gate.server.serve import GateServer, listen, server_config

    parked: set[asyncio.Future[None]] = set()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body, headers = b"%d" % len(parked), []
        if scope["path"] == "/park":
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()
            timer = loop.call_later(110, waiter.set_result, None)
            parked.add(waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                parked.discard(waiter)
            body, headers = BODY, HEADERS
        elif scope["path"] == "/release":
            for waiter in list(parked):
                if not waiter.done():
                    waiter.set_result(None)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    data = cfg.settings_data("sqlite://", port=0, max_connections=max_connections)
    sock = listen("127.0.0.1", 0)  # bound first: the port is known before serving
    print(_READY + str(sock.getsockname()[1]), flush=True)
    GateServer(server_config(app, Settings(**data))).run(sockets=[sock])


def _answer(body: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    lines = [b"HTTP/1.1 200 OK", *(name + b": " + value for name, value in headers)]
    return b"\r\n".join([*lines, b"connection: close", b"", body])


def serve_raw() -> None:
    """Run the raw asyncio floor in this process, printing its port once it listens."""
    answer = _answer(BODY, HEADERS)
    parked: list[asyncio.Transport] = []

    class Raw(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport, self.seen = transport, b""

        def data_received(self, data: bytes) -> None:
            self.seen += data
            if b"\r\n\r\n" not in self.seen:
                return
            path = self.seen.split(b" ", 2)[1]
            if path.startswith(b"/park"):
                parked.append(self.transport)
                return
            if path.startswith(b"/release"):
                answering, parked[:] = list(parked), []
                for transport in answering:  # the fan-out: the same bytes to every socket
                    transport.write(answer)
                    transport.close()
            count = b"%d" % len(parked)
            self.transport.write(_answer(count, [(b"content-length", b"%d" % len(count))]))
            self.transport.close()

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Raw, "127.0.0.1", 0, backlog=16384)
        print(_READY + str(server.sockets[0].getsockname()[1]), flush=True)
        await server.serve_forever()

    asyncio.run(main())


@contextmanager
def floor_server(max_connections: int, *, raw: bool = False) -> Iterator[tuple[str, int, int]]:
    """A floor server as a child process (`raw`: the asyncio floor): (url, port, pid)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench._floor", str(max_connections), *(["raw"] if raw else [])],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith(_READY):
            raise SystemExit(f"floor server did not start: {line!r}")
        port = int(line[len(_READY) :])
        yield f"http://127.0.0.1:{port}", port, proc.pid
    finally:
        proc.kill()  # at once: its parked connections would only delay a graceful stop
        proc.wait(timeout=15)


if __name__ == "__main__":
    serve_raw() if sys.argv[2:] == ["raw"] else serve(int(sys.argv[1]))
