"""Chaos harness: real `gate serve` processes, a hook-like workload, SIGKILLs at random points.

The workload is what agents and approvers do: submit (with an idempotency key, retried on
any connection error, as a hook would), long-poll for the verdict from whichever replica
answers, and decide from whichever replica answers (sometimes double-clicking on two
replicas at once). Meanwhile a chaos thread SIGKILLs a random replica and starts it again.
At the end `check()` compares the database with what every client saw.

Delivery is at-least-once by design: a replica killed after a chat platform accepted a
post but before it recorded the post as sent leaves its lease to run out, and another
replica posts again. There is no idempotency key in chat.postMessage to prevent that. The
harness therefore asserts "exactly once" for every card whose post row was attempted once,
and counts (and prints) the duplicates that trace back to a post retaken after a kill.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import sqlalchemy as sa

from gate.store.db import normalise_url
from tests.support import config as cfg
from tests.support.fake_slack import CHANNEL, FakeSlack
from tests.support.http import TLS
from tests.support.servers import ServerProcess, wait_until

TERMINAL = {"approved", "rejected", "expired", "cancelled"}
TERMINAL_AUDIT = TERMINAL
APPROVERS = {"alice": cfg.ALICE, "bob": cfg.BOB, "carol": cfg.CAROL}
#: every request gets a card on both channels the harness configures
TARGETS = {("log", "log"), ("slack", CHANNEL)}
#: how long a client keeps retrying one call through kills before the harness gives up
CALL_DEADLINE = 60.0


@dataclass
class Plan:
    """One request's script: what is submitted, who decides, and the status that must win."""

    n: int
    tool: str
    expected: str
    votes: list[tuple[str, str]] = field(default_factory=list)  # (approver, verdict)
    double_click: bool = False
    cancel: bool = False


