"""The connector's JWT, checked before the body is read, against the fake's published keys:
issuer, audience, expiry with the 5-minute skew, signature, algorithm, endorsement; then what
the activity must agree with (serviceUrl claim, channel, tenant). Every failure is a 401 (or
a 400 for a bad body under a good token), never a 500, and nothing changes."""

from __future__ import annotations

import time
import warnings
from typing import Any

import jwt
import pytest
from jwt.warnings import InsecureKeyLengthWarning

from channels.teams.settings import TeamsSettings
from channels.teams.verify import OpenIdKeys
from gate.base.errors import Unauthenticated, Unavailable
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.fake_teams import APP_ID, APP_PASSWORD, FakeTeams
from tests.support.keys import rsa_key
from tests.support.servers import free_port
from tests.teams.conftest import ask, object_id, send, teams_settings, verbs


def refresh(
    fake: FakeTeams, request_id: str, person: str = "alice", **changes: Any
) -> dict[str, Any]:
    activity = fake.invoke(
        verb="refresh", data={"request_id": request_id}, object_id=object_id(person),
        service_url=fake.url + "/", trigger="automatic",
    )  # fmt: skip
    activity.update(changes)
    return activity


def untouched(gate: Gate, request_id: str) -> None:
    with gate.client(cfg.ADMIN) as c:
        now = c.get(f"/v1/requests/{request_id}").json()
    assert now["status"] == "pending" and now["votes"] == [], now


def refused(r: Any, code: str | None = None) -> None:
    assert r.status_code == 401, r.text
    error = r.json()["error"]
    assert set(error) >= {"code", "message"}
    if code:
        assert error["code"] == code, error


