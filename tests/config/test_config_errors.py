"""A configuration gate cannot run with stops the real commands with one line naming the file,
the key and the reason, and exit status 2: never a traceback, never a half-started server."""

from __future__ import annotations

import math
import os
import re
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from gate.config.settings import MAX_DURATION, parse_duration
from tests.support.cli import gate_in_process, run_gate, serve_refused

CONFIG_EXIT = 2


def _gate(
    tmp_path: Path, toml: str, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`gate <args> --config <file with toml>`, in `tmp_path`, run in this process (`serve`
    only up to where it would start serving: these configurations must stop it before)."""
    path = tmp_path / "gate.toml"
    path.write_text(toml)
    argv = [*args, "--config", str(path)]
    if args[0] == "serve":
        return serve_refused(*argv[1:], env=env, cwd=tmp_path), path
    return gate_in_process(*argv, env=env, cwd=tmp_path), path


def _gate_process(
    tmp_path: Path, toml: str, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`_gate` as a real process: the console entry point, its exit status and its stderr."""
    path = tmp_path / "gate.toml"
    path.write_text(toml)
    return run_gate(*args, "--config", path, env=env, cwd=tmp_path), path


def _config_error(
    r: subprocess.CompletedProcess[str], path: Path, key: str, *words: str, line: int | None = None
) -> str:
    """Exit 2 and `gate: configuration error: <file>[:<line>]: <key>: <reason>`, nothing else."""
    assert r.returncode == CONFIG_EXIT, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    # The last line; start-up log lines (if logging was configured) may come before it.
    said = r.stderr.strip().splitlines()[-1]
    # the line where a test names it, else any (or none: a value from GATE_*, a URL's check)
    place = re.escape(f"{path}:{line}") if line else re.escape(str(path)) + r"(:\d+)?"
    assert re.match(f"gate: configuration error: {place}: {re.escape(key)}: ", said), said
    for word in words:
        assert word in said, (word, said)
    return said


# -- durations ----------------------------------------------------------------------------------


def test_parse_duration_is_bounded_and_names_the_bound() -> None:
    assert parse_duration("3650d") == MAX_DURATION
    assert parse_duration(timedelta(days=1)) == timedelta(days=1)
    for too_long in ("3651d", "99999999999d", "9" * 400 + "s", 1e300, math.inf, timedelta.max):
        with pytest.raises(ValueError, match="at most 3650d"):
            parse_duration(too_long)
    for not_positive in (math.nan, -1, 0, "0s", timedelta(0)):
        with pytest.raises(ValueError, match="must be positive"):
            parse_duration(not_positive)


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('[server]\ndefault_timeout = "99999999999d"\n', "server.default_timeout"),
        ("[server]\nmax_timeout = 1e300\n", "server.max_timeout"),
        ('[[rules]]\nname = "r"\ntimeout = "99999999999d"\n', 'rule "r": timeout'),
        ('[[rules]]\nname = "r"\nmax_grant = "4000d"\n', 'rule "r": max_grant'),
    ],
)
def test_an_overflowing_duration_stops_serve(tmp_path: Path, toml: str, key: str) -> None:
    r, path = _gate(tmp_path, toml, "serve")
    _config_error(r, path, key, "a duration may be at most 3650d")


# -- the port -----------------------------------------------------------------------------------


def test_a_port_out_of_range_stops_serve(tmp_path: Path) -> None:
    r, path = _gate(tmp_path, "[server]\nport = 70000\n", "serve")
    _config_error(r, path, "server.port", "less than or equal to 65535")
    r, path = _gate(tmp_path, "", "serve", env={"GATE_SERVER__PORT": "-1"})
    _config_error(r, path, "server.port", "greater than or equal to 0")
    r, path = _gate(tmp_path, "", "policy", "check", env={"GATE_SERVER__PORT": "65536"})
    _config_error(r, path, "server.port", "65535")
    # On the command line it is argparse's usage error, which also exits 2.
    r, _ = _gate(tmp_path, "", "serve", "--port", "70000")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "argument --port: '70000' is not a port (0 to 65535)" in r.stderr


# -- the database -------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["serve"], ["db", "upgrade"], ["policy", "check"]])
def test_an_unsupported_database_url_is_named_without_its_password(
    tmp_path: Path, command: list[str]
) -> None:
    toml = '[server]\ndatabase_url = "mysql://gate:s3cret-pw@db.internal/gate"\n'
    r, path = _gate(tmp_path, toml, *command)
    line = _config_error(r, path, "server.database_url", "unsupported database scheme 'mysql'")
    assert "sqlite:///" in line and "postgresql://" in line  # says what would work
    assert "s3cret-pw" not in r.stderr + r.stdout
    r, path = _gate(tmp_path, '[server]\ndatabase_url = "gate.db"\n', *command)
    _config_error(r, path, "server.database_url", "unsupported database URL (no scheme://)")


