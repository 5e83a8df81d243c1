"""A web page on another site can neither rebind its name to gate nor post to it.

Local mode (no tokens, loopback bind) answers only loopback `Host` names, on the API and the
console; every state-changing request without a bearer token must show it comes from gate's
own pages (same-origin `Origin` or `Sec-Fetch-Site`) or be JSON, which a cross-site page
cannot send without a CORS preflight that gate never grants.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gate.asking.exchange import Exchange
from gate.client import GateClient
from gate.config.settings import Settings
from gate.hook.command import urllib_sender
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.http import TLS
from tests.web.conftest import browser, csrf_of, sign_in

PAY = {"tool_name": "pay_vendor", "tool_args": {"amount": 60000}, "user_id": "dave"}


@pytest.fixture
def local_gate(make_gate: GateFactory, sqlite_url: str) -> Gate:
    """Token-less local mode: no tokens, no passwords, loopback bind."""
    data = cfg.settings_data(sqlite_url)
    data["tokens"] = []
    return make_gate(settings=Settings(**data))


def _ask(gate: Gate) -> str:
    with gate.client() as c:
        r = c.post("/v1/gate", json=PAY)
    assert r.status_code == 200, r.text
    request_id: str = r.json()["request"]["id"]
    return request_id


def _status(gate: Gate, request_id: str) -> str:
    with gate.client(cfg.ADMIN if gate.settings.tokens else None) as c:
        status: str = c.get(f"/v1/requests/{request_id}").json()["status"]
    return status


def _error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    body: dict[str, Any] = r.json()["error"]
    assert body["code"] == code
    return body


# -- DNS rebinding ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "evil.example:{port}",
        "evil.example",
        "127.0.0.1.nip.io:{port}",
        "localhost.evil.example:{port}",
        "127.0.0.1:1",  # a loopback name on another port: not this server
        "",
        "[::1",
        "localhost:notaport",
    ],
)
def test_local_mode_refuses_a_rebound_host_on_api_and_console(local_gate: Gate, host: str) -> None:
    request_id = _ask(local_gate)
    value = host.format(port=local_gate.server.port)
    with httpx.Client(base_url=local_gate.url, headers={"Host": value}, verify=TLS) as c:
        for method, path in [
            ("GET", f"/v1/requests/{request_id}"),
            ("GET", "/v1/requests"),
            ("GET", "/"),
            ("GET", f"/requests/{request_id}"),
            ("GET", "/events"),
            ("POST", f"/v1/requests/{request_id}/decision"),
        ]:
            r = c.request(method, path, json={"verdict": "approve"} if method == "POST" else None)
            body = _error(r, 421, "host_not_allowed")
            assert "local mode" in body["message"], path
    assert _status(local_gate, request_id) == "pending"


def test_a_port_of_odd_digits_is_refused_not_a_500(local_gate: Gate) -> None:
    # "²" is a digit to str.isdigit() but not to int(); a latin-1 header byte can carry it
    with httpx.Client(
        base_url=local_gate.url, headers={"Host": "localhost:\xb2".encode("latin-1")}, verify=TLS
    ) as c:
        _error(c.get("/v1/requests"), 421, "host_not_allowed")


def test_a_csrf_field_that_cannot_be_encoded_is_refused_not_a_500(local_gate: Gate) -> None:
    request_id = _ask(local_gate)
    with httpx.Client(base_url=local_gate.url, verify=TLS) as c:
        r = c.post(
            f"/requests/{request_id}/decide",
            content="verdict=approve&csrf_token=%ED%A0%80",  # a lone surrogate, UTF-8 encoded
            headers={
                "content-type": "application/x-www-form-urlencoded",
                "origin": local_gate.url,
            },
        )
    assert r.status_code in (400, 403), r.text[:300]
    assert _status(local_gate, request_id) == "pending"


@pytest.mark.parametrize(
    "host", ["localhost:{port}", "127.0.0.1:{port}", "[::1]:{port}", "localhost"]
)
def test_local_mode_answers_loopback_names(local_gate: Gate, host: str) -> None:
    value = host.format(port=local_gate.server.port)
    with httpx.Client(base_url=local_gate.url, headers={"Host": value}, verify=TLS) as c:
        assert c.get("/v1/requests").status_code == 200
        assert c.get("/").status_code == 200


def test_with_tokens_any_host_is_answered(web_gate: Gate) -> None:
    # A rebinding page has no token and no cookie for its own name: nothing to protect.
    with web_gate.client(cfg.ADMIN) as c:
        assert c.get("/v1/requests", headers={"Host": "gate.example.com"}).status_code == 200


# -- cross-site writes ------------------------------------------------------------------------


def test_local_mode_refuses_a_cross_site_body_less_cancel(local_gate: Gate) -> None:
    request_id = _ask(local_gate)
    path = f"/v1/requests/{request_id}/cancel"
    with httpx.Client(base_url=local_gate.url, verify=TLS) as c:
        # What <form method=post> or fetch(no-cors) from another site sends.
        _error(c.post(path, headers={"Origin": "https://evil.example"}), 403, "cross_site_request")
        _error(c.post(path, headers={"Origin": "null"}), 403, "cross_site_request")
        _error(c.post(path, headers={"Sec-Fetch-Site": "cross-site"}), 403, "cross_site_request")
        _error(c.post(path, headers={"Sec-Fetch-Site": "same-site"}), 403, "cross_site_request")
        # No proof at all: a body-less post, a text/plain "simple" post, a form post.
        _error(c.post(path), 403, "cross_site_request")
        _error(
            c.post(path, content=b'{"reason": "x"}', headers={"Content-Type": "text/plain"}),
            403,
            "cross_site_request",
        )
        _error(c.post(path, data={"reason": "x"}), 403, "cross_site_request")
        # JSON from a page on another origin cannot happen without a preflight; if Origin
        # says another site anyway, it is refused too.
        _error(
            c.post(path, json={}, headers={"Origin": "http://evil.example"}),
            403,
            "cross_site_request",
        )
    assert _status(local_gate, request_id) == "pending"


@pytest.mark.parametrize("credentials", ["Basic YWxpY2U6cHc=", 'Digest username="a"', "x"])
def test_only_a_bearer_token_proves_a_post_is_not_a_pages(
    local_gate: Gate, credentials: str
) -> None:
    # A browser attaches Basic or Digest credentials it learnt for a site (a proxy's login
    # prompt) to a form another site posts there; only a bearer token can't come that way.
    request_id = _ask(local_gate)
    path = f"/v1/requests/{request_id}/cancel"
    with httpx.Client(base_url=local_gate.url, verify=TLS) as c:
        headers = {"Authorization": credentials, "Origin": "https://evil.example"}
        _error(c.post(path, headers=headers), 403, "cross_site_request")
        _error(c.post(path, data={"reason": "x"}, headers=headers), 403, "cross_site_request")
    assert _status(local_gate, request_id) == "pending"


def test_local_mode_accepts_json_and_same_origin(local_gate: Gate) -> None:
    with httpx.Client(base_url=local_gate.url, verify=TLS) as c:
        first = _ask(local_gate)
        r = c.post(f"/v1/requests/{first}/cancel", headers={"Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        second = _ask(local_gate)
        r = c.post(f"/v1/requests/{second}/cancel", headers={"Origin": local_gate.url})
        assert r.status_code == 200, r.text
        third = _ask(local_gate)
        r = c.post(f"/v1/requests/{third}/cancel", headers={"Sec-Fetch-Site": "same-origin"})
        assert r.status_code == 200, r.text
    assert {_status(local_gate, i) for i in (first, second, third)} == {"cancelled"}


def test_hook_and_sdk_work_in_local_mode(local_gate: Gate) -> None:
    """`gate hook` (urllib) and the SDK (httpx) send JSON, even with no body."""
    send = urllib_sender(local_gate.url, None)
    reply = send(Exchange("POST", "/v1/gate", PAY, 10))
    assert reply.status == 200, reply.body
    request_id = reply.body["request"]["id"]
    assert send(Exchange("POST", f"/v1/requests/{request_id}/cancel", None, 10)).status == 200
    with GateClient(local_gate.url) as sdk:
        other = sdk.submit(**PAY)["request"]["id"]
        assert sdk.cancel(other)["status"] == "cancelled"


def test_console_form_from_another_site_is_refused(web_gate: Gate) -> None:
    answer = web_gate.submit(**PAY)
    request_id = answer["request"]["id"]
    with sign_in(web_gate, "alice") as c:
        token = csrf_of(c.get(f"/requests/{request_id}").text)
        form = {"verdict": "approve", "csrf_token": token}
        url = f"/requests/{request_id}/decide"
        del c.headers["Origin"]
        # Even with a valid CSRF token (say, leaked): the browser says where the form came from.
        for headers in (
            {"Origin": "https://evil.example"},
            {"Origin": web_gate.url.replace("127.0.0.1", "localhost")},
            {"Origin": web_gate.url.replace("http://", "https://")},
            {"Origin": "null"},
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site"},
            {},
        ):
            r = c.post(url, data=form, headers=headers)
            _error(r, 403, "cross_site_request")
        _error(c.post("/logout", data={"csrf_token": token}), 403, "cross_site_request")
        assert _status(web_gate, request_id) == "pending"
        r = c.post(url, data=form, headers={"Sec-Fetch-Site": "same-origin"})
        assert r.status_code == 303, r.text
    assert _status(web_gate, request_id) == "approved"


def test_console_sign_in_from_another_site_is_refused(web_gate: Gate) -> None:
    with browser(web_gate) as c:
        token = csrf_of(c.get("/login").text)
        r = c.post(
            "/login",
            data={"username": "alice", "password": "x", "csrf_token": token},
            headers={"Origin": "https://evil.example"},
        )
        _error(r, 403, "cross_site_request")


def test_public_url_is_a_same_origin(make_gate: GateFactory, sqlite_url: str) -> None:
    """Behind a proxy the browser's Origin is the public address, not the upstream one."""
    from tests.web.conftest import web_settings

    # (http: an https public_url makes the cookie Secure, which httpx keeps off plain http)
    settings = web_settings(sqlite_url, public_url="http://gate.example.com:8080/")
    gate = make_gate(settings=settings)
    with browser(gate) as c:
        token = csrf_of(c.get("/login").text)
        form = {"username": "alice", "password": "wrong", "csrf_token": token}
        r = c.post("/login", data=form, headers={"Origin": "http://gate.example.com:8080"})
        assert r.status_code == 401, r.text  # past the guard: the password was checked
        for other in ("http://gate.example.com", "http://other.example.com:8080"):
            _error(
                c.post("/login", data=form, headers={"Origin": other}), 403, "cross_site_request"
            )


def test_bearer_tokens_and_signed_callbacks_need_no_origin(web_gate: Gate) -> None:
    request_id = web_gate.submit(**PAY)["request"]["id"]
    with web_gate.client(cfg.AGENT) as c:
        # A page cannot attach a bearer token, so a token-carrying post is not cross-site.
        r = c.post(f"/v1/requests/{request_id}/cancel", headers={"Origin": "https://x.example"})
        assert r.status_code == 200, r.text
    with httpx.Client(base_url=web_gate.url, verify=TLS) as c:
        # No Slack here: the route is missing (404), not refused by the guard (403).
        r = c.post("/channels/slack/interactions", data={"payload": "{}"})
        assert r.status_code == 404, r.text
        # Outside local mode, an API call without a token is the API's 401, not the guard's.
        _error(c.post("/v1/gate", data={"x": "1"}), 401, "missing_token")
