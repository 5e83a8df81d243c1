"""The Passkeys page: a signed-in approver adds and removes their passkeys (WebAuthn).

Adding is two posts. `POST /passkeys/options` issues a single-use registration challenge
(`gate.store.passkeys`, two minutes) and answers with `navigator.credentials.create` options
(JSON); the page's script (`static/passkeys.js`) asks the authenticator and posts its answer
to `POST /passkeys`, which checks it (`gate.identity.passkeys.verify_registration`: the
challenge, gate's origin and RP id, user verification) and stores the credential while using
up the challenge, in one transaction. Removing keeps the row, marked with who removed it and
when. Each change is logged (`gate.web.passkeys`), and the row records how its adder was
signed in, so the passkey a vote names can always be traced.
"""

from __future__ import annotations

import logging
import secrets

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from gate.base.errors import Conflict, GateError, InvalidInput
from gate.base.statuses import new_id
from gate.config.settings import ApproverSettings
from gate.identity import passkeys as webauthn
from gate.identity.passkeys import PasskeyRefused, RelyingParty
from gate.store import passkeys as store
from gate.store.records import ChallengeRow, PasskeyRow
from gate.web.console import Console, ListPage, Posted, sentence
from gate.web.forms import field_of
from gate.web.session import WebSession

log = logging.getLogger("gate.web.passkeys")

#: how long a passkey's name may be
MAX_LABEL = 100
#: how many passkeys one approver may keep (each is a row and an `allowCredentials` entry)
MAX_PASSKEYS = 20


class PasskeysPage(ListPage):
    """The Passkeys page and its Add and Remove forms."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.db = console.state.db
        self.rp = RelyingParty.of(console.settings.server.base_url)

    def page(
        self,
        request: Request,
        session: WebSession,
        me: ApproverSettings,
        *,
        status: int = 200,
        notice: str | None = None,
        error: str | None = None,
    ) -> HTMLResponse:
        """The approver's passkeys and the form to add one."""
        return self.console.render(
            request,
            session,
            "passkeys.html",
            me=me,
            status=status,
            passkeys=store.of_approver(self.db, me.name),
            rp_id=self.rp.id,
            max_label=MAX_LABEL,
            notice=notice,
            error=error,
        )

    async def options(self, request: Request) -> Response:
        """POST /passkeys/options: a registration challenge and its options (JSON)."""
        posted = await self.console.posted(request)
        if not isinstance(posted, Posted):
            return posted
        try:
            answer = await anyio.to_thread.run_sync(self._options, posted.me)
        except GateError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)
        return JSONResponse(answer, headers={"Cache-Control": "no-store"})

    def _options(self, me: ApproverSettings) -> dict[str, object]:
        existing = store.of_approver(self.db, me.name)
        if len(existing) >= MAX_PASSKEYS:
            raise Conflict(f"you have {MAX_PASSKEYS} passkeys already: remove one first")
        now = self.console.state.clock()
        nonce = secrets.token_urlsafe(32)
        row = ChallengeRow(
            nonce=nonce,
            approver=me.name,
            purpose="register",
            request_id=None,
            args_hash=None,
            expires_at=now + webauthn.CHALLENGE_TTL,
        )
        store.issue(self.db, row, now=now)
        challenge = webauthn.registration_challenge(nonce)
        ids = [k.credential_id for k in existing]
        return {
            "nonce": nonce,
            "publicKey": webauthn.registration_options(self.rp, me.name, ids, challenge),
        }

    async def add(self, request: Request) -> Response:
        """POST /passkeys: check the authenticator's answer and keep the new passkey."""
        posted = await self.console.posted(request)
        if not isinstance(posted, Posted):
            return posted
        session, me = posted.session, posted.me
        try:
            label = await anyio.to_thread.run_sync(self._add, posted)
        except (GateError, PasskeyRefused) as exc:
            text = exc.message if isinstance(exc, GateError) else exc.reason
            status = exc.status if isinstance(exc, GateError) else 403
            return await anyio.to_thread.run_sync(
                lambda: self.page(request, session, me, status=status, error=sentence(text))
            )
        notice = f"Added the passkey {label!r}: approvals that need a passkey can use it now."
        return self.console.redirect(request, session, "/passkeys", notice)

    def _add(self, posted: Posted) -> str:
        me = posted.me
        label = " ".join((field_of(posted.form, "label") or "").split())[:MAX_LABEL]
        nonce = (field_of(posted.form, "nonce") or "")[:64]
        credential = field_of(posted.form, "credential") or ""
        if not nonce or not credential:
            raise InvalidInput("no passkey answered: use the Add button (it needs JavaScript)")
        issued = store.challenge(self.db, nonce)
        now = self.console.state.clock()
        if issued is None or issued.expires_at < now:
            raise PasskeyRefused(
                "challenge_used", "this answer was used already or its challenge expired: add again"
            )
        if issued.purpose != "register" or issued.approver != me.name:
            raise PasskeyRefused("wrong_challenge", "this answer was made for something else")
        made = webauthn.verify_registration(
            self.rp, credential, webauthn.registration_challenge(issued.nonce)
        )
        row = PasskeyRow(
            id=new_id(),
            credential_id=made.credential_id,
            approver=me.name,
            label=label or "passkey",
            public_key=made.public_key,
            sign_count=made.sign_count,
            transports=made.transports,
            created_at=now,
        )
        auth = posted.signed.auth.to_json()
        done = store.add(self.db, row, nonce=issued.nonce, now=now, auth=auth)
        if done == "challenge_used":
            raise PasskeyRefused("challenge_used", "this answer was used already: add again")
        if done == "known":
            raise Conflict("this passkey is registered already", code="passkey_known")
        log.info(
            "passkey added",
            extra={"approver": me.name, "passkey": row.id, "credential": row.credential_id},
        )
        return row.label

    async def remove(self, request: Request, key_id: str) -> Response:
        """POST /passkeys/{id}/remove: take one of the approver's passkeys out of use."""
        posted = await self.console.posted(request)
        if not isinstance(posted, Posted):
            return posted
        session, me = posted.session, posted.me
        now = self.console.state.clock()
        gone = await anyio.to_thread.run_sync(
            lambda: store.remove(self.db, approver=me.name, key_id=key_id, now=now)
        )
        if gone is None:
            return self.console.redirect(
                request, session, "/passkeys", "You have no such passkey.", ok=False
            )
        log.info("passkey removed", extra={"approver": me.name, "passkey": gone.id})
        notice = f"Removed the passkey {gone.label!r}: it no longer approves anything."
        return self.console.redirect(request, session, "/passkeys", notice)

    def router(self) -> APIRouter:
        """The Passkeys page's routes (pages: not in the OpenAPI schema)."""
        r = APIRouter(include_in_schema=False)
        r.add_api_route("/passkeys", self.show, methods=["GET"])

        @r.post("/passkeys/options")
        async def options(request: Request) -> Response:
            return await self.options(request)

        @r.post("/passkeys")
        async def add(request: Request) -> Response:
            return await self.add(request)

        @r.post("/passkeys/{key_id}/remove")
        async def remove(key_id: str, request: Request) -> Response:
            return await self.remove(request, key_id)

        @r.get("/passkeys/{key_id}/remove")
        def remove_address(key_id: str) -> Response:
            return RedirectResponse("/passkeys", status_code=303)

        return r