def test_a_valid_token_is_accepted_and_keys_are_cached(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    request_id = ask(teams_gate)
    for _ in range(3):
        r = send(teams_gate, fake_teams, refresh(fake_teams, request_id))
        assert r.status_code == 200, r.text
        assert "approve" in verbs(r.json()["value"])
    # metadata and keys fetched once for three invokes
    assert len(fake_teams.recorded("GET", "/v1/.well-known/")) == 2


@pytest.mark.parametrize(
    ("how", "claims", "code"),
    [
        ("another bot's token", {"audience": "00000000-0000-0000-0000-000000000000"}, "bad_token"),
        ("another issuer", {"issuer": "https://sts.windows.net/evil/"}, "bad_token"),
        # seconds from now, read when the test runs (not when it is collected: a long
        # suite would otherwise turn "not valid yet" into valid)
        ("expired past the skew", {"issued_in": -3600 - 400}, "stale_token"),
        ("not valid yet", {"issued_in": 900}, "bad_token"),
    ],
)
def test_claims_that_do_not_hold_are_refused(
    teams_gate: Gate, fake_teams: FakeTeams, how: str, claims: dict[str, Any], code: str
) -> None:
    request_id = ask(teams_gate)
    if "issued_in" in claims:
        rest = {k: v for k, v in claims.items() if k != "issued_in"}
        claims = rest | {"issued_at": time.time() + claims["issued_in"]}
    for verb in ("refresh", "approve"):
        activity = refresh(fake_teams, request_id)
        activity["value"]["action"]["verb"] = verb
        refused(send(teams_gate, fake_teams, activity, **claims), code)
    untouched(teams_gate, request_id)


def test_expiry_allows_five_minutes_of_skew(teams_gate: Gate, fake_teams: FakeTeams) -> None:
    request_id = ask(teams_gate)
    late = send(
        teams_gate, fake_teams, refresh(fake_teams, request_id), issued_at=time.time() - 3660
    )
    assert late.status_code == 200, late.text


def test_tokens_signed_otherwise_are_refused(teams_gate: Gate, fake_teams: FakeTeams) -> None:
    request_id = ask(teams_gate)
    activity = refresh(fake_teams, request_id)
    service_url = activity["serviceUrl"]
    other = rsa_key("teams", 1)  # never published
    claims = {"serviceurl": service_url, "iss": "https://api.botframework.com", "aud": APP_ID,
              "exp": int(time.time()) + 600}  # fmt: skip
    with warnings.catch_warnings():  # the test password is a short HMAC key: that is the point
        warnings.simplefilter("ignore", InsecureKeyLengthWarning)
        hs256 = jwt.encode(claims, APP_PASSWORD, algorithm="HS256", headers={"kid": fake_teams.kid})
    tokens = {
        "another key, our kid": fake_teams.sign(service_url=service_url, key=other),
        "an unknown kid": fake_teams.sign(service_url=service_url, key=other, kid="not-ours"),
        # the app password as an HMAC key: the classic algorithm confusion
        "HS256": hs256,
        "alg none": jwt.encode(claims, None, algorithm="none", headers={"kid": fake_teams.kid}),
        "not a JWT": "not.a.jwt",
        "far too long": "a" * 9000,
    }
    for how, token in tokens.items():
        refused(send(teams_gate, fake_teams, activity, token=token), "bad_token"), how
    for header in (
        "",
        "Basic YWxhZGRpbjpvcGVuc2VzYW1l",
        f"bearer {tokens['another key, our kid']}",
    ):
        with teams_gate.client() as c:
            r = c.post("/channels/teams/messages", json=activity, headers={"Authorization": header})
        refused(r)
    untouched(teams_gate, request_id)
    # Fetched once: made-up kids inside the minute after a fetch do not fetch again.
    assert len(fake_teams.recorded("GET", "/v1/.well-known/keys")) == 1


def test_a_key_not_endorsed_for_teams_is_refused(teams_gate: Gate, fake_teams: FakeTeams) -> None:
    fake_teams.endorsements = ["webchat"]
    request_id = ask(teams_gate)
    refused(send(teams_gate, fake_teams, refresh(fake_teams, request_id)), "bad_token")


async def test_a_rotated_key_is_fetched_once_a_minute_at_most(fake_teams: FakeTeams) -> None:
    now = [1_800_000_000.0]
    settings = TeamsSettings.model_validate(fake_teams.settings())
    keys = OpenIdKeys(settings, clock=lambda: now[0])
    first, _ = await keys.key(fake_teams.kid)
    old_kid = fake_teams.kid
    fake_teams.key = rsa_key("teams", 2)
    fake_teams.kid = "rotated-key"
    with pytest.raises(Unauthenticated):  # inside the minute: no fetch for an unknown kid
        await keys.key("rotated-key")
    assert keys.fetches == 1
    now[0] += 61
    rotated, algorithms = await keys.key("rotated-key")
    assert keys.fetches == 2 and algorithms == {"RS256"}
    assert rotated.endorsements >= {"msteams"}
    with pytest.raises(Unauthenticated):  # the retired key is gone with the old document
        await keys.key(old_kid)
    now[0] += 24 * 3600 + 1  # a day later the keys are fetched again even for a known kid
    await keys.key("rotated-key")
    assert keys.fetches == 3 and first.key is not rotated.key


def test_the_body_must_agree_with_the_token(teams_gate: Gate, fake_teams: FakeTeams) -> None:
    request_id = ask(teams_gate)
    good = refresh(fake_teams, request_id)
    cases = {
        "serviceUrl not the token's": (
            refresh(fake_teams, request_id, serviceUrl="https://evil.example/"),
            {"service_url": good["serviceUrl"]},
            "bad_token",
        ),
        "another channel": (refresh(fake_teams, request_id, channelId="webchat"), {}, "bad_token"),
        "another tenant": (
            refresh(
                fake_teams,
                request_id,
                channelData={"tenant": {"id": "0f0f0f0f-aaaa-bbbb-cccc-000000000000"}},
            ),
            {},
            "wrong_tenant",
        ),
        "no tenant": (refresh(fake_teams, request_id, channelData={}), {}, "wrong_tenant"),
    }
    for how, (activity, claims, code) in cases.items():
        token = fake_teams.sign(**{"service_url": activity["serviceUrl"], **claims})
        refused(send(teams_gate, fake_teams, activity, token=token), code), how


def test_the_token_is_checked_before_the_body_is_read(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    garbage = b"\xff{not an activity" * 20
    forged = fake_teams.sign(service_url="x", key=rsa_key("teams", 1))
    refused(send(teams_gate, fake_teams, garbage, token=forged))
    # The same bytes under a good token are a 400, not a 500.
    r = send(teams_gate, fake_teams, garbage)
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_activity", r.text
    deep = b"[" * 100_000 + b"]" * 100_000
    r = send(teams_gate, fake_teams, deep)
    assert r.status_code == 400 and "nested" in r.json()["error"]["message"], r.text


def test_unreachable_keys_fail_closed(
    make_gate: GateFactory, sqlite_url: str, fake_teams: FakeTeams
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1/.well-known/openidconfiguration"
    gate = make_gate(settings=teams_settings(sqlite_url, fake_teams, openid_metadata_url=dead))
    request_id = ask(gate)
    r = send(gate, fake_teams, refresh(fake_teams, request_id))
    assert r.status_code == 503 and r.json()["error"]["code"] == "keys_unavailable", r.text
    untouched(gate, request_id)


def test_other_activities_are_acknowledged_and_ignored(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    request_id = ask(teams_gate)
    message = refresh(fake_teams, request_id)
    message.update(type="message", name=None, text="approve 01JD")
    r = send(teams_gate, fake_teams, message)
    assert r.status_code == 200 and r.content == b""
    untouched(teams_gate, request_id)


async def test_a_metadata_outage_keeps_the_keys_held_and_is_retried_once_a_minute(
    fake_teams: FakeTeams,
) -> None:
    now = [1_800_000_000.0]
    settings = TeamsSettings.model_validate(fake_teams.settings())
    keys = OpenIdKeys(settings, clock=lambda: now[0])
    await keys.key(fake_teams.kid)
    fake_teams.stop()  # login.botframework.com is down
    now[0] += 24 * 3600 + 1  # the keys are due for a refresh
    held, _ = await keys.key(fake_teams.kid)  # one failed try; the held key still verifies
    assert keys.fetches == 1 and held.endorsements >= {"msteams"}
    with pytest.raises(Unauthenticated):
        await keys.key("unknown")  # no second try inside the minute
    with pytest.raises(Unauthenticated):
        await keys.key("unknown")
    # Nothing held and nothing fetched: 503, never a token accepted unchecked.
    empty = OpenIdKeys(settings, clock=lambda: now[0])
    for _ in range(2):
        with pytest.raises(Unavailable):
            await empty.key(fake_teams.kid)
