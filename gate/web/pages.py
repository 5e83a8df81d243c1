"""The read-only console pages: the queue (kept live by server-sent events), the history of
finished requests with its exports, and the stats charts."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import date
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from gate.config.settings import ApproverSettings
from gate.identity.auth import Principal
from gate.insights import fatigue
from gate.store import listing
from gate.web import calls, charts, queries, stats_page
from gate.web.console import Console, span

QUEUE_LIMIT = 200
HISTORY_PAGE = 50
#: the largest history page a `limit=` may ask for
MAX_HISTORY_PAGE = 500
#: an SSE comment this often keeps proxies from closing an idle stream (most cut at 30-60 s)
KEEPALIVE_SECONDS = 15.0
OUTCOMES = ["approved", "rejected", "expired", "cancelled", "pending"]
#: an open event stream re-reads its sign-in before sending, at most this often
SIGN_IN_RECHECK_SECONDS = 1.0
#: stands for "no event for KEEPALIVE_SECONDS" in the event stream's loop
_KEEPALIVE = object()


class Pages:
    """The queue, history and stats pages, sharing the console's plumbing."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.state = console.state

    def queue_views(
        self, me: ApproverSettings, groups: frozenset[str] = frozenset()
    ) -> list[dict[str, Any]]:
        """Pending requests, newest first, each with whether `me` (in these single sign-on
        `groups`) may decide it."""
        principal = Principal(me.name, "approver", me)
        views, _ = self.state.service.list(principal, status="pending", limit=QUEUE_LIMIT)
        rows = []
        for view in views:
            refusal = self.console.refusal(view, me, groups)
            voted = any(v.approver == me.name for v in view.votes)
            call = calls.shown(view)
            summary, summary_hidden = calls.summary_cut(view.summary)
            rows.append(
                {
                    "view": view,
                    "mine": refusal is None and not voted,
                    "voted": voted,
                    # gate's reading of the call leads the row; the agent's words follow it
                    "call": call,
                    "preview": calls.preview(call),
                    "summary": summary,
                    "summary_hidden": summary_hidden,
                }
            )
        return rows

    def queue(self, request: Request) -> Response:
        """Pending requests, the ones the approver may decide marked."""
        return self._queue(request, rows_only=False)

    def queue_rows(self, request: Request) -> Response:
        """The queue's rows alone, which the live page fetches when an event arrives."""
        return self._queue(request, rows_only=True)

    def _queue(self, request: Request, *, rows_only: bool) -> Response:
        console = self.console
        session, signed = console.signed(request)
        if signed is None:
            if rows_only:
                return Response("sign in first", status_code=401, media_type="text/plain")
            return console.to_login(request)
        me, template = signed.approver, "_queue_rows.html" if rows_only else "queue.html"
        rows = self.queue_views(me, signed.groups)
        # what a batch form that could not be used left for the queue (`gate.web.batch`)
        flash = None if rows_only else session.notice_for(request.url.path)
        return console.render(request, session, template, me=me, rows=rows, flash=flash)

    async def events(self, request: Request) -> Response:
        """Server-sent events: one message per created / changed / final request, for as
        long as the sign-in that opened the stream lasts."""
        _, me = await self.console.who_async(request)
        if me is None:
            return Response("sign in first", status_code=401, media_type="text/plain")

        async def signed_in() -> bool:
            _, still = await self.console.who_async(request)
            return still is not None

        return StreamingResponse(
            self._event_stream(signed_in),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def _event_stream(self, signed_in: Callable[[], Awaitable[bool]]) -> AsyncIterator[str]:
        """The events, sent only while `signed_in()` still holds: a stream is long-lived, and
        one opened with a cookie that was since signed out (or grew too old) must end as
        every page then refuses it. Checked before an event or keep-alive at most once per
        `SIGN_IN_RECHECK_SECONDS`, so a busy queue costs each stream one read a second."""
        checked = time.monotonic()
        inbox: asyncio.Queue[Any] = asyncio.Queue()

        async def pump() -> None:
            async for event in self.state.notifier.stream():
                inbox.put_nowait(event)
            inbox.put_nowait(None)

        task = asyncio.create_task(pump())
        await asyncio.sleep(0)  # let the pump subscribe before the page learns it is live
        try:
            yield "retry: 2000\n: connected\n\n"
            while True:
                try:
                    event = await asyncio.wait_for(inbox.get(), KEEPALIVE_SECONDS)
                except TimeoutError:
                    event = _KEEPALIVE
                if event is None:
                    return
                if time.monotonic() - checked >= SIGN_IN_RECHECK_SECONDS:
                    if not await signed_in():
                        return
                    checked = time.monotonic()
                if event is _KEEPALIVE:
                    yield ": keep-alive\n\n"
                    continue
                data = json.dumps({"id": event.request_id, "kind": event.kind})
                yield f"event: {event.kind}\ndata: {data}\n\n"
        finally:
            task.cancel()

    def history(self, request: Request) -> Response:
        """Finished requests with filters and paging."""
        console = self.console
        session, me = console.who(request)
        if me is None:
            return console.to_login(request)
        try:
            filters = parse_filters(request)
        except ValueError as exc:
            return console.error(request, session, me, 400, "Bad filter", str(exc))
        cursor = request.query_params.get("cursor") or None
        limit = _page_size(request.query_params.get("limit", ""))
        db = self.state.db
        rows, next_cursor = listing.history_page(db, filters, limit=limit, cursor=cursor)
        args = filters.query_args()
        if limit != HISTORY_PAGE:
            args["limit"] = str(limit)
        next_args = urlencode({**args, "cursor": next_cursor}) if next_cursor else None
        return console.render(
            request,
            session,
            "history.html",
            me=me,
            rows=rows,
            filters=filters,
            statuses=listing.FINAL_STATUSES,
            known=listing.distinct_values(db),
            approvers=[a.name for a in console.settings.approvers],
            next_url=f"/history?{next_args}" if next_args else None,
            first_url=f"/history?{urlencode(args)}" if cursor else None,
            export_query=urlencode(args),
        )

    def export(self, request: Request, fmt: str) -> Response:
        """The filtered audit trail as CSV or JSON lines."""
        _, me = self.console.who(request)
        if me is None:
            return Response("sign in first", status_code=401, media_type="text/plain")
        try:
            filters = parse_filters(request)
        except ValueError as exc:
            return Response(str(exc), status_code=400, media_type="text/plain")
        rows = listing.audit_rows(self.state.db, filters)
        stamp = self.state.clock().strftime("%Y%m%d-%H%M%S")
        if fmt == "csv":
            body, media = queries.to_csv(rows), "text/csv; charset=utf-8"
        else:
            body, media = queries.to_jsonl(rows), "application/x-ndjson"
        name = f"gate-audit-{stamp}.{'csv' if fmt == 'csv' else 'jsonl'}"
        return StreamingResponse(
            body,
            media_type=media,
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    def stats(self, request: Request) -> Response:
        """Charts an operator would rather look at than read, with their numbers."""
        session, me = self.console.who(request)
        if me is None:
            return self.console.to_login(request)
        raw = request.query_params.get("days", "14")
        days = int(raw) if raw in ("7", "14", "30") else 14
        now = self.state.clock()
        data = queries.stats(self.state.db, now=now, days=days)
        tired = fatigue.measure(self.state.db, self.state.settings, now=now, days=days)
        return self.console.render(
            request,
            session,
            "stats.html",
            me=me,
            data=data,
            outcomes=OUTCOMES,
            rule_rows=[[rule, *(c.get(o, 0) for o in OUTCOMES)] for rule, c in data.by_rule],
            approver_rows=[
                [name, c.get("approve", 0), c.get("reject", 0)] for name, c in data.by_approver
            ],
            median=span(data.median_seconds) if data.median_seconds is not None else None,
            charts=_charts(data),
            **stats_page.context(tired),
        )

    def router(self) -> APIRouter:
        """The read-only pages' routes (kept out of the OpenAPI schema: they are pages)."""
        r = APIRouter(include_in_schema=False)
        r.add_api_route("/", self.queue, methods=["GET"])
        r.add_api_route("/queue/rows", self.queue_rows, methods=["GET"])
        r.add_api_route("/events", self.events, methods=["GET"])
        r.add_api_route("/history", self.history, methods=["GET"])
        r.add_api_route("/history/export.csv", self.export_csv, methods=["GET"])
        r.add_api_route("/history/export.jsonl", self.export_jsonl, methods=["GET"])
        r.add_api_route("/stats", self.stats, methods=["GET"])
        return r

    def export_csv(self, request: Request) -> Response:
        """The filtered audit trail as CSV."""
        return self.export(request, "csv")

    def export_jsonl(self, request: Request) -> Response:
        """The filtered audit trail as JSON lines."""
        return self.export(request, "jsonl")


def _charts(data: queries.Stats) -> dict[str, str]:
    return {
        "times": charts.both(charts.columns, data.decision_times, title="Time to decision"),
        "rules": charts.both(charts.stacked_bars, data.by_rule, OUTCOMES, title="Outcomes by rule"),
        "approvers": charts.both(
            charts.stacked_bars,
            data.by_approver,
            ["approve", "reject"],
            title="Votes by approver",
        ),
        "backlog": charts.both(
            charts.columns,
            data.backlog,
            title="Pending at the end of each day",
            series="pending",
        ),
        "expiries": charts.both(
            charts.columns, data.expiries, title="Expiries per day", series="expired"
        ),
    }


def _page_size(raw: str) -> int:
    # isascii: str.isdigit() also accepts digits int() refuses (superscripts) or reads (Thai)
    if raw.isascii() and raw.isdigit() and 0 < int(raw) <= MAX_HISTORY_PAGE:
        return int(raw)
    return HISTORY_PAGE


def parse_filters(request: Request) -> listing.HistoryFilter:
    """History filters from the query string; ValueError names the bad one."""
    params = request.query_params

    def text(name: str) -> str | None:
        value = (params.get(name) or "").strip()
        if len(value) > 200:
            raise ValueError(f"{name} is longer than 200 characters")
        return value or None

    def day(name: str) -> date | None:
        value = text(name)
        if value is None:
            return None
        try:
            return date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{name} must be a date like 2026-01-31, not {value!r}") from None

    status = text("status")
    if status and status not in listing.FINAL_STATUSES:
        raise ValueError(f"status must be one of {', '.join(listing.FINAL_STATUSES)}")
    return listing.HistoryFilter(
        status=status,
        tool=text("tool"),
        agent=text("agent"),
        approver=text("approver"),
        since=day("since"),
        until=day("until"),
    )
