"""The approval email: who gets one for a target, and the message itself (pure, no I/O).

Each recipient gets a message of their own: an approver of the request who may still act
gets their own links (one signed token each, `channels.email.links`), anyone else the same
card with only the link to gate's web page. Every link points at gate's own `public_url`;
the mail loads nothing remote. Built with `email.message.EmailMessage` (plain text first,
HTML as the alternative), headers from untrusted text flattened to one line.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from typing import Literal
from urllib.parse import urlencode

from channels import decisions, edits
from channels.email.text import ARGS_CHARS, call, facts, inert, one_line, templates
from gate.config.settings import Settings
from gate.decisions.acting import approved_own
from gate.decisions.readmodel import RequestView

#: what a mail is for: the first card, a refresh while pending (a vote, an extension, a
#: reminder, an escalation), or the outcome
Kind = Literal["card", "reminder", "outcome"]
CONFIRM_PATH = "/channels/email/confirm"
#: the longest value the confirm page offers in an edit box (longer ones: the web page)
EDIT_CHARS = 2000
#: the links a pending card offers, in the order shown
ACTIONS = ("approve", "reject", "edit", "grant", "extend", "acknowledge")
LABELS = {
    "approve": "Approve",
    "reject": "Reject",
    "edit": "Edit and approve",
    "grant": "Approve and allow more for a while",
    "extend": decisions.EXTEND_LABEL,
    "acknowledge": decisions.ACKNOWLEDGE_LABEL,
}


@dataclass(frozen=True)
class Recipient:
    """One address a card goes to, and the approver it belongs to (None: a watcher)."""

    address: str
    approver: str | None


def recipients(settings: Settings, view: RequestView, target: str) -> list[Recipient]:
    """Who gets a card for `target`: "approvers" (each approver the request names, or every
    approver when it names none), "group:NAME", or one address."""
    if target == "approvers" or target.startswith("group:"):
        if target == "approvers":
            named = set(view.approvers)
            people = [a for a in settings.approvers if not named or a.name in named]
        else:
            group = target.removeprefix("group:")
            people = [a for a in settings.approvers if group in a.groups]
        found = [Recipient(a.identity("email") or "", a.name) for a in people]
        return [r for r in found if r.address]
    person = settings.approver_by_identity("email", target)
    return [Recipient(target, person.name if person is not None else None)]


def may_act(settings: Settings, view: RequestView, recipient: Recipient) -> bool:
    """Whether this recipient's mail gets decision links: an approver of a pending request
    who did not ask for it and has not voted yet (gate checks again, and decides, on every
    click; this only keeps links out of mail that could not use them)."""
    if view.status != "pending" or recipient.approver is None:
        return False
    if view.offers.refuse_email_bound:  # a mailbox is all a link's clicker proves (EMAIL_REFUSED)
        return False
    if view.approvers and recipient.approver not in view.approvers:
        return False
    if settings.approver(recipient.approver) is None:
        return False
    # compared as gate compares on a click (case, width, invisible characters folded): a
    # request whose user is "Alice@Example.com" is alice's own
    if approved_own(
        settings, [recipient.approver], user_id=view.user_id, submitted_by=view.submitted_by
    ):
        return False
    return all(v.approver != recipient.approver for v in view.votes)


#: what a mail says instead of decision links when its rule refuses email-bound clicks
EMAIL_REFUSED = (
    "This rule does not take decisions from email links: whoever reads this mailbox could "
    "click them. Decide on the request page in gate, or from a chat app linked to you."
)


def offered(view: RequestView) -> list[str]:
    """The actions a pending card links to, as the rule offers them."""
    # "I'm on it" until someone is: reminders and escalation stop (gate.decisions.acknowledging)
    on_it = ["acknowledge"] if view.acknowledged_by is None else []
    if not decisions.approvable(view, ARGS_CHARS):
        # the mail and the confirm page cut the arguments: approving is done in gate
        return ["reject", "extend", *on_it]
    actions = ["approve", "reject"]
    if edits.editable_fields(view, max_chars=EDIT_CHARS):
        actions.append("edit")
    if decisions.grant_choices(view):
        actions.append("grant")
    return [*actions, "extend", *on_it]


def confirm_url(base_url: str, token: str, action: str) -> str:
    """The link to the confirm page for one action."""
    return f"{base_url}{CONFIRM_PATH}?{urlencode({'t': token, 'do': action})}"


def root_id(view: RequestView, address: str, domain: str) -> str:
    """The Message-ID of the first card to `address`: later mails about the request thread
    under it, and it is the same on every replica (no state kept)."""
    who = hashlib.sha256(address.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"<gate.{view.id}.{who}@{domain}>"


def compose(
    view: RequestView,
    *,
    kind: Kind,
    sender: str,
    recipient: Recipient,
    base_url: str,
    make_token: Callable[[], str] | None,
    now: datetime,
) -> EmailMessage:
    """One recipient's mail; `make_token` (None: no decision links) signs their links."""
    token = make_token() if make_token is not None and view.status == "pending" else None
    links = [
        (LABELS[a], confirm_url(base_url, token, a)) for a in offered(view)
    ] if token else []  # fmt: skip
    shown = call(view)
    tool = shown.headline
    headline = {
        "card": f"Approval needed: {tool}",
        "reminder": f"Still waiting for approval: {tool}",
        "outcome": inert(view.outcome_sentence()),
    }[kind]
    context = {
        "headline": headline,
        "facts": facts(view, now),
        "call": shown,
        "links": links,
        "web_url": view.url,
        "final": view.is_final,
        "email_refused": EMAIL_REFUSED if view.offers.refuse_email_bound else None,
        "address": recipient.address,
    }
    domain = sender.rpartition("@")[2].strip(" >") or "gate.invalid"
    msg = EmailMessage()
    # gate's headline, never the agent's summary; the id stays whole at the end.
    msg["Subject"] = one_line(f"[gate] {headline}", 90) + f" ({view.id})"
    msg["From"] = sender
    msg["To"] = recipient.address
    msg["Date"] = format_datetime(now)
    root = root_id(view, recipient.address, domain)
    if kind == "card":
        msg["Message-ID"] = root
    else:
        msg["Message-ID"] = make_msgid("gate", domain=domain)
        msg["In-Reply-To"] = root
        msg["References"] = root
    # RFC 3834: no out-of-office replies to a machine's mail
    msg["Auto-Submitted"] = "auto-generated"
    msg["X-Gate-Request"] = view.id
    msg.set_content(templates().get_template("card.txt").render(context))
    msg.add_alternative(templates().get_template("card.html").render(context), subtype="html")
    return msg
