"""An approval signed with a passkey, for a rule with `step_up = { webauthn = true }`.

The request page's Approve forms ask gate for a challenge first (`POST
/requests/{id}/passkey`, the form as it will be sent): gate hashes the call the form would
approve (the request's arguments, or the edited ones), issues a single-use nonce for this
approver, request and hash (`gate.store.passkeys`, two minutes), and answers with
`navigator.credentials.get` options whose challenge is `approval_challenge(request id, hash,
nonce)`. The page's script asks the passkey and posts the form with its answer.

`check` then runs before the vote goes to the decision pipeline: the nonce must be this
approver's, for this request and for the hash of what the form approves; the assertion must
verify against that recomputed challenge, gate's origin and RP id, and the approver's own
credential, with a counter that moved forward. The nonce is used up and the counter moved
in one transaction (a replay finds no nonce). Any doubt refuses the approval with a reason;
the vote then records `webauthn` with the credential id (`AuthMethod.with_passkey`).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Any

import anyio
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from gate.base.errors import Conflict, Forbidden, GateError, InvalidInput, NotFound
from gate.decisions.readmodel import RequestView
from gate.identity import passkeys as webauthn
from gate.identity.authmethod import AuthMethod
from gate.identity.passkeys import PasskeyRefused, RelyingParty
from gate.policy import stepup
from gate.store import passkeys as store
from gate.store.records import ChallengeRow
from gate.web import forms
from gate.web.console import Console, Posted
from gate.web.forms import FormError, field_of
from gate.web.session import SignedIn

log = logging.getLogger("gate.web.passkeys")

#: the decide form's fields the page's script fills in
NONCE_FIELD = "passkey_nonce"
ASSERTION_FIELD = "passkey_assertion"
Unmask = Callable[[str, dict[str, Any] | None], dict[str, Any] | None]


def needs_passkey(view: RequestView | None) -> bool:
    """Whether approving `view` needs a passkey's assertion."""
    return view is not None and view.offers.step_up is not None and view.offers.step_up.webauthn


