"""How an approval was authenticated, as stored and read back, and what a step-up accepts.

Both read JSON frozen on rows (a vote's `auth`, a request's `options.step_up`): what is there
but unreadable never reads as something weaker (an unknown auth kind is no record at all; an
unreadable step-up demands the strictest).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gate.identity.authmethod import AuthMethod
from gate.policy import stepup
from gate.policy.offers import Offers, StepUp

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
OIDC = AuthMethod(
    "oidc", issuer="https://idp.example", subject="s-1", auth_time=NOW - timedelta(minutes=2)
)


@pytest.mark.parametrize(
    "auth",
    [
        OIDC,
        AuthMethod("oidc", issuer="https://idp.example", subject="s-1", acr="mfa"),
        AuthMethod("chat", platform="slack", user_id="U0ALICE", bound_by="configured_id"),
        AuthMethod("chat", platform="email", user_id="a@example.com", bound_by="email"),
        AuthMethod("token", token="alice"),
        AuthMethod("password"),
        AuthMethod("proxy"),
        AuthMethod("local"),
        AuthMethod("webauthn", credential_id="cred-1", signed_in_by="password"),
        AuthMethod(
            "webauthn",
            issuer="https://idp.example",
            subject="sub-1",
            credential_id="cred-2",
            signed_in_by="oidc",
        ),
    ],
)
def test_an_auth_method_reads_back_as_written(auth: AuthMethod) -> None:
    assert AuthMethod.from_json(auth.to_json()) == auth
    assert auth.describe()


@pytest.mark.parametrize(
    "stored", [None, "oidc", [], {}, {"kind": "fingerprint"}, {"kind": 3}, {"no": "kind"}]
)
def test_an_unreadable_record_is_no_record(stored: object) -> None:
    assert AuthMethod.from_json(stored) is None


def test_odd_fields_are_dropped_not_trusted() -> None:
    read = AuthMethod.from_json(
        {"kind": "chat", "platform": 7, "bound_by": "guessed", "auth_time": "yesterday"}
    )
    assert read == AuthMethod("chat")


@pytest.mark.parametrize("stored", ["5m", [], {"max_age_seconds": "300"}, {"acr": "x"}])
def test_an_unreadable_step_up_is_the_strictest(stored: object) -> None:
    read = StepUp.from_json(stored)
    assert read is not None and read.max_age == timedelta(0)
    assert stepup.refusal(read, OIDC, NOW) is not None  # no sign-in is ever fresh enough


def test_a_step_up_survives_the_request_options() -> None:
    offers = Offers(step_up=StepUp(timedelta(minutes=5), ("mfa",)), approver_groups=("finance",))
    again = Offers.from_options(offers.to_options())
    assert again.step_up == offers.step_up and again.approver_groups == ("finance",)
    assert "step_up" not in Offers().to_options()  # rules without it store what they did


@pytest.mark.parametrize(
    ("auth", "words"),
    [
        (None, "unrecorded"),
        (AuthMethod("token", token="ops-admin"), "API token ops-admin"),
        (AuthMethod("password"), "password sign-in"),
        (AuthMethod("chat", platform="slack", user_id="U1", bound_by="email"), "slack user U1"),
        (AuthMethod("oidc", issuer="i", subject="s"), "did not say when"),
        (AuthMethod("oidc", issuer="i", subject="s", auth_time=NOW - timedelta(hours=2)), "2 h"),
    ],
)
def test_what_a_step_up_refuses(auth: AuthMethod | None, words: str) -> None:
    why = stepup.refusal(StepUp(timedelta(minutes=5)), auth, NOW)
    assert why is not None and words in why


def test_what_a_step_up_accepts_and_its_acr() -> None:
    five = StepUp(timedelta(minutes=5))
    assert stepup.refusal(five, OIDC, NOW) is None
    assert stepup.refusal(None, AuthMethod("password"), NOW) is None  # no step-up: anything
    strong = StepUp(timedelta(minutes=5), ("urn:mfa",))
    assert "urn:mfa" in (stepup.refusal(strong, OIDC, NOW) or "")
    with_mfa = AuthMethod("oidc", issuer="i", subject="s", auth_time=NOW, acr="urn:mfa")
    assert stepup.refusal(strong, with_mfa, NOW) is None


def test_a_passkey_approval_keeps_the_sign_in_it_was_made_in() -> None:
    signed = AuthMethod("oidc", issuer="https://idp.example", subject="sub-1", acr="mfa")
    signed_with_key = signed.with_passkey("cred-9")
    assert signed_with_key.kind == "webauthn" and signed_with_key.credential_id == "cred-9"
    assert signed_with_key.sign_in == signed
    assert "credential cred-9" in signed_with_key.describe()
    assert "single sign-on (issuer https://idp.example" in signed_with_key.describe()
    assert AuthMethod("webauthn", credential_id="x").sign_in is None  # not recorded: never guessed
