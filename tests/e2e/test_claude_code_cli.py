"""Claude Code for real: the pinned CLI from npm runs `claude -p` against a fake model on
loopback, which answers with a Bash `tool_use` that writes a marker file. gate stands in front
of the call three ways: the PreToolUse hook as `examples/claude-code/settings.json` has it,
the same hooks as `gate init claude-code` writes them, and the permission-prompt tool
(`--permission-prompt-tool mcp__gate__approve`, `gate mcp prompt`).
A person decides through gate's API, and the test checks what actually happened: whether the
command ran (the marker), and what the model was told (the `tool_result` the CLI sent back).

Each way runs one session of three calls in turn (a CLI run costs 1 to 3 s of CPU): the model
asks for a command that is approved, then one that is rejected, then one the person edits;
each call writes a marker of its own and gets its own `tool_result`, so the tests read one
call each. Gate down and a reused call id are sessions of their own.

The CLI (`@anthropic-ai/claude-code`, version pinned in `claude-code.version`) is installed
once into `.cache/claude-code` (`.ci/run` does it up front); without npm these tests skip.
It runs with a throwaway HOME, telemetry, auto-update and non-essential traffic off, and only
loopback addresses to talk to.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import config as cfg
from tests.support.databases import migrated_sqlite
from tests.support.fake_anthropic import API_KEY, MODEL, FakeAnthropic, PlannedCall
from tests.support.http import TLS
from tests.support.servers import ServerProcess, free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "@anthropic-ai/claude-code"
VERSION = (Path(__file__).parent / "claude-code.version").read_text().strip()
PREFIX = ROOT / ".cache" / "claude-code"
SETTINGS = ROOT / "examples" / "claude-code" / "settings.json"
#: every wait in these tests ends; a CLI run that needs longer than this is a failure
CLI_TIMEOUT = 120

SHELL_RULE = {
    "name": "shell",
    "tools": ["Bash"],
    "approvers": ["group:finance"],
    "timeout": "10m",
    "reason": "Shell commands need a person",
}


# -- the CLI ----------------------------------------------------------------------------------


def _version_of(cli: Path) -> str | None:
    if not cli.exists():
        return None
    try:
        out = subprocess.run(
            [str(cli), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            env=_cli_env(Path("/nonexistent-home")),
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.split()[0] if out.returncode == 0 and out.stdout.strip() else None


@pytest.fixture(scope="session")
def claude() -> Path:
    """The pinned `claude` executable, installed into .cache/claude-code on first use."""
    cli = PREFIX / "node_modules" / ".bin" / "claude"
    if _version_of(cli) == VERSION:
        return cli
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(
            f"npm is not installed, so {PACKAGE}@{VERSION} cannot be installed for the Claude "
            "Code end-to-end tests (.ci/run installs it)"
        )
    PREFIX.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            npm,
            "install",
            "--prefix",
            str(PREFIX),
            "--no-audit",
            "--no-fund",
            f"{PACKAGE}@{VERSION}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        pytest.skip(f"npm could not install {PACKAGE}@{VERSION}: {done.stderr.strip()[-800:]}")
    found = _version_of(cli)
    assert found == VERSION, f"installed {PACKAGE} reports version {found!r}, not {VERSION}"
    return cli


def _cli_env(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment: no real credentials, config or proxies leak in from the caller."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "LANG": "C.UTF-8",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    if "TMPDIR" in os.environ:
        env["TMPDIR"] = os.environ["TMPDIR"]
    env.update(extra)
    return env


def gate_executable() -> str:
    """This checkout's `gate` script (the one next to the test interpreter)."""
    beside = Path(sys.executable).with_name("gate")
    found = str(beside) if beside.is_file() else shutil.which("gate")
    assert found, "no `gate` executable next to the test interpreter nor on the PATH"
    return found


# -- gate and the model ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def gate_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real `gate serve` for the module: every Bash call needs someone from finance."""
    home = tmp_path_factory.mktemp("gate")
    data = cfg.settings_data(migrated_sqlite(home / "gate.db"))
    data["rules"] = [SHELL_RULE, *data["rules"]]
    path = home / "gate.toml"
    path.write_text(cfg.to_toml(data))
    server = ServerProcess(path).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def model() -> Iterator[FakeAnthropic]:
    fake = FakeAnthropic().start()
    yield fake
    fake.stop()


