"""The terminal commands over the HTTP API: `gate requests list|show|approve|reject`, `gate log`,
`gate grants list|revoke` and `gate agents list|reset` (agents tripped by their rejections,
`gate.decisions.denials`).

They talk to a running server (GATE_URL, GATE_TOKEN) so decisions wake waiters exactly as a
click would. Standard library only at import; `show` prints the call through
`gate.rendering`, as every other surface shows it.
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.error
import urllib.request
from typing import Any

#: what `requests list --status` takes: a request's status, or every one
STATUSES = ("pending", "approved", "rejected", "expired", "cancelled", "all")


def add_commands(sub: Any) -> None:
    """Register `requests ...` on the top-level parser."""
    req = sub.add_parser("requests", help="list, show and decide requests on a running server")
    _server_options(req, top=True)
    tasks = req.add_subparsers(metavar="TASK")
    ls = tasks.add_parser("list", help="requests as a table, newest first (pending by default)")
    ls.add_argument(
        "--status",
        choices=STATUSES,
        default="pending",
        help="which requests: pending (default: those waiting for a decision), approved, "
        "rejected, expired, cancelled, or all",
    )
    ls.add_argument(
        "--limit", type=int, default=50, help="at most this many (1 to 500, default: 50)"
    )
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _server_options(ls, top=False)
    ls.set_defaults(handler=_list)
    show = tasks.add_parser("show", help="one request")
    show.add_argument("id", help="the request's id (the ID column of `gate requests list`)")
    _server_options(show, top=False)
    show.set_defaults(handler=_show)
    for verdict in ("approve", "reject"):
        p = tasks.add_parser(verdict, help=f"{verdict} a request")
        p.add_argument("id", help="the request's id (the ID column of `gate requests list`)")
        p.add_argument(
            "--comment",
            "-m",
            *(["--reason"] if verdict == "reject" else []),
            dest="comment",
            help="why, in words the agent is told (required to reject: the agent needs to "
            "know what to do instead)"
            if verdict == "reject"
            else "a note the agent is told (optional)",
        )
        _server_options(p, top=False)
        p.set_defaults(handler=_decide, verdict=verdict)
    _add_log_command(sub)
    _add_agent_commands(sub)
    _add_grant_commands(sub)


def _add_grant_commands(sub: Any) -> None:
    """Register `grants list|revoke` on the top-level parser."""
    grants = sub.add_parser("grants", help="grants approvers made: uses left, how each ended")
    _server_options(grants, top=True)
    tasks = grants.add_subparsers(metavar="TASK")
    ls = tasks.add_parser("list", help="active grants (--all: recently ended ones too)")
    ls.add_argument("--all", action="store_true", help="also grants that ended, and how")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _server_options(ls, top=False)
    ls.set_defaults(handler=_grants)
    revoke = tasks.add_parser("revoke", help="end a grant now: the calls it covered ask again")
    revoke.add_argument("id", help="the grant's id (the ID column of `gate grants list`)")
    _server_options(revoke, top=False)
    revoke.set_defaults(handler=_revoke)


def _add_log_command(sub: Any) -> None:
    """`gate log`: the decision log (`GET /v1/decisions`), newest first."""
    p = sub.add_parser(
        "log", help="the decision log of a running server: every answer, newest first"
    )
    for flag, what in (("agent", "agent id"), ("tool", "tool name"), ("rule", "rule name")):
        p.add_argument(f"--{flag}", help=f"only this {what}")
    p.add_argument("--answer", choices=("allow", "deny", "ask", "granted"), help="only this answer")
    p.add_argument("--since", help="from then on: a duration back from now (7d, 2h) or a UTC time")
    p.add_argument("--until", help="before then: a duration back from now or a UTC time")
    p.add_argument(
        "--limit", type=int, default=50, help="at most this many (1 to 500, default: 50)"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _server_options(p, top=True)
    p.set_defaults(handler=_log)


def _add_agent_commands(sub: Any) -> None:
    """Register `agents list|reset` on the top-level parser."""
    agents = sub.add_parser("agents", help="agents tripped by their rejections, and their reset")
    _server_options(agents, top=True)
    tasks = agents.add_subparsers(metavar="TASK")
    ls = tasks.add_parser("list", help="the agents tripped now (every call of theirs is asked)")
    _server_options(ls, top=False)
    ls.set_defaults(handler=_tripped)
    reset = tasks.add_parser("reset", help="reset a tripped agent: policy decides its calls again")
    reset.add_argument("name", help="the agent (its agent_id, or its token's name)")
    _server_options(reset, top=False)
    reset.set_defaults(handler=_reset)


def _server_options(p: argparse.ArgumentParser, *, top: bool) -> None:
    """`--url` and `--token`, before the task (`gate requests --url U list`) or after it.

    After it they only override what was given before (or the environment's defaults).
    """
    url = os.environ.get("GATE_URL", "http://127.0.0.1:8000") if top else argparse.SUPPRESS
    token = os.environ.get("GATE_TOKEN") if top else argparse.SUPPRESS
    p.add_argument(
        "--url",
        default=url,
        help="the gate server's URL (default: $GATE_URL or http://127.0.0.1:8000)",
    )
    p.add_argument(
        "--token",
        default=token,
        help="an approver or admin token (default: $GATE_TOKEN; none needed on a server "
        "without [[tokens]] on this machine)",
    )


def _call(ns: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(ns.url.rstrip("/") + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if ns.token:
        request.add_header("Authorization", f"Bearer {ns.token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            err = json.loads(exc.read())["error"]
            message = f"{exc.code} {err['code']}: {err['message']}"
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {exc.code}"
        raise SystemExit(f"gate: {message}") from None
    except OSError as exc:
        raise SystemExit(f"gate: cannot reach {ns.url}: {exc}") from None


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def _list(ns: argparse.Namespace) -> int:
    query = f"limit={ns.limit}" + ("" if ns.status == "all" else f"&status={ns.status}")
    page = _call(ns, "GET", f"/v1/requests?{query}")
    if ns.json:
        print(json.dumps(page["items"], indent=2))  # noqa: T201
        return 0
    what = "requests" if ns.status == "all" else f"{ns.status} requests"
    if not page["items"]:
        others = "" if ns.status == "all" else " (--status all shows every request)"
        print(f"no {what}{others}")  # noqa: T201
        return 0
    more = ", more with --limit" if page.get("next_cursor") else ""
    print(f"{what}, newest first ({len(page['items'])} shown{more}):\n")  # noqa: T201
    rows = [
        [
            r["id"],
            r["status"],
            r["tool_name"][:30],
            (r["summary"] or "")[:40],
            r["agent_id"] or "",
            r["rule"] or "",
            r["expires_at"][:19],
        ]
        for r in page["items"]
    ]
    print(_table(rows, ["ID", "STATUS", "TOOL", "SUMMARY", "AGENT", "RULE", "EXPIRES (UTC)"]))  # noqa: T201
    return 0


def _show(ns: argparse.Namespace) -> int:
    r = _call(ns, "GET", f"/v1/requests/{ns.id}")
    print(_shown_request(r))  # noqa: T201
    return 0


def _shown_request(r: dict[str, Any]) -> str:
    """A request as `requests show` prints it: gate's rendering of the call first (whole),
    the agent's words below it labelled as the agent's claim, then the other fields."""
    from gate.rendering import as_text, render_call, render_text

    options = r.get("options")
    options = options if isinstance(options, dict) else {}
    watched = [str(w) for w in options.get("watched_args") or () if isinstance(w, str)]
    rendering = render_call(str(r.get("tool_name", "")), r.get("tool_args"), watched=watched)
    out = [rendering.headline, "", as_text(rendering).text, ""]
    summary = r.get("summary")
    out.append("The agent's claim (its own words, not gate's reading of the call):")
    if summary:
        out.extend(f"  {line.text}" for line in render_text(str(summary)))
    else:
        out.append("  (the agent sent no summary)")
    skip = ("tool_args", "votes", "context", "options", "summary")
    rows = [
        [k, _inert(json.dumps(v) if isinstance(v, dict | list) else str(v), " ⏎ ")]
        for k, v in r.items()
        if k not in skip
    ]
    out += ["", _table(rows, ["FIELD", "VALUE"])]
    if r.get("context"):
        out.append("\ncontext:\n" + _inert(json.dumps(r["context"], indent=2)))
    # what the API returned, unmasked (an approver's token reads it so): where a mask could
    # hide code, this is where the README sends an approver; ASCII JSON escapes every
    # invisible or look-alike character
    out.append("\narguments as sent (JSON, unmasked):\n" + json.dumps(r.get("tool_args"), indent=2))
    for vote in r.get("votes") or ():
        line = f"vote: {vote['approver']} {vote['verdict']} via {vote['via']} at {vote['at']}"
        out.append(_inert(line))
    return "\n".join(out)


def _inert(text: str, joint: str = "\n") -> str:
    """Untrusted text for the terminal: secrets masked, invisible and look-alike characters
    escaped, its lines joined by `joint`."""
    from gate.rendering import render_text

    return joint.join(line.text for line in render_text(text))


def _decide(ns: argparse.Namespace) -> int:
    r = _call(
        ns, "POST", f"/v1/requests/{ns.id}/decision", {"verdict": ns.verdict, "comment": ns.comment}
    )
    print(f"{r['id']}: {r['status']}" + (f" ({r['reason']})" if r.get("reason") else ""))  # noqa: T201
    return 0


def _tripped(ns: argparse.Namespace) -> int:
    rows = _call(ns, "GET", "/v1/agents/tripped")
    if not rows:
        print("no agent is tripped")  # noqa: T201
        return 0
    table = [[_inert(r["agent"]), r["tripped_at"][:19], _inert(r["reason"])] for r in rows]
    print(_table(table, ["AGENT", "SINCE (UTC)", "WHY"]))  # noqa: T201
    return 0


def _reset(ns: argparse.Namespace) -> int:
    r = _call(ns, "POST", "/v1/agents/reset", {"agent": ns.name})
    print(f"reset agent {_inert(r['agent'])}: policy decides its calls again")  # noqa: T201
    return 0


def _grants(ns: argparse.Namespace) -> int:
    rows = _call(ns, "GET", f"/v1/grants?active={'false' if ns.all else 'true'}")
    if ns.json:
        print(json.dumps(rows, indent=2))  # noqa: T201
        return 0
    if not rows:
        print("no grants" if ns.all else "no active grants (--all shows ended ones)")  # noqa: T201
        return 0
    table = [
        [
            g["id"],
            g["status"],
            g["tool_name"][:30],
            g["scope"],
            _inert(_covers(g), " ")[:50],
            g["created_by"],
            f"{g['uses']} of {g['max_uses']}" if g.get("max_uses") else str(g["uses"]),
            "-" if g.get("uses_left") is None else str(g["uses_left"]),
            (g["ended_at"] or g["expires_at"])[:19],
        ]
        for g in rows
    ]
    heads = ["ID", "STATUS", "TOOL", "SCOPE", "COVERS", "BY", "USES", "LEFT", "ENDS/ENDED (UTC)"]
    print(_table(table, heads))  # noqa: T201
    return 0


def _covers(g: dict[str, Any]) -> str:
    """What calls a grant covers, in a few words (agent-sent values: shown inert)."""
    if g["scope"] == "pattern":
        pinned = g.get("pinned") or {}
        return " ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in pinned.items())
    if g["scope"] == "session":
        return f"session {g['session_id']}"
    if g["scope"] == "agent":
        return f"agent {g['agent_id']}"
    return "the same arguments"


def _revoke(ns: argparse.Namespace) -> int:
    g = _call(ns, "POST", f"/v1/grants/{ns.id}/revoke")
    print(f"{g['id']}: revoked; calls it covered ask a person again")  # noqa: T201
    return 0


__all__ = ["add_commands"]


def _log(ns: argparse.Namespace) -> int:
    from urllib.parse import urlencode

    query: dict[str, Any] = {"limit": ns.limit}
    names = {"agent": "agent_id", "tool": "tool_name", "rule": "rule", "answer": "answer"}
    query |= {param: getattr(ns, flag) for flag, param in names.items() if getattr(ns, flag)}
    for bound in ("since", "until"):
        if getattr(ns, bound):
            query[bound] = _moment(getattr(ns, bound))
    page = _call(ns, "GET", f"/v1/decisions?{urlencode(query)}")
    if ns.json:
        print(json.dumps(page["items"], indent=2))  # noqa: T201
        return 0
    if not page["items"]:
        print("no decisions match (answers are written about once a second)")  # noqa: T201
        return 0
    rows = [
        [
            r["at"][:19].replace("T", " "),
            r["answer"],
            _inert(r["tool_name"][:30], " "),
            _inert(json.dumps(r["masked_args"], ensure_ascii=False)[:50], " "),
            _inert(r["agent_id"] or "", " "),
            r["rule"] or "(none)",
            r["policy_revision"],
            r["request_id"] or "",
        ]
        for r in page["items"]
    ]
    headers = ["AT (UTC)", "ANSWER", "TOOL", "ARGUMENTS", "AGENT", "RULE", "REVISION", "REQUEST"]
    print(_table(rows, headers))  # noqa: T201
    if page.get("next_cursor"):
        print("(more with --limit or --until)")  # noqa: T201
    return 0


def _moment(text: str) -> str:
    """`--since`/`--until` as the API's ISO time: a duration back from now, or a time as is."""
    from datetime import UTC, datetime

    from gate.config.settings import parse_duration

    try:
        return (datetime.now(UTC) - parse_duration(text)).isoformat()
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).isoformat()
    except ValueError:
        raise SystemExit(
            f"gate: {text[:40]!r} is neither a duration (7d, 2h) nor a time (2026-11-27T10:00)"
        ) from None
