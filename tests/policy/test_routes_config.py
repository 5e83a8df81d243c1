"""A route that cannot work is refused when gate.toml is loaded, naming the file, the line
and the route: by `gate serve`'s policy load (in process) and by `gate policy check`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gate.base.errors import ConfigError
from gate.config.errors import located
from gate.config.settings import load_settings
from gate.policy.rules import Policy

BASE = """
[channels.log]

[[approvers]]
name = "alice"
groups = ["finance"]
log = "dm-alice"

[[approvers]]
name = "bob"
groups = ["finance"]

[[rules]]
name = "payments"
tools = ["pay_*"]
approvers = ["group:finance"]

[[oncall]]
name = "finance"
people = ["alice"]
start = 2026-11-23T09:00:00Z
"""
#: the `[[routes]]` header is on this line; the keys a case adds follow it, from line 24
HEADER = BASE.count("\n") + 2


def _write(tmp_path: Path, route: str) -> Path:
    path = tmp_path / "gate.toml"
    path.write_text(BASE + '\n[[routes]]\nname = "finance"\n' + route)
    return path


@pytest.mark.parametrize(
    ("route", "offset", "says"),
    [
        ('channels = ["slack:C0FIN"]\n', 2, "channel 'slack' is not configured"),
        ('channels = ["finance-room"]\n', 2, "must look like 'slack:C0123'"),
        ('when = "args.amount >"\nchannels = ["log:x"]\n', 2, "`when` is not valid CEL"),
        ('when = "args.amount + 1"\nchannels = ["log:x"]\n', 2, "must be a condition"),
        ('when = "command == 1"\nchannels = ["log:x"]\n', 2, "fails on every call"),
        # a route is chosen when the request is made, before anything is counted: a history
        # term there would fail on every call and send every card wider
        (
            'when = \'history.count("pay_*", "1h") > 3\'\nchannels = ["log:x"]\n',
            2,
            "reads the call history, which only a rule's condition can",
        ),
        ('rules = ["payment"]\nchannels = ["log:x"]\n', 2, "no rule called 'payment'"),
        ('users = ["dave"]\n', 2, "'dave' is not in [[approvers]]"),
        ('users = ["bob"]\n', 2, "'bob' has no id on any configured channel"),
        ('users = ["group:finance"]\n', 2, "'bob' has no id on any configured channel"),
        ('oncall = ["ops"]\n', 2, "no [[oncall]] schedule called 'ops'"),
        ("stop = false\n", 0, "a route needs somewhere to send the card"),
    ],
)
def test_a_route_that_cannot_work_is_refused_at_load(
    tmp_path: Path, route: str, offset: int, says: str
) -> None:
    path = _write(tmp_path, route)
    settings = load_settings(path)
    with pytest.raises(ConfigError) as caught:
        Policy(settings)
    said = str(located(caught.value))
    line = HEADER + offset
    assert said.startswith(f'{path}:{line}: route "finance": '), said
    assert says in said, said


def test_an_unreachable_on_call_person_is_refused_at_the_schedule(tmp_path: Path) -> None:
    path = tmp_path / "gate.toml"
    text = BASE.replace('people = ["alice"]', 'people = ["alice", "bob"]')
    path.write_text(text + '\n[[routes]]\nname = "r"\noncall = ["finance"]\n')
    with pytest.raises(ConfigError) as caught:
        Policy(load_settings(path))
    said = str(located(caught.value))
    line = text.splitlines().index('people = ["alice", "bob"]') + 1
    assert said.startswith(f'{path}:{line}: on-call schedule "finance": '), said
    assert "'bob' has no id on any configured channel" in said


def test_an_on_call_start_without_a_time_zone_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "gate.toml"
    path.write_text(BASE.replace("2026-11-23T09:00:00Z", "2026-11-23T09:00:00"))
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert "give the time zone" in str(caught.value)


def test_policy_check_names_the_route_and_lists_good_ones(tmp_path: Path) -> None:
    def check(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gate.cli", "policy", "check", "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=dict(os.environ),
        )

    bad = check(_write(tmp_path, 'channels = ["slack:C0FIN"]\n'))
    assert bad.returncode == 1 and "Traceback" not in bad.stderr, bad.stderr
    assert f'{tmp_path / "gate.toml"}:{HEADER + 2}: route "finance"' in bad.stderr
    good = check(_write(tmp_path, 'when = "args.amount > 10"\nchannels = ["log:fin"]\n'))
    assert good.returncode == 0, good.stderr
    assert "route finance: requests when args.amount > 10" in good.stdout
