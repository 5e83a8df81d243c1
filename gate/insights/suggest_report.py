"""`gate policy suggest`'s output: TOML to paste, with its evidence as comments, or JSON."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gate.insights.suggest import Proposal, Suggestions
from gate.insights.suggest_rules import inline

#: candidates held back that the text report lists (a tool with a hundred distinct values
#: has a hundred; the JSON has them all)
HELD_BACK_SHOWN = 12


def text(found: Suggestions, *, since: datetime) -> list[str]:
    """The report as lines: a header, each proposal as commented TOML, then what was held
    back and why. Valid TOML as a whole (everything but the rules is a comment)."""
    lines = [
        f"# gate policy suggest: {len(found.proposals)} proposal(s) from {found.decided} "
        f"decided asks since {since:%Y-%m-%d %H:%M} UTC ({found.days:.1f} days; allow needs "
        f"{found.min_approvals}+ approvals by 2+ people and no refusal ever).",
        "# Nothing is applied: paste a rule into gate.toml above the rule named, then run",
        "# `gate policy check` and restart gate.",
    ]
    for number, proposal in enumerate(found.proposals, 1):
        lines += ["", *_proposal(number, proposal)]
    if found.blocked:
        lines += ["", "# Held back:"]
        lines += [f"#   {reason}" for reason in found.blocked[:HELD_BACK_SHOWN]]
        if len(found.blocked) > HELD_BACK_SHOWN:
            more = len(found.blocked) - HELD_BACK_SHOWN
            lines.append(f"#   ... and {more} more (--json lists them all)")
    return lines


def _proposal(number: int, p: Proposal) -> list[str]:
    verb = "approved" if p.kind == "allow" else "rejected"
    above = (
        ", ".join(f'"{r}"' for r in p.asked_under) or "list (no rule asked: the caller forced it)"
    )
    lines = [
        f"# {number}. {p.kind} {inline(p.tool)}: {p.covered} asks {verb} by "
        f"{', '.join(map(inline, p.people))}; removes {p.per_day:.1f} asks/day",
        f"#    put it above the rule {above} in gate.toml (the first matching rule wins)",
        "#    last decisions: "
        + "; ".join(
            f"{d.id} {inline('/'.join(d.who)) or '?'} {d.at:%Y-%m-%d %H:%M}" for d in p.last
        ),
    ]
    return lines + p.toml.rstrip("\n").split("\n")


def as_json(found: Suggestions, *, since: datetime) -> dict[str, Any]:
    """The report for scripts."""
    return {
        "since": since.isoformat(),
        "days": round(found.days, 3),
        "decided": found.decided,
        "min_approvals": found.min_approvals,
        "proposals": [
            {
                "kind": p.kind,
                "name": p.name,
                "tool": p.tool,
                "when": p.when,
                "toml": p.toml,
                "place_above": list(p.asked_under),
                "covered": p.covered,
                "asks_per_day": round(p.per_day, 3),
                "people": list(p.people),
                "by_rule": p.by_rule,
                "last": [
                    {"id": d.id, "who": list(d.who), "at": d.at.isoformat(), "status": d.status}
                    for d in p.last
                ],
            }
            for p in found.proposals
        ],
        "held_back": list(found.blocked),
        "lost_by_rule": found.lost_by_rule(),
    }
