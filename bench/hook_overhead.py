"""How much does `gate hook` cost per tool call, next to the cheapest possible client?

Starts `gate serve` (SQLite, no rules, loopback without tokens), then times whole processes,
interleaved in one run so both see the same machine:

* baseline: `python3 -c` doing the same single `POST /v1/gate` with urllib;
* `gate hook --format claude-code` on an un-gated call (no rule matches: the fast path), run
  as the console script, as `python -m gate.cli hook` and as `python -m gate.hook`.

Prints the median wall time of each and its ratio to the baseline (goal: <= 1.3x), and the
median CPU time (user + system) each process used: on a shared, loaded machine the wall time
mostly measures waiting for a core, the CPU time what one call of the hook really costs.

    .venv/bin/python bench/hook_overhead.py [--runs 40]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

PAYLOAD = {
    "session_id": "36a0a5dd-dd52-41fe-a100-8de35f102f52",
    "transcript_path": "/home/u/.claude/projects/p/36a0a5dd.jsonl",
    "cwd": "/home/u/proj",
    "permission_mode": "default",
    "hook_event_name": "PreToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "flutter pub get 2>&1", "timeout": 60000},
    "tool_use_id": "toolu_01YCtibRpCBiSsrAFnrQfD9B",
}

BASELINE = """
import json, sys, urllib.request
body = json.loads(sys.stdin.read())
req = urllib.request.Request(
    sys.argv[1] + "/v1/gate",
    data=json.dumps({"tool_name": body["tool_name"], "tool_args": body["tool_input"]}).encode(),
    headers={"Content-Type": "application/json"},
)
urllib.request.urlopen(req, timeout=10).read()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    config = tmp / "gate.toml"
    config.write_text(f'[server]\ndatabase_url = "sqlite:///{tmp / "gate.db"}"\n')
    log = open(tmp / "serve.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gate.cli", "serve", "--config", str(config), "--port", str(port)],
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/healthz", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("gate serve did not start:\n" + (tmp / "serve.log").read_text())


def timed(argv: list[str], stdin: bytes, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, input=stdin, capture_output=True, env=env)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv} failed: {done.stderr.decode()}")
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    ns = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp))
        try:
            env = {**os.environ, "GATE_URL": url}
            env.pop("GATE_TOKEN", None)
            # Installed packages have their bytecode compiled (pip does it); measure that case,
            # not recompiling gate's modules on every run. The cache goes to the temp dir, so
            # the checkout stays clean, and the warm-up runs below fill it for every candidate.
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
            stdin = json.dumps(PAYLOAD).encode()
            candidates: dict[str, list[str]] = {
                "baseline: python3 -c urllib POST": [sys.executable, "-c", BASELINE, url],
                "python -m gate.cli hook": [sys.executable, "-m", "gate.cli", "hook"],
                "python -m gate.hook": [sys.executable, "-m", "gate.hook"],
            }
            script = shutil.which("gate", path=str(Path(sys.executable).parent))
            if script:
                candidates["gate hook (console script)"] = [script, "hook"]
            for argv in candidates.values():  # warm the page cache and the server
                for _ in range(3):
                    timed(argv, stdin, env)
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in candidates}
            for _ in range(ns.runs):
                for name, argv in candidates.items():
                    times[name].append(timed(argv, stdin, env))
        finally:
            proc.terminate()
            proc.wait(10)

    base = statistics.median(w for w, _ in times["baseline: python3 -c urllib POST"])
    print(f"{ns.runs} runs each, interleaved; medians of each whole process")
    for name, values in times.items():
        median = statistics.median(w for w, _ in values)
        cpu = statistics.median(c for _, c in values)
        print(
            f"  {name:36s} wall {median * 1000:7.1f} ms {median / base:5.2f}x"
            f"   CPU {cpu * 1000:6.1f} ms"
        )


if __name__ == "__main__":
    main()
