"""The confirm page a mail's link opens, rendered from a request's view (pure, no I/O).

A GET shows the request and one form for the action the link named; only the form's POST
decides. Untrusted text is made inert (`channels.email.text`) and escaped by Jinja2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from channels import decisions, edits
from channels.email.message import ACTIONS, EDIT_CHARS, LABELS, confirm_url, offered
from channels.email.text import ARGS_CHARS, call, facts, inert, templates
from gate.decisions.readmodel import RequestView
from gate.text import untrusted


@dataclass(frozen=True)
class EditBox:
    """One argument's edit box: its name as shown, its text, and what was wrong with it."""

    label: str
    text: str
    error: str | None = None


@dataclass(frozen=True)
class Form:
    """The one form a confirm page shows."""

    do: str
    action: str
    csrf: str
    shown: str = ""
    reason: str = ""
    reasons: list[str] = field(default_factory=list)
    fields: list[EditBox] = field(default_factory=list)
    grants: list[tuple[str, str]] = field(default_factory=list)
    others: list[tuple[str, str]] = field(default_factory=list)


def build_form(
    view: RequestView,
    do: str,
    *,
    token: str,
    csrf: str,
    typed: Mapping[str, str] | None = None,
    errors: Mapping[str, str] | None = None,
) -> tuple[Form, str | None]:
    """The form for `do` (what the approver typed kept, errors by argument name), and a
    notice when the rule does not offer it (the Approve form is shown instead)."""
    typed, errors = typed or {}, errors or {}
    offers = offered(view)
    notice = None
    if "approve" not in offers and do in ("approve", "edit", "grant"):
        # the mail and this page did not show the whole call (cut, or a mask that could hide
        # code): it is approved elsewhere, or here rejected
        note = decisions.arguments(view, ARGS_CHARS).note("email")
        notice, do = f"{note} You can reject it here.", "reject"
    elif do not in offers:
        notice = {
            "edit": "Nothing here can be edited by email; edit it in gate, or approve as asked.",
            "grant": "This rule offers no grants; you can approve this one call.",
            "acknowledge": f"{view.acknowledgement or 'Someone is on it already'}.",
        }.get(do, "")
        do = "approve"
    # Relative: the page posts back to wherever it was opened from (a proxy's address too).
    others = [(LABELS[a], confirm_url("", token, a)) for a in ACTIONS if a in offers]
    form = Form(
        do=do,
        action=confirm_url("", token, do),
        csrf=csrf,
        shown=view.expires_at.isoformat(),
        reason=typed.get("reason", ""),
        reasons=[inert(r, 100) for r in decisions.reject_reasons(view)],
        fields=[
            EditBox(inert(f.key, 60), typed.get(f"e{i}", f.text), errors.get(f.key))
            for i, f in enumerate(edits.editable_fields(view, max_chars=EDIT_CHARS))
        ]
        if do == "edit"
        else [],
        grants=[(f"{g.scope}:{g.duration}", g.label) for g in decisions.grant_choices(view)],
        others=[(label, url) for label, url in others if f"do={do}" not in url],
    )
    return form, notice or None


def render(
    *,
    title: str,
    view: RequestView | None,
    now: datetime,
    address: str | None = None,
    notice: str | None = None,
    notice_kind: str = "info",
    form: Form | None = None,
) -> str:
    """The whole page."""
    context: dict[str, Any] = {
        "title": title,
        # gate's own (the signed link's): a page in a browser makes no link of it, and the
        # person reads the address their mail went to, not a defanged one
        "address": untrusted.clean(address, 120) if address else None,
        "notice": notice,
        "notice_kind": notice_kind,
        "facts": facts(view, now) if view is not None else [],
        "call": call(view) if view is not None else None,
        "form": form,
        "web_url": view.url if view is not None else None,
    }
    return templates().get_template("page.html").render(context)
