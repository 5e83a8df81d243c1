"""Rules' `when` conditions are checked before they run, and fail loudly when they fail.

A condition that can only fail (an unknown variable or method, types that never meet) is
refused when gate.toml is loaded, naming the rule with a hint; each such class is also run
through the real CEL runtime here, to show the refusal is never a false alarm. A condition
that fails on a call anyway is logged (once a minute per rule, with a count) and the request
says so (`Offers.condition_error`); the arguments a condition reads are frozen on the
request (`Offers.watched_args`).
"""

from __future__ import annotations

import logging
import random
import subprocess
from pathlib import Path
from typing import Any

import cel
import pytest

from gate.base.errors import ConfigError
from gate.config.settings import Settings
from gate.policy import cel_ast
from gate.policy.check import check, hint_for_syntax
from gate.policy.rules import CallFacts, Policy
from tests.conftest import GateFactory
from tests.support import config as cfg
from tests.support.cli import run_gate
from tests.support.databases import migrated_sqlite

#: activations the runtime check runs refused conditions against: every shape an argument
#: can take, so "never true" is shown for each
ACTIVATIONS = [
    {
        "tool_name": "Bash",
        "args": {"amount": amount, "command": command, "x": amount, "items": [1, 2]},
        "agent_id": "a",
        "user_id": "u",
        "metadata": {"org": "acme"},
    }
    for amount, command in ((5, "rm -rf /"), ("5", "ls"), (5.5, ""), ([5], "x"), (None, "y"))
]

# (condition, what the refusal says, the hint it gives)
REFUSED = [
    ("command.contains('rm')", "unknown variable `command`", "did you mean `args.command`?"),
    ("args.command.includes('rm')", "unknown method `.includes`", "did you mean `contains`?"),
    ("args.command.startswith('rm')", "unknown method `.startswith`", "`startsWith`"),
    ("size(args.items) > 0 && len(args.items) > 1", "unknown function `len`", "`size`"),
    ("tool == 'Bash'", "unknown variable `tool`", "did you mean `tool_name`?"),
    ("agent == 'bot'", "unknown variable `agent`", "did you mean `agent_id`?"),
    ("args.x == None", "unknown variable `None`", "CEL writes `null`"),
    ("contains(args.command, 'rm')", "is a method in CEL", ".contains(...)"),
    ("args.command.lowerAscii() == 'rm'", "unknown method `.lowerAscii`", ""),
    ("math.greatest(1, 2) > 1", "unknown function `math.greatest`", "core functions"),
    ("tool_name > 5", "cannot compare text with a number", "fails on every call"),
    ("size(args.command) == '3'", "compares a number with text", "never true"),
    ("args.amount * 1.5 > 1 && 1 + 1.5 > 2", "cannot combine int and double", "`1.0`"),
    ("'rm' in args.command && 'r' in 'rm'", "`in` looks in a list or a map", ""),
    ("args.amount == '5' && args.amount > 100", "compared with a number and with text", ""),
    ("args.amount == 1 && args.amount == 2", "must equal 1 and 2", ""),
    ("tool_name.length > 3", "reads a field of text", "`size(...)`"),
    ("size(args.command).contains('a')", "works on text, but here it is called on a number", ""),
    ("args.x && 1", "`&&` needs true or false", ""),
    (".args.x == 1", "unknown variable `.args`", "drop the leading dot"),
]

ACCEPTED = [
    ("args.amount > 50000", ("amount",)),
    ("has(args.amount) && args.amount > 5", ("amount",)),
    ("args['amount'] > 1 || 'note' in args", ("amount", "note")),
    ("args.command.contains('rm') || args.command.startsWith('git push')", ("command",)),
    ("args.items.exists(i, i.price > 100)", ("items",)),
    # a macro's own `args` is not the call's arguments
    ("[1, 2].exists(args, args > 1) && args.flag == true", ("flag",)),
    ("agent_id == 'bot' && user_id.startsWith('ext-') && metadata.org == 'acme'", ()),
    ("type(args.x) == string && size(args.x) < 10", ("x",)),
    ("args.a ? args.b == 1 : args.c == 2", ("a", "b", "c")),
    ("timestamp(args.at) > timestamp('2026-01-01T00:00:00Z')", ("at",)),
    ("args.amount == 5 || args.amount == '5'", ("amount",)),  # either shape: fine
    ("args.path.matches('^/etc/') && !args.path.endsWith('.md')", ("path",)),
    ("tool_name in ['Bash', 'Write'] && args.x != null", ("x",)),
    ("optional.of(args.x).hasValue()", ("x",)),
    ('args["weird key"] == 1', ("weird key",)),
    ("1u == 1 && 5 < 5.5 && args.n * 2 > 3", ("n",)),
    ("duration('1h') + duration('1m') > duration('61m') || args.z", ("z",)),
]