@pytest.mark.parametrize("command", [["serve"], ["db", "upgrade"], ["audit", "verify"]])
def test_a_sqlite_file_in_a_missing_folder_is_named(tmp_path: Path, command: list[str]) -> None:
    # port 0: a serve that got as far as taking its port takes any free one, never 8000
    toml = '[server]\nport = 0\ndatabase_url = "sqlite:///./no/such/folder/gate.db"\n'
    r, path = _gate(tmp_path, toml, *command)
    missing = tmp_path / "no" / "such" / "folder"
    _config_error(r, path, "server.database_url", f"the folder '{missing}'", "does not exist")
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize(
    ("command", "server"),
    [
        (["serve"], ""),
        (["serve"], "migrate_on_start = false\n"),
        (["db", "upgrade"], ""),
        (["audit", "verify"], ""),
    ],
    ids=["serve", "serve without migrating", "db upgrade", "audit verify"],
)
def test_an_unreachable_postgresql_is_named(
    tmp_path: Path, command: list[str], server: str
) -> None:
    # Port 1 on loopback: nothing listens there, the refusal is immediate.
    url = "postgresql://gate:s3cret-pw@127.0.0.1:1/gate"
    # port 0: serve takes its port before it reaches the database; never 8000, which a
    # parallel test (or anything on the machine) may hold
    toml = f'[server]\nport = 0\n{server}database_url = "{url}"\n'
    r, path = _gate(tmp_path, toml, *command)
    _config_error(r, path, "server.database_url", "cannot open the database", "refused")
    assert "s3cret-pw" not in r.stderr + r.stdout


def test_verifying_the_audit_of_a_database_gate_never_made_names_it(tmp_path: Path) -> None:
    # a read-only command: it neither creates a SQLite file nor reads a database with no
    # gate tables as an empty chain ("intact")
    r, path = _gate(tmp_path, '[server]\ndatabase_url = "sqlite:///./gate.db"\n', "audit", "verify")
    _config_error(r, path, "server.database_url", "no SQLite file at", "gate.db")
    assert not (tmp_path / "gate.db").exists()
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE notes (x)").connection.commit()
    toml = '[server]\ndatabase_url = "sqlite:///./other.db"\n'
    r, path = _gate(tmp_path, toml, "audit", "verify")
    _config_error(r, path, "server.database_url", "holds no gate tables")


# -- the file itself ----------------------------------------------------------------------------


def test_a_file_gate_cannot_read_is_named(tmp_path: Path) -> None:
    def run(config: Path, env: dict[str, str] | None = None) -> str:
        r = serve_refused("--config", config, env=env)
        assert r.returncode == CONFIG_EXIT and "Traceback" not in r.stderr, r.stderr
        line = r.stderr.strip().splitlines()[-1]
        assert line.startswith(f"gate: configuration error: {config}: "), line
        return line

    assert run(tmp_path).endswith("cannot be read: Is a directory")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe[server]\n")
    assert run(binary).endswith("not UTF-8 text (byte 0)")
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    line = run(empty, env={"GATE_SERVER": "not json"})
    assert "GATE_* environment variable" in line and '"server"' in line


# -- approvers ----------------------------------------------------------------------------------


def test_a_channel_id_that_is_not_text_or_a_number_stops_serve(tmp_path: Path) -> None:
    toml = '[[approvers]]\nname = "alice"\ntelegram = ["42"]\n'
    r, path = _gate(tmp_path, toml, "serve")
    _config_error(
        r, path, 'approver "alice"', "telegram: a channel id must be text or a whole number", line=1
    )


def test_two_approvers_with_one_email_in_different_letter_case_stop_serve(tmp_path: Path) -> None:
    # email matches in any letter case (a sign-in header, self-approval), so one address
    # would name two people
    toml = (
        '[[approvers]]\nname = "alice"\nemail = "Alice@Example.com"\n'
        '[[approvers]]\nname = "al"\nemail = "alice@example.COM"\n'
    )
    r, _path = _gate(tmp_path, toml, "serve")
    assert r.returncode == CONFIG_EXIT, r.stderr
    assert "Traceback" not in r.stderr
    assert (
        r.stderr.strip()
        .splitlines()[-1]
        .endswith("approver emails must be unique (in any letter case)")
    )


