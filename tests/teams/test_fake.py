"""The fake Teams checks what it receives, as the real services would (so a channel passing
against it is held to something): the token request, the bearer token, the activity, the
card's schema and size."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.fake_teams import APP_ID, APP_PASSWORD, CONVERSATION, SCOPE, FakeTeams
from tests.support.http import TLS

CARD = {"type": "AdaptiveCard", "version": "1.5", "body": [{"type": "TextBlock", "text": "hi"}]}


def token(client: httpx.Client, **form: str) -> httpx.Response:
    body = {"grant_type": "client_credentials", "client_id": APP_ID,
            "client_secret": APP_PASSWORD, "scope": SCOPE, **form}  # fmt: skip
    return client.post("/botframework.com/oauth2/v2.0/token", data=body)


def activity(card: Any, **extra: Any) -> dict[str, Any]:
    attachment = {"contentType": "application/vnd.microsoft.card.adaptive", "content": card}
    return {"type": "message", "attachments": [attachment], **extra}


def test_the_token_endpoint_checks_the_client(fake_teams: FakeTeams) -> None:
    with httpx.Client(base_url=fake_teams.url, verify=TLS) as c:
        assert token(c).status_code == 200
        assert token(c, client_secret="wrong").json()["error"] == "invalid_client"
        assert token(c, scope="https://graph.microsoft.com/.default").status_code == 400
        as_json = c.post("/botframework.com/oauth2/v2.0/token", json={"client_id": APP_ID})
        assert as_json.status_code == 400


def test_the_connector_checks_token_activity_and_card(fake_teams: FakeTeams) -> None:
    url = f"/v3/conversations/{CONVERSATION}/activities"
    with httpx.Client(base_url=fake_teams.url, verify=TLS) as c:
        bearer = {"Authorization": "Bearer " + token(c).json()["access_token"]}
        assert c.post(url, json=activity(CARD)).status_code == 401
        assert (
            c.post(url, json=activity(CARD), headers={"Authorization": "Bearer x"}).status_code
            == 401
        )
        posted = c.post(url, json=activity(CARD), headers=bearer)
        assert posted.status_code == 201
        activity_id = posted.json()["id"]
        for bad in (
            {**CARD, "version": "1.4"},  # Universal Actions need 1.5
            {**CARD, "body": [{"type": "TextBlock"}]},  # a TextBlock needs text
            {**CARD, "actions": [{"type": "Action.Execute", "verb": "x", "colour": "red"}]},
            {**CARD, "refresh": {"userIds": [f"29:{i}" for i in range(61)]}},
        ):
            r = c.post(url, json=activity(bad), headers=bearer)
            assert r.status_code == 400, bad
        huge = {**CARD, "body": [{"type": "TextBlock", "text": "x" * 30_000}]}
        assert c.post(url, json=activity(huge), headers=bearer).status_code == 413
        put = f"{url}/{activity_id}"
        assert c.put(put, json=activity(CARD, id="other"), headers=bearer).status_code == 400
        assert c.put(put, json=activity(CARD, id=activity_id), headers=bearer).status_code == 200
        missing = f"{url}/1700999"
        assert c.put(missing, json=activity(CARD, id="1700999"), headers=bearer).status_code == 404
    assert len(fake_teams.card_problems) >= 5
    assert len(fake_teams.posted()[0].cards) == 2
