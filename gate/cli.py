"""The `gate` command: serve | hook | init | mcp | db | policy | requests | users.

Only the standard library is imported at module level: `gate hook` runs once per tool call,
so everything heavy is imported inside the subcommand that needs it.
"""

from __future__ import annotations

import sys

if sys.argv[1:2] == ["hook"]:
    # `gate hook` answers (a deny) even when it is stopped while still starting: the stop
    # signals are caught before anything else is imported (gate.hook.start).
    from gate.hook.start import catch as _catch_stops

    _catch_stops()

import argparse
import json
from collections.abc import Callable, Sequence

# `gate hook` pays for every module-level import on each tool call: pathlib and typing are
# only needed elsewhere (typing only for annotations).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

Handler = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `gate` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "hook":
        from gate.hook.command import main as hook_main

        return hook_main(args[1:])
    if args and args[0] == "mcp":
        from gate.mcp.sealed import SealError, seal

        try:
            seal(args[1:])  # restarts without $GATE_TOKEN, before gate.mcp's imports
        except SealError as exc:
            sys.stderr.write(f"gate: {exc}\n")
            return 2
        # gate.mcp imports the MCP SDK (an optional extra) only inside its subcommands
        from gate.mcp import main as mcp_main

        return mcp_main(args[1:])
    parser = _parser()
    ns = parser.parse_args(args)
    handler: Handler | None = getattr(ns, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return handler(ns)
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    # the policy commands' --config, shared (standard library only, like this module)
    from gate.policy.commands import config_arg

    parser = argparse.ArgumentParser(
        prog="gate", description="Human approval for AI agent tool calls."
    )
    parser.add_argument(
        "--version", action="version", version=f"gate {version()}", help="print the version"
    )
    sub = parser.add_subparsers(metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the server")
    config_arg(serve)
    serve.add_argument("--host", help="address to bind (default: [server].host, 127.0.0.1)")
    serve.add_argument("--port", type=_port, help="port (default: [server].port, 8000)")
    serve.set_defaults(handler=_serve)

    sub.add_parser("hook", help="pre-tool hook for agents (see `gate hook --help`)")
    sub.add_parser("mcp", help="gate for MCP clients: prompt | proxy (see `gate mcp --help`)")

    db = sub.add_parser("db", help="database tasks").add_subparsers(metavar="TASK")
    up = db.add_parser("upgrade", help="apply pending migrations")
    config_arg(up)
    up.set_defaults(handler=_db_upgrade)

    policy = sub.add_parser("policy", help="check, explain, test, lint rules").add_subparsers(
        metavar="TASK"
    )
    check = policy.add_parser("check", help="validate gate.toml; exit 1 naming what is wrong")
    config_arg(check)
    check.set_defaults(handler=_policy_check)
    explain = policy.add_parser("explain", help="say which rule matches a call, and why")
    config_arg(explain)
    explain.add_argument("payload", help="JSON file with a POST /v1/gate body (or - for stdin)")
    explain.set_defaults(handler=_policy_explain)
    # `gate policy test` and `gate policy lint` (gate/policy/commands.py)
    from gate.policy.commands import add_commands as add_policy_commands

    add_policy_commands(policy)
    from gate.insights.commands import add_commands as add_history_commands

    add_history_commands(policy)

    audit = sub.add_parser("audit", help="the tamper-evident audit log").add_subparsers(
        metavar="TASK"
    )
    verify = audit.add_parser("verify", help="recompute every audit hash chain; exit 1 if broken")
    config_arg(verify)
    verify.set_defaults(handler=_audit_verify)

    from gate.client.terminal import add_commands

    add_commands(sub)

    from gate.hook.setup import add_commands as add_init_commands

    add_init_commands(sub)
    _add_credential_commands(sub)
    return parser


def _add_credential_commands(sub: Any) -> None:
    """`gate users hash-password` and `gate tokens new`: secrets for gate.toml."""
    users = sub.add_parser("users", help="approver accounts").add_subparsers(metavar="TASK")
    hash_pw = users.add_parser(
        "hash-password",
        help="print an argon2 hash for [[approvers]] password_hash (password from stdin or prompt)",
    )
    hash_pw.set_defaults(handler=_hash_password)

    tokens = sub.add_parser("tokens", help="API tokens for agents, approvers and admins")
    new_token = tokens.add_subparsers(metavar="TASK").add_parser(
        "new", help="make a token: print it once, and the [[tokens]] lines with its hash"
    )
    new_token.add_argument("name", help="what the token is for, e.g. billing-agent")
    new_token.add_argument(
        "--role",
        choices=["agent", "approver", "admin"],
        default="agent",
        help="agent: asks (default); approver: decides as --approver; admin: both, and more",
    )
    new_token.add_argument(
        "--approver", help="the [[approvers]] name this token acts as (required for approver)"
    )
    new_token.set_defaults(handler=_new_token)


def version() -> str:
    """The installed version of gate (`gate --version`), or a word on why it is unknown."""
    from importlib import metadata

    from gate.config.connections import DISTRIBUTION

    # The distribution's name, then the name it had before it was published (a checkout
    # installed before the rename still answers).
    for name in (DISTRIBUTION, "gate"):
        try:
            found = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if found.entry_points.select(group="console_scripts", name="gate"):
            return found.version
    return f"unknown (not installed as {DISTRIBUTION}; run from a checkout)"


def _new_token(ns: argparse.Namespace) -> int:
    """Print a fresh token and the gate.toml entry that stores only its SHA-256."""
    import secrets

    from gate.identity.auth import sha256_hex

    if ns.role == "approver" and not ns.approver:
        print("gate: an approver token needs --approver NAME", file=sys.stderr)  # noqa: T201
        return 2
    token = f"gate_{ns.role}_{secrets.token_urlsafe(32)}"
    lines = [
        "[[tokens]]",
        f"name = {json.dumps(ns.name)}",
        f'role = "{ns.role}"',
        f'token_sha256 = "{sha256_hex(token)}"',
    ]
    if ns.approver:
        lines.append(f"approver = {json.dumps(ns.approver)}")
    print(f"token (shown once; give it to the {ns.role} as GATE_TOKEN):", file=sys.stderr)  # noqa: T201
    print(token)  # noqa: T201
    print("\nadd to gate.toml (then restart gate serve):", file=sys.stderr)  # noqa: T201
    print("\n".join(lines))  # noqa: T201
    return 0


def _hash_password(ns: argparse.Namespace) -> int:
    import getpass

    from gate.identity.auth import hash_password

    if sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            print("gate: the passwords differ", file=sys.stderr)  # noqa: T201
            return 1
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        print("gate: empty password", file=sys.stderr)  # noqa: T201
        return 1
    print(hash_password(password))  # noqa: T201
    return 0


#: exit status when gate cannot start because of its configuration (argparse uses 2 too)
CONFIG_EXIT = 2


def _port(text: str) -> int:
    """argparse type for --port: a TCP port, or 0 for any free one."""
    if not text.isascii() or not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text[:20]!r} is not a port (0 to 65535)")
    return int(text)


def _load(ns: argparse.Namespace, **server: Any) -> Any:
    from gate.base.errors import ConfigError
    from gate.config.settings import load_settings

    try:
        settings = load_settings(ns.config)
        for key, value in server.items():
            if value is not None:
                setattr(settings.server, key, value)
        return settings
    except ConfigError as exc:
        raise SystemExit(_config_failure(exc)) from None


def _config_failure(exc: Exception, source: str | None = None) -> int:
    """Print `gate: configuration error: <file>, <key>: <reason>`; the exit status."""
    from gate.base.errors import ConfigError
    from gate.config.errors import located

    if isinstance(exc, ConfigError) and exc.source is None and source:
        exc = ConfigError(exc.reason, source=source, key=exc.key, line=exc.line)
    if isinstance(exc, ConfigError):
        exc = located(exc)
    print(f"gate: configuration error: {exc}", file=sys.stderr)  # noqa: T201
    return CONFIG_EXIT


def _serve(ns: argparse.Namespace) -> int:
    from gate.base.errors import ConfigError
    from gate.config.exposure import exposure_problem

    settings = _load(ns, host=ns.host, port=ns.port)
    exposed = exposure_problem(settings)
    if exposed is not None:
        return _config_failure(ConfigError(exposed, source=settings.source))
    # The server's imports (FastAPI, SQLAlchemy, the app: about 1.5 s of CPU) only once the
    # settings are known good, so a mistake in gate.toml is named at once.
    from gate.app import create_app
    from gate.base.logs import configure_logging
    from gate.server.serve import GateServer, listen, server_config

    configure_logging(settings.server.log_level, json_logs=settings.server.log_json)
    # Take the port before anything touches the database (see gate.server.serve.listen).
    try:
        sock = listen(settings.server.host, settings.server.port)
    except OSError as exc:
        print(  # noqa: T201
            f"gate: cannot listen on {settings.server.host}:{settings.server.port}: "
            f"{exc.strerror or exc} (is another gate serve running there? use --port)",
            file=sys.stderr,
        )
        return 1
    try:
        app = create_app(settings)
        # Without migrate_on_start nothing has connected yet: an unreachable database is
        # named here, not in a traceback from the first sweep.
        app.state.gate.db.check_reachable()
    except ConfigError as exc:
        sock.close()
        return _config_failure(exc, settings.source)
    import logging

    for warning in [*app.state.gate.policy.warnings, *_unsent_tools(settings)]:
        logging.getLogger("gate.policy").warning("%s", warning)
    # uvicorn with gate's connection limits: read deadline, header cap, connection cap
    GateServer(server_config(app, settings)).run(sockets=[sock])
    return 0


def _audit_verify(ns: argparse.Namespace) -> int:
    from gate.base.errors import ConfigError
    from gate.decisions import audit
    from gate.store.db import Database, existing_schema

    settings = _load(ns)
    try:
        # checked before it is opened: opening a SQLite file that is not there creates it
        existing_schema(settings.server.database_url)
        db = Database(settings.server.database_url)
    except ConfigError as exc:
        return _config_failure(exc, settings.source)
    try:
        problems = audit.verify(db)
    finally:
        db.dispose()
    for line in problems:
        print(line)  # noqa: T201
    if problems:
        print(f"audit chain BROKEN: {len(problems)} problem(s)", file=sys.stderr)  # noqa: T201
        return 1
    print("audit chain intact")  # noqa: T201
    return 0


def _db_upgrade(ns: argparse.Namespace) -> int:
    from gate.base.errors import ConfigError
    from gate.store.db import upgrade

    settings = _load(ns)
    try:
        upgrade(settings.server.database_url)
    except ConfigError as exc:
        return _config_failure(exc, settings.source)
    print("database is at the latest schema")  # noqa: T201
    return 0


def _policy_check(ns: argparse.Namespace) -> int:
    from gate.policy import shadow
    from gate.policy.rules import compile_rules

    settings = _load(ns)
    # every rule is checked, so one run names every problem, not only the first
    rules, problems, warnings = compile_rules(settings)
    problems += _route_problems(settings)
    for warning in warnings:
        print(f"gate: warning: {warning}", file=sys.stderr)  # noqa: T201
    if problems:
        from gate.config.errors import located

        for problem in problems:
            print(f"gate: policy error: {located(problem)}", file=sys.stderr)  # noqa: T201
        return 1
    from gate.policy.revision import revision

    print(f"{settings.source}: OK, {len(rules)} rule(s), policy revision {revision(settings)}")  # noqa: T201
    for rule in rules:
        when = f" when {rule.when}" if rule.when else ""
        trial = f" [SHADOW until {shadow.shown(rule.until)}]" if rule.until else ""
        print(f"  {rule.name}: {rule.action} {list(rule.tools)}{when}{trial}")  # noqa: T201
    for route in settings.routes:
        when = f" when {route.when}" if route.when else ""
        of = f" of {route.rules}" if route.rules is not None else ""
        print(f"  route {route.name}: requests{of}{when}")  # noqa: T201
    if any(rule.until for rule in rules):
        print(  # noqa: T201
            "gate: shadow rules are tried beside the live ones and never answer a call; past "
            "`until` this policy no longer loads",
            file=sys.stderr,
        )
    for warning in _unsent_tools(settings):
        print(f"gate: warning: {warning}", file=sys.stderr)  # noqa: T201
    return 0


def _route_problems(settings: Any) -> list[Any]:
    """The `[[routes]]` problem, if any (`gate.policy.routes`, which stops at the first)."""
    from gate.base.errors import ConfigError
    from gate.policy.routes import Router

    try:
        Router(settings)
    except ConfigError as exc:
        return [exc]
    return []


def _unsent_tools(settings: Any) -> list[str]:
    """A warning per rule naming a tool the hook `gate init` installed (in this project or
    for this user) never sends to gate."""
    from pathlib import Path

    from gate.policy import matchers as hook_matchers

    hooks = hook_matchers.installed(hook_matchers.hook_files(Path.cwd()))
    return hook_matchers.uncovered([(r.name, r.tools) for r in settings.rules], hooks)


def _policy_explain(ns: argparse.Namespace) -> int:
    from pathlib import Path

    from gate.base.errors import ConfigError
    from gate.decisions.history import explain_reader
    from gate.policy.rules import CallFacts, Policy

    settings = _load(ns)
    try:
        policy = Policy(settings)
        raw = sys.stdin.read() if ns.payload == "-" else Path(ns.payload).read_text()
        body = json.loads(raw)
    except ConfigError as exc:
        print(f"gate: policy error: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    except (OSError, json.JSONDecodeError) as exc:
        print(f"gate: cannot read payload {ns.payload}: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    if not isinstance(body, dict) or "tool_name" not in body:
        print("gate: the payload must be a JSON object with tool_name", file=sys.stderr)  # noqa: T201
        return 1
    facts = CallFacts(
        tool_name=str(body["tool_name"]),
        args=body.get("tool_args") or body.get("tool_input") or {},
        agent_id=body.get("agent_id"),
        user_id=body.get("user_id"),
        metadata=body.get("metadata") or {},
    )
    try:
        reader = explain_reader(settings, policy, body)
    except ConfigError as exc:
        print(f"gate: payload error: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    decision = policy.evaluate(facts, reader)
    result: dict[str, Any] = {
        "decision": decision.action or "allow",
        "rule": decision.rule.name if decision.rule else None,
        "reason": decision.reason,
        "trail": list(decision.trail),
        # what each shadow rule that could have changed the answer would have said
        "shadow": [outcome.as_dict() for outcome in decision.shadow],
        # each history term the rules tried read, as written, with its value
        "history": dict(decision.history),
    }
    if decision.condition_error:
        result["condition_error"] = decision.condition_error
    if decision.action == "ask" and decision.rule is not None:
        result["decided_by"] = policy.chain_of(decision.rule)
    print(json.dumps(result, indent=2))  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