@pytest.mark.parametrize("secret", ["", 'trusted_proxy_secret = "short"\n'])
def test_a_trusted_user_header_without_the_proxys_secret_stops_serve(
    tmp_path: Path, secret: str
) -> None:
    # Trusting the header alone lets anything that reaches gate name itself an approver
    toml = f'[server]\ntrusted_user_header = "X-Forwarded-User"\n{secret}'
    r, path = _gate(tmp_path, toml, "serve")
    line = _config_error(r, path, "server", "trusted_user_header needs trusted_proxy_secret")
    assert "act as any approver" in line and "short" not in line  # the secret is not echoed


# -- what a newcomer gets wrong -------------------------------------------------------------------

#: blocks `import psycopg` in the child process, as a machine without the postgres extra
NO_PSYCOPG = """
import sys


class _NoPsycopg:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("psycopg", "psycopg_binary", "psycopg_c", "psycopg_pool"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoPsycopg())
"""


@pytest.mark.parametrize(
    "command", [["serve"], ["db", "upgrade"], ["audit", "verify"], ["policy", "check"]]
)
def test_a_postgresql_url_without_the_driver_names_the_extra(
    tmp_path: Path, command: list[str]
) -> None:
    # A real process: the driver is missing from the interpreter gate starts in.
    url = "postgresql://gate:s3cret-pw@127.0.0.1:1/gate"
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(NO_PSYCOPG)
    paths = [str(shim), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {"PYTHONPATH": os.pathsep.join(paths)}
    blocked = subprocess.run(
        [sys.executable, "-c", "import psycopg"], env={**os.environ, **env}, capture_output=True
    )
    assert blocked.returncode == 1 and b"No module named 'psycopg'" in blocked.stderr
    toml = f'[server]\nport = 0\ndatabase_url = "{url}"\n'
    r, path = _gate_process(tmp_path, toml, *command, env=env)
    said = _config_error(
        r,
        path,
        "server.database_url",
        "PostgreSQL needs the psycopg driver, which cannot be imported (No module named "
        "'psycopg'): install the postgres extra, pip install 'gate-approvals[postgres]' "
        "(from a clone: pip install '.[postgres]')",
        line=3,
    )
    assert "s3cret-pw" not in said
    # set by the environment instead, the variable is named
    env["GATE_SERVER__DATABASE_URL"] = "postgres://gate@db.internal/gate"
    r, path = _gate_process(tmp_path, "", *command, env=env)
    _config_error(
        r, path, "server.database_url", "pip install 'gate-approvals[postgres]'", "(set by GATE_"
    )


BIG_PAYMENTS = """\
[server]
port = 0

[[approvers]]
name = "alice"

[[rules]]
name = "reads"
tools = ["read_*"]
action = "allow"

[[rules]]
name = "big-payments"
tool = ["pay_*"]
approvers = ["alice"]
"""


def test_an_unknown_key_names_the_rule_the_line_and_the_key_meant(tmp_path: Path) -> None:
    for command in (["serve"], ["policy", "check"]):
        r, path = _gate(tmp_path, BIG_PAYMENTS, *command)
        said = _config_error(r, path, 'rule "big-payments"', line=14)
        assert said.endswith('unknown key "tool"; did you mean "tools"?'), said


@pytest.mark.parametrize(
    ("toml", "line", "where", "says"),
    [
        ("[serverr]\nport = 1\n", 1, None, 'unknown table "serverr"; did you mean "server"?'),
        ("[server]\n\nprot = 8001\n", 3, "server", 'unknown key "prot"; did you mean "port"?'),
        (
            '[[tokens]]\nname = "ci"\nrole = "agent"\ntoken = "t"\nrol = "x"\n',
            5,
            'token "ci"',
            'unknown key "rol"; did you mean "role"?',
        ),
        ('[[rules]]\ntools = ["x"]\n', 1, "[[rules]] #1", 'missing key "name"'),
        (
            '[[rules]]\nname = "r"\nfrobnicate = 1\n',
            3,
            'rule "r"',
            'unknown key "frobnicate"',
        ),
        ('[[rules]]\nname = "r"\naction = "maybe"\n', 3, 'rule "r"', "action: Input should be"),
    ],
)
def test_a_mistake_in_the_file_is_told_by_its_line_and_name(
    tmp_path: Path, toml: str, line: int, where: str | None, says: str
) -> None:
    r, path = _gate(tmp_path, toml, "policy", "check")
    assert r.returncode == CONFIG_EXIT and "Traceback" not in r.stderr, r.stderr
    said = r.stderr.strip().splitlines()[-1]
    place = f"gate: configuration error: {path}:{line}: " + (f"{where}: " if where else "")
    assert said.startswith(place + says), said


def test_a_bad_value_from_the_environment_names_the_variable(tmp_path: Path) -> None:
    r, path = _gate(tmp_path, "[server]\nport = 8000\n", "serve", env={"GATE_SERVER__PORT": "-1"})
    said = _config_error(r, path, "server.port", "greater than or equal to 0")
    assert said.endswith("(set by GATE_SERVER__PORT)") and f"{path}:2" not in said


EXPOSED = {
    "no tokens": (
        '[[approvers]]\nname = "alice"\n',
        "there are no [[tokens]], so no agent could call it (add one: `gate tokens new "
        "my-agent` prints its lines); or bind 127.0.0.1",
    ),
    "no approvers": (
        '[[tokens]]\nname = "ci"\nrole = "agent"\ntoken = "t"\n',
        "there are no [[approvers]], so nobody could decide what it asks (add one: "
        'name = "alice", with password_hash from `gate users hash-password`); or bind',
    ),
    "neither": ('[[rules]]\nname = "r"\n', "no agent could call it (add one: "),
}


@pytest.mark.parametrize("case", list(EXPOSED))
@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_serving_beyond_loopback_that_nobody_could_use_is_refused(
    tmp_path: Path, case: str, host: str
) -> None:
    toml, says = EXPOSED[case]
    r, path = _gate(tmp_path, toml, "serve", "--host", host, "--port", "0")
    assert r.returncode == CONFIG_EXIT and "Traceback" not in r.stderr, r.stderr
    said = r.stderr.strip().splitlines()[-1]
    assert said.startswith(
        f"gate: configuration error: {path}: refusing to serve on {host}, which other "
        "machines can reach: "
    ), said
    assert says in said, said
    if case == "neither":
        assert "and no [[approvers]], so nobody could decide" in said


def test_a_rule_gate_cannot_compile_is_named_with_its_line(tmp_path: Path) -> None:
    toml = (
        '[server]\nport = 0\n\n[[rules]]\nname = "reads.v2"\ntools = ["read_*"]\n'
        'action = "allow"\n\n[[rules]]\nname = "big-payments"\ntools = ["pay_*"]\n'
        'when = "args.amount >"\n'
    )
    checked, path = _gate(tmp_path, toml, "policy", "check")
    assert checked.returncode == 1 and "Traceback" not in checked.stderr, checked.stderr
    assert checked.stderr.startswith(
        f'gate: policy error: {path}:12: rule "big-payments": `when` is not valid CEL: '
    ), checked.stderr
    served, path = _gate(tmp_path, toml, "serve")
    assert served.returncode == CONFIG_EXIT and "Traceback" not in served.stderr
    # the parser's own lines (a caret under the spot) follow the first
    assert (
        f'gate: configuration error: {path}:12: rule "big-payments": `when` is not valid CEL: '
        in served.stderr
    ), served.stderr


def test_a_channel_table_gate_refuses_is_named_with_its_line(tmp_path: Path) -> None:
    toml = '[server]\nport = 0\n\n[channels.slack]\nbot_token = "xoxb-1"\n'
    r, path = _gate(tmp_path, toml, "serve")
    said = _config_error(r, path, "channels.slack.signing_secret", "is required", line=4)
    assert "xoxb-1" not in said


# -- pattern grants -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "words"),
    [
        # a pattern grant that pins nothing would cover every call of the tool under the rule
        ('[[rules]]\nname = "r"\ngrant_scopes = ["pattern"]\n', "grant_pin names no argument"),
        ('[[rules]]\nname = "r"\ngrant_pin = ["repo"]\n', 'does not offer "pattern"'),
    ],
)
def test_a_pattern_grant_must_pin_something(tmp_path: Path, toml: str, words: str) -> None:
    r, path = _gate(tmp_path, toml, "policy", "check")
    # a rule's mistake is a policy error, at the rule's line (as `when` and stage mistakes are)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    said = r.stderr.strip().splitlines()[-1]
    assert said.startswith(f'gate: policy error: {path}:3: rule "r": '), said
    assert words in said, said


def test_an_identity_claim_for_no_chat_platform_stops_serve(tmp_path: Path) -> None:
    # `[oidc] identity_claims` binds ids on chat platforms; a name that is none (a typo of
    # "slack", or "email", which gate.toml binds) would bind nothing, silently
    toml = (
        '[oidc]\nissuer = "https://idp.example"\nclient_id = "gate"\nclient_secret = "s"\n'
        'identity_claims = { slak = "slack_id" }\n'
    )
    r, path = _gate(tmp_path, toml, "serve")
    _config_error(r, path, "oidc", "identity_claims: slak is not a chat platform", "slack")
