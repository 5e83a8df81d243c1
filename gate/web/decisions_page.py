"""The Decisions page: the decision log (every answer of `POST /v1/gate`), newest first.

Read through `gate.decisions.decision_log.read_page`, as `GET /v1/decisions` reads it, with a
`Principal` for the signed-in approver. The arguments were masked when the row was written
and are shown through `gate.text.untrusted.to_json` again (invisible and look-alike characters
escaped, cut to a line).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from gate.decisions import decision_log
from gate.decisions.decision_log import ANSWERS
from gate.identity.auth import Principal
from gate.text import untrusted
from gate.web.console import Console

PAGE = 50
#: characters of the masked arguments a row shows (the API has them whole)
ARGS_SHOWN = 160
#: the page's filters: query name -> the log's column
FILTERS = {"agent": "agent_id", "tool": "tool_name", "rule": "rule", "answer": "answer"}


class DecisionsPage:
    """`GET /decisions`: the log with filters (agent, tool, rule, answer, day) and paging."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.state = console.state

    def page(self, request: Request) -> Response:
        """One page of the decision log."""
        console = self.console
        session, me = console.who(request)
        if me is None:
            return console.to_login(request)
        query = request.query_params
        chosen = {name: (query.get(name) or "").strip()[:200] for name in FILTERS}
        try:
            since = _day(query.get("since"))
            until = _day(query.get("until"))
            cursor = int(query["cursor"]) if query.get("cursor") else None
        except ValueError:
            message = "Dates are YYYY-MM-DD, and the page cursor a number."
            return console.error(request, session, me, 400, "Bad filter", message)
        if chosen["answer"] and chosen["answer"] not in ANSWERS:
            message = f"An answer is one of {', '.join(ANSWERS)}."
            return console.error(request, session, me, 400, "Bad filter", message)
        rows, next_cursor = decision_log.read_page(
            self.state.db,
            Principal(me.name, "approver", me),
            filters={FILTERS[name]: value or None for name, value in chosen.items()},
            since=since,
            until=until,
            cursor=cursor,
            limit=PAGE,
        )
        args = {k: v for k, v in chosen.items() if v}
        args |= {k: query[k] for k in ("since", "until") if query.get(k)}
        next_args = urlencode({**args, "cursor": next_cursor}) if next_cursor else None
        return console.render(
            request,
            session,
            "decisions.html",
            me=me,
            rows=[_shown(row) for row in rows],
            chosen=chosen,
            since=query.get("since") or "",
            until=query.get("until") or "",
            answers=ANSWERS,
            revision=self.state.policy.revision,
            enabled=self.state.decision_log is not None,
            next_url=f"/decisions?{next_args}" if next_args else None,
            first_url=f"/decisions?{urlencode(args)}" if cursor else None,
        )

    def router(self) -> APIRouter:
        """The page's route (kept out of the OpenAPI schema: it is a page)."""
        r = APIRouter(include_in_schema=False)
        r.add_api_route("/decisions", self.page, methods=["GET"])
        return r


def _shown(row: Any) -> dict[str, Any]:
    text = untrusted.to_json(row.masked_args)
    cut = len(text) > ARGS_SHOWN
    return {"row": row, "args": text[:ARGS_SHOWN] + ("…" if cut else "")}


def _day(text: str | None) -> datetime | None:
    """A YYYY-MM-DD day from a form, as the start of that day in UTC."""
    if not text:
        return None
    return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