# -- the ways gate stands in front of Claude Code --------------------------------------------

#: PreToolUse (+ PostToolUse, SessionEnd) hooks: the example file, and `gate init claude-code`
HOOK_WAYS = ("example-settings", "gate-init")


def hook_settings(gate_url: str) -> dict[str, Any]:
    """examples/claude-code/settings.json, with this checkout's gate and the test server."""
    settings: dict[str, Any] = json.loads(SETTINGS.read_text())
    settings.setdefault("env", {})["GATE_URL"] = gate_url
    python = shlex.quote(sys.executable)
    for entries in settings["hooks"].values():
        for entry in entries:
            for handler in entry["hooks"]:
                assert handler["command"].startswith(EXAMPLE_PYTHON + " -m gate.hook "), handler
                handler["command"] = python + handler["command"].removeprefix(EXAMPLE_PYTHON)
    return settings


#: the interpreter the example file names (`gate init claude-code` writes the real one)
EXAMPLE_PYTHON = "/opt/gate/.venv/bin/python"


def prompt_tool_config(gate_url: str) -> dict[str, Any]:
    """An --mcp-config that runs `gate mcp prompt` as the server named `gate`."""
    args = ["mcp", "prompt", "--timeout", "120"]
    return {
        "mcpServers": {
            "gate": {"command": gate_executable(), "args": args, "env": {"GATE_URL": gate_url}}
        }
    }


def _gate_mcp_missing() -> str | None:
    if importlib.util.find_spec("gate.mcp") is None:
        return "gate has no `gate mcp prompt` (gate/mcp) in this checkout"
    if importlib.util.find_spec("mcp") is None:
        return "the MCP SDK is not installed: pip install -e '.[mcp]' for `gate mcp prompt`"
    return None


@dataclass
class Outcome:
    """What one `claude -p` run did."""

    code: int
    result: dict[str, Any]
    stderr: str
    seconds: float


@dataclass
class Agent:
    """`claude -p` in a project of its own, with gate in front one of the ways."""

    cli: Path
    way: str
    home: Path
    project: Path
    sessions: list[str] = field(default_factory=list)

    def run(self, model: FakeAnthropic, gate_url: str, prompt: str) -> Outcome:
        """One `claude -p` session to its end."""
        self.sessions.append(str(uuid.uuid4()))
        argv = [str(self.cli), "-p", prompt, "--output-format", "json", "--model", MODEL]
        argv += ["--session-id", self.sessions[-1]]
        if self.way == "example-settings":
            settings = self.project / ".claude" / "settings.json"
            settings.parent.mkdir(exist_ok=True)
            settings.write_text(json.dumps(hook_settings(gate_url), indent=2))
        elif self.way == "gate-init":
            # Writes the hooks with absolute paths into <project>/.claude/settings.json; run
            # again it changes nothing. The token stays in the environment (GATE_TOKEN).
            init = [gate_executable(), "init", "claude-code", "--dir", str(self.project)]
            init += ["--url", gate_url, "--no-check"]
            written = subprocess.run(init, capture_output=True, text=True, timeout=60)
            assert written.returncode == 0, written.stderr
        else:
            config = self.home / "mcp.json"
            config.write_text(json.dumps(prompt_tool_config(gate_url)))
            argv += ["--mcp-config", str(config), "--strict-mcp-config"]
            argv += ["--permission-prompt-tool", "mcp__gate__approve"]
        env = _cli_env(
            self.home, ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY=API_KEY, GATE_TOKEN=cfg.AGENT
        )
        started = time.monotonic()
        done = subprocess.run(
            argv, cwd=self.project, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT
        )
        seconds = time.monotonic() - started
        assert done.stdout.strip(), (
            f"claude printed nothing (exit {done.returncode}):\n{done.stderr}"
        )
        return Outcome(done.returncode, json.loads(done.stdout), done.stderr, seconds)


#: every way gate stands in front of Claude Code
WAYS = (*HOOK_WAYS, "permission-prompt-tool")


def new_agent(cli: Path, way: str, root: Path) -> Agent:
    """An Agent of `way` with its HOME and project under `root` (skips a way gate lacks)."""
    if way == "permission-prompt-tool":
        missing = _gate_mcp_missing()
        if missing:
            pytest.skip(missing)
    home, project = root / "home", root / "project"
    home.mkdir()
    project.mkdir()
    return Agent(cli, way, home, project)


