"""History-aware conditions at run time: whose calls count, which calls count, and when they
are read and written (the terms are `gate.policy.history`, the SQL `gate.store.counted`).

Whose calls: the caller is the **token** that sent the call (`Principal.name`), never the
`agent_id` in the body. `agent_id` is the agent's own claim: a history keyed on it would reset
each time the agent named itself anew, so a count or a budget could be dodged by varying it.
Agents that must be counted apart get a token each; several agents sharing one token share
one count (the stricter reading). The session variants key on the token and the call's
`session_id`, so one token cannot spend or fill another token's session.

Which calls: a call let through at once (an allow rule, or no rule), and an asked call from
the moment it is asked (in flight: a pending request counts, so ten asks sent together
cannot each see an empty budget) for as long as its request is pending or approved (by a
person, a grant or `on_timeout = "approve"`), unless the agent reports it did not run it.
A denied call, and an ask rejected, expired or cancelled, count nothing: no money was spent.
The call being judged is not in its own history: add it (`+ args.amount`).

When: only calls of tools some history term names are written (one INSERT: in the ask's own
transaction, or in the judging one for an allowed call), and only a call a rule with history
is tried on reads (one SELECT per scope used). A policy without history sends nothing more
than before (`tests/core/test_history.py` counts the statements).

Two calls of one caller judged at the same instant take turns (`judged`: the read and the
write in one transaction holding `counted.lock`), so a budget is not overshot by calls let
through together. See docs/history.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

from sqlalchemy.exc import SQLAlchemyError

from gate.base.errors import ConfigError
from gate.config.settings import Settings
from gate.identity.auth import Principal
from gate.inputs.bodies import GateCall
from gate.policy import cases, history
from gate.policy.rules import Decision, Policy
from gate.store import counted
from gate.store.db import Database
from gate.store.records import RequestRow


class Judging(Protocol):
    """What `judged` needs of the service (`GateService`; named apart: no import circle)."""

    policy: Policy
    db: Database
    clock: Callable[[], datetime]

    def judge(
        self,
        call: GateCall,
        principal: Principal | None = None,
        reader: history.Reader | None = None,
    ) -> Decision: ...


def caller_of(principal_name: str | None) -> str:
    """Whose history a call reads and adds to: its token's name (see the module docstring)."""
    return principal_name or ""


def reader(
    db: Database,
    clock: Callable[[], datetime],
    *,
    caller: str,
    session_id: str | None,
    conn: Any = None,
) -> history.Reader:
    """Reads the values of terms for one call of `caller` (in `session_id`), on `conn` (a
    transaction holding the caller's lock) or else on a connection of its own."""

    def read(terms: tuple[history.Term, ...]) -> Mapping[history.Term, history.Number]:
        now = clock()
        values: dict[history.Term, history.Number] = {}
        for per_session in (False, True):
            mine = [t for t in terms if (t.scope == "session") == per_session]
            if not mine:
                continue
            if per_session and not session_id:
                raise ValueError("the call names no session_id, so its session cannot be counted")
            windows = [
                counted.Window(now - t.window, t.arg if t.kind == "sum" else None) for t in mine
            ]
            query = partial(
                counted.tallies,
                caller=caller,
                session_id=session_id,
                windows=windows,
                per_session=per_session,
            )
            if conn is not None:
                found = query(conn)
            else:
                with db.read_conn() as own:
                    found = query(own)
            for i, term in enumerate(mine):
                total = sum(tally.values[i] for tally in found if term.matches(tally.tool_name))
                values[term] = _whole(total)
        return values

    return read


def _whole(total: history.Number) -> history.Number:
    return int(total) if float(total).is_integer() else total


def touches(policy: Policy, tool_name: str) -> bool:
    """Whether judging a call of `tool_name` may read or write history (no I/O: when false,
    policy runs on the event loop as before)."""
    return bool(policy.history_terms) and policy.uses_history(tool_name)


