"""What `gate mcp proxy` adds to an un-gated `tools/call`, next to calling the upstream directly.

Starts `gate serve` (SQLite, standard test policy: no rule covers the tool, so every call is
asked about and forwarded) and, in the same run, two official-SDK clients over stdio: one
straight to the test upstream server (tests/mcp/upstream_server.py), one to
`gate mcp proxy --name bench -- <the same upstream>`. Calls alternate between the two, so both
see the same machine. Also times a bare `POST /v1/gate` (the gate round trip inside each
proxied call) on a kept-alive connection.

Prints the median and p95 of each and the proxy's added latency per call.

    .venv/bin/python -m bench.mcp_proxy_overhead [--calls 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import httpx
from mcp import ClientSession, StdioServerParameters, stdio_client

from bench._common import database, machine, percentile, server
from tests.support import config as cfg

UPSTREAM = [
    sys.executable,
    str(Path(__file__).resolve().parents[1] / "tests/mcp/upstream_server.py"),
]


async def _session(stack: AsyncExitStack, command: list[str], env: dict[str, str]) -> ClientSession:
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    read, write = await stack.enter_async_context(stdio_client(params))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session


async def _timed_call(session: ClientSession, label: str) -> float:
    t = time.perf_counter()
    result = await session.call_tool("write_marker", {"label": label})
    elapsed = time.perf_counter() - t
    if result.is_error:
        raise SystemExit(f"the call failed: {result.content}")
    return elapsed * 1000


async def _run(url: str, calls: int) -> dict[str, list[float]]:
    env = {"GATE_URL": url, "GATE_TOKEN": cfg.AGENT}
    proxy = [sys.executable, "-m", "gate.cli", "mcp", "proxy", "--name", "bench", "--", *UPSTREAM]
    times: dict[str, list[float]] = {"direct": [], "proxy": [], "gate": []}
    async with AsyncExitStack() as stack:
        direct = await _session(stack, UPSTREAM, env)
        proxied = await _session(stack, proxy, env)
        http = await stack.enter_async_context(
            httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {cfg.AGENT}"})
        )
        body = {"tool_name": "mcp__bench__write_marker", "tool_args": {"label": "x"}}
        for i in range(10):  # warm-up: imports, connection pools, the SQLite page cache
            await _timed_call(direct, f"w{i}")
            await _timed_call(proxied, f"w{i}")
            await http.post("/v1/gate", json=body)
        for i in range(calls):
            times["direct"].append(await _timed_call(direct, f"d{i}"))
            times["proxy"].append(await _timed_call(proxied, f"p{i}"))
            t = time.perf_counter()
            reply = await http.post("/v1/gate", json=body)
            times["gate"].append((time.perf_counter() - t) * 1000)
            if reply.status_code != 200 or reply.json().get("decision") != "allow":
                raise SystemExit(f"unexpected gate answer: {reply.status_code} {reply.text}")
    return times


def main() -> None:
    """Run the comparison and print the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=300)
    ns = p.parse_args()
    with database("sqlite") as db_url, server(db_url) as gate:
        times = anyio.run(_run, gate.url, ns.calls)
    print(machine())
    print(f"{ns.calls} sequential un-gated tools/call per client, alternating, over stdio")
    rows = [
        ("upstream directly (baseline)", times["direct"]),
        ("through gate mcp proxy", times["proxy"]),
        ("bare POST /v1/gate (inside each proxied call)", times["gate"]),
    ]
    for name, values in rows:
        print(
            f"  {name:<46} median {statistics.median(values):6.2f} ms"
            f"   p95 {percentile(values, 95):6.2f} ms"
        )
    added = statistics.median(times["proxy"]) - statistics.median(times["direct"])
    ratio = statistics.median(times["proxy"]) / statistics.median(times["direct"])
    print(f"  proxy adds {added:.2f} ms per call at the median ({ratio:.2f}x the direct call)")


if __name__ == "__main__":
    main()
