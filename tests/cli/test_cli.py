"""One CLI: the same flag for the same thing in every command, help on every option,
`gate --version`, `gate requests list` saying what it shows, and a reject needing a reason
the same way wherever it is made (the decide pipeline, `gate.policy.offers.with_reasons`)."""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gate import cli
from gate import mcp as gate_mcp
from gate.base.statuses import Verdict
from gate.decisions import deciding
from gate.decisions.acting import Actor, Refusal
from gate.hook import command as hook
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.cli import WouldServeError, gate_in_process, run_gate, serve_refused
from tests.support.databases import migrated_sqlite
from tests.support.http import TLS


def _gate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`gate ARGS`, called in this process (the tests that need the real command say so)."""
    return gate_in_process(*args, env=env)


def _parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser of the `gate` command, by its command line."""
    pending = [
        ("gate", cli._parser()),
        ("gate hook", hook._parser()),
        ("gate mcp", gate_mcp._parser()),
    ]
    while pending:
        name, parser = pending.pop()
        yield name, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(
                    (f"{name} {sub}", p)
                    for sub, p in action.choices.items()
                    # `gate hook` and `gate mcp` parse their own arguments (walked above)
                    if f"{name} {sub}" not in ("gate hook", "gate mcp")
                )


def test_every_option_has_help() -> None:
    missing = [
        f"{name} {'/'.join(action.option_strings) or action.dest}"
        for name, parser in _parsers()
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction | argparse._HelpAction)
        and not action.help
    ]
    assert not missing, missing


def _flag(parser: argparse.ArgumentParser, dest: str) -> list[str]:
    """The visible spellings of the option stored in `dest`."""
    return [
        flag
        for action in parser._actions
        if action.dest == dest and action.help != argparse.SUPPRESS
        for flag in action.option_strings
    ]


def test_the_gate_servers_url_and_token_have_one_name() -> None:
    parsers = dict(_parsers())
    for command in ("gate requests", "gate requests list", "gate requests reject", "gate hook"):
        assert _flag(parsers[command], "url") == ["--url"], command
        assert _flag(parsers[command], "token") == ["--token"], command
    for command in ("gate init claude-code", "gate init codex"):
        assert _flag(parsers[command], "url") == ["--url"], command
    assert _flag(parsers["gate mcp prompt"], "gate_url") == ["--url"]
    # the old spelling still works, out of --help
    ns = gate_mcp._parser().parse_args(["prompt", "--gate-url", "http://gate.old:1"])
    assert ns.gate_url == "http://gate.old:1"
    assert "--gate-url" not in parsers["gate mcp prompt"].format_help()
    # proxy: --url named the upstream first, so it stays that (as --upstream-url)
    ns = gate_mcp._parser().parse_args(
        ["proxy", "--name", "n", "--url", "http://up/mcp", "--gate-url", "http://gate:1"]
    )
    assert (ns.url, ns.gate_url) == ("http://up/mcp", "http://gate:1")
    ns = gate_mcp._parser().parse_args(["proxy", "--name", "n", "--upstream-url", "http://up"])
    assert ns.url == "http://up"


def test_requests_takes_url_and_token_before_or_after_the_task() -> None:
    parser = cli._parser()
    before = parser.parse_args(["requests", "--url", "http://a:1", "--token", "t", "list"])
    after = parser.parse_args(["requests", "list", "--url", "http://a:1", "--token", "t"])
    for ns in (before, after):
        assert (ns.url, ns.token, ns.status) == ("http://a:1", "t", "pending")
    env = {"GATE_URL": "http://from-env:2"}
    shown = _gate("requests", "list", "--help", env=env)
    assert "default: $GATE_URL or http://127.0.0.1:8000" in " ".join(shown.stdout.split())


def test_version_prints_the_installed_version() -> None:
    done = run_gate("--version")  # the real command: argparse prints and exits
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        r"gate (\d+\.\d+\.\d+\S*|unknown \(not installed as gate-approvals.*\))\n", done.stdout
    ), done.stdout
    assert done.stdout == f"gate {cli.version()}\n"


# -- requests list says what it shows ---------------------------------------------------------


def test_requests_list_says_what_it_shows(gate_sqlite: Gate) -> None:
    where = ["--url", gate_sqlite.url, "--token", cfg.ADMIN]
    empty = _gate("requests", "list", *where)
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout == "no pending requests (--status all shows every request)\n"
    rid = gate_sqlite.submit(tool_name="ask_x", tool_args={})["request"]["id"]
    listed = _gate("requests", "list", *where)
    assert listed.stdout.startswith("pending requests, newest first (1 shown):\n\nID ")
    assert rid in listed.stdout
    assert gate_sqlite.decide(rid, cfg.BOB, "reject", "not today").status_code == 200
    assert _gate("requests", "list", *where).stdout.startswith("no pending requests")
    done = _gate("requests", "list", "--status", "rejected", *where)
    assert (
        done.stdout.startswith("rejected requests, newest first (1 shown):") and rid in done.stdout
    )
    every = _gate("requests", "list", "--status", "all", *where)
    assert every.stdout.startswith("requests, newest first (1 shown):")
    wrong = _gate("requests", "list", "--status", "done", *where)
    assert wrong.returncode == 2 and "invalid choice: 'done'" in wrong.stderr