@dataclass
class Tally:
    """Counters every thread adds to (under the lock)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    kills: int = 0
    transport_errors: int = 0
    decisions_ok: int = 0
    decisions_conflict: int = 0
    server_errors: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    accepted_votes: set[tuple[str, str]] = field(default_factory=set)

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + n)


def make_plans(count: int, rng: random.Random) -> list[Plan]:
    """A mix of single decisions, quorum votes, expiries, timeouts that approve and cancels."""
    plans = []
    for n in range(count):
        roll = rng.random()
        if roll < 0.40:
            approver = rng.choice(list(APPROVERS))
            verdict = "approve" if rng.random() < 0.7 else "reject"
            expected = "approved" if verdict == "approve" else "rejected"
            plan = Plan(n, f"ask_c{n}", expected, [(approver, verdict)], rng.random() < 0.3)
        elif roll < 0.55:
            bob = "approve" if rng.random() < 0.75 else "reject"
            expected = "approved" if bob == "approve" else "rejected"
            plan = Plan(n, f"wire_c{n}", expected, [("alice", "approve"), ("bob", bob)])
        elif roll < 0.65:
            verdict = rng.choice(["approve", "reject"])
            expected = "approved" if verdict == "approve" else "rejected"
            plan = Plan(n, f"deploy_c{n}", expected, [("carol", verdict)], rng.random() < 0.3)
        elif roll < 0.80:
            plan = Plan(n, f"ephemeral_c{n}", "expired")
        elif roll < 0.88:
            plan = Plan(n, f"lenient_c{n}", "approved")
        else:
            plan = Plan(n, f"ask_c{n}", "cancelled", cancel=True)
        plans.append(plan)
    return plans


class Chaos:
    """Drive `plans` against `servers` while killing and restarting them."""

    def __init__(
        self,
        servers: list[ServerProcess],
        db_url: str,
        slack: FakeSlack,
        *,
        seed: int,
        kill_every: tuple[float, float],
    ) -> None:
        self.servers = servers
        self.urls = [s.url for s in servers]
        self.db_url = db_url
        self.slack = slack
        self.rng = random.Random(seed)
        self.kill_every = kill_every
        self.tally = Tally()
        self.ids: dict[int, str] = {}
        self.seen: dict[int, dict[str, Any]] = {}
        self._stop = threading.Event()
        # One pooled client for every thread: building an httpx.Client costs ~90 ms of CPU
        # (its TLS context), which with hundreds of threads would throttle the workload.
        self.http = httpx.Client(
            timeout=15,
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=300),
            verify=TLS,
        )

    # -- clients --------------------------------------------------------------------------

    def call(self, method: str, path: str, token: str, body: Any = None) -> httpx.Response:
        """One API call retried through kills, on whichever replica answers."""
        deadline = time.monotonic() + CALL_DEADLINE
        while True:
            url = random.choice(self.urls)
            try:
                r = self.http.request(
                    method,
                    url + path,
                    json=body,
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=15,
                )
            except httpx.TransportError:
                self.tally.add("transport_errors")
                if time.monotonic() > deadline:
                    raise
                time.sleep(random.uniform(0.05, 0.2))
                continue
            if r.status_code >= 500:
                with self.tally.lock:
                    self.tally.server_errors.append(f"{method} {path}: {r.status_code} {r.text}")
                if time.monotonic() > deadline:
                    return r
                time.sleep(0.1)
                continue
            return r

    def submit(self, plan: Plan) -> str:
        body = {
            "tool_name": plan.tool,
            "tool_args": {"n": plan.n},
            "idempotency_key": f"chaos-{plan.n}",
            "summary": f"chaos request {plan.n}",
        }
        r = self.call("POST", "/v1/gate", cfg.AGENT, body)
        assert r.status_code == 200, r.text
        data = r.json()
        assert data["decision"] == "ask", data
        request_id: str = data["request"]["id"]
        return request_id

    def wait(self, plan: Plan) -> None:
        """A hook's loop: long-poll until final, reconnecting on any error."""
        request_id = self.ids[plan.n]
        while True:
            r = self.call("GET", f"/v1/requests/{request_id}/wait?timeout=5", cfg.AGENT)
            assert r.status_code == 200, r.text
            body = r.json()
            if body["status"] != "pending":
                self.seen[plan.n] = body
                return

    def decide(self, plan: Plan) -> None:
        request_id = self.ids[plan.n]
        time.sleep(random.uniform(0.05, 1.5))
        if plan.cancel:
            r = self.call("POST", f"/v1/requests/{request_id}/cancel", cfg.AGENT, {})
            self._record(plan, "agent", r)
            return
        for approver, verdict in plan.votes:
            path = f"/v1/requests/{request_id}/decision"
            body = {"verdict": verdict, "comment": f"chaos {plan.n}"}
            token = APPROVERS[approver]
            if plan.double_click:  # the same click arriving twice, on two replicas at once
                with ThreadPoolExecutor(2) as two:
                    clicks = [two.submit(self.call, "POST", path, token, body) for _ in range(2)]
                    for click in clicks:
                        self._record(plan, approver, click.result())
            else:
                self._record(plan, approver, self.call("POST", path, token, body))

    def _record(self, plan: Plan, approver: str, r: httpx.Response) -> None:
        if r.status_code == 200:
            self.tally.add("decisions_ok")
            if not plan.cancel:
                with self.tally.lock:
                    self.tally.accepted_votes.add((self.ids[plan.n], approver))
            return
        code = r.json().get("error", {}).get("code") if r.content else None
        # A retried click whose first try committed before a kill, a double click, or a
        # vote that lost the race to a reject: the documented answers, nothing recorded twice.
        if r.status_code == 409 and code in ("already_decided", "already_voted"):
            self.tally.add("decisions_conflict")
            return
        with self.tally.lock:
            self.tally.unexpected.append(f"{plan.tool}: {r.status_code} {r.text}")

    # -- chaos ----------------------------------------------------------------------------

    def _killer(self) -> None:
        while not self._stop.wait(self.rng.uniform(*self.kill_every)):
            server = self.rng.choice(self.servers)
            server.kill()  # SIGKILL: no shutdown hook runs
            self.tally.add("kills")
            time.sleep(self.rng.uniform(0.0, 0.5))
            server.start()

    def run(self, plans: list[Plan], *, submit_gap: tuple[float, float]) -> None:
        """Submit every plan, wait and decide for each, with the killer running throughout."""
        killer = threading.Thread(target=self._killer, daemon=True)
        killer.start()
        futures: list[Future[None]] = []
        try:
            with ThreadPoolExecutor(max_workers=len(plans) * 2 + 4) as pool:
                for plan in plans:
                    self.ids[plan.n] = self.submit(plan)
                    futures.append(pool.submit(self.wait, plan))
                    if plan.votes or plan.cancel:
                        futures.append(pool.submit(self.decide, plan))
                    time.sleep(self.rng.uniform(*submit_gap))
                for f in futures:
                    f.result(timeout=180)
        finally:
            self._stop.set()
            killer.join(timeout=60)
            self.http.close()
        for server in self.servers:  # the last kill may have left one down
            if server.proc is None or server.proc.poll() is not None:
                server.start()

    # -- invariants -----------------------------------------------------------------------

    def settle(self, timeout: float) -> None:
        """Wait until the outbox has nothing left to send (a dead replica's lease may run)."""
        engine = sa.create_engine(normalise_url(self.db_url))
        try:

            def drained() -> bool:
                with engine.connect() as conn:
                    return not conn.execute(
                        sa.text("SELECT count(*) FROM delivery WHERE status = 'pending'")
                    ).scalar()

            wait_until(drained, timeout=timeout, interval=0.5)
        finally:
            engine.dispose()

    def check(self, plans: list[Plan], log_text: Callable[[], str]) -> dict[str, int]:
        """Assert every invariant; return the counts to print."""
        t = self.tally
        assert not t.server_errors, t.server_errors[:5]
        assert not t.unexpected, t.unexpected[:5]
        assert len(self.seen) == len(plans)
        engine = sa.create_engine(normalise_url(self.db_url))
        try:
            with engine.connect() as conn:
                rows = conn.execute(
                    sa.text("SELECT id, status, decided_by, tool_name FROM confirmation_request")
                ).all()
                audit = conn.execute(sa.text("SELECT request_id, kind FROM audit_event")).all()
                votes = conn.execute(sa.text("SELECT request_id, approver FROM vote")).all()
                deliveries = conn.execute(
                    sa.text(
                        "SELECT request_id, channel, target, kind, status, attempts, message_ref "
                        "FROM delivery"
                    )
                ).all()
        finally:
            engine.dispose()

        stored = {r.id: r for r in rows}
        # one request per plan: idempotent submits retried through kills created no twins
        assert len(stored) == len(plans)
        for plan in plans:
            rid = self.ids[plan.n]
            row = stored[rid]
            assert row.status == plan.expected, (plan, row)
            seen = self.seen[plan.n]
            assert (seen["status"], seen["decided_by"]) == (row.status, row.decided_by)

        kinds = Counter((a.request_id, a.kind) for a in audit)
        for rid, row in stored.items():
            assert kinds[(rid, "created")] == 1, rid
            terminal = sum(kinds[(rid, k)] for k in TERMINAL_AUDIT)
            assert terminal == 1 and kinds[(rid, row.status)] == 1, (rid, row.status)

        vote_pairs = Counter((v.request_id, v.approver) for v in votes)
        assert max(vote_pairs.values(), default=1) == 1  # never doubled
        assert t.accepted_votes <= set(vote_pairs)  # every acknowledged vote is stored
        for plan in plans:
            rid = self.ids[plan.n]
            n_votes = sum(1 for (r, _a) in vote_pairs if r == rid)
            if plan.cancel or not plan.votes:
                assert n_votes == 0, plan
            elif plan.expected == "approved":
                assert n_votes == len(plan.votes), plan

        posts: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
        for d in deliveries:
            assert d.status == "sent", d  # nothing dead, nothing left behind
            if d.kind == "post":
                posts[(d.request_id, d.channel, d.target)].append(d)
        retaken = 0
        slack_posts = self._slack_posts()
        log_posts = _log_posts(log_text())
        for rid in stored:
            for channel, target in TARGETS:
                [post] = posts[(rid, channel, target)]  # exactly one post row per target
                seen_posts = slack_posts[rid] if channel == "slack" else log_posts[rid]
                if post.attempts == 1:
                    assert seen_posts == 1, (rid, channel, seen_posts)
                else:  # taken over after a kill: at least once, at most once per attempt
                    assert 1 <= seen_posts <= post.attempts, (rid, channel, post.attempts)
                    retaken += seen_posts > 1
            ref = posts[(rid, "slack", CHANNEL)][0].message_ref  # "<channel>:<ts>"
            card = self.slack.messages[(CHANNEL, ref.rsplit(":", 1)[1])]
            assert card.updates >= 1 and stored[rid].status in card.text.lower(), card.text

        expiries = sum(1 for r in rows if r.status == "expired")
        timeouts = sum(1 for r in rows if r.status == "approved" and r.decided_by == "gate")
        return {
            "kills": t.kills,
            "requests": len(rows),
            "decisions": t.decisions_ok,
            "refused_repeats": t.decisions_conflict,
            "expiries": expiries,
            "timeout_approvals": timeouts,
            "votes": len(votes),
            "client_reconnects": t.transport_errors,
            "cards": sum(slack_posts.values()) + sum(log_posts.values()),
            "duplicate_posts_after_kill": retaken,
        }

    def _slack_posts(self) -> Counter[str]:
        found: Counter[str] = Counter()
        for message in self.slack.posted():
            first = message.history[0] if message.history else message.blocks
            match = re.search(r"Request `?([0-9A-Z]{26})", json.dumps(first))
            assert match, first
            found[match.group(1)] += 1
        return found


def _log_posts(text: str) -> Counter[str]:
    """Cards the log channel wrote (`card {...}`), by request id."""
    found: Counter[str] = Counter()
    for match in re.finditer(r" card (\{.*\})$", text, re.MULTILINE):
        found[json.loads(match.group(1))["request"]] += 1
    return found
