"""Step-up: whether an approval is as strong as its rule demands (RFC 9470's idea).

A rule with `step_up` (`gate.config.oidc.StepUpSettings`, frozen on each request as
`Offers.step_up`) accepts an approval only from a person who signed in through the identity
provider no longer than `max_age` before they approve, with one of the rule's `acr` values
when it names any. A password, the proxy header, an API token or a chat click cannot prove
that, so each is refused with the way to do it: the request page, signed in again through
the provider. With `webauthn`, the approval must also carry a passkey's assertion over the
request and its arguments, which only the request page makes (`gate.web.passkey_approval`):
any other surface is refused. Rejecting needs no step-up: it stops the call, which is where
gate fails anyway. The answer is the decision pipeline's (`gate.decisions.deciding`), so every
surface gets it.
"""

from __future__ import annotations

from datetime import datetime

from gate.identity.authmethod import AuthMethod
from gate.policy.offers import StepUp

#: what a card says instead of offering the decision buttons (every channel, `channels.decisions`)
CARD_NOTE = (
    "This rule needs a fresh single sign-on or a passkey to approve: open the request in "
    "gate, where you will be asked for what it needs."
)


def refusal(step_up: StepUp | None, auth: AuthMethod | None, now: datetime) -> str | None:
    """Why an approval authenticated by `auth` does not meet `step_up` at `now`, in words
    for the person; None when it does (or the rule demands none)."""
    if step_up is None:
        return None
    if step_up.webauthn and (auth is None or auth.kind != "webauthn"):
        how = auth.describe() if auth is not None else "an unrecorded sign-in"
        return (
            "this rule needs an approval signed with a passkey or security key over this very "
            f"call, and this one came by {how}: approve on the request page in gate, which "
            "asks your passkey"
        )
    return sign_in_refusal(step_up, auth.sign_in if auth is not None else None, now)


def sign_in_refusal(step_up: StepUp | None, auth: AuthMethod | None, now: datetime) -> str | None:
    """The single sign-on part of `refusal`: why the console sign-in `auth` is not fresh
    enough for `step_up` (the request page offers to sign in again); None when it is."""
    if step_up is None or step_up.max_age is None:
        return None
    limit = _span(step_up.max_age.total_seconds())
    if auth is None or auth.kind != "oidc":
        how = auth.describe() if auth is not None else "an unrecorded sign-in"
        return (
            f"this rule needs an approval signed in through single sign-on within the last "
            f"{limit}, and this one came by {how}: open the request page in gate and sign in "
            "again there"
        )
    if auth.auth_time is None:
        return (
            "this rule needs a recent single sign-on, and the identity provider did not say "
            "when you authenticated: sign in again on the request page"
        )
    age = (now - auth.auth_time).total_seconds()
    if age > step_up.max_age.total_seconds():
        return (
            f"this rule needs a single sign-on within the last {limit}; yours was "
            f"{_span(age)} ago: sign in again on the request page"
        )
    if step_up.acr and auth.acr not in step_up.acr:
        return (
            f"this rule needs a sign-in of class {' or '.join(step_up.acr)} at the identity "
            f"provider, and yours was {auth.acr or 'unnamed'}: sign in again on the request page"
        )
    return None


def _span(seconds: float) -> str:
    whole = max(0, int(seconds))
    if whole < 120:
        return f"{whole} s"
    if whole < 7200:
        return f"{whole // 60} min"
    return f"{whole // 3600} h"
