"""Untrusted text made inert for mail and the confirm page, and the facts both show.

Mail clients turn text that looks like a link into one (`https://...`, `www....`, a bare
`approve-now.com/confirm`, the host of an address), in plain text and in HTML alike, and HTML
escaping cannot stop that. So on top of `gate.text.untrusted` (capped, invisible characters
removed, secrets masked) every piece of untrusted text has its link-shaped parts defanged the
way security mail does it (`gate.text.defanging.defang`): `https[:]//evil[.]example`,
`approve-now[.]com/confirm`. Escaping for HTML is the templates' job (Jinja2 autoescape); a header
line is one line (`one_line`), so no text can add a header of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from channels import decisions, edits
from gate.decisions.readmodel import RequestView
from gate.text import untrusted
from gate.text.defanging import defang

#: the most of one value a mail or the page shows (the web page has the rest)
VALUE_CHARS = 300
#: characters of the arguments a mail and its confirm page show whole (and so may offer to
#: approve)
ARGS_CHARS = 4000
SUBJECT_CHARS = 120


def inert(text: object, limit: int = VALUE_CHARS) -> str:
    """Untrusted text as a mail or page may show it: cleaned, cut, no link a client would follow."""
    cleaned = untrusted.clean(text, limit + 200)
    if len(cleaned) > limit:
        cleaned = cleaned[:limit] + "…"
    return defanged(cleaned)


def defanged(text: str) -> str:
    """Text gate already made safe to show, with no link a mail client would follow; nothing
    else changes (it is not cleaned, masked or cut again)."""
    return defang(text)


def one_line(text: str, limit: int = SUBJECT_CHARS) -> str:
    """Text fit for a header: every run of whitespace and control characters is one space,
    and no `=?` that could open an RFC 2047 encoded-word.

    `EmailMessage` decodes encoded-words in a header value it is handed, and mail clients
    decode them when they show it: `=?utf-8?b?...?=` in a summary would come back as a line
    break (written out raw: a header or a body of the agent's own) or as any invisible or
    direction-changing character, past every check that ran on the text as typed.
    """
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    flat = flat.replace("=?", "= ?")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True)
class Call:
    """The call as a mail and the confirm page show it, every part inert: gate's `headline`,
    the call as gate renders it (`text`), what the card says when it cannot offer to approve
    it (`note`), a failed condition (`condition`), the arguments the condition reads, and
    the agent's summary (`claim`), shown after the call and labelled as the agent's."""

    headline: str
    text: str
    note: str | None
    condition: str | None
    claim: str | None
    #: how the templates label what is not gate's
    claim_label: str = decisions.CLAIM_LABEL
    condition_words: str = decisions.CONDITION_FAILED


def call(view: RequestView) -> Call:
    """The call that will run, as gate renders it, defanged: whole while pending when it fits
    `ARGS_CHARS` (only then do the mail and the page offer to approve it), else cut ending
    with what is not shown, and a note; once final, the arguments that ran.

    The text is exactly what gate measured for its approval check (`decisions.arguments`,
    already inert), only defanged: cleaning it again would mask across a key and its value
    and lengthen it past a cut, hiding part of a call the mail offers to approve. The mail's
    own "Open in gate" link is where the whole call is.
    """
    pending = view.status == "pending"
    args = None if pending else view.run_args
    shown = decisions.arguments(view, ARGS_CHARS, link=False, args=args)
    claim = decisions.claim(view)
    asked = decisions.why_asked(view)
    return Call(
        headline=inert(decisions.headline(view, shown), SUBJECT_CHARS),
        text=defanged(shown.text),
        note=shown.note("email") if pending and not shown.whole else None,
        condition=inert(asked.words) if asked else None,
        condition_words=asked.heading if asked else decisions.CONDITION_FAILED,
        claim=inert(claim) if claim else None,
    )


@dataclass(frozen=True)
class Fact:
    """One labelled line about the request."""

    label: str
    value: str


def facts(view: RequestView, now: datetime) -> list[Fact]:
    """What an approver needs to know about the request, untrusted parts made inert."""
    rows = [Fact("Request", view.id), Fact("Tool", inert(view.tool_name))]
    rows.append(Fact("Agent", inert(view.agent_id or "-")))
    rows.append(Fact("User", inert(view.user_id or "-")))
    rows.append(Fact("Rule", inert(decisions.rule_and_stage(view) or "-")))
    if view.status == "pending":
        when = f"{view.expires_at:%Y-%m-%d %H:%M} UTC ({decisions.countdown(view.expires_at, now)})"
        rows.append(Fact("Deadline", when))
        rows.append(Fact("Approvals", f"{len(view.approvals)} of {view.approvals_required}"))
        if view.acknowledgement:  # an approver said they are on it
            rows.append(Fact("On it", inert(view.acknowledgement)))
    rows.append(Fact("Status", inert(view.outcome_sentence())))
    if view.reason and view.is_final:
        rows.append(Fact("Reason", inert(view.reason)))
    for key, before, after in edits.changes(view):
        rows.append(Fact(f"Changed {inert(key, 60)}", f"{inert(before)} → {inert(after)}"))
    return rows


@cache
def templates() -> Environment:
    """The channel's Jinja2 templates: HTML autoescaped, plain text as written."""
    return Environment(
        loader=FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
    )
