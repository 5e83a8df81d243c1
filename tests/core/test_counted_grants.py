"""Pattern grants and counted grants in the core: what a pattern covers, how uses are taken
and end a grant, what a counted grant costs a call, and calls racing for the last use
(threads on one service: SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gate.base.statuses import GrantStatus, Verdict
from gate.decisions import audit, deciding, grants
from gate.decisions.grants import GrantAsk
from gate.decisions.service import GateService
from gate.inputs.bodies import GateCall
from gate.store import decisions as store
from gate.store.tables import Grant
from tests.core.conftest import AGENT, Clock, approver, ask, service_of
from tests.support import config as cfg
from tests.support.sql_counter import counting, per_database

DEPLOYS: dict[str, Any] = {
    "name": "deploys",
    "tools": ["deploy"],
    "approvers": ["group:finance"],
    "timeout": "10m",
    "grant_scopes": ["call", "pattern"],
    "grant_pin": ["repo"],
    "max_grant_uses": 5,
}


@pytest.fixture
def service(db_url: str, clock: Clock) -> Iterator[GateService]:
    data = cfg.settings_data(db_url)
    data["rules"] = [DEPLOYS, *data["rules"]]
    svc = service_of(data, clock)
    yield svc
    svc.db.dispose()


def granted(service: GateService, asked: GrantAsk, **args: Any) -> str:
    """A deploy asked with `args`, approved by alice with the grant `asked`."""
    rid = ask(service, tool_name="deploy", tool_args=args)
    result = deciding.decide(service, rid, approver(service, "alice"), Verdict.approve, grant=asked)
    assert result.changed and result.refusal is None, result
    return rid


def answer(service: GateService, **args: Any) -> str:
    return service.submit(GateCall(tool_name="deploy", tool_args=args), AGENT).decision.action


def the_grant(service: GateService) -> Grant:
    with service.db.read() as session:
        (grant,) = grants.list_grants(session, active_only=False, now=service.clock())
        return grant


def test_a_pattern_grant_covers_the_pinned_values_only(service: GateService) -> None:
    granted(service, GrantAsk("pattern", "30m", pin=("env",)), repo="web", env="prod", tag="v1")
    assert answer(service, repo="web", env="prod", tag="v2") == "allow"  # tag is free
    assert answer(service, repo="api", env="prod", tag="v1") == "ask"  # repo: the rule pins it
    assert answer(service, repo="web", env="dev", tag="v1") == "ask"  # env: alice pinned it
    assert answer(service, repo="web", tag="v1") == "ask"  # a pinned argument left out
    grant = the_grant(service)
    assert grant.pinned == {"repo": "web", "env": "prod"}
    assert (grant.max_uses, grant.uses) == (5, 1)  # the rule's most, as nobody chose fewer


def test_pinned_values_compare_as_json_not_as_python(service: GateService) -> None:
    granted(service, GrantAsk("pattern", "30m", uses=3), repo=1)
    assert answer(service, repo=True) == "ask"  # True == 1 in Python
    assert answer(service, repo=1.5) == "ask"
    assert answer(service, repo="1") == "ask"
    assert answer(service, repo=1) == "allow"


def test_the_last_use_ends_the_grant_as_used_up(service: GateService) -> None:
    rid = granted(service, GrantAsk("call", "30m", uses=2), repo="web")
    assert [answer(service, repo="web") for _ in range(3)] == ["allow", "allow", "ask"]
    grant = the_grant(service)
    assert (grant.status, grant.uses, grants.uses_left(grant)) == ("used_up", 2, 0)
    assert grant.ended_at is not None and grant.ended_by is None
    events = audit.trail(service.db, rid)
    assert [e.kind for e in events][-2:] == ["grant_created", "grant_used_up"]
    assert events[-1].detail["uses"] == 2
    assert audit.verify(service.db) == []  # the event joined the approving request's chain


def test_a_use_read_before_another_call_took_it_is_not_taken(service: GateService) -> None:
    granted(service, GrantAsk("call", "30m", uses=1), repo="web")
    stale = the_grant(service)  # what a second call read, with its one use left
    assert (stale.status, stale.uses) == ("active", 0)
    assert answer(service, repo="web") == "allow"  # the first call takes it
    with service.db.write() as session:
        taken = store.take_grant_use(
            session, stale.id, now=service.clock(), used_up=GrantStatus.used_up
        )
    assert taken is None
    assert the_grant(service).uses == 1


@pytest.mark.parametrize("uses", [1, 3])
def test_calls_racing_for_the_last_uses_get_exactly_that_many(
    service: GateService, clock: Clock, db_url: str, uses: int
) -> None:
    granted(service, GrantAsk("pattern", "30m", uses=uses), repo="web")
    # a second service on the same database, with its own engine and connections, as another
    # replica would have: on SQLite the two contend through the file's lock, not one in-process
    # writer lock
    data = cfg.settings_data(db_url)
    data["rules"] = [DEPLOYS, *data["rules"]]
    replica = service_of(data, clock)
    callers = 8
    start = threading.Barrier(callers)
    answers: list[str] = []
    failures: list[BaseException] = []

    def call(n: int) -> None:
        try:
            start.wait()
            answers.append(answer((service, replica)[n % 2], repo="web", tag=f"v{n}"))
        except BaseException as exc:  # reported below: a thread's error is otherwise lost
            failures.append(exc)

    threads = [threading.Thread(target=call, args=(n,)) for n in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    replica.db.dispose()
    assert not failures, failures
    assert sorted(answers) == ["allow"] * uses + ["ask"] * (callers - uses)
    grant = the_grant(service)
    assert (grant.status, grant.uses) == ("used_up", uses)
    events = audit.trail(service.db, grant.request_id)
    assert [e.kind for e in events].count("grant_used_up") == 1


def test_what_a_call_a_counted_grant_covers_costs(service: GateService) -> None:
    granted(service, GrantAsk("call", "30m", uses=3), repo="web")
    # the lookup, who approved it, the use taken (a compare-and-set, at once: an uncounted
    # grant's count goes with the batch), the request and its audit event (PostgreSQL: those
    # two as one statement). SQLite: as many as an uncounted grant; PostgreSQL: one more.
    with counting(service.db.engine) as tally:
        assert answer(service, repo="web") == "allow"
    expected = per_database(service.db.engine, sqlite=5, postgres=4)
    assert (tally.count, tally.transactions) == (expected, 1), str(tally)
    # the last use also ends it, in the approving request's chain: that request locked (SQLite
    # then reads the chain's head; PostgreSQL's lock read it, and sends the batch before it),
    # and the event. Only the last use pays this.
    answer(service, repo="web")
    with counting(service.db.engine) as tally:
        assert answer(service, repo="web") == "allow"
    expected = per_database(service.db.engine, sqlite=8, postgres=6)
    assert (tally.count, tally.transactions) == (expected, 1), str(tally)


def test_a_quorums_grant_is_the_narrowest_of_its_votes() -> None:
    from datetime import timedelta

    from gate.decisions.grants import GrantSpec, agreed

    half, hour = timedelta(minutes=30), timedelta(hours=1)
    pattern = GrantSpec("pattern", hour, 5, ("repo",))
    narrower = GrantSpec("pattern", half, 2, ("repo", "env"))
    # the shortest time, the fewest uses, every argument either pinned
    assert agreed([pattern, narrower]) == GrantSpec("pattern", half, 2, ("repo", "env"))
    # uncounted beside counted: counted
    assert agreed([GrantSpec("call", hour), GrantSpec("call", hour, 3)]) == GrantSpec(
        "call", hour, 3
    )
    # a pattern beside a session grant: neither is inside the other, only the same call is
    assert agreed([pattern, GrantSpec("session", hour)]) == GrantSpec("call", hour, 5)
    # one vote without a grant: none
    assert agreed([pattern, None]) is None