class PasskeyApproval:
    """The challenge route and the check of a passkey-signed approval."""

    def __init__(self, console: Console, unmasked: Unmask) -> None:
        self.console = console
        self.db = console.state.db
        self.rp = RelyingParty.of(console.settings.server.base_url)
        self.unmasked = unmasked

    async def challenge(self, request: Request, request_id: str) -> Response:
        """POST /requests/{id}/passkey: the options for `navigator.credentials.get`, bound to
        this request and the call the posted form approves (JSON; errors in the one shape)."""
        posted = await self.console.posted(request)
        if not isinstance(posted, Posted):
            return posted
        try:
            answer = await anyio.to_thread.run_sync(self._challenge, posted, request_id)
        except GateError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)
        return JSONResponse(answer, headers={"Cache-Control": "no-store"})

    def _challenge(self, posted: Posted, request_id: str) -> dict[str, Any]:
        view = self.console.service.view(request_id)
        if view is None:
            raise NotFound(f"no request with id {request_id!r}")
        if not needs_passkey(view):
            raise Conflict("this request's rule does not ask for a passkey", code="not_offered")
        refusal = self.console.refusal(view, posted.me, posted.signed.groups)
        if refusal is not None or view.is_final:
            raise Forbidden(refusal or "this request is decided already")
        now = self.console.state.clock()
        stale = stepup.sign_in_refusal(view.offers.step_up, posted.signed.auth, now)
        if stale is not None:  # the rule wants a fresh single sign-on too: that first
            raise Forbidden(stale, code="step_up_required")
        try:
            parsed = forms.parse_decide(posted.form)
        except FormError as exc:
            raise InvalidInput(exc.message) from None
        edited = self.unmasked(request_id, parsed.edited_args)
        keys = store.of_approver(self.db, posted.me.name)
        if not keys:
            raise Conflict(
                "this rule needs a passkey to approve, and you have none: add one on the "
                "Passkeys page (/passkeys), then approve",
                code="no_passkey",
            )
        args_hash = view.binding_for(edited)
        nonce = secrets.token_urlsafe(32)
        row = ChallengeRow(
            nonce=nonce,
            approver=posted.me.name,
            purpose="approve",
            request_id=request_id,
            args_hash=args_hash,
            expires_at=now + webauthn.CHALLENGE_TTL,
        )
        store.issue(self.db, row, now=now)
        challenge = webauthn.approval_challenge(request_id, args_hash, nonce)
        allowed = [(k.credential_id, k.transports) for k in keys]
        options = webauthn.assertion_options(self.rp, challenge, allowed)
        return {"nonce": nonce, "args_hash": args_hash, "publicKey": options}

    def check(
        self,
        signed: SignedIn,
        view: RequestView,
        form: Any,
        edited: dict[str, Any] | None,
    ) -> AuthMethod:
        """How an approval of `view` (with `edited` arguments) posted with a passkey's answer
        in `form` was authenticated; PasskeyRefused says why it does not count."""
        nonce = field_of(form, NONCE_FIELD) or ""
        assertion = field_of(form, ASSERTION_FIELD) or ""
        if not nonce or not assertion:
            raise PasskeyRefused(
                "missing",
                "this rule needs your passkey to approve, and none answered: use the Approve "
                "button, which asks your passkey (it needs JavaScript)",
            )
        me = signed.approver.name
        now = self.console.state.clock()
        issued = self._issued(nonce, view, me, now)
        args_hash = view.binding_for(edited)
        if issued.args_hash != args_hash:
            raise PasskeyRefused(
                "wrong_arguments",
                "your passkey signed for other arguments than the ones this form approves: "
                "approve again",
            )
        credential_id = webauthn.credential_of(assertion)
        key = store.by_credential(self.db, credential_id)
        if key is None or key.approver != me or key.removed_at is not None:
            raise PasskeyRefused(
                "unknown_passkey",
                "the passkey that answered is not one of yours in gate (removed, or never "
                "added): add it on the Passkeys page",
            )
        challenge = webauthn.approval_challenge(view.id, args_hash, issued.nonce)
        count = webauthn.verify_assertion(
            self.rp,
            assertion,
            challenge=challenge,
            public_key=key.public_key,
            sign_count=key.sign_count,
        )
        self._spend(issued.nonce, credential_id, key.sign_count, count, now)
        log.info("passkey approval", extra={"request_id": view.id, "approver": me})
        return signed.auth.with_passkey(credential_id)

    def _issued(self, nonce: str, view: RequestView, me: str, now: datetime) -> ChallengeRow:
        """The challenge gate issued `me` for approving `view` under `nonce`, unused, in time."""
        issued = store.challenge(self.db, nonce[:64])
        if issued is None or issued.expires_at < now:
            raise PasskeyRefused(
                "challenge_used",
                "this passkey answer was used already, or its challenge expired (they last "
                "two minutes): approve again",
            )
        if issued.purpose != "approve" or issued.request_id != view.id or issued.approver != me:
            raise PasskeyRefused(
                "wrong_request",
                "this passkey answer was made for another request (or another person): "
                "approve again from this request's page",
            )
        return issued

    def _spend(self, nonce: str, credential_id: str, seen: int, count: int, now: datetime) -> None:
        """Use the challenge up and move the passkey's counter, or PasskeyRefused."""
        spent = store.spend(
            self.db,
            nonce=nonce,
            credential_id=credential_id,
            seen_count=seen,
            new_count=count,
            now=now,
        )
        if spent == "challenge_used":
            raise PasskeyRefused(
                "challenge_used", "this passkey answer was used already: approve again"
            )
        if spent == "counter_moved":
            raise PasskeyRefused(
                "counter_backwards",
                "another approval with this passkey was checked at the same moment (its "
                "counter moved): approve again",
            )
