"""What rendering a hostile tool argument costs, on every card and page, at 10 KB to 1 MB.

For each hostile string (shapes that made the old secret-masking regexes backtrack, and shapes
that flag every line of gate.rendering: short lines, look-alike words, lone surrogates) and
each size, it times the Slack card, the Feishu card, the masker alone with its scan cap
lifted, gate.rendering's `render_call` + `as_text` (a tree, a command, an Edit diff, cut for a
card; a command whole as the request page shows it) next to the old JSON rendering
(`untrusted.arguments_json`), and the web console's request page, next to
a baseline measured in the same run on the same arguments: `json.dumps` for the cards, the
JSON API's `GET /v1/requests/{id}` for the page. Then it prints how each grows from 10 KB to
100 KB and from 100 KB to 1 MB: ~10x is linear, ~100x quadratic.

A card render runs in a forked child that is stopped after `--limit` seconds (the old code
needed minutes for some 1 MB strings): such a figure prints as `>limit`.

    .venv/bin/python -m bench.render_cost
    .venv/bin/python -m bench.render_cost --sizes 10000 100000 --limit 30
    .venv/bin/python -m bench.render_cost --cpu --no-web --only "old JSON" render_call
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from bench._common import database
from channels.feishu import card as feishu_card
from channels.slack import card as slack_card
from gate.app import create_app
from gate.config.settings import Settings
from gate.decisions.readmodel import RequestView
from gate.rendering import as_text, render_call
from gate.text import untrusted
from tests.support import config as cfg
from tests.support.servers import ThreadServer

SIZES = (10_000, 100_000, 1_000_000)
#: what a chat card holds of a call's text (Slack's section limit is 3,000)
CARD_CHARS = 3_000
NOW = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


def _repeat(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


#: name -> the hostile string of about n characters
HOSTILE: dict[str, Callable[[int], str]] = {
    "a-run": lambda n: "a" * n,
    "dotted a.a.a.": lambda n: _repeat("a.", n),
    "eyJ-eyJ-": lambda n: _repeat("eyJ-", n),
    "open PEM": lambda n: "-----BEGIN RSA PRIVATE KEY-----" + "A" * n,
    "password=": lambda n: _repeat("password=", n),
    "xoxb-…": lambda n: "xoxb-" + "a" * n,
    "<<<": lambda n: "<" * n,
    "bidi mix": lambda n: _repeat("\u202eabc\u2066\u200bא<@U1>", n),
    "short lines": lambda n: _repeat("echo hi\n", n),
    "Cyrillic look-alike words": lambda n: _repeat("pаypal.com ", n),
    "lone surrogates": lambda n: _repeat("a\ud800\n", n),
}


def make_view(text: str) -> RequestView:
    """A pending request whose argument (and summary, cut as the API would) is `text`."""
    return RequestView(
        id="01JBENCH",
        status="pending",
        tool_name="run_shell",
        tool_args={"payload": text},
        agent_id="bench-agent",
        user_id="dave",
        session_id=None,
        org_id=None,
        rule="bench",
        summary=text[:4000],
        context={},
        created_at=NOW,
        expires_at=NOW + timedelta(minutes=10),
        approvals_required=1,
        approvers=["alice"],
        votes=[],
        decided_at=None,
        decided_by=None,
        decided_via=None,
        reason=None,
        on_timeout="reject",
        submitted_by="bench-agent",
        url="http://gate.example/requests/01JBENCH",
    )


def _slack(view: RequestView) -> None:
    slack_card.fallback_text(view)
    slack_card.render_card(view, now=NOW)


def _feishu(view: RequestView) -> None:
    feishu_card.render_card(view, now=NOW)


def _baseline(view: RequestView) -> None:
    json.dumps(view.tool_args, ensure_ascii=False)


def _old_json(view: RequestView) -> None:
    # what every card showed of a call before gate.rendering: masked, escaped, indented JSON
    untrusted.arguments_json(view.tool_args)


def _render_tree(view: RequestView) -> None:
    as_text(render_call(view.tool_name, view.tool_args), limit=CARD_CHARS, url=view.url)


def _render_command(view: RequestView) -> None:
    as_text(render_call("Bash", {"command": view.tool_args["payload"]}), limit=CARD_CHARS)


def _render_edit(view: RequestView) -> None:
    text = view.tool_args["payload"]
    args = {"file_path": "a.py", "old_string": text, "new_string": "changed\n" + text}
    as_text(render_call("Edit", args), limit=CARD_CHARS)


def _render_page(view: RequestView) -> None:
    # the request page and `gate requests show`: every character, no cap
    as_text(render_call("Bash", {"command": view.tool_args["payload"]}, limit=None))


def _uncapped(view: RequestView) -> None:
    # The cards scan at most untrusted.SCAN_LIMIT characters of a value, which hides how the
    # scan itself grows: this is the same cleaning and masking with no cap at all.
    untrusted.clean(view.tool_args["payload"], limit=None)
    untrusted.to_json(view.tool_args, limit=None)


CARDS: dict[str, Callable[[RequestView], None]] = {
    "json.dumps (baseline)": _baseline,
    "Slack card": _slack,
    "Feishu card": _feishu,
    "masker with no cap (untrusted.clean + to_json, limit=None)": _uncapped,
    "old JSON rendering (untrusted.arguments_json)": _old_json,
    "render_call + as_text, a tree (card, 3,000 chars)": _render_tree,
    "render_call + as_text, a Bash command (card)": _render_command,
    "render_call + as_text, an Edit diff (card)": _render_edit,
    "render_call(limit=None) + as_text, a Bash command (page)": _render_page,
}


def _timed_child(surface: str, shape: str, size: int, cpu: bool, out: Any) -> None:
    view = make_view(HOSTILE[shape](size))
    clock = time.process_time if cpu else time.perf_counter
    runs: list[float] = []
    while len(runs) < 3 and sum(runs) < 1.0:  # the median of 3, unless one run is slow
        start = clock()
        CARDS[surface](view)
        runs.append(clock() - start)
    out.put(statistics.median(runs))


def time_card(surface: str, shape: str, size: int, limit: float, cpu: bool = False) -> float | None:
    """Seconds to render (CPU seconds with `cpu`), in a forked child; None when it ran past
    `limit` (wall time)."""
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_timed_child, args=(surface, shape, size, cpu, out))
    child.start()
    child.join(limit)
    if child.is_alive():
        child.kill()
        child.join()
        return None
    return float(out.get(timeout=5))


@contextmanager
def page_server() -> Iterator[httpx.Client]:
    """A real app on loopback (local mode: the page needs no sign-in) and a client for it."""
    with database("sqlite") as url:
        data = cfg.settings_data(url, max_body_bytes=8 * 1024 * 1024)
        data["tokens"] = []
        server = ThreadServer(create_app(Settings(**data))).start()
        try:
            with httpx.Client(base_url=server.url, timeout=600) as http:
                yield http
        finally:
            server.stop()


def submit(http: httpx.Client, text: str) -> str:
    """A pending request (rule "anyone") whose argument is `text`; its id."""
    body = {"tool_name": "ask_run", "tool_args": {"payload": text}, "summary": text[:4000]}
    answer = http.post("/v1/gate", json=body)
    answer.raise_for_status()
    return str(answer.json()["request"]["id"])


def time_get(http: httpx.Client, path: str) -> float:
    """Seconds to GET `path` (the median of 3, unless one is slow)."""
    runs: list[float] = []
    while len(runs) < 3 and sum(runs) < 1.0:
        start = time.perf_counter()
        page = http.get(path)
        runs.append(time.perf_counter() - start)
        page.raise_for_status()
    return statistics.median(runs)


def _ms(seconds: float | None, limit: float) -> str:
    return f">{limit:.0f} s" if seconds is None else f"{seconds * 1000:,.1f} ms"


def _growth(small: float | None, big: float | None) -> str:
    if small is None or big is None:
        return "—"
    return f"{big / max(small, 1e-6):.1f}x"


def _table(surface: str, sizes: tuple[int, ...]) -> None:
    header = " | ".join(f"{s:,} chars" for s in sizes)
    growth = " | ".join(f"{b // a}x size" for a, b in zip(sizes, sizes[1:], strict=False))
    print(f"\n## {surface}\n")
    print(f"| string | {header} | {growth} |")
    print("| --- " * (2 * len(sizes)) + "|", flush=True)


def _row(shape: str, times: Sequence[float | None], limit: float) -> None:
    cells = [_ms(t, limit) for t in times]
    ratios = [_growth(a, b) for a, b in zip(times, times[1:], strict=False)]
    print(f"| {shape} | " + " | ".join(cells + ratios) + " |", flush=True)


def main() -> None:
    """Measure and print one table per surface, a row as soon as it is measured."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--limit", type=float, default=60.0, help="seconds per card render")
    parser.add_argument("--no-web", action="store_true", help="cards only")
    parser.add_argument(
        "--cpu", action="store_true", help="time renders in CPU seconds (a shared machine)"
    )
    parser.add_argument("--only", nargs="+", help="the surfaces (table titles) starting so")
    args = parser.parse_args()
    sizes = tuple(args.sizes)
    print(f"# render cost, {platform.python_version()}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    for surface in CARDS:
        if args.only and not surface.startswith(tuple(args.only)):
            continue
        _table(surface, sizes)
        for shape in HOSTILE:
            times = [time_card(surface, shape, n, args.limit, args.cpu) for n in sizes]
            _row(shape, times, args.limit)
    if args.no_web:
        return
    with page_server() as http:
        ids = {(shape, n): submit(http, make(n)) for shape, make in HOSTILE.items() for n in sizes}
        for surface, path in (
            ("GET /v1/requests/{id} (baseline)", "/v1/requests/{}"),
            ("web request page", "/requests/{}"),
        ):
            _table(surface, sizes)
            for shape in HOSTILE:
                times = [time_get(http, path.format(ids[(shape, n)])) for n in sizes]
                _row(shape, times, args.limit)


if __name__ == "__main__":
    main()
