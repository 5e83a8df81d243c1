"""What a new gate app costs before its first answers: building it, and its first requests.

    .venv/bin/python -m bench.app_start [--apps 40] [--rounds 3]

In one process, apps are built (`create_app`, SQLite, the standard test policy), served by
uvicorn in a thread, sent one request of each kind (an ask answered by policy, the console's
sign-in page, the JSON request list, `/healthz`), a second round of the same requests, and
stopped; the process's CPU is read around each step. Two ways of including the routers take
turns in blocks of `--apps`:

* **FastAPI's `include_router`** (the baseline): the router is wrapped, and the first request
  that passes the wrapper analyses each of its routes again;
* **gate's** (`gate.api.lean.GateAPI.include_router`): the routes are served as the router
  built them.

The baseline is made by building the app with a subclass of `GateAPI` that keeps FastAPI's
method (`gate.app.GateAPI` is swapped for its blocks). A server builds its app once, so what
a user sees is the first requests after a start; the test suite builds some two thousand.
The client runs in the same process: its share is the same in both columns.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from fastapi import FastAPI

import gate.app
from bench._common import machine
from gate.api.lean import GateAPI
from tests.support import config as cfg
from tests.support.databases import migrated_sqlite
from tests.support.http import TLS
from tests.support.servers import ThreadServer

AGENT = {"Authorization": f"Bearer {cfg.AGENT}"}
ADMIN = {"Authorization": f"Bearer {cfg.ADMIN}"}
STEPS = ("build", "first requests", "second requests")


class _FastApiIncludes(GateAPI):
    """GateAPI with FastAPI's own `include_router` (the baseline)."""

    include_router = FastAPI.include_router  # type: ignore[assignment]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _requests(client: httpx.Client) -> None:
    ask = {"tool_name": "read_file", "tool_args": {"path": "/a"}}
    assert client.post("/v1/gate", json=ask, headers=AGENT).status_code == 200
    assert client.get("/login").status_code == 200
    assert client.get("/v1/requests", headers=ADMIN).status_code == 200
    assert client.get("/healthz").status_code == 200


@contextmanager
def _app_class(cls: type[GateAPI]) -> Iterator[None]:
    names = vars(gate.app)  # the name create_app builds its app with
    saved = names["GateAPI"]
    names["GateAPI"] = cls
    try:
        yield
    finally:
        names["GateAPI"] = saved


def one_app(folder: Path) -> tuple[float, float, float]:
    """CPU seconds of building an app, its first requests and the same requests again."""
    url = migrated_sqlite(folder / "gate.db")
    settings = cfg.make_settings(url)
    start = _cpu()
    app = gate.app.create_app(settings)
    built = _cpu()
    server = ThreadServer(app).start()
    try:
        with httpx.Client(base_url=server.url, verify=TLS) as client:
            before = _cpu()
            _requests(client)
            first = _cpu()
            _requests(client)
            second = _cpu()
    finally:
        server.stop()
    return built - start, first - before, second - first


def block(cls: type[GateAPI], apps: int) -> list[tuple[float, float, float]]:
    """`apps` apps built with `cls`, each measured."""
    with _app_class(cls), tempfile.TemporaryDirectory() as tmp:
        return [one_app(Path(tempfile.mkdtemp(dir=tmp))) for _ in range(apps)]


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", type=int, default=40, help="apps per block")
    parser.add_argument("--rounds", type=int, default=3, help="blocks of each way")
    args = parser.parse_args(argv)
    print(machine())
    ways: dict[str, Callable[[int], list[tuple[float, float, float]]]] = {
        "FastAPI's include_router": lambda n: block(_FastApiIncludes, n),
        "gate's include_router": lambda n: block(GateAPI, n),
    }
    for run in ways.values():  # warm the imports and caches of both before measuring
        run(3)
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, run in ways.items():
            results[name] += run(args.apps)
    print(f"\nCPU ms per app, median of {args.apps * args.rounds} apps per way")
    print(f"{'':28s}" + "".join(f"{step:>18s}" for step in STEPS))
    for name, rows in results.items():
        medians = [statistics.median(column) * 1000 for column in zip(*rows, strict=True)]
        print(f"{name:28s}" + "".join(f"{m:18.1f}" for m in medians))


if __name__ == "__main__":
    main()
