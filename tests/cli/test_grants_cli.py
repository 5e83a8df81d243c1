"""`gate grants list|revoke` against a running server: uses left, and how each grant ended."""

from __future__ import annotations

from gate.config.settings import Settings
from tests.conftest import GateFactory
from tests.support import config as cfg
from tests.support.cli import run_gate

RELEASES = {
    "name": "releases",
    "tools": ["release_*"],
    "timeout": "10m",
    "grant_scopes": ["call", "pattern"],
    "grant_pin": ["repo"],
    "max_grant_uses": 3,
}


def test_grants_list_shows_uses_left_and_how_each_ended(
    make_gate: GateFactory, sqlite_url: str
) -> None:
    data = cfg.settings_data(sqlite_url)
    data["rules"] = [RELEASES, *data["rules"]]
    gate = make_gate(settings=Settings(**data))
    where = ["--url", gate.url, "--token", cfg.BOB]
    assert run_gate("grants", "list", *where).stdout == (
        "no active grants (--all shows ended ones)\n"
    )
    for args, grant in (
        ({"repo": "web", "tag": "v1"}, {"scope": "pattern", "duration": "30m", "uses": 2}),
        ({"repo": "api"}, {"scope": "call", "duration": "30m", "uses": 1}),
    ):
        rid = gate.submit(tool_name="release_app", tool_args=args)["request"]["id"]
        with gate.client(cfg.ALICE) as c:
            body = {"verdict": "approve", "grant": grant}
            assert c.post(f"/v1/requests/{rid}/decision", json=body).status_code == 200
    assert gate.submit(tool_name="release_app", tool_args={"repo": "web"})["decision"] == "allow"
    assert gate.submit(tool_name="release_app", tool_args={"repo": "api"})["decision"] == "allow"

    active = run_gate("grants", "list", *where)
    assert active.returncode == 0, active.stderr
    head, _, row = active.stdout.splitlines()
    assert head.split() == [
        "ID", "STATUS", "TOOL", "SCOPE", "COVERS", "BY", "USES", "LEFT", "ENDS/ENDED", "(UTC)"
    ]  # fmt: skip
    cells = row.split()
    assert cells[1:9] == ["active", "release_app", "pattern", 'repo="web"', "alice", "1", "of", "2"]
    assert cells[9] == "1"  # uses left
    grant_id = row.split()[0]
    revoked = run_gate("grants", "revoke", grant_id, *where)
    assert revoked.stdout == f"{grant_id}: revoked; calls it covered ask a person again\n"

    every = run_gate("grants", "list", "--all", *where).stdout.splitlines()[2:]
    ended = sorted((line.split()[1], line.split()[3], line.split()[-2]) for line in every)
    # (status, scope, uses left): the call grant used up its one use, the pattern one revoked
    assert ended == [("revoked", "pattern", "1"), ("used_up", "call", "0")], every
