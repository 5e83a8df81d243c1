"""The decision log: every answer of `POST /v1/gate`, recorded off the hot path.

A call's answer costs it one `deque.append` of what it already holds (the validated call,
the rule's name, the request's id). A thread of this module's own wakes once a window
(`[decision_log].flush_seconds`), masks each call's arguments (`gate.text.untrusted.mask_value`,
the one place that masks), hashes them (`gate.asking.binding.call_hash`) and writes the window's
answers in one multi-row INSERT (`gate.store.decision_log.insert`). So an un-gated call runs
no statement of its own, and a window's rows, however many, cost one transaction.

What a crash can lose is bounded by the window: the answers buffered since the last write
(half a second by default). A clean stop (the app's lifespan) writes them all. An ask is
never lost with them: its request row was committed before the agent got its answer, and
the request records the rule and policy revision too.

When the database cannot be written the rows are kept and tried again each window, up to
`max_buffered`; beyond that new answers are dropped, counted and logged, never silently.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from gate.asking.binding import call_hash
from gate.base.statuses import utcnow
from gate.config.features import DecisionLogSettings
from gate.identity.auth import Principal
from gate.inputs.bodies import GateCall
from gate.policy.rules import Decision
from gate.policy.shadow import ShadowOutcome
from gate.store import decision_log as store
from gate.store.db import Database
from gate.store.records import DecisionRow
from gate.text import untrusted

log = logging.getLogger(__name__)

#: the answers a row records: a grant's allow is "granted" (the rule asked, a grant answered)
ANSWERS = ("allow", "deny", "ask", "granted")


@dataclass(frozen=True, slots=True)
class Noted:
    """One answer as the hot path hands it over: nothing computed yet."""

    at: datetime
    call: GateCall
    submitted_by: str | None
    answer: str
    rule: str | None
    request_id: str | None
    #: what shadow rules would have answered the call
    shadow: tuple[ShadowOutcome, ...] = ()


class DecisionLog:
    """The buffer, its writer thread, and the retention prune."""

    def __init__(
        self,
        *,
        db: Database,
        settings: DecisionLogSettings,
        revision: str,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.db = db
        self.settings = settings
        self.revision = revision
        self.clock = clock
        self._buffer: deque[Noted] = deque()
        self._dropped = 0
        self._failing = False
        self._stop = threading.Event()
        self._flushing = threading.Lock()  # the writer thread, a stop, a test: one at a time
        self._thread: threading.Thread | None = None
        #: rows written by this process (tests and metrics read it)
        self.written = 0

    # -- the hot path --------------------------------------------------------------------

    def answered(
        self, call: GateCall, submitted_by: str | None, decision: Decision, request_id: str | None
    ) -> None:
        """Note the answer `decision` gave `call` (`request_id`: the ask's request, or the
        request a grant approved at once), unless its rule says `log = false`."""
        rule = decision.rule
        if rule is not None and not rule.log:
            return
        answer: str = decision.action or "allow"  # no rule matched: allowed
        if answer == "allow" and request_id is not None:
            answer = "granted"  # the rule asked; a grant answered at once
        self.note(
            call, submitted_by, answer, rule.name if rule else None, request_id, decision.shadow
        )

    def note(
        self,
        call: GateCall,
        submitted_by: str | None,
        answer: str,
        rule: str | None,
        request_id: str | None,
        shadow: tuple[ShadowOutcome, ...] = (),
    ) -> None:
        """Buffer one answer (any thread; no I/O, no copying), with what shadow rules would
        have answered it."""
        if len(self._buffer) >= self.settings.max_buffered:
            self._dropped += 1  # said by the writer thread, which owns the log line
            return
        self._buffer.append(
            Noted(self.clock(), call, submitted_by, answer, rule, request_id, shadow)
        )

    # -- the writer ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread (once)."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="gate-decision-log", daemon=True)
            self._thread.start()

    def stop(self) -> int:
        """Stop the writer and write what is buffered (a clean stop loses nothing)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        written = self.flush()
        if self._buffer:  # the database refused the last batch: nobody is left to retry it
            log.warning(
                "decision log: %d answer(s) could not be written before the stop",
                len(self._buffer),
            )
        return written

    def _run(self) -> None:
        window = self.settings.flush_seconds
        due = time.monotonic() + window
        # Windows start at a fixed rate, however long a write took: what a crash can lose
        # stays one window (plus the write in progress), not one window plus every write.
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            due = max(due + window, time.monotonic())
            try:
                self.flush()
            except Exception:  # a bug here must not end the thread: the next window retries
                log.exception("decision log: writing a batch failed")

    def flush(self) -> int:
        """Write every buffered answer in one transaction; returns how many were written."""
        with self._flushing:
            return self._flush()

    def _flush(self) -> int:
        self._say_dropped()
        taken = [self._buffer.popleft() for _ in range(len(self._buffer))]
        if not taken:
            return 0
        rows = [self.row(noted) for noted in taken]
        try:
            with self.db.write_conn() as conn:
                store.insert(conn, rows)
        except Exception as exc:
            self._keep(taken, exc)
            return 0
        if self._failing:
            log.warning("decision log: writing again (%d answer(s) kept meanwhile)", len(taken))
            self._failing = False
        self.written += len(rows)
        return len(rows)

    def row(self, noted: Noted) -> DecisionRow:
        """The row one answer makes: arguments masked and hashed, whole ones kept a while."""
        call = noted.call
        keep = self.settings.args_retention
        facts = {"args": call.tool_args, "metadata": call.metadata} if keep else None
        return DecisionRow(
            id=None,
            at=noted.at,
            agent_id=call.agent_id,
            session_id=call.session_id,
            user_id=call.user_id,
            submitted_by=noted.submitted_by,
            tool_name=call.tool_name,
            args_hash=call_hash(call.tool_name, call.tool_args),
            masked_args=untrusted.mask_value(call.tool_args),
            facts=facts,
            rule=noted.rule,
            policy_revision=self.revision,
            answer=noted.answer,
            request_id=noted.request_id,
            shadow=[outcome.as_dict() for outcome in noted.shadow] or None,
        )

    def _keep(self, taken: list[Noted], exc: Exception) -> None:
        """Put a batch that could not be written back in front, as far as there is room."""
        room = max(0, self.settings.max_buffered - len(self._buffer))
        kept = taken[:room]
        self._buffer.extendleft(reversed(kept))
        self._dropped += len(taken) - len(kept)
        if not self._failing:
            log.warning(
                "decision log: cannot write %d answer(s) (%s); keeping them and trying again "
                "every %.1f s",
                len(taken),
                type(exc).__name__,
                self.settings.flush_seconds,
            )
            self._failing = True

    def _say_dropped(self) -> None:
        dropped, self._dropped = self._dropped, 0
        if dropped:
            log.warning(
                "decision log: %d answer(s) dropped: the buffer held max_buffered = %d while "
                "the database could not be written",
                dropped,
                self.settings.max_buffered,
            )

    # -- retention -----------------------------------------------------------------------

    def prune(self, now: datetime | None = None) -> tuple[int, int]:
        """Delete rows past `retention` and clear whole arguments past `args_retention`."""
        now = now or self.clock()
        older_than = now - self.settings.retention
        facts_before = now - self.settings.args_retention
        deleted = cleared = 0
        while True:
            with self.db.write_conn() as conn:
                more, wiped = store.prune(conn, older_than=older_than, facts_before=facts_before)
            deleted, cleared = deleted + more, cleared + wiped
            if more < store.PRUNE_BATCH and wiped < store.PRUNE_BATCH:
                return deleted, cleared


def read_page(
    db: Database,
    principal: Principal,
    *,
    filters: dict[str, str | None],
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: int | None = None,
    limit: int = 50,
) -> tuple[list[DecisionRow], int | None]:
    """A page of the log, newest first, for an approver or admin (403 for an agent)."""
    principal.require("approver", "admin")
    with db.read_conn() as conn:
        return store.page(
            conn,
            filters=filters,
            since=_utc(since),
            until=_utc(until),
            cursor=cursor,
            limit=limit,
        )


def _utc(moment: datetime | None) -> datetime | None:
    """`moment` in UTC; without an offset it is read as UTC (as every time gate writes is).
    A time at the edge of the calendar whose UTC falls outside it is the edge itself."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        edge = datetime.min if moment.year == datetime.min.year else datetime.max
        return edge.replace(tzinfo=UTC)
