"""Real servers for tests: the gate app under uvicorn in a thread, or `gate serve` as a process.

Both listen on loopback port 0 (the OS picks a free port), so tests never collide.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import httpx
import uvicorn

from gate.server.serve import protocol_class
from tests.support.http import TLS


class _PromptServer(uvicorn.Server):
    """uvicorn's server, stopping the moment it is told. uvicorn looks at `should_exit` once
    every 0.1 s; the suite stops some two thousand servers, so `wake` ends the wait at once."""

    _loop: asyncio.AbstractEventLoop | None = None
    _woken: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self._loop, self._woken = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864_000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), 0.1)
            should_exit = await self.on_tick(counter)

    def wake(self) -> None:
        """Have the main loop look at `should_exit` now (from any thread)."""
        loop, woken = self._loop, self._woken
        if loop is not None and woken is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(woken.set)


class ThreadServer:
    """Serve an ASGI app with uvicorn on 127.0.0.1:<free port> in a background thread."""

    def __init__(self, app: Any) -> None:
        self.app = app
        config = uvicorn.Config(
            app,
            # gate's own protocol (read deadline, header cap, graceful close), as `gate serve`
            http=protocol_class(),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            lifespan="on",
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        self.server = _PromptServer(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("server thread died during start-up")
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start within 20 s")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.server.wake()
        self.thread.join(timeout=10)

    def __enter__(self) -> ThreadServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LoopbackFake:
    """Start and stop for a loopback fake of a platform: its ASGI `app` served by a
    `ThreadServer` on a fresh port each start (the fakes used to carry a copy of this each)."""

    app: Any
    server: ThreadServer | None = None

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:<port>` of the running fake."""
        assert self.server is not None, f"{type(self).__name__} is not started"
        return self.server.url

    def start(self) -> Self:
        """Serve the app; returns self so `Fake().start()` reads as one step."""
        self.server = ThreadServer(self.app).start()
        return self

    def stop(self) -> None:
        """Stop serving (a no-op when never started)."""
        if self.server is not None:
            self.server.stop()


_LISTEN = re.compile(rb"Uvicorn running on http://127\.0\.0\.1:(\d+)")


class ServerProcess:
    """`gate serve` as a real child process, killable and restartable on the same port."""

    def __init__(
        self,
        config_path: Path,
        *,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        nofile: int | None = None,
    ) -> None:
        self.config_path = config_path
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path or config_path.with_suffix(".log")
        #: the open-file limit (soft and hard) the server starts under, when set
        self.nofile = nofile
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> ServerProcess:
        """Start (or restart on the previous port) and wait until /healthz answers."""
        self.starts += 1
        log = open(self.log_path, "ab")
        offset = self.log_path.stat().st_size
        cmd = [
            sys.executable,
            "-m",
            "gate.cli",
            "serve",
            "--config",
            str(self.config_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=log,
            env=self.env,
            preexec_fn=self._limit_files if self.nofile is not None else None,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"gate serve exited with {self.proc.returncode}:\n"
                    + self.log_path.read_text(errors="replace")[-4000:]
                )
            if self.port == 0:
                with open(self.log_path, "rb") as fh:
                    fh.seek(offset)
                    match = _LISTEN.search(fh.read())
                if match:
                    self.port = int(match.group(1))
            if self.port and _healthy(self.url):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(
            "gate serve did not become healthy:\n"
            + self.log_path.read_text(errors="replace")[-4000:]
        )

    def _limit_files(self) -> None:
        # In the child, before exec: soft and hard, so gate serve cannot raise it (it
        # raises its soft limit to the hard one).
        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send `sig` and wait for the process to be gone."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=15)

    def stop(self) -> None:
        """terminate -> wait -> kill."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=1, verify=TLS).status_code == 200
    except httpx.HTTPError:
        return False


def waiters_in(metrics: str) -> int:
    """The long-polls open on a server, from the text of its /metrics."""
    for line in metrics.splitlines():
        if line.startswith("gate_open_waiters "):
            return int(float(line.split()[1]))
    return 0


#: sockets holding the ports `free_port` handed out, for the life of the test process
_RESERVED: list[socket.socket] = []


def free_port() -> int:
    """A loopback port where nothing listens, for "the server is down" tests.

    The port stays bound (never listening) until the process exits: a connection to it is
    refused, and no other test of a parallel run can bind it in the meantime (a port that was
    merely free a moment ago could be taken by another worker's server).
    """
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    _RESERVED.append(s)
    return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float = 10, interval: float = 0.1) -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds.

    The first looks come quickly (10 ms apart) and the gaps then grow by half up to
    `interval`: most conditions hold within a few looks, and a long wait does not spend the
    machine's CPU asking (a look is often an HTTP round trip to a server in this process; at
    a fixed 20 ms the suite's polling cost more CPU than some of its servers).
    """
    deadline = time.monotonic() + timeout
    gap = min(0.01, interval)
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(gap)
        gap = min(gap * 1.5, interval)


__all__ = [
    "LoopbackFake",
    "ServerProcess",
    "ThreadServer",
    "free_port",
    "waiters_in",
    "signal",
    "wait_until",
]
