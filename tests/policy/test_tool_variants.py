"""A rule for a tool also catches the tool's case, width and look-alike variants.

An agent runtime or MCP upstream that looks tool names up loosely runs `Bash` for `bash`,
`Ｂａｓｈ` or `Bаsh` (a Cyrillic "а"): each must meet the rule written for `Bash`. One class of
variant per case, through the public API (`POST /v1/gate`). An allow rule is the other way
round: it lets through only the name as written, so a variant never gets more than the name
it imitates.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from gate.config.settings import Settings
from gate.policy import toolnames
from gate.policy.toolnames import canonical
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg

VARIANTS = {
    "lower case": "bash",
    "upper case": "BASH",
    "fullwidth": "\uff22\uff41\uff53\uff48",  # Ｂａｓｈ
    "cyrillic a": "B\u0430sh",  # Bаsh
    "cyrillic and greek capitals": "\u0412\u0391sh",  # ВΑsh
    "zero-width space": "Bas\u200bh",
    "bidi mark and soft hyphen": "\u200fBa\u00adsh",
    "mathematical bold": "\U0001d401\U0001d41a\U0001d42c\U0001d421",  # 𝐁𝐚𝐬𝐡
    "trailing no-break space": "Bash\u00a0",
    "cyrillic capital i": "\u0406nit",  # Іnit, for a rule on `init`
}


@pytest.fixture
def gate(make_gate: GateFactory, sqlite_url: str) -> Gate:
    data = cfg.settings_data(sqlite_url)
    data["rules"] = [
        {"name": "reads", "tools": ["Read", "Grep"], "action": "allow"},
        {"name": "shell", "tools": ["Bash", "init"], "timeout": "10m", "grant_scopes": ["session"]},
        {"name": "no-deletes", "tools": ["mcp__fs__delete_*"], "action": "deny"},
    ]
    return make_gate(Settings(**data))


@pytest.mark.parametrize("name", VARIANTS.values(), ids=list(VARIANTS))
def test_a_variant_of_a_name_meets_the_rule_for_that_name(gate: Gate, name: str) -> None:
    answer = gate.submit(tool_name=name, tool_args={"command": "rm -rf ~"})

    assert answer["decision"] == "ask", answer
    assert answer["rule"] == "shell"
    assert answer["request"]["tool_name"] == name  # asked about as the agent named it


@pytest.mark.parametrize(
    "name", ["mcp__fs__Delete_File", "MCP__FS__DELETE_FILE", "mcp__fs__delete\u200b_file"]
)
def test_a_variant_is_denied_by_a_deny_rule(gate: Gate, name: str) -> None:
    answer = gate.submit(tool_name=name, tool_args={"path": "/"})

    assert (answer["decision"], answer["rule"]) == ("deny", "no-deletes")


@pytest.mark.parametrize("name", ["read", "R\u0435ad", "\uff32\uff45\uff41\uff44"])
def test_an_allow_rule_lets_through_only_the_name_as_written(gate: Gate, name: str) -> None:
    exact = gate.submit(tool_name="Read", tool_args={"file_path": "/etc/hosts"})
    variant = gate.submit(tool_name=name, tool_args={"file_path": "/etc/hosts"})

    assert (exact["decision"], exact["rule"]) == ("allow", "reads")
    assert variant["decision"] == "allow" and variant["rule"] is None  # no rule: not "reads"


def test_a_grant_covers_only_the_name_it_was_given_for(gate: Gate) -> None:
    call = {"tool_name": "Bash", "tool_args": {"command": "ls"}, "session_id": "s1"}
    first = gate.submit(**call)["request"]
    with gate.client(cfg.ALICE) as c:
        grant = {"scope": "session", "duration": "30m"}
        r = c.post(
            f"/v1/requests/{first['id']}/decision", json={"verdict": "approve", "grant": grant}
        )
    assert r.status_code == 200, r.text

    same = gate.submit(**{**call, "tool_args": {"command": "pwd"}})
    variant = gate.submit(**{**call, "tool_name": "B\u0430sh"})

    assert same["decision"] == "allow" and same["request"]["decided_via"] == "grant"
    # a grant is an allow: a look-alike of the tool it was given for is asked about afresh
    assert variant["decision"] == "ask" and variant["request"]["status"] == "pending"


def test_names_that_only_share_letters_stay_apart() -> None:
    assert canonical("Bash") != canonical("BashOutput")
    assert canonical("Bash") != canonical("Bosh")
    assert canonical("mcp__a__b") == "mcp__a__b"
    assert canonical("\u0412\u0430sh") == canonical("bash") == canonical("BASH")


def test_the_lookalike_table_is_what_unicodes_confusables_give() -> None:
    spec = importlib.util.find_spec("confusable_homoglyphs")
    assert spec is not None and spec.submodule_search_locations, "a development dependency"
    folder = Path(next(iter(spec.submodule_search_locations)))
    data = json.loads((folder / "confusables.json").read_text("utf-8"))
    # when this fails, `python -m gate.policy.toolnames` writes gate/policy/lookalikes.txt again
    assert toolnames.build(data) == toolnames._skeleton()
    assert all(
        reads_as.isascii() and "*" not in reads_as for reads_as in toolnames._skeleton().values()
    )