@pytest.fixture(params=WAYS)
def agent(request: pytest.FixtureRequest, claude: Path, tmp_path: Path) -> Agent:
    """Claude Code with gate's hooks (two ways), or with gate as its permission-prompt tool."""
    return new_agent(claude, request.param, tmp_path)


# -- the person -------------------------------------------------------------------------------


class Approver(threading.Thread):
    """Waits for each pending Bash request whose command it has a decision for, and decides it
    through the API as it comes (a session asks about its calls one after the other)."""

    def __init__(self, gate_url: str, decisions: dict[str, dict[str, Any]]) -> None:
        super().__init__(daemon=True)
        self.gate_url, self.decisions = gate_url, decisions
        #: the decided requests, by command
        self.requests: dict[str, dict[str, Any]] = {}
        self.error: BaseException | None = None
        self.cli_done = threading.Event()
        self.start()

    def run(self) -> None:
        try:
            self._decide()
        except BaseException as exc:  # handed to the test thread by finish()
            self.error = exc

    def _decide(self) -> None:
        admin = {"Authorization": f"Bearer {cfg.ADMIN}"}
        alice = {"Authorization": f"Bearer {cfg.ALICE}"}
        deadline = time.monotonic() + CLI_TIMEOUT
        with httpx.Client(base_url=self.gate_url, timeout=10, verify=TLS) as http:
            while time.monotonic() < deadline and not self.cli_done.is_set():
                params = {"status": "pending", "tool_name": "Bash"}
                items = http.get("/v1/requests", params=params, headers=admin).json()["items"]
                for item in items:
                    command = item["tool_args"].get("command")
                    if command in self.decisions and command not in self.requests:
                        path = f"/v1/requests/{item['id']}/decision"
                        decided = http.post(path, json=self.decisions[command], headers=alice)
                        assert decided.status_code == 200, decided.text
                        self.requests[command] = decided.json()
                if len(self.requests) == len(self.decisions):
                    return
                time.sleep(0.05)
        unasked = [c for c in self.decisions if c not in self.requests]
        raise AssertionError(f"nobody was asked about {unasked!r} while claude ran")

    def finish(self) -> dict[str, dict[str, Any]]:
        """Once claude is done: the decided requests by command (re-raises what went wrong in
        the thread)."""
        self.cli_done.set()
        self.join(timeout=CLI_TIMEOUT)
        assert not self.is_alive(), "the approver is still waiting"
        if self.error is not None:
            raise self.error
        return self.requests


# -- checks -----------------------------------------------------------------------------------


@dataclass
class Call:
    """A Bash call the model makes: it writes `text` into `marker` and prints it."""

    planned: PlannedCall
    marker: Path
    text: str

    @property
    def command(self) -> str:
        return str(self.planned.input["command"])


def writing(marker: Path, text: str) -> str:
    """A shell command that writes `text` into `marker` and prints the file."""
    return f"printf '%s\\n' {text} > {marker} && cat {marker}"


def marker_call(model: FakeAnthropic, project: Path, name: str) -> Call:
    """Plan a Bash call that writes `name` in the project and prints it."""
    marker, text = project / name, f"{name}-{uuid.uuid4().hex[:8]}"
    planned = model.plan("Bash", {"command": writing(marker, text), "description": f"write {name}"})
    return Call(planned, marker, text)


def told(model: FakeAnthropic, call: Call) -> tuple[str, bool]:
    """(text, is_error) of the one tool_result the model got for `call`."""
    results = model.results_for(call.planned)
    assert len(results) == 1, results
    return results[0].text, results[0].is_error


def answered_in(body: dict[str, Any]) -> list[str]:
    """The tool_use ids whose results the newest message of a request body carries."""
    last = body["messages"][-1]
    content = last.get("content") if last.get("role") == "user" else None
    if not isinstance(content, list):
        return []
    return [b["tool_use_id"] for b in content if b.get("type") == "tool_result"]


def request_answering(model: FakeAnthropic, call: Call) -> dict[str, Any]:
    """The one agent request that brought the model the result of `call`."""
    (body,) = [b for b in model.agent_requests() if call.planned.id in answered_in(b)]
    return body


