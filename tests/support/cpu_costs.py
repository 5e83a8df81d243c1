"""Where the suite's CPU goes, per test file: `pytest -p tests.support.cpu_costs`.

The suite is CPU-bound on CI's two cores, and most of its CPU is spent in processes the
tests start (`gate serve`, hooks, MCP proxies, Chromium), which a wall-clock `--durations`
does not separate from waiting. Each worker records, per test, the CPU of its own process and
of the children it reaped meanwhile (a module's server is counted at the test that stopped
it, so read the figures per file), into `test-artifacts/cpu/<pid>.jsonl`; the end of the run
prints the costliest files.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import pytest

OUT = Path(__file__).resolve().parents[2] / "test-artifacts" / "cpu"
#: how many files the end of the run names
SHOWN = 25
_out: list[TextIO] = []


def pytest_configure(config: pytest.Config) -> None:
    """Forget the last run's records (in the controller, before any worker starts)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        for old in OUT.glob("*.jsonl"):
            old.unlink()


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, reaped.ru_utime + reaped.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Record the test's CPU (its setup and teardown included)."""
    if not _out:
        OUT.mkdir(parents=True, exist_ok=True)
        _out.append((OUT / f"{os.getpid()}.jsonl").open("a", encoding="utf-8"))
    (own0, kids0), wall0 = _cpu(), time.monotonic()
    yield
    (own1, kids1), wall1 = _cpu(), time.monotonic()
    line = {"id": item.nodeid, "own": own1 - own0, "children": kids1 - kids0}
    # `start`: seconds since the epoch, to line the workers' records up on one time axis
    timing = {"wall": wall1 - wall0, "start": time.time() - (wall1 - wall0)}
    _out[0].write(json.dumps({**line, **timing}) + "\n")
    _out[0].flush()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The costliest files of this run (the controller reads every worker's records)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for path in OUT.glob("*.jsonl"):
        for raw in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(raw)
            sums = by_file[record["id"].split("::")[0]]
            sums[0] += record["own"]
            sums[1] += record["children"]
            sums[2] += record["wall"]
            sums[3] += 1
    if not by_file:
        return
    own = sum(s[0] for s in by_file.values())
    children = sum(s[1] for s in by_file.values())
    terminalreporter.write_sep("=", "CPU seconds by test file (tests.support.cpu_costs)")
    terminalreporter.write_line(
        f"in tests: {own + children:.0f} ({own:.0f} in the workers, {children:.0f} in children)"
    )
    costliest = sorted(by_file.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:SHOWN]
    for name, (o, c, wall, count) in costliest:
        terminalreporter.write_line(
            f"{o + c:7.1f}  (own {o:5.1f}, children {c:5.1f}, wall {wall:6.1f}, {count:4.0f} tests)"
            f"  {name}"
        )
