"""What every console page shares: who is signed in, rendering, redirects, error pages.

Server-rendered Jinja2 with autoescape on for every template, and every printed string
cleaned and masked by `gate.text.untrusted`, as on the chat cards. The pages themselves live by
what they do: `pages` (queue, live events, history, stats), `request_page` (a request and its
decide and extend forms), `grants`, `login`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import anyio
import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markupsafe import Markup, escape
from starlette.datastructures import FormData

from gate.base.resources import resource_path
from gate.base.surfaces import surface_name
from gate.config.settings import ApproverSettings
from gate.decisions.acting import Actor, refusal_for
from gate.decisions.readmodel import RequestView
from gate.identity.auth import csrf_matches
from gate.policy import shadow
from gate.server.state import AppState
from gate.text import untrusted
from gate.web.forms import field_of
from gate.web.session import (
    CSRF_FIELD,
    PROXY_SECRET_HEADER,
    Flash,
    SessionCodec,
    SignedIn,
    WebSession,
    proxy_user,
    signed_in,
)
from gate.web.signin import SignIns

log = logging.getLogger("gate.web")

CSRF_MESSAGE = (
    "This form was sent without a valid security token (CSRF), so nothing was done. "
    "Reload the page and try again."
)


class _CompiledTemplates(jinja2.BytecodeCache):
    """The console's templates compiled once per process, for every app's environment.

    An environment compiles each template on its first render; a process that builds many
    apps (the test suite builds some two thousand) compiled the same templates each time.
    Every console environment has the same options, so the compiled code is the same; the
    cache is keyed by template and checked against the source's checksum (an edited template
    compiles again).
    """

    def __init__(self) -> None:
        self._compiled: dict[str, bytes] = {}  # one assignment per key: atomic across threads

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        compiled = self._compiled.get(bucket.key)
        if compiled is not None:
            bucket.bytecode_from_string(compiled)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self._compiled[bucket.key] = bucket.bytecode_to_string()


_COMPILED = _CompiledTemplates()


def environment(clock: Callable[[], datetime]) -> jinja2.Environment:
    """The Jinja2 environment: autoescape on for every template, whatever its name, and every
    printed string cleaned and masked by `gate.text.untrusted`, as on the chat cards."""
    env = jinja2.Environment(
        bytecode_cache=_COMPILED,
        loader=jinja2.FileSystemLoader(resource_path("templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=shown,
    )
    env.filters.update(
        ts=lambda dt: dt.strftime("%Y-%m-%d %H:%M:%S UTC") if dt else "",
        iso=lambda dt: dt.isoformat() if dt else "",
        ago=lambda dt: span((clock() - dt).total_seconds()) + " ago",
        left=lambda dt: _left((dt - clock()).total_seconds()),
        # JSON is masked value by value (secret-named keys too), then escaped here: the
        # Markup result is not scanned again as one long string.
        pretty=lambda obj: escape(untrusted.to_json(obj, indent=2)),
        # A call's arguments on its own page, with no value cut: this page is where calls too
        # long for a chat card are approved, so it shows every character that would run
        # (masked; the body limit bounds the scan, which stays linear).
        whole=lambda obj: escape(untrusted.to_json(obj, indent=2, limit=None)),
        compact=lambda obj: escape(untrusted.to_json(obj)),
        masked_edits=untrusted.mask_diff,
        surface=surface_name,
    )
    return env


def shown(value: Any) -> Any:
    """What `{{ ... }}` prints: a string cleaned and masked (`untrusted.clean`) before
    autoescape. Markup (the JSON filters' output, our CSRF token) is ours and passes as is.

    Not capped: what templates print as plain text is bounded by the API's field limits or
    is our own JSON (the edit box), which a cap would cut into invalid JSON; the scan is
    linear either way.
    """
    if isinstance(value, str) and not isinstance(value, Markup):
        return untrusted.clean(value, limit=None)
    return value


def span(seconds: float) -> str:
    """A duration as people read it: "45s", "3m 05s", "2h 07m", "1d 4h"."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


def _left(seconds: float) -> str:
    return "deadline passed" if seconds <= 0 else span(seconds) + " left"


def sentence(message: str) -> str:
    """An error message as a sentence for the page."""
    text = message[:1].upper() + message[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


@dataclass
class Posted:
    """A form post from a signed-in approver that carried the session's CSRF token."""

    session: WebSession
    me: ApproverSettings
    form: FormData
    #: how `me` signed in (recorded on their votes)
    signed: SignedIn


class Console:
    """The plumbing every page uses, bound to one app's state."""

    def __init__(self, state: AppState) -> None:
        self.state = state
        self.settings = state.settings
        self.service = state.service
        self.codec = SessionCodec(state.settings)
        self.env = environment(state.clock)
        #: a rule asks for passkeys (`step_up.webauthn`): the Passkeys page is on
        self.passkeys_on = any(
            r.step_up is not None and r.step_up.webauthn for r in self.settings.rules
        )
        self.sign_ins = SignIns(
            state.db,
            max_age_seconds=state.settings.server.session_max_age_seconds,
            clock=state.clock,
        )

    def who(self, request: Request) -> tuple[WebSession, ApproverSettings | None]:
        """The session and the signed-in approver, if any (reads the database: not async)."""
        session, signed = self.signed(request)
        return session, signed.approver if signed else None

    def signed(self, request: Request) -> tuple[WebSession, SignedIn | None]:
        """The session and who is signed in, with how (reads the database: not async)."""
        session = self.codec.load(request)
        return session, signed_in(self.settings, request, session, self.sign_ins.approver_of)

    async def who_async(self, request: Request) -> tuple[WebSession, ApproverSettings | None]:
        """`who` from an async route, off the event loop."""
        return await anyio.to_thread.run_sync(self.who, request)

    async def posted(self, request: Request) -> Posted | Response:
        """A form post checked like every other: the CSRF token first, then a signed-in
        approver. Returns the page that refuses it (403, or the way to sign in) otherwise."""
        session, signed = await anyio.to_thread.run_sync(self.signed, request)
        me = signed.approver if signed else None
        form = await request.form()
        if not csrf_matches(session.csrf, field_of(form, CSRF_FIELD)):
            return self.refuse_csrf(request, session, me)
        if signed is None:
            return self.to_login(request)
        return Posted(session, signed.approver, form, signed)

    def redirect(
        self, request: Request, session: WebSession, path: str, text: str, *, ok: bool = True
    ) -> Response:
        """POST/redirect/GET: 303 to `path`, which shows `text` once.

        A reload then repeats the GET, not the form, and the address bar holds a link that
        works when copied.
        """
        session.flash = Flash(path, text, ok)
        session.dirty = True
        response = RedirectResponse(quote(path), status_code=303)
        self.codec.save(request, response, session)
        return response

    def refusal(
        self, view: RequestView, me: ApproverSettings, groups: frozenset[str] = frozenset()
    ) -> str | None:
        """Why `me` (in these single sign-on `groups`) may not act on `view` on this page
        (the pipeline's words), or None."""
        why = refusal_for(self.settings, view, Actor.of_approver(me, "web", groups=groups))
        return why.sentence() if why else None

    @property
    def proxy_mode(self) -> bool:
        """Whether a trusted proxy signs people in (no password form)."""
        return bool(self.settings.server.trusted_user_header)

    def render(
        self,
        request: Request,
        session: WebSession,
        template: str,
        *,
        me: ApproverSettings | None,
        status: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        """Render `template` with the common context and save the session cookie."""
        html = self.env.get_template(template).render(
            me=me,
            csrf=Markup(session.csrf),  # random, ours: masking must never alter it
            csrf_field=CSRF_FIELD,
            path=request.url.path,
            proxy_mode=self.proxy_mode,
            # the banner every page shows while shadow rules are configured (gate.policy.shadow)
            shadow=shadow.notices(self.state.policy.shadows, self.state.clock()),
            tripped=len(self.service.trips.tripped),
            sso_label=self.settings.oidc.label if self.settings.oidc else None,
            webhooks_on=bool(self.settings.webhooks),
            passkeys_on=self.passkeys_on,
            **context,
        )
        response = HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})
        self.codec.save(request, response, session)
        return response

    def show_with_notice(self, request: Request, page: Callable[..., Response]) -> Response:
        """GET a signed-in page, with the notice a form's redirect left for it (`page` takes
        the request, the session, the approver and `notice` or `error`)."""
        session, me = self.who(request)
        if me is None:
            return self.to_login(request)
        flash = session.notice_for(request.url.path)
        if flash is None:
            return page(request, session, me)
        if flash.ok:
            return page(request, session, me, notice=flash.text)
        return page(request, session, me, error=flash.text)

    def to_login(self, request: Request) -> Response:
        """Send a signed-out visitor to the sign-in page, coming back here afterwards."""
        header = self.settings.server.trusted_user_header
        named = proxy_user(self.settings, request)
        if header and request.headers.get(header) and named is None:  # not from the proxy
            return self.render(
                request,
                self.codec.load(request),
                "error.html",
                me=None,
                status=403,
                title="Sign-in not trusted",
                message=f"This request names its user in {header}"
                f" without gate's proxy secret ({PROXY_SECRET_HEADER}): only the sign-in proxy"
                " may name who is signed in.",
            )
        if named:
            session = self.codec.load(request)
            return self.render(
                request,
                session,
                "error.html",
                me=None,
                status=403,
                title="Not an approver",
                message="Your proxy sign-in does not match any [[approvers]] entry in gate.toml.",
            )
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target)}", status_code=303)

    def refuse_csrf(self, request: Request, session: WebSession, me: Any) -> HTMLResponse:
        """403 for a form post without the session's CSRF token."""
        return self.error(request, session, me, 403, "Form refused", CSRF_MESSAGE)

    def error(
        self, request: Request, session: WebSession, me: Any, status: int, title: str, msg: str
    ) -> HTMLResponse:
        """An HTML error page."""
        return self.render(
            request, session, "error.html", me=me, status=status, title=title, message=msg
        )


class ListPage:
    """A signed-in console page listing something (grants, agents, identities, passkeys,
    webhook messages) whose forms redirect back to it with a notice; `page` renders it."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.state = console.state

    def page(
        self,
        request: Request,
        session: WebSession,
        me: ApproverSettings,
        *,
        notice: str | None = None,
        error: str | None = None,
    ) -> HTMLResponse:
        """The page, with `notice` or `error` above it."""
        raise NotImplementedError

    def show(self, request: Request) -> Response:
        """GET the page, with the notice a form's redirect left for it."""
        return self.console.show_with_notice(request, self.page)