def denied(outcome: Outcome) -> list[str]:
    """The tool_use ids the CLI reports as refused by permission."""
    return [d["tool_use_id"] for d in outcome.result["permission_denials"]]


def assert_clean_exchange(model: FakeAnthropic, outcome: Outcome, calls: list[Call]) -> None:
    """The CLI spoke the API as the fake expects and finished its turn: one request for the
    first call, then one per call bringing that call's result (and getting the next call)."""
    assert model.problems == []
    requests = model.agent_requests()
    assert [answered_in(body) for body in requests] == [[]] + [[c.planned.id] for c in calls]
    for body in requests:
        assert body["model"] == MODEL
        assert body["stream"] is True
        assert "Bash" in {t["name"] for t in body["tools"]}
    assert outcome.code == 0, outcome.stderr
    assert outcome.result["is_error"] is False
    assert outcome.result["result"].startswith("The tool call ")


def request_of(gate_url: str, request_id: str) -> dict[str, Any]:
    with httpx.Client(
        base_url=gate_url, headers={"Authorization": f"Bearer {cfg.ADMIN}"}, verify=TLS
    ) as c:
        found: dict[str, Any] = c.get(f"/v1/requests/{request_id}").json()
    return found


# -- one session per way ----------------------------------------------------------------------


@dataclass
class Session:
    """One `claude -p` session of one way, as recorded: the model asked for `approved` (the
    person approved it), then `rejected` (rejected with a comment), then `asked` (approved
    with `edited_args` instead). The tests only read it."""

    agent: Agent
    #: Claude Code's id of this session (the agent may run more sessions later)
    session_id: str
    model: FakeAnthropic
    outcome: Outcome
    approved: Call
    rejected: Call
    asked: Call
    #: what the person changed `asked` into: a command writing `edited_text` into a marker of
    #: its own, `edited_marker`
    edited_args: dict[str, Any]
    edited_marker: Path
    edited_text: str
    #: gate's requests as the person decided them, by call id
    decided: dict[str, dict[str, Any]]
    #: gate's view of the approved request once the session ended (its outcome)
    approved_afterwards: dict[str, Any]


def run_session(cli: Path, way: str, root: Path, gate_url: str) -> Session:
    """Run the session of three calls for `way` (see Session)."""
    agent = new_agent(cli, way, root)
    model = FakeAnthropic().start()
    try:
        approved = marker_call(model, agent.project, "approved.txt")
        rejected = marker_call(model, agent.project, "rejected.txt")
        asked = marker_call(model, agent.project, "asked.txt")
        edited_marker = agent.project / "edited.txt"
        edited_text = f"edited-{uuid.uuid4().hex[:8]}"
        edited_args = {**asked.planned.input, "command": writing(edited_marker, edited_text)}
        # One person decides each call as the session reaches it.
        person = Approver(
            gate_url,
            {
                approved.command: {"verdict": "approve"},
                rejected.command: {"verdict": "reject", "comment": "not in this repository"},
                asked.command: {
                    "verdict": "approve",
                    "edited_args": edited_args,
                    "comment": "use edited.txt",
                },
            },
        )

        outcome = agent.run(model, gate_url, "Write the approved, rejected and asked markers.")

        by_command = person.finish()
    finally:
        model.stop()
    decided = {c.planned.id: by_command[c.command] for c in (approved, rejected, asked)}
    return Session(
        agent=agent,
        session_id=agent.sessions[-1],
        model=model,
        outcome=outcome,
        approved=approved,
        rejected=rejected,
        asked=asked,
        edited_args=edited_args,
        edited_marker=edited_marker,
        edited_text=edited_text,
        decided=decided,
        approved_afterwards=request_of(gate_url, decided[approved.planned.id]["id"]),
    )


class Sessions:
    """Each way's session, run by the first test that needs it and kept for the module's
    other tests (a session that failed fails them all with its error, and is not run again)."""

    def __init__(self, cli: Path, gate_url: str, tmp: pytest.TempPathFactory) -> None:
        self.cli, self.gate_url, self.tmp = cli, gate_url, tmp
        self.runs: dict[str, Session | BaseException] = {}

    def __getitem__(self, way: str) -> Session:
        if way not in self.runs:
            try:
                self.runs[way] = run_session(self.cli, way, self.tmp.mktemp(way), self.gate_url)
            except Exception as exc:  # a skip is no Exception: it skips every time
                self.runs[way] = exc
        run = self.runs[way]
        if isinstance(run, BaseException):
            raise run
        return run


