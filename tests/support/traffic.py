"""A week of synthetic approval traffic, written straight into a migrated gate database.

Shared by the stats and suggest tests and by the docs' worked examples
(`python -m tests.support.traffic sqlite:///gate.db` fills a database to try them on). It is
deterministic for a seed, and shaped like a team's week:

* `git_push` to `api`/`main`: always approved, by alice and bob; bob mostly at a glance.
* `Bash` `npm test`: always approved (alice, carol); other `Bash` commands: mixed.
* `pay_invoice`: approved mostly, sometimes rejected (amounts vary: nothing stable).
* `db_drop` on `prod`: always rejected (bob, carol).
* `deploy_api` to `staging`: approved; to `prod`: once rejected.
* a few requests per day expire with nobody answering.

Votes come from the web console or Slack; a Slack vote's card has a `post` delivery sent a
second or two after the request was made (what the glance count measures from).
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlmodel import SQLModel

from gate.base.statuses import new_id
from gate.store.db import Database
from gate.store.tables import ConfirmationRequest, Delivery, Vote

#: (weight, tool, rule, args maker, outcome maker) per kind of call; see the module docstring
Kind = tuple[int, str, str, Any, Any]


@dataclass
class Traffic:
    """What was written: request ids by the pattern they follow, for tests to point at."""

    requests: int = 0
    votes: int = 0
    ids: dict[str, list[str]] = field(default_factory=dict)


def _kinds(rng: random.Random) -> list[Kind]:
    def approve(*people: str) -> Any:
        return lambda: ("approved", [(rng.choice(people), "approve")])

    def reject(*people: str) -> Any:
        return lambda: ("rejected", [(rng.choice(people), "reject")])

    def mixed() -> tuple[str, list[tuple[str, str]]]:
        if rng.random() < 0.3:
            return reject("alice", "carol")()  # type: ignore[no-any-return]
        return approve("alice", "bob", "carol")()  # type: ignore[no-any-return]

    def payment() -> dict[str, Any]:
        vendor = rng.choice(["acme", "initech", "globex"])
        return {"vendor": vendor, "amount": rng.randint(50_001, 90_000)}

    def build() -> dict[str, Any]:
        return {"command": f"rm -rf build/{rng.randint(1, 99)}"}

    def drop() -> dict[str, Any]:
        return {"env": "prod", "table": rng.choice(["users", "orders"])}

    return [
        (30, "git_push", "agent-tools", lambda: {"repo": "api", "branch": "main"},
         approve("alice", "bob")),
        (20, "Bash", "agent-tools", lambda: {"command": "npm test"}, approve("alice", "carol")),
        (15, "Bash", "agent-tools", build, mixed),
        (15, "pay_invoice", "big-payments", payment, mixed),
        (6, "db_drop", "db-writes", drop, reject("bob", "carol")),
        (8, "deploy_api", "deploys", lambda: {"env": "staging"}, approve("bob", "carol")),
        (3, "deploy_api", "deploys", lambda: {"env": "prod"}, approve("alice")),
    ]  # fmt: skip


def week_of_traffic(
    db: Database, *, now: datetime, per_day: int = 40, days: int = 7, seed: int = 7
) -> Traffic:
    """Write `days` days of traffic ending at `now` (about `per_day` asks a day)."""
    rng = random.Random(seed)
    kinds = _kinds(rng)
    weights = [k[0] for k in kinds]
    result = Traffic()
    requests: list[dict[str, Any]] = []
    votes: list[dict[str, Any]] = []
    posts: list[dict[str, Any]] = []
    start = now - timedelta(days=days)
    for _ in range(per_day * days):
        # working hours, weekdays busier: what the heat map should show
        at = start + timedelta(seconds=rng.uniform(0, days * 86400))
        if at.weekday() >= 5 and rng.random() < 0.7:
            continue
        at = at.replace(hour=rng.choice([9, 10, 10, 11, 13, 14, 14, 15, 16, 17, 21]))
        if at > now - timedelta(minutes=5):
            continue
        _, tool, rule, make_args, outcome = rng.choices(kinds, weights)[0]
        row = _request(tool, rule, make_args(), at)
        if rng.random() < 0.05:
            row |= {"status": "expired", "decided_at": row["expires_at"], "decided_via": "timeout"}
            pattern = "expired"
        else:
            status, cast = outcome()
            if (
                tool == "deploy_api"
                and row["tool_args"]["env"] == "prod"
                and not result.ids.get("deploy_prod_rejected")
            ):
                status, cast = "rejected", [("bob", "reject")]
                result.ids["deploy_prod_rejected"] = [row["id"]]
            _decide(rng, row, status, cast, votes, posts)
            pattern = f"{tool}:{status}"
        requests.append(row)
        result.ids.setdefault(pattern, []).append(row["id"])
    _write(db, requests, votes, posts)
    result.requests, result.votes = len(requests), len(votes)
    return result


def _request(tool: str, rule: str, args: dict[str, Any], at: datetime) -> dict[str, Any]:
    return {
        "id": new_id(),
        "tool_name": tool,
        "tool_args": args,
        "agent_id": "claude-code",
        "user_id": "dave",
        "session_id": None,
        "context": {},
        "rule": rule,
        "status": "pending",
        "approvers": [],
        "approvals_required": 1,
        "created_at": at,
        "expires_at": at + timedelta(minutes=15),
        "decided_at": None,
        "decided_by": None,
        "decided_via": None,
        "on_timeout": "reject",
        "options": {},
    }


def _decide(
    rng: random.Random,
    row: dict[str, Any],
    status: str,
    cast: list[tuple[str, str]],
    votes: list[dict[str, Any]],
    posts: list[dict[str, Any]],
) -> None:
    at: datetime = row["created_at"]
    shown = at + timedelta(seconds=rng.uniform(0.5, 2.5))
    for who, verdict in cast:
        via = "slack" if rng.random() < 0.6 else "web"
        # bob approves git pushes at a glance; everyone else reads for a while
        quick = who == "bob" and row["tool_name"] == "git_push"
        wait = rng.uniform(1, 4) if quick else rng.expovariate(1 / 240) + 8
        voted = (shown if via == "slack" else at) + timedelta(seconds=wait)
        if via == "slack":
            posts.append(_post(row["id"], at, shown))
        votes.append(
            {"request_id": row["id"], "approver": who, "verdict": verdict, "via": via, "at": voted}
        )
        row |= {"status": status, "decided_at": voted, "decided_by": who, "decided_via": via}


def _post(request_id: str, at: datetime, sent: datetime) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "channel": "slack",
        "target": "C0APPROVALS",
        "kind": "post",
        "status": "sent",
        "attempts": 1,
        "next_attempt_at": at,
        "created_at": at,
        "sent_at": sent,
    }


def _write(
    db: Database,
    requests: list[dict[str, Any]],
    votes: list[dict[str, Any]],
    posts: list[dict[str, Any]],
) -> None:
    with db.write_conn() as conn:
        for table, rows in (
            (_table(ConfirmationRequest), requests),
            (_table(Vote), votes),
            (_table(Delivery), posts),
        ):
            for start in range(0, len(rows), 500):
                conn.execute(sa.insert(table), rows[start : start + 500])


def _table(model: type[SQLModel]) -> sa.Table:
    return SQLModel.metadata.tables[str(model.__tablename__)]


def main(argv: list[str]) -> int:
    """`python -m tests.support.traffic DATABASE_URL [PER_DAY]`: fill a migrated database."""
    from gate.store.db import upgrade

    upgrade(argv[0])
    db = Database(argv[0])
    try:
        per_day = int(argv[1]) if len(argv) > 1 else 40
        made = week_of_traffic(db, now=datetime.now(UTC), per_day=per_day)
    finally:
        db.dispose()
    sys.stdout.write(f"{made.requests} requests, {made.votes} votes\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