def judged(service: Judging, call: GateCall, principal: Principal) -> Decision:
    """`service.judge(call)`; for a call history touches, in one write transaction that holds
    the caller's history (`counted.lock`), reads it, and writes the call when policy lets it
    through at once: two calls of one caller judged together take turns, so a budget is not
    overshot by calls allowed at the same instant."""
    policy = service.policy
    if not touches(policy, call.tool_name):
        return service.judge(call, principal)
    caller = caller_of(principal.name)
    try:
        return _judged_locked(service, call, principal, caller)
    except SQLAlchemyError as exc:
        # the database cannot be reached (or failed): the rules with history terms give their
        # fail-closed answer, said on the request, as for any condition that fails
        return service.judge(call, principal, _failing(exc))


def _failing(exc: Exception) -> history.Reader:
    def read(terms: tuple[history.Term, ...]) -> Mapping[history.Term, history.Number]:
        raise exc

    return read


def _judged_locked(service: Judging, call: GateCall, principal: Principal, caller: str) -> Decision:
    policy = service.policy
    with service.db.write_conn() as conn:
        counted.lock(conn, caller)
        read = reader(
            service.db, service.clock, caller=caller, session_id=call.session_id, conn=conn
        )
        decision = service.judge(call, principal, read)
        if decision.action in ("allow", None) and policy.counts(call.tool_name):
            record(
                conn,
                caller=caller,
                session_id=call.session_id,
                tool_name=call.tool_name,
                args=call.tool_args,
                request_id=None,
                now=service.clock(),
            )
    return decision


def record_asked(
    session: object, policy: Policy, req: RequestRow, principal_name: str, now: datetime
) -> None:
    """Write an asked call (its request just inserted, or approved by a grant) in the ask's
    transaction, when a history term counts its tool."""
    if policy.counts(req.tool_name):
        record(
            session,
            caller=caller_of(principal_name),
            session_id=req.session_id,
            tool_name=req.tool_name,
            args=req.tool_args,
            request_id=req.id,
            now=now,
        )


def record(
    conn: object,
    *,
    caller: str,
    session_id: str | None,
    tool_name: str,
    args: Mapping[str, Any],
    request_id: str | None,
    now: datetime,
) -> None:
    """Write one counted call in the transaction `conn` (an ask's session, or its own)."""
    counted.record(
        conn,
        caller=caller,
        session_id=session_id,
        tool_name=tool_name,
        args=args,
        request_id=request_id,
        at=now,
    )


def prune(db: Database, settings: Settings, now: datetime) -> int:
    """Delete counted calls older than `server.history_max_window` (no term may look further
    back), in batches each its own short transaction; how many."""
    deleted = 0
    while True:
        with db.write_conn() as conn:
            batch = counted.prune(conn, older_than=now - settings.server.history_max_window)
        deleted += batch
        if batch < counted.PRUNE_BATCH:
            return deleted


def explain_reader(settings: Settings, policy: Policy, body: Mapping[str, Any]) -> Any:
    """Where `gate policy explain` reads history terms: the payload's `history` (terms as
    written -> values, as a case supplies them), else the database for the token named in
    `caller` (the same read the server does), else nowhere (such a rule fails closed)."""
    if not policy.history_terms:
        return None
    supplied = body.get("history")
    if supplied is not None:
        if not isinstance(supplied, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in supplied.values()
        ):
            raise ConfigError("`history` must map terms to numbers", key="history")
        return cases.fixture_reader(
            [(cases.term_of(str(k), "payload", "history"), v) for k, v in supplied.items()]
        )
    caller = body.get("caller")
    if not isinstance(caller, str) or not caller:
        return None
    session_id = body.get("session_id")
    return reader(
        Database(settings.server.database_url),
        lambda: datetime.now(UTC),
        caller=caller,
        session_id=session_id if isinstance(session_id, str) else None,
    )