@pytest.fixture(scope="module")
def sessions(
    claude: Path, gate_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Sessions:
    return Sessions(claude, gate_server.url, tmp_path_factory)


@pytest.fixture(params=WAYS)
def session(request: pytest.FixtureRequest, sessions: Sessions) -> Session:
    """The session of three calls of the way this test is for."""
    way: str = request.param
    return sessions[way]


# -- the tests --------------------------------------------------------------------------------


def test_the_session_speaks_the_api_and_ends_its_turn(session: Session) -> None:
    calls = [session.approved, session.rejected, session.asked]
    assert_clean_exchange(session.model, session.outcome, calls)
    # the rejected call is the only one the CLI counts as refused
    assert denied(session.outcome) == [session.rejected.planned.id]


def test_approved_command_runs_and_the_model_gets_its_output(session: Session) -> None:
    call, model = session.approved, session.model
    request = session.decided[call.planned.id]

    assert call.marker.read_text() == call.text + "\n"
    output, is_error = told(model, call)
    assert not is_error and output.startswith(call.text + "\n")
    assert call.planned.id not in denied(session.outcome)
    # The person saw exactly what the model asked to run.
    assert request["tool_args"] == call.planned.input
    assert request["status"] == "approved"
    if session.agent.way in HOOK_WAYS:
        # The hook passed Claude Code's session on, and the example's PostToolUse entry told
        # gate that the approved call ran.
        assert request["session_id"] == session.session_id
        assert session.approved_afterwards["outcome"] == "ran"


def test_rejected_command_does_not_run_and_the_model_gets_the_reason(session: Session) -> None:
    call = session.rejected

    assert not call.marker.exists()
    text, is_error = told(session.model, call)
    assert is_error
    assert "Rejected by alice" in text and "not in this repository" in text
    assert "Do not retry it unchanged" in text
    assert call.planned.id in denied(session.outcome)


def test_edited_command_is_the_one_that_runs(session: Session) -> None:
    call, model = session.asked, session.model

    assert not call.marker.exists()
    assert session.edited_marker.read_text() == session.edited_text + "\n"
    text, is_error = told(model, call)
    assert not is_error and text.startswith(session.edited_text)
    assert session.decided[call.planned.id]["approved_args"] == session.edited_args
    assert call.planned.id not in denied(session.outcome)
    if session.agent.way in HOOK_WAYS:
        # the model is told the call it asked for was changed, and how (PreToolUse's
        # additionalContext; the permission-prompt tool has no way to say it)
        later = json.dumps(request_answering(model, call))
        assert "Approved with edits by alice" in later and "use edited.txt" in later


def test_gate_down_nothing_runs(agent: Agent, model: FakeAnthropic) -> None:
    call = marker_call(model, agent.project, "unreviewed.txt")
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there

    outcome = agent.run(model, down, "Write the unreviewed marker.")

    assert not call.marker.exists()
    text, is_error = told(model, call)
    assert is_error
    assert down in text and "blocked" in text
    assert denied(outcome) == [call.planned.id]
    assert_clean_exchange(model, outcome, [call])


@pytest.mark.parametrize("session", ["gate-init", "permission-prompt-tool"], indirect=True)
def test_a_reused_call_id_does_not_carry_an_approval(
    session: Session, gate_server: ServerProcess
) -> None:
    # A model (or an agent replaying ids on purpose) reuses the id of an approved call for a
    # different command: gate keys requests by call id, and the approval must not transfer.
    # The first call is the session's approved one, which ran; the replay is a new session.
    first = session.approved
    assert first.marker.read_text() == first.text + "\n"

    replay = FakeAnthropic().start()
    try:
        second = session.agent.project / "second.txt"
        command = f"echo replayed > {second}"
        replay.plan("Bash", {"command": command, "description": "again"}, call_id=first.planned.id)
        outcome = session.agent.run(replay, gate_server.url, "Write the second marker.")
        assert not second.exists()
        (result,) = replay.results
        assert result.is_error and "already used for a different call" in result.text
        assert denied(outcome) == [first.planned.id]
    finally:
        replay.stop()
