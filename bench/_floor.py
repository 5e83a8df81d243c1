"""The floor a parked long-poll is judged against: uvicorn as `gate serve` runs it, with an app
that does nothing but park.

`serve` runs an ASGI app under `gate.server.server_config` (httptools, gate's connection
guards): `GET /park` parks on one future and one timer until `POST /release` (or 110 s),
then answers a JSON body the size of a request's view with as many headers as gate's answer;
`GET /count` says how many are parked. What a parked connection costs here, and how long
answering 1,000 of them at once takes here, is what any app under this server pays.

    .venv/bin/python -m bench._floor MAX_CONNECTIONS   (the benchmarks start it themselves)
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
    from gate.config import Settings
    from gate.server import GateServer, listen, server_config

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


@contextmanager
def floor_server(max_connections: int) -> Iterator[tuple[str, int, int]]:
    """The floor server as a child process: (url, port, pid)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench._floor", str(max_connections)],
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
    serve(int(sys.argv[1]))