def _policy(when: str, action: str = "ask") -> Policy:
    data = cfg.settings_data("sqlite://")
    data["rules"] = [{"name": "guarded", "tools": ["*"], "action": action, "when": when}]
    return Policy(Settings(**data))


@pytest.mark.parametrize(("when", "says", "hint"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_condition_that_can_only_fail_is_refused_naming_the_rule(
    when: str, says: str, hint: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _policy(when)
    message = str(info.value)
    assert info.value.key == "rules.guarded.when"
    assert says in message and hint in message


@pytest.mark.parametrize(("when", "says", "hint"), REFUSED, ids=[r[0] for r in REFUSED])
def test_what_is_refused_really_fails_or_never_matches_in_the_runtime(
    when: str, says: str, hint: str
) -> None:
    program = cel.compile(when)  # CEL itself accepts every one of them
    for activation in ACTIVATIONS:
        try:
            result = program.execute(activation)
        except BaseException as exc:  # any CEL failure is the point
            assert not isinstance(exc, KeyboardInterrupt | SystemExit)
            continue
        assert result is not True, (when, activation)


@pytest.mark.parametrize(("when", "watched"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_sound_conditions_pass_and_name_what_they_read(when: str, watched: tuple[str, ...]) -> None:
    cel.compile(when)
    checked = check(when)
    assert checked.problems == () and checked.unchecked is None
    assert checked.watched == watched
    rule = _policy(when).rules[0]
    assert rule.offers.watched_args == watched


@pytest.mark.parametrize(
    ("when", "hint"),
    [
        ("args.x > 1 and args.y < 2", "`and` -> `&&`"),
        ("args.x > 1 or args.y < 2", "`or` -> `||`"),
        ("not args.x", "`not` -> `!`"),
        ("args.x = 1", "`=` -> `==`"),
        ("args.x === 1", "`===` -> `==`"),
    ],
)
def test_text_cel_refuses_gets_a_hint(when: str, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        _policy(when)
    assert "not valid CEL" in str(info.value) and hint in str(info.value)
    assert hint_for_syntax('args.note == "this and that = x"') is None  # inside a string


def _gate(*args: str) -> subprocess.CompletedProcess[str]:
    return run_gate(*args)


def test_policy_check_names_every_bad_rule_with_its_hint(tmp_path: Path) -> None:
    data = cfg.settings_data(migrated_sqlite(tmp_path / "gate.db"))
    data["rules"] = [
        {"name": "rm", "tools": ["Bash"], "when": "command.contains('rm')"},
        {"name": "fine", "tools": ["Write"], "when": "args.file_path.startsWith('/etc')"},
        {"name": "js", "tools": ["Edit"], "when": "args.old_string.includes('x')"},
    ]
    path = tmp_path / "gate.toml"
    path.write_text(cfg.to_toml(data))

    done = _gate("policy", "check", "--config", str(path))

    assert done.returncode == 1
    assert 'rule "rm"' in done.stderr and "did you mean `args.command`?" in done.stderr
    assert 'rule "js"' in done.stderr and "did you mean `contains`?" in done.stderr
    assert 'rule "fine"' not in done.stderr and "rules.fine" not in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_refuses_to_start_on_a_condition_that_can_only_fail(tmp_path: Path) -> None:
    data = cfg.settings_data(migrated_sqlite(tmp_path / "gate.db"))
    data["rules"] = [{"name": "rm", "tools": ["Bash"], "when": "command.contains('rm')"}]
    path = tmp_path / "gate.toml"
    path.write_text(cfg.to_toml(data))

    done = _gate("serve", "--config", str(path), "--port", "0")

    assert done.returncode == 2
    assert 'rule "rm"' in done.stderr and "unknown variable `command`" in done.stderr


def test_a_condition_failing_on_a_call_is_logged_per_rule_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [1000.0]
    data = cfg.settings_data("sqlite://")
    data["rules"] = [
        {"name": "pay", "tools": ["pay"], "when": "args.amount > 100"},
        {"name": "wire", "tools": ["wire"], "when": "args.amount > 100", "action": "deny"},
    ]
    policy = Policy(Settings(**data), clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="gate.policy")

    for _ in range(5):  # no `amount`: the condition fails on each
        decision = policy.evaluate(CallFacts("pay", {"note": "no amount"}))
        assert decision.action == "ask" and decision.condition_error is not None
    policy.evaluate(CallFacts("wire", {}))
    now[0] += 61
    policy.evaluate(CallFacts("pay", {}))

    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert lines[0].startswith("rule 'pay': `when` failed (no such key")
    assert "asked a person" in lines[0]
    assert lines[1].startswith("rule 'wire'") and "denied" in lines[1]
    assert "4 more failure(s) since the last report" in lines[2]
    assert "gate asked a person to be safe" in str(decision.condition_error)


def test_the_request_says_its_condition_failed_and_what_it_reads(
    make_gate: GateFactory, sqlite_url: str
) -> None:
    data = cfg.settings_data(sqlite_url)
    data["rules"] = [
        {"name": "big", "tools": ["pay_*"], "when": "args.amount > 100", "timeout": "10m"}
    ]
    gate = make_gate(Settings(**data))
    asked = gate.submit(tool_name="pay_vendor", tool_args={"amount": 500})
    failed = gate.submit(tool_name="pay_vendor", tool_args={"amount": "lots"})

    assert (asked["decision"], failed["decision"]) == ("ask", "ask")
    plain = gate.state.service.view(asked["request"]["id"])
    broken = gate.state.service.view(failed["request"]["id"])
    assert plain is not None and broken is not None
    assert plain.offers.condition_error is None
    assert plain.offers.watched_args == broken.offers.watched_args == ("amount",)
    error = broken.offers.condition_error
    assert error is not None and "`args.amount > 100`" in error
    assert "gate asked a person to be safe" in error


# -- the parser against CEL's own ------------------------------------------------------------

_PIECES = [
    "args", "args.x", "args['k']", "tool_name", "x", "1", "1u", "2.5", "-3", "'s'", '"t"',
    "r'\\d'", "b'y'", "true", "null", "[1, 2]", "{'a': 1}", "size(args.x)", "has(args.y)",
    "args.l.exists(e, e > 1)", "args.m.map(k, k)", ".args", "(args.z)", "a.b.c", "f(1)",
]  # fmt: skip
_OPERATORS = [" && ", " || ", " == ", " != ", " < ", " >= ", " + ", " - ", " * ", " % ", " in "]


def _generated(rng: random.Random) -> str:
    parts = [rng.choice(_PIECES)]
    for _ in range(rng.randint(0, 5)):
        op = rng.choice(_OPERATORS + ["", ".", "?", ":", ")", "(", "!", "[", "]", ","])
        parts.append(op)
        parts.append(rng.choice(_PIECES + ["!" + rng.choice(_PIECES)]))
    text = "".join(parts)
    if rng.random() < 0.2:  # cut anywhere: half a string, half an operator
        text = text[: rng.randint(0, len(text))]
    return text


def _names(node: cel_ast.Node, bound: frozenset[str] = frozenset()) -> set[str]:
    """Every identifier the tree uses as a variable (what `Program.variables()` lists)."""
    found: set[str] = set()
    if isinstance(node, cel_ast.Ident):
        found.add(node.name)
    for child in cel_ast.children(node):
        found |= _names(child)
    return found


def test_whatever_cel_accepts_the_parser_reads_with_the_same_variables() -> None:
    rng = random.Random(2804)
    accepted = 0
    for _ in range(4000):
        text = _generated(rng)
        try:
            program = cel.compile(text)
        except ValueError:
            try:  # the parser may refuse it too, but only with its own error
                cel_ast.parse(text)
            except cel_ast.ParseError:
                pass
            continue
        accepted += 1
        tree = cel_ast.parse(text)
        assert _names(tree) == set(program.variables()), text
        check(text)  # never raises
    assert accepted > 500


@pytest.mark.parametrize(
    "text",
    [
        "(" * 90 + "1" + ")" * 90,
        "!" * 5000 + "true",
        "-" * 5000 + "1",
        " || ".join(["true"] * 5000),
        "a" + ".b" * 5000,
        "'" + "\\" * 9999 + "'",
        '"""' + "x" * 100_000 + '"""',
        "[" * 99 + "]" * 99,
        "'\\u{1F600}' == 'x'",
        "'\\uD800' == 'x'",
        "'\\U0010FFFF' == '\\U00110000'",
        "1" * 5000,
        "args.x // a comment with 'quote\n == 1",
    ],
    ids=lambda t: t[:20],
)
def test_hostile_expressions_get_an_answer_not_a_crash(text: str) -> None:
    try:
        cel.compile(text)
    except ValueError:
        compiled = False
    else:
        compiled = True
    try:
        checked: Any = check(text)
    except RecursionError:  # pragma: no cover - the point of the test
        pytest.fail(f"recursion on {text[:30]!r}")
    if compiled:
        assert checked.problems is not None
