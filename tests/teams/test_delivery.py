"""Cards out through the Bot Connector: the app token (client credentials, cached, refreshed
once when refused), posts and in-place replacements, refresh.userIds resolved by object id,
failures mapped for the outbox, and the token sent to the configured service URL only."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from channels.teams import TeamsChannel
from channels.teams.settings import TeamsSettings
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import DeliveryError, validate_settings
from gate.server.state import ChannelGate
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.fake_teams import APP_ID, APP_PASSWORD, CONVERSATION, SCOPE, FakeTeams
from tests.support.servers import ThreadServer, wait_until
from tests.teams.conftest import ask, object_id, posted_card, press, verbs


def standalone(gate: Gate, **kwargs: Any) -> TeamsChannel:
    """A second TeamsChannel on the same settings, driven from the test's own event loop."""
    settings = validate_settings("teams", gate.settings.channels.configured()["teams"])
    assert isinstance(settings, TeamsSettings)
    return TeamsChannel(settings, ChannelGate(gate.state.service), **kwargs)


def a_view(gate: Gate, fake: FakeTeams, tool: str = "refund_order") -> RequestView:
    """A pending request whose card gate's own outbox has already posted (so the calls a
    test counts afterwards are the standalone channel's alone)."""
    view = gate.state.service.view(ask(gate, tool, {"amount": 900}))
    assert view is not None
    posted_card(fake, view.id)
    wait_until(lambda: gate.state.service.view(view.id, full=True).deliveries[0].status == "sent")
    return view