# -- a reject needs a reason, on every surface ------------------------------------------------

SAY_WHY = "say why you reject it: the reason is what the agent is told"


@pytest.mark.parametrize("via", ["api", "web", "slack", "telegram", "email", "teams"])
def test_the_pipeline_refuses_a_reject_without_a_reason_from_any_surface(
    gate_sqlite: Gate, via: str
) -> None:
    rid = gate_sqlite.submit(tool_name="ask_x", tool_args={})["request"]["id"]
    service = gate_sqlite.state.service
    bob = service.settings.approver("bob")
    assert bob is not None
    for comment in (None, "", "   "):
        result = deciding.decide(service, rid, Actor.of_approver(bob, via), Verdict.reject, comment)
        assert result.refusal is Refusal.not_offered and result.code == "reason_required"
        assert result.message() == f"Not recorded: {SAY_WHY}."
    preset = deciding.decide(service, rid, Actor.of_approver(bob, via), Verdict.reject, "no")
    assert preset.refusal is None and preset.view is not None
    assert preset.view.status == "rejected"


def test_the_api_refuses_a_reject_without_a_reason(gate_sqlite: Gate) -> None:
    rid = gate_sqlite.submit(tool_name="ask_x", tool_args={})["request"]["id"]
    for body in ({"verdict": "reject"}, {"verdict": "reject", "comment": " "}):
        with gate_sqlite.client(cfg.BOB) as http:
            refused = http.post(f"/v1/requests/{rid}/decision", json=body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"] == {
            "code": "reason_required",
            "message": SAY_WHY[0].upper() + SAY_WHY[1:],
        }
    approved = gate_sqlite.decide(rid, cfg.BOB, "approve")  # an approval needs none
    assert approved.status_code == 200 and approved.json()["status"] == "approved"


def test_requests_reject_needs_a_reason(gate_sqlite: Gate) -> None:
    rid = gate_sqlite.submit(tool_name="ask_x", tool_args={})["request"]["id"]
    where = ["--url", gate_sqlite.url, "--token", cfg.BOB]
    bare = run_gate("requests", "reject", rid, *where)  # the real command: exit 1, no traceback
    assert bare.returncode == 1 and "Traceback" not in bare.stderr
    assert bare.stderr == f"gate: 422 reason_required: {SAY_WHY[0].upper() + SAY_WHY[1:]}\n"
    done = _gate("requests", "reject", rid, "--reason", "use the staging account", *where)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"{rid}: rejected (Rejected by bob in the API: use the staging account)\n"
    )
    with httpx.Client(base_url=gate_sqlite.url, verify=TLS) as http:
        view = http.get(f"/v1/requests/{rid}", headers={"Authorization": f"Bearer {cfg.BOB}"})
    assert view.json()["status"] == "rejected"


# -- the in-process runner the CLI tests use (tests/support/cli.py) ---------------------------


def test_serve_in_process_cannot_start_serving(tmp_path: Path) -> None:
    # a configuration gate accepts: `serve_refused` stops where the server would start
    path = cfg.write_config(tmp_path / "gate.toml", migrated_sqlite(tmp_path / "gate.db"), port=0)
    with pytest.raises(WouldServeError, match="accepted its configuration and would serve"):
        serve_refused("--config", path)
    with pytest.raises(ValueError, match="not run in-process"):
        gate_in_process("serve", "--config", path)
    for command in ("hook", "mcp"):  # each acts on the whole process (signals, re-exec)
        with pytest.raises(ValueError, match="not run in-process"):
            gate_in_process(command, "--help")


def test_the_runner_leaves_the_process_as_it_found_it(tmp_path: Path) -> None:
    root = logging.getLogger()
    httpx_logger = logging.getLogger("httpx")
    before = (list(root.handlers), root.level, httpx_logger.level, logging._srcfile)
    environ, cwd = dict(os.environ), os.getcwd()
    # `gate serve` configures logging before it finds the database unreachable
    path = tmp_path / "gate.toml"
    path.write_text('[server]\nport = 0\ndatabase_url = "postgresql://gate@127.0.0.1:1/gate"\n')
    done = serve_refused("--config", path, cwd=tmp_path, env={"GATE_SERVER__LOG_LEVEL": "DEBUG"})
    assert done.returncode == 2 and "cannot open the database" in done.stderr, done.stderr
    assert (list(root.handlers), root.level, httpx_logger.level, logging._srcfile) == before
    assert dict(os.environ) == environ and os.getcwd() == cwd
