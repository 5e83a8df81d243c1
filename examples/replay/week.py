"""A week of synthetic traffic for the replay example (docs/decision-log.md).

    python examples/replay/week.py [FOLDER]

Writes FOLDER/gate.db (default: this folder): seven days of a coding agent's calls answered
by examples/replay/gate.toml through gate's own code (the function `POST /v1/gate` answers
with, the decision pipeline approvers' clicks go through, the decision log's writer), on a
clock that walks through the week. People approve routine shell commands, and reject force
pushes and `rm -rf` outside the build folder. Then try:

    gate policy replay examples/replay/candidate.toml --config FOLDER/gate.toml

FOLDER/gate.toml is examples/replay/gate.toml pointed at FOLDER/gate.db.
"""

from __future__ import annotations

import asyncio
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: (tool, args, calls a day, what a person says to an ask: "approve" or a reject reason)
TRAFFIC: list[tuple[str, dict[str, Any], int, str]] = [
    ("Read", {"file_path": "src/app.py"}, 40, ""),
    ("Grep", {"pattern": "TODO", "path": "src"}, 25, ""),
    ("db_query", {"env": "prod", "sql": "DELETE FROM users"}, 1, ""),
    ("db_query", {"env": "dev", "sql": "SELECT 1"}, 4, ""),
    ("Bash", {"command": "git status"}, 12, "approve"),
    ("Bash", {"command": "git diff"}, 8, "approve"),
    ("Bash", {"command": "ls -la"}, 6, "approve"),
    ("Bash", {"command": "pytest -q"}, 10, "approve"),
    ("Bash", {"command": "git push origin main"}, 2, "approve"),
    ("Bash", {"command": "git push --force origin main"}, 1, "force pushes rewrite history"),
    ("Bash", {"command": "rm -rf ~/projects"}, 1, "outside the build folder"),
]


class WalkingClock:
    """Now, as the week goes: set by the generator, read by every use case."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def generate(folder: Path, *, database_url: str | None = None, seed: int = 7) -> int:
    """Write the week into `folder`'s database (or `database_url`); returns calls made."""
    from gate.app import build_state
    from gate.config.settings import load_settings

    folder.mkdir(parents=True, exist_ok=True)
    url = database_url or f"sqlite:///{(folder / 'gate.db').absolute()}"
    config = folder / "gate.toml"
    if config.resolve() != (HERE / "gate.toml").resolve():  # the live policy, on this database
        text = (HERE / "gate.toml").read_text()
        config.write_text(text.replace('"sqlite:///./gate.db"', f'"{url}"', 1))
    settings = load_settings(HERE / "gate.toml", server={"database_url": url})
    # the week ends as the generator runs, so `--since 7d` replays all of it
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=7, minutes=-10)
    clock = WalkingClock(start)
    state = build_state(settings, clock)
    made = 0
    try:
        made = asyncio.run(_week(state, clock, random.Random(seed)))
    finally:
        if state.decision_log is not None:
            state.decision_log.stop()  # as a clean stop does: every answer written
        state.db.dispose()
    return made


async def _week(state: Any, clock: WalkingClock, rnd: random.Random) -> int:
    from gate.api import v1
    from gate.identity.auth import Principal
    from gate.inputs.bodies import GateCall

    agent = Principal("coding-agent", "agent")
    day_calls = [(tool, args, say) for tool, args, n, say in TRAFFIC for _ in range(n)]
    made = 0
    first = clock.now
    for day in range(7):
        rnd.shuffle(day_calls)
        for n, (tool, args, say) in enumerate(day_calls):
            # a working day: eight hours of calls, a day apart
            spacing = 8 * 3600 // len(day_calls)
            clock.now = first + timedelta(days=day, seconds=n * spacing)
            call = GateCall(
                tool_name=tool, tool_args=args, agent_id="coding-agent", session_id=f"day-{day}"
            )
            body = await v1.gate_answer(state.service, call, agent)
            made += 1
            if say:
                _decide(state, body, say, rnd)
    return made


def _decide(state: Any, body: bytes, say: str, rnd: random.Random) -> None:
    import json

    from gate.base.statuses import Verdict
    from gate.decisions import deciding
    from gate.decisions.acting import Actor

    answer = json.loads(body)
    if answer["decision"] != "ask":
        return
    approver = state.settings.approver(rnd.choice(["alice", "bob"]))
    actor = Actor.of_approver(approver, "web")
    rid = answer["request"]["id"]
    if say == "approve":
        deciding.decide(state.service, rid, actor, Verdict.approve)
    else:
        deciding.decide(state.service, rid, actor, Verdict.reject, say)


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    calls = generate(target)
    print(f"wrote a week of {calls} calls to {target / 'gate.db'}")