class Evil:
    """A host that records whatever reaches it (it must be nothing)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

        async def anything(request: Request) -> Response:
            self.seen.append(
                f"{request.method} {request.url.path} {request.headers.get('authorization')}"
            )
            return JSONResponse({"id": "evil"})

        app = Starlette(routes=[Route("/{path:path}", anything, methods=["GET", "POST", "PUT"])])
        self.server = ThreadServer(app).start()


def test_a_card_is_posted_with_an_app_token_and_replaced_in_place(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    request_id = ask(teams_gate, "refund_order", {"amount": 900})
    card = posted_card(fake_teams, request_id)
    # the token: client credentials for the Bot Framework scope, as a form
    token_call = fake_teams.recorded("POST", "/botframework.com/")[0]
    assert token_call.body == {
        "grant_type": "client_credentials", "client_id": APP_ID,
        "client_secret": APP_PASSWORD, "scope": SCOPE,
    }  # fmt: skip
    post = fake_teams.recorded("POST", "/v3/conversations/")[0]
    assert unquote(post.path) == f"/v3/conversations/{CONVERSATION}/activities"
    assert "%3A" in post.raw_path and "%40" in post.raw_path  # the conversation id is encoded whole
    assert post.headers["authorization"].startswith("Bearer eyJ")
    # refresh names the approvers (alice, bob) by member id, looked up by object id
    members = [unquote(r.path).rsplit("/", 1)[1] for r in fake_teams.recorded("GET", "/v3/")]
    assert sorted(members) == sorted([object_id("alice"), object_id("bob")])
    assert card["refresh"]["userIds"] == [
        fake_teams.members[object_id(p)] for p in ("alice", "bob")
    ]
    assert verbs(card) == {"refresh"}  # the base card itself is read-only

    assert teams_gate.decide(request_id, cfg.BOB, "reject", "not now").status_code == 200
    final = posted_card(fake_teams, request_id, updates=1)
    put = fake_teams.recorded("PUT", "/v3/conversations/")[0]
    assert put.path.endswith("/activities/" + fake_teams.posted()[0].activity_id)
    assert put.body["id"] == fake_teams.posted()[0].activity_id
    assert verbs(final) == set() and "refresh" not in final
    assert fake_teams.card_problems == []
    # one token for all of it; member ids looked up once
    assert len(fake_teams.recorded("POST", "/botframework.com/")) == 1
    assert len(fake_teams.recorded("GET", "/v3/")) == 2


def test_the_requester_and_non_members_are_not_in_refresh(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    with fake_teams.lock:
        del fake_teams.members[object_id("bob")]  # bob left the channel
    request_id = ask(teams_gate, "refund_order", {"amount": 900}, user_id=object_id("alice"))
    card = posted_card(fake_teams, request_id)
    assert card["refresh"]["userIds"] == []  # alice asked, bob is not there: nobody auto-refreshes
    assert fake_teams.card_problems == []


async def test_a_refused_token_is_refreshed_once(teams_gate: Gate, fake_teams: FakeTeams) -> None:
    chan = standalone(teams_gate)
    view = a_view(teams_gate, fake_teams)

    def token_requests() -> int:
        return len(fake_teams.recorded("POST", "/botframework.com/"))

    try:
        await chan.post(view, CONVERSATION)
        before = token_requests()
        fake_teams.revoke_tokens()
        await chan.post(view, CONVERSATION)  # 401, one new token, the post goes through
        assert token_requests() == before + 1
        # Refused again after the refresh: a DeliveryError the outbox retries later.
        fake_teams.refuse_all = True
        with pytest.raises(DeliveryError, match="refused twice") as refused:
            await chan.post(view, CONVERSATION)
        assert not refused.value.permanent
        assert token_requests() == before + 2
    finally:
        fake_teams.refuse_all = False
        await chan.aclose()


async def test_the_token_is_cached_until_shortly_before_it_expires(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    now = [1_800_000_000.0]
    chan = standalone(teams_gate, clock=lambda: now[0])
    view = a_view(teams_gate, fake_teams)
    try:
        before = len(fake_teams.recorded("POST", "/botframework.com/"))
        for _ in range(3):
            await chan.post(view, CONVERSATION)
        assert len(fake_teams.recorded("POST", "/botframework.com/")) == before + 1
        now[0] += 3599 - 300 - 1  # still inside its life less the 5-minute margin
        await chan.post(view, CONVERSATION)
        assert len(fake_teams.recorded("POST", "/botframework.com/")) == before + 1
        now[0] += 2
        await chan.post(view, CONVERSATION)
        assert len(fake_teams.recorded("POST", "/botframework.com/")) == before + 2
    finally:
        await chan.aclose()


@pytest.mark.parametrize(
    ("kind", "status", "retry_after", "expected"),
    [
        ("post", 429, "7", (7.0, False)),
        ("post", 429, None, (1.0, False)),
        ("post", 503, None, (None, False)),
        ("post", 500, "3", (3.0, False)),
        ("post", 400, None, (None, True)),
        ("post", 403, None, (None, True)),
        ("post", 404, None, (None, True)),
        ("token", 401, None, (None, True)),
        ("token", 503, None, (None, False)),
    ],
)
async def test_failures_map_onto_the_outbox_rules(
    teams_gate: Gate,
    fake_teams: FakeTeams,
    kind: str,
    status: int,
    retry_after: str | None,
    expected: tuple[float | None, bool],
) -> None:
    chan = standalone(teams_gate)
    view = a_view(teams_gate, fake_teams)
    calls = len(fake_teams.recorded())
    fake_teams.fail(kind, status=status, retry_after=retry_after)
    try:
        with pytest.raises(DeliveryError) as failed:
            await chan.post(view, CONVERSATION)
        assert (failed.value.retry_after, failed.value.permanent) == expected
        # never retried inside the channel: one try of the failing call
        tried = [r for r in fake_teams.recorded()[calls:] if r.method != "GET"]
        assert len(tried) == (1 if kind == "token" else 2)
    finally:
        await chan.aclose()


async def test_an_update_of_an_unknown_activity_is_permanent(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    chan = standalone(teams_gate)
    try:
        with pytest.raises(DeliveryError) as failed:
            await chan.update(a_view(teams_gate, fake_teams), CONVERSATION, "1700000999999999")
        assert failed.value.permanent
    finally:
        await chan.aclose()


def test_an_outage_delays_the_card_and_the_outbox_retries(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    with fake_teams.down(503):
        request_id = ask(teams_gate)
        wait_until(lambda: fake_teams.recorded("POST", "/v3/conversations/"))
        assert teams_gate.decide(request_id, cfg.ALICE).status_code == 200
    card = posted_card(fake_teams, request_id)
    assert verbs(card) == set() and "Approved by alice" in str(card)


def test_the_token_never_goes_to_an_activitys_service_url(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    # A press whose activity (and token claim) name another host: gate answers it and keeps
    # sending cards to the configured service URL only.
    evil = Evil()
    try:
        request_id = ask(teams_gate, "refund_order", {"amount": 900})
        posted_card(fake_teams, request_id)
        activity = fake_teams.invoke(
            verb="approve", data={"request_id": request_id}, object_id=object_id("alice"),
            service_url=evil.server.url + "/",
        )  # fmt: skip
        token = fake_teams.sign(service_url=activity["serviceUrl"])
        with teams_gate.client() as c:
            r = c.post(
                "/channels/teams/messages",
                json=activity,
                headers={"Authorization": f"Bearer {token}"},
            )
        assert r.status_code == 200, r.text
        posted_card(fake_teams, request_id, updates=1)  # the update went to the fake
        assert evil.seen == []
    finally:
        evil.server.stop()


async def test_redirects_are_not_followed_with_the_token(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    evil = Evil()

    async def moved(request: Request) -> Response:
        return RedirectResponse(evil.server.url + request.url.path, status_code=307)

    bouncer = ThreadServer(
        Starlette(routes=[Route("/{path:path}", moved, methods=["GET", "POST", "PUT"])])
    ).start()
    settings = validate_settings("teams", teams_gate.settings.channels.configured()["teams"])
    settings = settings.model_copy(update={"service_url": bouncer.url + "/"})
    chan = TeamsChannel(settings, ChannelGate(teams_gate.state.service))
    try:
        with pytest.raises(DeliveryError):
            await chan.post(a_view(teams_gate, fake_teams), CONVERSATION)
        assert evil.seen == []
    finally:
        await chan.aclose()
        bouncer.stop()
        evil.server.stop()


def test_a_press_in_teams_updates_the_card_for_everyone(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    request_id = ask(teams_gate, "refund_order", {"amount": 900})
    posted_card(fake_teams, request_id)
    r = press(teams_gate, fake_teams, "alice", "approve", request_id)
    assert r.status_code == 200
    final = posted_card(fake_teams, request_id, updates=1)
    assert "Approved by alice in Microsoft Teams" in str(final) or "Approved by alice" in str(final)
