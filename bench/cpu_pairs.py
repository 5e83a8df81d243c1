"""Server CPU per call of this checkout and another, measured in alternation.

    .venv/bin/python -m bench.cpu_pairs --before /tmp/base [--db sqlite|postgres]
        [--pairs 5] [--calls 1000] [--idle]

On a noisy machine one run of `bench.call_cost` can move by a third from one minute to the
next, so "is this change cheaper?" is answered here by pairs: a server of this checkout,
then one of `--before` (e.g. `git worktree add --detach /tmp/base <commit>`), each on a fresh
database, `--pairs` times, with `bench.call_cost`'s measurement (calls one at a time, the
server's CPU read from /proc). Each server runs with its checkout as working directory, so
`python -m gate.cli` imports that checkout's `gate`. Prints every run, then the medians
with their ranges, in milliseconds and as multiples of `/healthz` in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

from bench._common import database, machine, server
from bench.call_cost import idle_cpu, measure_cpu

ROWS = ("POST /v1/gate that asks", "POST .../decision")
HERE = Path(__file__).resolve().parent.parent


def one(checkout: Path, kind: str, calls: int) -> dict[str, float]:
    """ms of server CPU per call for each row, from a server of `checkout`."""
    started_in = Path.cwd()
    os.chdir(checkout)  # the server process starts here and imports this checkout's gate
    try:
        with database(kind, migrate=False) as url, server(url, max_wait_seconds=60) as proc:
            assert proc.proc is not None
            return measure_cpu(proc.url, proc.proc.pid, calls, chains=False)
    finally:
        os.chdir(started_in)


def idle(checkout: Path, kind: str) -> float:
    """ms of CPU per second an idle server of `checkout` spends, on a fresh database."""
    started_in = Path.cwd()
    os.chdir(checkout)
    try:
        with database(kind, migrate=False) as url:
            return idle_cpu(url)
    finally:
        os.chdir(started_in)


def idle_pairs(sides: dict[str, Path], kind: str, pairs: int) -> None:
    """Print the idle CPU of each side, `pairs` times in alternation, then the medians."""
    runs: dict[str, list[float]] = {name: [] for name in sides}
    for n in range(pairs):
        for name, checkout in sides.items():
            runs[name].append(idle(checkout, kind))
            print(f"  pair {n + 1} {name:<7} idle {runs[name][-1]:.1f} ms/s", flush=True)
    print(f"[{kind}] idle CPU, medians of {pairs} pairs:")
    for name, side in runs.items():
        print(f"  {name:<7} {statistics.median(side):.1f} ms/s ({min(side):.1f}-{max(side):.1f})")


def summary(name: str, runs: list[dict[str, float]]) -> str:
    """Medians and ranges of the rows over `runs`."""
    parts = []
    for row in ROWS:
        ms = [r[row] for r in runs]
        ratio = [r[row] / r["GET /healthz"] for r in runs]
        parts.append(
            f"{row.split()[-1]} {statistics.median(ms):.2f} ms ({min(ms):.2f}-{max(ms):.2f}), "
            f"{statistics.median(ratio):.1f}x ({min(ratio):.1f}-{max(ratio):.1f}x)"
        )
    return f"  {name:<7} " + "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--idle", action="store_true", help="idle CPU per second instead")
    args = parser.parse_args()
    print(machine())
    sides = {"now": HERE, "before": args.before.resolve()}
    if args.idle:
        idle_pairs(sides, args.db, args.pairs)
        return
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    for n in range(args.pairs):
        for name, checkout in sides.items():
            cpu = one(checkout, args.db, args.calls)
            runs[name].append(cpu)
            health = cpu["GET /healthz"]
            rows = ", ".join(f"{r.split()[-1]} {cpu[r]:.2f} ms" for r in ROWS)
            print(f"  pair {n + 1} {name:<7} /healthz {health:.2f} ms, {rows}", flush=True)
    print(f"[{args.db}] medians of {args.pairs} pairs, {args.calls} calls each:")
    for name, side in runs.items():
        print(summary(name, side))


if __name__ == "__main__":
    main()
