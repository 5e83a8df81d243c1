"""What a shadow rule costs an un-gated call: `bench.call_cost`'s rows with and without one.

.venv/bin/python -m bench.shadow_cost [--db sqlite|postgres] [--calls 1000] [--servers 3]

Runs real `gate serve` processes with the standard test policy, alternately without and with
one shadow rule placed first (so it is tried on every call: `read_*` with a `when`, the
costliest kind), and prints the un-gated row (`POST /v1/gate` that a rule allows) as server
CPU per call and as a ratio to `/healthz` on the same server, medians over the servers.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench._common import database, machine
from bench.call_cost import measure_cpu
from tests.support import config as cfg
from tests.support.servers import ServerProcess

UNGATED = "POST /v1/gate, no rule"


def _config(db_url: str, folder: Path, *, with_shadow: bool) -> Path:
    data = cfg.settings_data(db_url, sweep_interval_seconds=5)
    if with_shadow:
        until = (datetime.now(UTC) + timedelta(days=7)).strftime("%Y-%m-%dT%H:%M:%SZ")
        trial = {
            "name": "try-asking-reads",
            "tools": ["read_*"],
            "when": "has(args.path) && args.path.startsWith('/etc')",
            "mode": "shadow",
            "until": until,
        }
        data["rules"].insert(0, trial)
    path = folder / ("shadow.toml" if with_shadow else "plain.toml")
    path.write_text(cfg.to_toml(data))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--servers", type=int, default=3)
    args = parser.parse_args()
    print(machine())
    figures: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    with database(args.db) as db_url, tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.servers):
            for with_shadow in (False, True):
                path = _config(db_url, Path(tmp), with_shadow=with_shadow)
                proc = ServerProcess(path, log_path=Path(tmp) / "serve.log").start(timeout=60)
                try:
                    assert proc.proc is not None
                    cpu = measure_cpu(proc.url, proc.proc.pid, args.calls)
                finally:
                    proc.stop()
                ratio = cpu[UNGATED] / cpu["GET /healthz"]
                figures[with_shadow].append((cpu[UNGATED], ratio))
    for with_shadow, runs in figures.items():
        ms = statistics.median(r[0] for r in runs)
        ratio = statistics.median(r[1] for r in runs)
        spread = f"{min(r[1] for r in runs):.2f}-{max(r[1] for r in runs):.2f}"
        label = "one shadow rule tried on every call" if with_shadow else "no shadow rule"
        print(f"[{args.db}] un-gated call, {label}: {ms:.3f} ms, {ratio:.2f}x /healthz [{spread}]")


if __name__ == "__main__":
    main()
